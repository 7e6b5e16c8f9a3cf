"""The format registry's contract (stackdist/traces/formats.py): every registered format is read
the same whole, streamed (compressed, split in files, in small chunks) and by its compiled scan;
every command's ``--format`` offers exactly the registry's formats; a format registered in a
test is read by ``curve`` and ``plan`` through the ordinary path."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from stackdist.cli.main import build_parser, main
from stackdist.traces import AccessTrace, RequestTrace
from stackdist.traces.formats import (
    FORMATS,
    REQUESTS,
    TraceFormat,
    call_reader,
    format_names,
    formats,
    get,
    register,
)
from stackdist.traces.stream_input import (
    CHUNK_LINES,
    iter_access_chunks,
    iter_request_chunks,
    joined_sizes,
    key_values,
)

DATA = Path(__file__).parent / "data"


def _lines(path: Path, rows: list[str]) -> Path:
    path.write_text("".join(r + "\n" for r in rows))
    return path


def _access_rows(n: int = 3000) -> list[tuple[int, int]]:
    keys = np.random.default_rng(5).zipf(1.3, n) % 200 - 50  # negative keys too
    return [(int(k), int(k) % 7 + 1) for k in keys]


def _mooncake(path: Path) -> Path:
    rng = np.random.default_rng(7)
    rows = []
    for i in range(300):
        ids = [int(rng.integers(0, 3))] + [int(x) for x in rng.integers(0, 40, int(rng.integers(0, 5)))]
        rows.append(json.dumps({"timestamp": 10 * i, "input_length": 512 * len(ids) - int(rng.integers(0, 500)),
                                "output_length": int(rng.integers(0, 9)), "hash_ids": ids}))
    return _lines(path, rows)


def _lmcache(path: Path) -> Path:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(60):
        n = int(rng.integers(0, 5))
        chain = [f"0x{int(rng.integers(0, 3)):x}" + "1" * j for j in range(n)]
        rows.append(json.dumps({"timestamp": float(rng.random() * 100), "request_id": f"r{i}", "chunk_size": 4,
                                "seq_len": 4 * n + int(rng.integers(0, 4)), "chunk_hashes": chain}))
    return _lines(path, rows)


def _npy(path: Path) -> Path:
    np.save(path, np.array(_access_rows(), np.int64))
    return path


SAMPLES = {
    "csv": lambda d: _lines(d / "t.csv", ["# comment", "key,size"] + [f"{k},{s}" for k, s in _access_rows()]),
    "tsv": lambda d: _lines(d / "t.tsv", [f"{k}\t{s}" for k, s in _access_rows()]),
    "jsonl": lambda d: _lines(d / "t.jsonl", [json.dumps({"key": k, "size": s}) for k, s in _access_rows()]),
    "npy": lambda d: _npy(d / "t.npy"),
    "mooncake": lambda d: _mooncake(d / "m.jsonl"),
    "qwen": lambda d: Path(shutil.copy(DATA / "qwen_small.jsonl", d / "q.jsonl")),
    "tokens": lambda d: _lines(d / "k.jsonl", [json.dumps({"input_ids": list(range(i % 5, 9 * i % 70)), "output_length": i})
                                               for i in range(40)] + [json.dumps([1, 2, 3])]),
    "dynamo": lambda d: Path(shutil.copy(DATA / "engines" / "dynamo" / "agentic_kv2.jsonl", d / "d.jsonl")),
    "lmcache": lambda d: _lmcache(d / "lookup_hashes_0.jsonl"),
}
"""A small sample file of every registered format (a new format adds its sample here)."""

_REQUEST_FIELDS = ("block_ids", "offsets", "block_tokens", "timestamps_s", "input_length", "output_length",
                   "workers", "decode_workers", "engine_cached_tokens", "recorded_schedule_s", "request_labels")


@pytest.fixture
def registry():
    """The registry as it was, restored after the test."""
    saved = dict(FORMATS)
    yield FORMATS
    FORMATS.clear()
    FORMATS.update(saved)


def _same_requests(a: RequestTrace, b: RequestTrace, sessions: bool = True) -> None:
    assert a.block_size == b.block_size and a.n_requests == b.n_requests
    for name in _REQUEST_FIELDS + (("session_ids",) if sessions else ()):
        x, y = getattr(a, name, None), getattr(b, name, None)
        assert (x is None) == (y is None), name
        if x is not None:
            assert np.asarray(x).tolist() == np.asarray(y).tolist(), name


def _streamed(fmt: TraceFormat, spec, lines: int = CHUNK_LINES):
    if fmt.kind == REQUESTS:
        from stackdist.traces.requests import concat_requests

        chunks = list(iter_request_chunks(spec, fmt.name, lines=lines))
        return chunks[0] if len(chunks) == 1 else concat_requests(chunks)
    parts = list(iter_access_chunks(spec, fmt.name, lines=lines))
    return np.concatenate([k for k, _ in parts]), joined_sizes(parts, spec)


def _same(fmt: TraceFormat, whole, streamed, sessions: bool = True) -> None:
    if fmt.kind == REQUESTS:
        _same_requests(whole, streamed, sessions)
    else:
        assert key_values(whole.keys).tolist() == streamed[0].tolist()
        assert (None if whole.sizes is None else whole.sizes.tolist()) == (None if streamed[1] is None else streamed[1].tolist())


def _split(fmt: TraceFormat, path: Path) -> list[str]:
    """The sample as two files of the same format, in order."""
    halves = [path.with_name("a_" + path.name), path.with_name("b_" + path.name)]
    if path.suffix == ".npy":
        rows = np.load(path)
        for half, part in zip(halves, np.array_split(rows, 2)):
            np.save(half, part)
    else:
        text = path.read_bytes().splitlines(keepends=True)
        cut = len(text) // 2
        halves[0].write_bytes(b"".join(text[:cut]))
        halves[1].write_bytes(b"".join(text[cut:]))
    return [str(h) for h in halves]


def test_every_format_has_a_sample():
    assert set(SAMPLES) == set(FORMATS)


@pytest.mark.parametrize("name", list(FORMATS))
def test_reader_reads_its_sample_and_the_suffix_names_the_format(tmp_path, name):
    fmt = get(name)
    path = SAMPLES[name](tmp_path)
    trace = call_reader(fmt, path)
    assert isinstance(trace, RequestTrace if fmt.kind == REQUESTS else AccessTrace)
    assert len(trace.block_ids if fmt.kind == REQUESTS else trace.keys) > 0
    if fmt.suffixes:  # the suffix implies the format: read without naming it, the same trace
        from stackdist.traces import read_access_trace

        _same(fmt, trace, (key_values(read_access_trace(path).keys), read_access_trace(path).sizes))
    if fmt.kind == REQUESTS and fmt.block_size is not None:
        assert trace.block_size == fmt.block_size


@pytest.mark.parametrize("name", list(FORMATS))
def test_streamed_reading_equals_the_whole_file(tmp_path, name):
    """Compressed, split in two files, and in chunks of 3 lines: the reader's trace. (Qwen
    follows a conversation within a chunk only, so its 3-line chunks keep their own sessions.)"""
    fmt = get(name)
    path = SAMPLES[name](tmp_path)
    whole = call_reader(fmt, path)
    packed = tmp_path / ("z_" + path.name + ".gz")
    packed.write_bytes(gzip.compress(path.read_bytes()))
    _same(fmt, whole, _streamed(fmt, str(packed)))
    _same(fmt, whole, _streamed(fmt, _split(fmt, path)), sessions=fmt.name != "qwen")
    _same(fmt, whole, _streamed(fmt, str(path), lines=3), sessions=fmt.name != "qwen")


@pytest.mark.parametrize("name", [f.name for f in FORMATS.values() if f.fast_scan or f.fast_block_ids])
def test_the_compiled_scan_equals_the_reader(tmp_path, name):
    fmt = get(name)
    path = SAMPLES[name](tmp_path)
    whole = call_reader(fmt, path)
    if fmt.kind == REQUESTS:
        from stackdist.traces.requests import concat_requests

        scanned = concat_requests(list(fmt.load("fast_scan")([str(path)], fmt.name)))
        _same_requests(whole, scanned)
        ids = np.concatenate(list(fmt.load("fast_block_ids")(str(path), fmt.block_size)))
        assert ids.tolist() == whole.block_ids.tolist()
    else:
        parts = list(fmt.load("fast_scan")(str(path), fmt.suffixes[0]))
        _same(fmt, whole, (np.concatenate([k for k, _ in parts]), joined_sizes(parts, path)))


def _format_choices(command: str) -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    action = next(a for a in sub.choices[command]._actions if a.dest == "format")
    return list(action.choices)


@pytest.mark.parametrize(("command", "allowed"), [
    ("curve", {}), ("tiers", {}), ("plan", {}), ("watch", {"line_records": True}),
])
def test_every_commands_format_choices_are_the_registrys(command, allowed):
    assert _format_choices(command) == format_names(**allowed)


def test_a_format_not_allowed_is_a_usage_error_naming_the_allowed_ones(capsys):
    for argv, message in ((["watch", "x.npy", "--format", "npy", "--no-follow"],
                           f"format 'npy' is not allowed here; one of {', '.join(format_names(line_records=True))}"),
                          (["curve", "x.csv", "--format", "tokns"], "unknown format 'tokns' (did you mean 'tokens'?)")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        assert f"argument --format: {message}" in capsys.readouterr().err


def read_block_lines(path, block_size: int = 512) -> RequestTrace:
    """The dummy format: one request a line, its prompt's block ids separated by spaces."""
    rows = [[int(x) for x in line.split()] for line in Path(path).read_text().splitlines() if line.strip()]
    return RequestTrace.from_blocks(rows, block_size=block_size)


def test_a_format_registered_in_a_test_is_read_by_curve_and_plan(tmp_path, capsys, registry):
    register(TraceFormat("blocklines", REQUESTS, f"{__name__}:read_block_lines",
                         "stackdist.traces.stream_input:request_line_chunks", "block ids separated by spaces",
                         block_size=512))
    assert "blocklines" in _format_choices("curve") and "blocklines" in _format_choices("plan")
    rows = [[1, 2, 3], [1, 2], [4], [1, 2, 3, 5], [4, 6]]
    mine = _lines(tmp_path / "t.blocks", [" ".join(map(str, r)) for r in rows])
    twin = _lines(tmp_path / "t.jsonl", [json.dumps({"timestamp": 0, "input_length": 512 * len(r), "hash_ids": r})
                                         for r in rows])

    def answer(*argv: str) -> dict:
        assert main(list(argv)) == 0
        report = json.loads(capsys.readouterr().out)
        report.pop("trace", None)
        return report

    assert answer("curve", str(mine), "--format", "blocklines") == answer("curve", str(twin), "--format", "mooncake")
    plan = [answer("plan", str(p), "--format", f, "--block-size", "512", "--json", "-", "--semantics", "both")
            for p, f in ((mine, "blocklines"), (twin, "mooncake"))]
    assert plan[0]["semantics"] == plan[1]["semantics"]
    packed = tmp_path / "t.blocks.gz"
    packed.write_bytes(gzip.compress(mine.read_bytes()))
    assert answer("curve", str(packed), "--format", "blocklines") == answer("curve", str(twin), "--format", "mooncake")


def test_registering_refuses_a_taken_name_or_suffix(registry):
    with pytest.raises(ValueError, match="already registered"):
        register(TraceFormat("csv", REQUESTS, "m:f", "m:g", "again"))
    with pytest.raises(ValueError, match="suffix .csv already implies csv"):
        register(TraceFormat("csv2", "accesses", "m:f", "m:g", "again", (".csv",)))
    assert [f.name for f in formats(REQUESTS, line_records=False)] == [
        f.name for f in FORMATS.values() if f.kind == REQUESTS and not f.line_records]
