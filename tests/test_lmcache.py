"""LMCache lookup-hash logs: the reader, and per-access semantics equal to LMCache's own
simulator loop (prefix hits at lookup, then access hits / insert misses, LRU) at every capacity."""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest

from stackdist.errors import TraceFormatError
from stackdist.planning import PrefixCurve
from stackdist.serving import replay_requests
from stackdist.traces import read_lmcache


def lmcache_simulate(events: list[dict], capacity_chunks: int) -> int:
    """LMCache's tools/cache_simulator loop, written again from its README: hit tokens."""
    cache: OrderedDict = OrderedDict()
    hit_tokens = 0
    for e in sorted(events, key=lambda e: e["timestamp"]):
        prefix = 0
        for h in e["chunk_hashes"]:
            if h not in cache:
                break
            prefix += 1
        hit_tokens += prefix * e["chunk_size"]
        for i, h in enumerate(e["chunk_hashes"]):
            if i < prefix:
                cache.move_to_end(h)
            else:
                cache[h] = True
                cache.move_to_end(h)
                if len(cache) > capacity_chunks:
                    cache.popitem(last=False)
    return hit_tokens


def _events(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    events = []
    for i in range(60):
        root = int(rng.integers(0, 3))
        n = int(rng.integers(0, 6))
        chain = [f"0x{root:x}" + "".join(f"{int(rng.integers(0, 2))}" for _ in range(j)) for j in range(1, n + 1)]
        events.append({"timestamp": float(rng.random() * 100), "request_id": f"r{i}", "model_name": "m",
                       "chunk_size": 4, "seq_len": 4 * n + int(rng.integers(0, 4)), "chunk_hashes": chain})
    return events


@pytest.mark.parametrize("seed", range(8))
def test_per_access_equals_lmcache_simulator(tmp_path, seed):
    events = _events(seed)
    path = tmp_path / "lookup_hashes_1.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    curve = PrefixCurve(replay_requests(read_lmcache(tmp_path), "per-access"))
    for c in range(1, 25):
        assert curve.prefix_token_hits_at(c) == lmcache_simulate(events, c)


def test_lmcache_reader_errors_name_file_and_line(tmp_path):
    path = tmp_path / "lookup_hashes_1.jsonl"
    path.write_text('{"chunk_size": 4, "seq_len": 4, "chunk_hashes": ["0x1", "0x2"]}\n')
    with pytest.raises(TraceFormatError, match=r"lookup_hashes_1.jsonl:1: chunk_hashes has 2 entries but seq_len 4"):
        read_lmcache(path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceFormatError, match="no lookup_hashes"):
        read_lmcache(empty)


def _log(tmp_path, shapes=((32, 256, 128),), dtypes=("float8_e4m3fn",), n=40, name="lookup_hashes_0.jsonl", **extra):
    rng = np.random.default_rng(2)
    rows = []
    for i in range(n):
        k = int(rng.integers(1, 4))
        row = {"timestamp": float(i), "request_id": f"r{i}", "model_name": "m", "chunk_size": 256, "seq_len": 256 * k + 7,
               "chunk_hashes": [f"0x{int(rng.integers(0, 3)):x}{j}" for j in range(k)], **extra}
        if shapes is not None:
            row["shapes"], row["dtypes"] = [list(s) for s in shapes], list(dtypes)
        rows.append(row)
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_chunk_bytes_come_from_the_shapes_and_dtypes(tmp_path):
    # LMCache's README example: 32 x 256 x 128 fp8 elements a chunk = 1 MiB
    assert read_lmcache(_log(tmp_path)).kv_bytes_per_block == 2**20
    two = _log(tmp_path, shapes=((2, 256, 8), (3, 5)), dtypes=("torch.bfloat16", "float32"), name="b.jsonl")
    assert read_lmcache(two).kv_bytes_per_block == 2 * 256 * 8 * 2 + 3 * 5 * 4
    assert read_lmcache(_log(tmp_path, shapes=None, name="c.jsonl")).kv_bytes_per_block is None
    from stackdist.traces import reblock

    assert reblock(read_lmcache(_log(tmp_path)), 64).kv_bytes_per_block == 2**18


@pytest.mark.parametrize("shapes, dtypes, message", [
    (((4, 4),), ("float12",), "'dtypes' entry"),
    (((4, 0),), ("int8",), "positive integers"),
    (((4, 4),), ("int8", "int8"), "same length"),
])
def test_bad_shapes_or_dtypes_name_the_line(tmp_path, shapes, dtypes, message):
    with pytest.raises(TraceFormatError, match=message) as info:
        read_lmcache(_log(tmp_path, shapes=shapes, dtypes=dtypes))
    assert info.value.line == 1


def test_lines_disagreeing_on_the_chunk_bytes_are_an_error(tmp_path):
    a = _log(tmp_path).read_text()
    b = _log(tmp_path, dtypes=("bfloat16",), name="lookup_hashes_1.jsonl").read_text()
    (tmp_path / "lookup_hashes_1.jsonl").write_text(b)
    (tmp_path / "lookup_hashes_0.jsonl").write_text(a)
    with pytest.raises(TraceFormatError, match="one KV size per chunk"):
        read_lmcache(tmp_path)


def _plan_json(tmp_path, capsys, path, *flags):
    from stackdist.cli.main import main

    out = tmp_path / "plan.json"
    assert main(["plan", str(path), "--format", "lmcache", "--json", str(out), *flags]) == 0
    return json.loads(out.read_text())["model"], capsys.readouterr().err


def test_plan_takes_the_bytes_from_the_log_and_says_so(tmp_path, capsys):
    path = _log(tmp_path)
    model, err = _plan_json(tmp_path, capsys, path)
    assert model["bytes_per_block"] == 2**20 and model["kv_bytes_per_token"] == 2**20 // 256
    assert "KV bytes from the log's shapes and dtypes" in err and "no --model given" not in err
    from stackdist.planning.geometry import model_spec

    qwen3 = model_spec("qwen3-8b").geometry.kv_bytes_per_token
    model, err = _plan_json(tmp_path, capsys, path, "--model", "qwen3-8b")
    assert model["bytes_per_block"] == 2**20  # the log wins, and the conflict is said
    assert f"--model qwen3-8b (model default, 2 B/element) has {qwen3:,} KV bytes per token" in err and "using the log's" in err
    # the same model in fp8: its own shapes, no conflict
    fp8 = _log(tmp_path, shapes=((qwen3 // 2 * 256,),), dtypes=("float8_e5m2",), name="lookup_hashes_9.jsonl")
    model, err = _plan_json(tmp_path, capsys, fp8, "--model", "qwen3-8b", "--kv-dtype", "fp8")
    assert model["kv_bytes_per_token"] == qwen3 // 2 and "using the log's" not in err
    # a log with no shapes: the model's bytes, and the default model is said
    bare = _log(tmp_path, shapes=None, name="lookup_hashes_5.jsonl")
    model, err = _plan_json(tmp_path, capsys, bare)
    assert model["kv_bytes_per_token"] == model_spec("qwen2.5-1.5b").geometry.kv_bytes_per_token
    assert err.count("no --model given") == 1 and "qwen2.5-1.5b" in err
