"""Streaming input (stackdist.traces.stream_input): chunk by chunk equals the whole-file readers."""

from __future__ import annotations

import gzip
import io
import json
import sys

import numpy as np
import pytest

from stackdist.errors import TraceFormatError
from stackdist.traces import read_access_trace, read_mooncake
from stackdist.traces.stream_input import (
    expand_inputs,
    is_streamed,
    iter_access_chunks,
    iter_lines,
    iter_request_chunks,
    key_values,
)


def _joined(chunks):
    keys, sizes = zip(*chunks)
    return np.concatenate(keys), None if sizes[0] is None else np.concatenate(sizes)


@pytest.mark.parametrize("lines", [1, 3, 1000])
def test_csv_in_chunks_equals_the_whole_file(tmp_path, lines):
    rng = np.random.default_rng(lines)
    keys = rng.integers(0, 50, 40)
    text = "key,size\n" + "".join(f"{k},{k % 7 + 1}\n" + ("\n" if k % 5 == 0 else "") for k in keys)
    path = tmp_path / "t.csv"
    path.write_text(text)
    got_keys, got_sizes = _joined(iter_access_chunks(str(path), lines=lines))
    whole = read_access_trace(path)
    assert got_keys.tolist() == key_values(whole.keys).tolist() and got_sizes.tolist() == whole.sizes.tolist()


def test_compressed_globbed_and_standard_input_are_one_trace(tmp_path, monkeypatch):
    zstandard = pytest.importorskip("zstandard")
    (tmp_path / "a.csv.gz").write_bytes(gzip.compress(b"1\n2\n"))
    (tmp_path / "b.csv.zst").write_bytes(zstandard.ZstdCompressor().compress(b"key\n3\n1\n"))
    (tmp_path / "c.csv").write_text("\ufeff2\n")
    spec = str(tmp_path / "*.csv*")
    assert is_streamed(spec) and len(expand_inputs(spec)) == 3
    assert _joined(iter_access_chunks(spec, lines=1))[0].tolist() == [1, 2, 3, 1, 2]

    class Stdin:
        buffer = io.BytesIO(b"x\ny\nx\n")

    monkeypatch.setattr(sys, "stdin", Stdin)
    got = _joined(iter_access_chunks("-"))[0]
    assert got[0] == got[2] != got[1]


def test_a_later_chunk_keeps_its_first_line_and_the_delimiter(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a\t1\nkey\t2\nb\t3\n")
    whole = read_access_trace(path)
    keys, sizes = _joined(iter_access_chunks(str(path), lines=1))
    assert keys.tolist() == key_values(whole.keys).tolist() and sizes.tolist() == [1, 2, 3]


def test_errors_name_the_real_file_and_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("1,2\n\n3,4\n5\n")
    with pytest.raises(TraceFormatError) as info:
        list(iter_access_chunks(str(path), lines=1))
    assert str(info.value).startswith(f"{path}:4: has 1 column(s) but line 1 has 2")
    bad = tmp_path / "m.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 9, "hash_ids": [1]}\n\n{"timestamp": 0}\n')
    with pytest.raises(TraceFormatError, match=r"m.jsonl:3: missing field 'input_length'"):
        list(iter_request_chunks(str(bad), block_size=16, lines=1))
    with pytest.raises(TraceFormatError, match="no file matches"):
        expand_inputs(str(tmp_path / "none-*.csv"))
    with pytest.raises(TraceFormatError, match="no such file"):
        list(iter_lines(str(tmp_path / "missing.csv")))


def test_request_chunks_equal_the_whole_mooncake_file(tmp_path):
    rng = np.random.default_rng(3)
    rows = []
    for i in range(25):
        n = int(rng.integers(1, 5))
        rows.append({"timestamp": i * 10, "input_length": 512 * n - 3, "output_length": 2,
                     "hash_ids": rng.integers(0, 30, n).tolist()})
    path = tmp_path / "m.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    plain = tmp_path / "m.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows))
    chunks = list(iter_request_chunks(str(path), lines=7))
    whole = read_mooncake(plain)
    assert [c.n_requests for c in chunks] == [7, 7, 7, 4]
    assert np.concatenate([c.block_ids for c in chunks]).tolist() == whole.block_ids.tolist()
    assert np.concatenate([c.block_tokens for c in chunks]).tolist() == whole.block_tokens.tolist()
    assert chunks[0].source == str(path)


def test_npy_is_read_in_slices(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.array([[1, 2], [3, 1], [1, 2]]))
    keys, sizes = _joined(iter_access_chunks(str(path), lines=2))
    assert keys.tolist() == [1, 3, 1] and sizes.tolist() == [2, 1, 2]
    np.save(path, np.array([[1, 0]]))
    with pytest.raises(TraceFormatError, match="row 0"):
        list(iter_access_chunks(str(path)))


@pytest.mark.parametrize("sized", [False, True])
def test_the_fast_delimited_path_equals_the_exact_reader(tmp_path, sized):
    rng = np.random.default_rng(int(sized))
    keys = rng.integers(-50, 3000, 5000)
    rows = [f"{k},{abs(k) % 9 + 1}" if sized else f"{k}" for k in keys]
    rows[3000] = rows[3000] + "\r"
    rows[4000] = " " + rows[4000]  # spaces: the exact reader's rules apply to that block
    text = ("key,size\n" if sized else "") + "\n".join(rows) + "\n"
    path = tmp_path / "t.csv"
    path.write_text(text)
    got_keys, got_sizes = _joined(iter_access_chunks(str(path)))
    whole = read_access_trace(path)
    assert got_keys.tolist() == key_values(whole.keys).tolist()
    assert (got_sizes is None and whole.sizes is None) or got_sizes.tolist() == whole.sizes.tolist()
    path.write_text("\n".join(["1,2"] * 2000 + ["3"]) + "\n")
    with pytest.raises(TraceFormatError, match=r"t.csv:2001: has 1 column"):
        list(iter_access_chunks(str(path)))


def test_parse_int_lines_accepts_only_the_common_form():
    from stackdist.traces.fast_delimited import parse_int_lines

    def run(text):
        keys, sizes, _m, cols, ok = parse_int_lines(np.frombuffer(text, np.uint8), ord(","))
        return keys.tolist(), sizes.tolist(), cols, ok

    assert run(b"1,2\r\n-3,4\n\n+5,6") == ([1, -3, 5], [2, 4, 6], 2, True)
    assert run(b"7\n8\n") == ([7, 8], [0, 0], 1, True)
    for bad in (b"1,0\n", b"1,2\n3\n", b" 1\n", b"key\n", b"1,2,3\n", b"#c\n", b"12345678901234567890\n"):
        assert run(bad)[3] is False


def test_the_fast_mooncake_path_equals_the_exact_reader(tmp_path):
    from naive import real_trace_paths

    for path in real_trace_paths()[1:]:  # the smaller one (the fast path is the same code for both)
        chunks = list(iter_request_chunks(str(path)))
        whole = read_mooncake(path)
        for name in ("block_ids", "offsets", "block_tokens", "timestamps_s", "input_length", "output_length"):
            got = np.concatenate([getattr(c, name) for c in chunks]) if name != "offsets" else chunks[0].offsets
            assert got.tolist() == getattr(whole, name).tolist(), name
    odd = tmp_path / "m.jsonl"
    odd.write_text('{"timestamp": 1.5, "input_length": 9, "hash_ids": [1]}\n{"timestamp": 0, "input_length": 9}\n')
    with pytest.raises(TraceFormatError, match=r"m.jsonl:2: missing field 'hash_ids'"):
        list(iter_request_chunks(str(odd), block_size=16))
    odd.write_text('{"timestamp": 1.5, "input_length": 9, "hash_ids": [1], "x": "y"}\n')
    assert next(iter(iter_request_chunks(str(odd), block_size=16))).timestamps_s.tolist() == [0.0015]


@pytest.mark.parametrize("sized", [False, True])
def test_the_fast_jsonl_path_equals_the_exact_reader(tmp_path, sized):
    rng = np.random.default_rng(7 + int(sized))
    keys = rng.integers(-50, 3000, 5000)
    rows = [json.dumps({"key": int(k), "size": int(abs(k) % 9 + 1)} if sized else {"key": int(k)}) for k in keys]
    rows[10] = rows[10].replace(" ", "") + "\r"
    rows[2000] = rows[2000][:-1] + ', "note": "x"}'  # another field: the exact reader's rules for that block
    rows[3000] = '{"size": 3, "key": 5}' if sized else '{ "key" :5 }'
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(rows) + "\n\n")
    got_keys, got_sizes = _joined(iter_access_chunks(str(path)))
    whole = read_access_trace(path)
    assert got_keys.tolist() == key_values(whole.keys).tolist()
    assert (got_sizes is None and whole.sizes is None) or got_sizes.tolist() == whole.sizes.tolist()
    for bad, message in (('{"key": 1}\n{"key": 01}\n', r"t.jsonl:2"), ('{"key": 1}\n\n{"key": 2, "size": 0}\n', r"t.jsonl:3"),
                         ('{"key": 1}\n{"key": 1.5}\n', r"t.jsonl:2"), ('{"key": 1}\n{"size": 2}\n', r"t.jsonl:2: missing")):
        path.write_text(bad)
        with pytest.raises(TraceFormatError, match=message):
            list(iter_access_chunks(str(path)))
    path.write_text('{"key": "a"}\n{"key": "b"}\n{"key": "a"}\n')
    got_keys, _ = _joined(iter_access_chunks(str(path)))
    assert got_keys.tolist() == key_values(read_access_trace(path).keys).tolist()


def test_scan_access_jsonl_accepts_only_the_plain_form():
    from stackdist.traces.fast_json import scan_access_jsonl

    def run(text):
        keys, sizes, _m, has_size, ok = scan_access_jsonl(np.frombuffer(text, np.uint8))
        return keys.tolist(), sizes.tolist(), has_size, ok

    assert run(b'{"key": 5}\n\n{ "key":-7 }\r\n') == ([5, -7], [0, 0], False, True)
    assert run(b'{"size": 2, "key": 5}\n{"key": 1, "size": 3}') == ([5, 1], [2, 3], True, True)
    for bad in (b'{"key": "a"}\n', b'{"key": 05}\n', b'{"key": 1, "size": 0}\n', b'{"key": 5.0}\n', b'{"key": 1e3}\n',
                b'{"key": 1, "key": 2}\n', b'{"key": 1}x\n', b'{"key": 1}\n{"key": 1, "size": 2}\n', b'[1]\n', b'{}\n',
                b'{"key": 1234567890123456789}\n', b'{"k": 1}\n'):
        assert run(bad)[3] is False, bad


def test_the_mooncake_block_ids_equal_the_exact_reader(tmp_path):
    from naive import real_trace_paths

    from stackdist.traces.stream_input import iter_block_id_chunks

    for path in real_trace_paths()[1:]:
        got = np.concatenate(list(iter_block_id_chunks(str(path))))
        assert got.tolist() == read_mooncake(path).block_ids.tolist()
    odd = tmp_path / "m.jsonl"
    odd.write_text('{"timestamp": 1.5, "input_length": 600, "hash_ids": [1, 2]}\n\n{"timestamp": 0, "input_length": 9}\n')
    with pytest.raises(TraceFormatError, match=r"m.jsonl:3: missing field 'hash_ids'"):
        list(iter_block_id_chunks(str(odd)))
    odd.write_text('{"timestamp": 1.5, "input_length": 600, "hash_ids": [1, 2], "x": [3]}\n')
    assert [c.tolist() for c in iter_block_id_chunks(str(odd))] == [[1, 2]]
    rows = [f'{{"timestamp": {i}, "input_length": 1024, "hash_ids": [{i % 7}, {100 + i}]}}' for i in range(20_000)]
    odd.write_text("\n".join(rows) + "\n")  # over 1 MB: the block is scanned in two halves at once
    got = np.concatenate(list(iter_block_id_chunks(str(odd))))
    assert got.tolist() == read_mooncake(odd).block_ids.tolist()
    rows[15_000] = rows[15_000].replace("1024", "99")
    odd.write_text("\n".join(rows) + "\n")
    with pytest.raises(TraceFormatError, match=r"m.jsonl:15001: hash_ids has 2 entries"):
        list(iter_block_id_chunks(str(odd)))


def test_plan_and_tiers_read_streamed_inputs_as_the_plain_file(tmp_path):
    from stackdist.cli.main import main

    rows = [{"timestamp": i, "input_length": 32, "hash_ids": [i % 3, 10 + i % 3]} for i in range(30)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    plain, packed = tmp_path / "m.jsonl", tmp_path / "m.jsonl.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    out = {}
    for name, path in (("plain", plain), ("gz", packed)):
        assert main(["plan", str(path), "--block-size", "16", "--json", str(tmp_path / f"{name}.json")]) == 0
        out[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert out["plain"]["semantics"] == out["gz"]["semantics"]
    keys = tmp_path / "k.csv.gz"
    keys.write_bytes(gzip.compress(b"".join(f"{k}\n".encode() for k in [1, 2, 1, 3, 2, 1, 4, 1])))
    assert main(["tiers", str(keys), "--gpu", "1", "--cpu", "0,2", "-o", str(tmp_path / "t.json")]) == 0
    grid = json.loads((tmp_path / "t.json").read_text())
    assert grid["sampled"] is False and grid["inclusive"]["cpu_hits"] == [[0, 2]]
    (tmp_path / "k.csv").write_bytes(gzip.decompress(keys.read_bytes()))
    assert main(["tiers", str(tmp_path / "k.csv"), "--gpu", "1", "--cpu", "0,2", "-o", str(tmp_path / "p.json")]) == 0
    plain_grid = json.loads((tmp_path / "p.json").read_text())
    assert {**grid, "trace": None} == {**plain_grid, "trace": None}  # the same report as the plain file's


def test_several_files_on_the_command_line_are_one_trace(tmp_path, capsys):
    # `stackdist curve part-*.csv` unquoted: the shell passes the files one by one. They are one
    # trace in order: the same report as the joined file and as the quoted glob, --csv and a
    # request trace's --window included; an output that is any of them is refused (exit 2).
    from stackdist.cli.main import main

    rng = np.random.default_rng(3)
    keys = rng.zipf(1.3, 3_000) % 400
    parts = [tmp_path / f"part-{i}.csv" for i in range(3)]
    for part, chunk in zip(parts, np.array_split(keys, 3)):
        part.write_text("".join(f"{k}\n" for k in chunk))
    (tmp_path / "all.csv").write_text("".join(f"{k}\n" for k in keys))

    def report(*trace: str) -> dict:
        assert main(["curve", *trace, "--points", "9", "-o", str(tmp_path / "r.json")]) == 0
        return {**json.loads((tmp_path / "r.json").read_text()), "trace": None}

    assert report(*map(str, parts)) == report(str(tmp_path / "all.csv")) == report(str(tmp_path / "part-*.csv"))
    capsys.readouterr()
    assert main(["curve", *map(str, parts), "--points", "3", "--csv"]) == 0
    several = capsys.readouterr().out
    assert main(["curve", str(tmp_path / "all.csv"), "--points", "3", "--csv"]) == 0
    assert several == capsys.readouterr().out
    assert main(["curve", *map(str, parts), "-o", str(parts[1])]) == 2
    assert "is the input" in capsys.readouterr().err
    plans = []
    for trace in (list(map(str, parts)), [str(tmp_path / "all.csv")]):
        assert main(["plan", *trace, "--format", "csv", "--json", str(tmp_path / "p.json")]) == 0
        plans.append(json.loads((tmp_path / "p.json").read_text()))
        plans[-1]["trace"].pop("source")
    assert plans[0] == plans[1]
    rows = [{"timestamp": i, "input_length": 1024, "hash_ids": [i % 3, 10 + i % 5]} for i in range(40)]
    halves = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for half, chunk in zip(halves, (rows[:25], rows[25:])):
        half.write_text("".join(json.dumps(r) + "\n" for r in chunk))
    (tmp_path / "ab.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    window = ["--format", "mooncake", "--window", "5:35", "--warmup", "3"]
    assert report(*map(str, halves), *window) == report(str(tmp_path / "ab.jsonl"), *window)


@pytest.mark.parametrize("seed", range(4))
def test_the_bounded_stream_equals_the_whole_replay(seed):
    # KeyValueStream (compiled key map + replay state + distance counts) against HitCurve over the
    # whole trace: every capacity from 0, batches of any length; its state stops growing once
    # every key (and so every distance) has been seen, however long the stream.
    from stackdist.engine import HitCurve
    from stackdist.engine.stream import KeyValueStream

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30_000))
    keys = (rng.zipf(1.2, n) % int(rng.integers(1, 3_000))).astype(np.uint64)
    if seed % 2:  # small ids (their own ids), then large ones too: the map starts mid-stream
        later = np.arange(n) >= n // 2
        keys[later & (keys % 3 == 0)] += np.uint64(2**30)
    else:  # sparse ids: the map from the first batch
        keys *= np.uint64(2**40 + 7)
    stream = KeyValueStream()
    cuts = np.sort(rng.integers(0, n, 6))
    for part in np.split(keys, cuts):
        stream.feed(part)
    got, want = stream.curve(), HitCurve.from_trace(keys)
    caps = np.arange(0, int(np.unique(keys).size) + 2)
    assert got.sample(caps) == want.sample(caps) and got.summary() == want.summary()
    stream.feed(keys)  # every key known, every distance up to the key count possible
    size = stream.state_nbytes
    for _ in range(3):
        stream.feed(keys)
    assert stream.state_nbytes == size and stream.n_accesses == 5 * n


def test_a_streamed_curve_is_replayed_without_holding_the_trace(tmp_path, monkeypatch):
    # curve over several unit-size files (and a request trace's block stream) past the bounded
    # input size (set low here) takes the bounded stream: HitCurve.from_trace, which needs the
    # whole trace, is never called; the same JSON.
    from stackdist.methods import curve as common  # the module (the package exports curve_of)
    from stackdist.cli.main import main
    from stackdist.engine import HitCurve

    keys = np.random.default_rng(9).zipf(1.3, 5_000) % 700
    for i, part in enumerate(np.array_split(keys, 3)):
        (tmp_path / f"p{i}.csv").write_text("".join(f"{k}\n" for k in part))
    (tmp_path / "all.csv").write_text("".join(f"{k}\n" for k in keys))
    rows = [{"timestamp": i, "input_length": 1024, "hash_ids": [int(k), int(k) + 10**6]} for i, k in enumerate(keys[:300])]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "m.jsonl.gz").write_bytes(gzip.compress((tmp_path / "m.jsonl").read_bytes()))

    def report(*argv: str) -> dict:
        assert main(["curve", *argv, "--points", "12", "-o", str(tmp_path / "r.json")]) == 0
        return {**json.loads((tmp_path / "r.json").read_text()), "trace": None}

    whole = [report(str(tmp_path / "all.csv")), report(str(tmp_path / "m.jsonl"), "--format", "mooncake")]
    monkeypatch.setattr(common, "BOUNDED_INPUT_BYTES", 1000)
    monkeypatch.setattr(HitCurve, "from_trace", classmethod(lambda *a, **k: pytest.fail("the trace was held")))
    assert report(*(str(tmp_path / f"p{i}.csv") for i in range(3))) == whole[0]
    assert report(str(tmp_path / "m.jsonl.gz"), "--format", "mooncake") == whole[1]
    assert report(str(tmp_path / "all.csv")) == whole[0]  # one large plain file: bounded too
    assert report(str(tmp_path / "m.jsonl"), "--format", "mooncake") == whole[1]


def test_the_bounded_stream_on_the_real_traces():
    # Each real trace's block stream (small ids: their own), and the same ids scrambled by an odd
    # 64-bit multiplier (a bijection: the key map's table from the start), fed in 7 batches:
    # the curve of HitCurve over the whole stream at every capacity the real-trace checks use.
    from naive import real_trace_capacities, real_trace_paths

    from stackdist.engine import HitCurve
    from stackdist.engine.stream import KeyValueStream

    for path in real_trace_paths():
        ids = read_mooncake(path).block_ids.astype(np.uint64)
        want = HitCurve.from_trace(ids)
        caps = np.array(real_trace_capacities(int(np.unique(ids).size)), np.int64)
        for keys in (ids, ids * np.uint64(0x9E3779B97F4A7C15)):
            stream = KeyValueStream()
            for part in np.array_split(keys, 7):
                stream.feed(part)
            assert stream.curve().sample(caps) == want.sample(caps) and stream.curve().summary() == want.summary()
