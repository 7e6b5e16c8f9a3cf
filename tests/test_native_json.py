"""The native JSON-lines scanners (stackdist.engine.scale.native_json, wired into
stackdist.cli.native_sample): on seeded random JSONL access traces, unit and sized, and Mooncake
request traces (whitespace, CRLF, blank lines, BOM variants) they feed the compiled readers' keys
and sizes; a mutation
fuzz checks that every line they accept is one the compiled scanner accepts, with the same keys;
the CLI's sampled curve equals the compiled path's JSON field for field when they take a file,
and every shape they decline leaves the compiled path's answer or error (same exit code, same
message)."""

from __future__ import annotations

import json
import shutil
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from stackdist.cli import main
from stackdist.cli.native_sample import MOONCAKE_BLOCK_SIZE, native_curves
from stackdist.engine.scale import native
from stackdist.engine.scale.native import NativeShards, library
from stackdist.engine.scale.native_json import feed_jsonl, feed_mooncake
from stackdist.engine.scale.thresholds import seed_mix, threshold_for_rate
from stackdist.traces.fast_json import scan_access_jsonl, scan_mooncake
from stackdist.traces.formats import DEFAULT_BLOCK_SIZE
from stackdist.traces.stream_input import iter_access_chunks, iter_block_id_chunks

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler: the native path is off and the compiled one answers")

BOM = b"\xef\xbb\xbf"
TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def sampler(rate: float = 0.5, seeds: tuple[int, ...] = (0, 1, 2)) -> NativeShards:
    return NativeShards(library(), [seed_mix(s) for s in seeds], [threshold_for_rate(rate)] * len(seeds))


def summary(s: NativeShards) -> list:
    """Everything a sample says: accesses, each seed's kept count and distance histogram."""
    return [s.n_accesses, s.kept(), [(h.tolist(), cold, keys) for h, cold, keys in s.histograms()]]


def sized_summary(s: NativeShards) -> list:
    """Everything a sized sample says: accesses, kind, total size, each seed's kept count and
    warm (distance, size) pairs, cold accesses and sizes, distinct keys, sampled size."""
    replays = s.sized_histograms()
    assert replays is not None
    return [s.n_accesses, s.kind, s.total_size, s.kept(),
            [(d.tolist(), z.tolist(), *rest) for d, z, *rest in replays]]


def as_bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8)


def curve_args(trace: str | list[str], fmt: str | None = None, rate: float = 0.5) -> Namespace:
    return Namespace(trace=trace, sample_rate=rate, sample_size=None, dask=None, window=None, warmup=None, format=fmt)


def run_both(monkeypatch, capsys, tmp_path: Path, trace: str | list[str], *extra: str) -> tuple[tuple, tuple]:
    """``curve`` of ``trace`` with the native path on, then off: (exit code, report, stderr) each."""
    out = []
    for flag in ("1", "0"):
        monkeypatch.setenv("STACKDIST_NATIVE", flag)
        path = tmp_path / f"out{flag}.json"
        capsys.readouterr()
        code = main(["curve", *([trace] if isinstance(trace, str) else trace), *extra, "-o", str(path)])
        out.append((code, json.loads(path.read_text()) if code == 0 else None, capsys.readouterr().err))
    monkeypatch.delenv("STACKDIST_NATIVE")
    return out[0], out[1]


# ---- random traces in every accepted spelling -------------------------------------------------

def jsonl_line(rng: np.random.Generator, key: int) -> str:
    text = str(key)
    if key == 0 and rng.random() < 0.3:
        text = "-0"
    forms = ['{{"key": {}}}', '{{"key":{}}}', '{{ "key" : {} }}', '\t{{"key":\t{}}}\t', '{{"key"\r: {}\r}}', ' {{"key": {}}} ']
    return forms[int(rng.integers(0, len(forms)))].format(text)


def random_keys(rng: np.random.Generator, n: int) -> list[int]:
    m = int(rng.integers(1, 300))
    keys = rng.integers(-m, m, n).tolist() if rng.random() < 0.5 else (rng.zipf(1.4, n) % m).tolist()
    big = 10**18 - 1
    return [k if rng.random() > 0.03 else int(rng.choice([big, -big, big - 7, 10**17 + 3, -(10**17)])) for k in keys]


def join_lines(rng: np.random.Generator, lines: list[str]) -> bytes:
    """Lines with LF or CRLF ends, blank lines between some, an optional BOM, maybe no final end."""
    out = []
    crlf = rng.random() < 0.3
    for line in lines:
        out.append(line + ("\r\n" if crlf else "\n"))
        if rng.random() < 0.05:
            out.append(["\n", "  \n", "\r\n", "\t\r\n"][int(rng.integers(0, 4))])
    text = "".join(out).encode()
    if rng.random() < 0.2:
        text = text.rstrip(b"\r\n")
    return (BOM if rng.random() < 0.2 else b"") + text


def mooncake_line(rng: np.random.Generator, ids: list[int]) -> str:
    """One request, its fields in a random order with random (accepted) whitespace."""
    def ws() -> str:
        return ["", "", " ", "\t", "\r", "  "][int(rng.integers(0, 6))]

    count = len(ids)
    input_length = 0 if count == 0 else int(rng.integers((count - 1) * MOONCAKE_BLOCK_SIZE + 1, count * MOONCAKE_BLOCK_SIZE + 1))
    values = {"timestamp": int(rng.integers(0, 10**6)), "input_length": input_length,
              "hash_ids": "[" + ws() + (ws() + "," + ws()).join(map(str, ids)) + ws() + "]"}
    if rng.random() < 0.7:
        values["output_length"] = int(rng.integers(0, 900))
    names = list(values)
    rng.shuffle(names)
    return ws() + "{" + ",".join(f'{ws()}"{name}"{ws()}:{ws()}{values[name]}{ws()}' for name in names) + "}" + ws()


def random_requests(rng: np.random.Generator, n: int) -> list[list[int]]:
    """Requests sharing prefixes: each extends a random earlier request's prefix with new ids."""
    requests: list[list[int]] = []
    fresh = int(rng.integers(0, 10**6)) if rng.random() < 0.5 else 10**18 - 10**5
    for _ in range(n):
        base = requests[int(rng.integers(0, len(requests)))] if requests and rng.random() < 0.7 else []
        keep = base[: int(rng.integers(0, len(base) + 1))]
        new = int(rng.integers(0, 6))
        requests.append(keep + list(range(fresh, fresh + new)))
        fresh += new
    return requests


def compiled_keys(path: Path, fmt: str | None) -> np.ndarray:
    parts = list(iter_block_id_chunks(str(path), fmt)) if fmt == "mooncake" else [k for k, _ in iter_access_chunks(str(path), fmt)]
    return np.concatenate(parts).astype(np.int64).view(np.uint64) if parts else np.zeros(0, np.uint64)


def test_mooncake_block_size_is_the_readers():
    assert MOONCAKE_BLOCK_SIZE == DEFAULT_BLOCK_SIZE["mooncake"]


def test_random_jsonl_traces_feed_the_compiled_readers_keys(tmp_path):
    rng = np.random.default_rng(20)
    for trial in range(15):
        keys = random_keys(rng, int(rng.integers(1, 400)))
        data = join_lines(rng, [jsonl_line(rng, k) for k in keys])
        path = tmp_path / f"t{trial}.jsonl"
        path.write_bytes(data)
        body = data[3:] if data.startswith(BOM) else data
        assert scan_access_jsonl(as_bytes(body))[4], "the generator writes only lines the compiled scanner takes"
        want = compiled_keys(path, None)
        assert want.view(np.int64).tolist() == keys
        got = sampler()
        assert feed_jsonl(got, as_bytes(body)), data[:200]
        assert summary(got) == summary(sampler().feed_values(want))


def test_random_mooncake_traces_feed_the_compiled_readers_ids(tmp_path):
    rng = np.random.default_rng(21)
    for trial in range(15):
        requests = random_requests(rng, int(rng.integers(1, 60)))
        data = join_lines(rng, [mooncake_line(rng, ids) for ids in requests])
        path = tmp_path / f"m{trial}.jsonl"
        path.write_bytes(data)
        body = data[3:] if data.startswith(BOM) else data
        assert scan_mooncake(as_bytes(body), MOONCAKE_BLOCK_SIZE)[6], "the generator writes only lines the compiled scanner takes"
        want = compiled_keys(path, "mooncake")
        assert want.tolist() == [i for ids in requests for i in ids]
        got = sampler()
        assert feed_mooncake(got, as_bytes(body), MOONCAKE_BLOCK_SIZE), data[:200]
        assert summary(got) == summary(sampler().feed_values(want))


def sized_line(rng: np.random.Generator, key: int, size: int) -> str:
    """A sized access line, its two fields in either order, with random (accepted) whitespace."""
    def ws() -> str:
        return ["", "", " ", "\t", "\r", "  "][int(rng.integers(0, 6))]

    fields = [f'"key"{ws()}:{ws()}{"-0" if key == 0 and rng.random() < 0.3 else key}', f'"size"{ws()}:{ws()}{size}']
    if rng.random() < 0.5:
        fields.reverse()
    if rng.random() < 0.6:  # the common spelling (the scanner's fast path)
        return f'{{"key": {key}, "size": {size}}}'
    return ws() + "{" + ws() + f"{ws()},{ws()}".join(fields) + ws() + "}" + ws()


def random_sizes(rng: np.random.Generator, keys: list[int]) -> list[int]:
    """A fixed size per key (1, small, large, or exactly 2**40 now and then)."""
    top = [1, 9, 5000, 2**40][int(rng.integers(0, 4))]
    size_of = {k: int(rng.integers(1, top + 1)) if rng.random() > 0.05 else 2**40 for k in set(keys)}
    return [size_of[k] for k in keys]


def compiled_sized(path: Path) -> tuple[np.ndarray, np.ndarray]:
    parts = list(iter_access_chunks(str(path), None))
    assert all(z is not None for _, z in parts), "the compiled reader reads the file as sized"
    return (np.concatenate([k for k, _ in parts]).astype(np.int64).view(np.uint64),
            np.concatenate([z for _, z in parts]).astype(np.int64))


def test_random_sized_jsonl_traces_feed_the_compiled_readers_keys_and_sizes(tmp_path):
    rng = np.random.default_rng(23)
    for trial in range(15):
        keys = random_keys(rng, int(rng.integers(1, 400)))
        sizes = random_sizes(rng, keys)
        data = join_lines(rng, [sized_line(rng, k, z) for k, z in zip(keys, sizes)])
        path = tmp_path / f"s{trial}.jsonl"
        path.write_bytes(data)
        body = data[3:] if data.startswith(BOM) else data
        got_scan = scan_access_jsonl(as_bytes(body))
        assert got_scan[4] and got_scan[3], "the generator writes only sized lines the compiled scanner takes"
        want_keys, want_sizes = compiled_sized(path)
        assert want_keys.view(np.int64).tolist() == keys and want_sizes.tolist() == sizes
        got = sampler()
        assert feed_jsonl(got, as_bytes(body)), data[:200]
        assert sized_summary(got) == sized_summary(sampler().feed_sized_values(want_keys, want_sizes))


# ---- a mutation fuzz: whatever the native scanner takes, the compiled one takes alike ----------

ALPHABET = list(b'0123456789-+.eE,:{}[]" \t\r\nkeysiz_') + [0xEF, 0x80]


def mutated(rng: np.random.Generator, line: bytes) -> bytes:
    out = bytearray(line)
    for _ in range(int(rng.integers(1, 3))):
        pos = int(rng.integers(0, len(out) + 1))
        op = rng.random()
        if op < 0.4 and pos < len(out):
            del out[pos]
        elif op < 0.7 and pos < len(out):
            out[pos] = ALPHABET[int(rng.integers(0, len(ALPHABET)))]
        else:
            out.insert(pos, ALPHABET[int(rng.integers(0, len(ALPHABET)))])
    return bytes(out)


def fuzz(rng: np.random.Generator, seeds: list[bytes], trials: int, native_feed, compiled_ids) -> int:
    """Mutate lines; each one the native scanner takes must be taken by the compiled scanner with
    the same keys and sizes (``compiled_ids``: keys, or (keys, sizes) for a sized line; the
    mutated line, then a copy of it as the compiled scanner read it: equal keys make the copy's
    accesses re-accesses). Returns how many it took."""
    taken = 0
    for _ in range(trials):
        line = mutated(rng, seeds[int(rng.integers(0, len(seeds)))])
        s = sampler(1.0, (3,))
        if not native_feed(s, as_bytes(line)):
            continue
        taken += 1
        got = compiled_ids(line)
        assert got is not None, line
        ids, sizes = got if isinstance(got, tuple) else (got, None)
        assert (s.kind == 2) == (sizes is not None), line
        s2 = sampler(1.0, (3,))
        assert native_feed(s2, as_bytes(line + b"\n" + line)), line
        for fed, times in ((s, 1), (s2, 2)):
            ref = sampler(1.0, (3,))
            if sizes is None:
                assert summary(fed) == summary(ref.feed_values(np.concatenate([ids] * times))), line
            else:
                ref.feed_sized_values(np.concatenate([ids] * times), np.concatenate([sizes] * times))
                assert sized_summary(fed) == sized_summary(ref), line
    return taken


def test_fuzzed_jsonl_lines_the_native_scanner_takes_are_the_compiled_scanners():
    def compiled(line: bytes) -> np.ndarray | tuple[np.ndarray, np.ndarray] | None:
        keys, sizes, m, has_size, ok = scan_access_jsonl(as_bytes(line))
        if not ok:
            return None
        return (keys.view(np.uint64).copy(), sizes.copy()) if has_size else keys[:m].view(np.uint64).copy()

    seeds = [b'{"key": 12345}', b'{ "key" : -7 }', b'{"key":0}\r', b'{"key": 999999999999999999}',
             b'{"key": 12345, "size": 678}', b'{ "size" : 1099511627776 , "key" : -3 }', b'{"key":5,"size":1}\r',
             b'{"size": 10, "key": 999999999999999999}']
    assert fuzz(np.random.default_rng(7), seeds, 300, feed_jsonl, compiled) > 25


def test_fuzzed_mooncake_lines_the_native_scanner_takes_are_the_compiled_scanners():
    def compiled(line: bytes) -> np.ndarray | None:
        ids, _, _, _, _, _, ok = scan_mooncake(as_bytes(line), MOONCAKE_BLOCK_SIZE)
        return ids.view(np.uint64).copy() if ok else None

    def native(s: NativeShards, data: np.ndarray) -> bool:
        return feed_mooncake(s, data, MOONCAKE_BLOCK_SIZE)

    seeds = [b'{"timestamp": 10, "input_length": 1000, "output_length": 5, "hash_ids": [1, 20]}',
             b'{"hash_ids":[],"input_length":0,"timestamp":0}', b'{ "timestamp" : 3 , "input_length" : 513 , "hash_ids" : [ 4 , 5 ] }']
    assert fuzz(np.random.default_rng(8), seeds, 300, native, compiled) > 8


# ---- the CLI: equal JSON where native takes a file; the compiled answer or error where not ---------

def test_cli_equals_the_compiled_path_on_random_traces(monkeypatch, capsys, tmp_path):
    rng = np.random.default_rng(22)
    for trial in range(9):
        rate, fmt = "0.5", None
        if trial % 3 == 1:
            data, fmt = join_lines(rng, [mooncake_line(rng, ids) for ids in random_requests(rng, 80)]), "mooncake"
        elif trial % 3 == 2:  # sized, at a rate that samples few keys too
            keys = random_keys(rng, 600)
            data = join_lines(rng, [sized_line(rng, k, z) for k, z in zip(keys, random_sizes(rng, keys))])
            rate = ["0.5", "0.2", "0.05"][trial // 3]
        else:
            data = join_lines(rng, [jsonl_line(rng, k) for k in random_keys(rng, 600)])
        path = tmp_path / f"t{trial}.jsonl"
        path.write_bytes(data)
        assert native_curves(curve_args(str(path), fmt, float(rate)), [0, 1, 2]) is not None
        extra = ["--format", fmt] if fmt else []
        (a, ra, _), (b, rb, _) = run_both(monkeypatch, capsys, tmp_path, str(path), *extra, "--sample-rate", rate, "--points", "9")
        assert a == b == 0 and ra == rb


EDGE_JSONL = {
    "crlf_blank_bom": BOM + b'{"key": 1}\r\n\r\n  \n{"key": -1}\r\n{"key":1}\r\n\t\n{"key": -1}',
    "one_line_no_end": b'{"key": 42}',
    "negative_and_minus_zero": b'{"key": -0}\n{"key": 0}\n{"key": -999999999999999999}\n{"key": 0}\n',
    "whitespace": b' \t{ \t"key"\r :\t 5 \r} \r\n{"key"  :5}\n{"key": 5 }\n',
    "sized": b'{"key": 1, "size": 2}\n{"key": 1, "size": 2}\n',
    "size_first": b'{"size": 2, "key": 1}\n',
    "sized_both_orders_crlf_blank_bom": BOM + b'{"key": -1, "size": 1099511627776}\r\n\r\n \n{"size":1099511627776,"key":-1}\r\n'
                                        b'{ "size" : 1 , "key" : 0 }\r\n{"key": -0, "size": 1}',
    "sized_big_keys": b'{"key": 999999999999999999, "size": 7}\n{"key": -999999999999999999, "size": 999999}\n' * 2,
}
DECLINED_JSONL = {
    "int64_max": b'{"key": 9223372036854775807}\n{"key": 1}\n',
    "int64_min": b'{"key": -9223372036854775808}\n{"key": 1}\n',
    "two_to_63": b'{"key": 9223372036854775808}\n{"key": 1}\n',
    "uint64_max": b'{"key": 18446744073709551615}\n{"key": 1}\n',
    "beyond_uint64": b'{"key": 18446744073709551616}\n',
    "nineteen_digits": b'{"key": 1000000000000000000}\n',
    "sized_later": b'{"key": 1}\n{"key": 2, "size": 3}\n',
    "size_zero": b'{"key": 1, "size": 2}\n{"key": 2, "size": 0}\n',
    "size_negative": b'{"key": 1, "size": -1}\n', "size_minus_zero": b'{"key": 1, "size": -0}\n',
    "size_float": b'{"key": 1, "size": 1.5}\n', "size_integral_float": b'{"key": 1, "size": 2.0}\n',
    "size_exponent": b'{"key": 1, "size": 1e3}\n', "size_string": b'{"key": 1, "size": "1"}\n',
    "size_leading_zero": b'{"key": 1, "size": 01}\n', "size_null": b'{"key": 1, "size": null}\n',
    "size_over_exact": b'{"key": 1, "size": 1099511627777}\n{"key": 1, "size": 1099511627777}\n',
    "size_nineteen_digits": b'{"key": 1, "size": 1000000000000000000}\n',
    "missing_size": b'{"key": 1, "size": 2}\n{"key": 2, "size": 3}\n{"key": 1}\n{"key": 2, "size": 3}\n',
    "size_changes": b'{"key": 1, "size": 2}\n{"key": 2, "size": 3}\n{"key": 1, "size": 4}\n',
    "size_only": b'{"size": 2}\n', "size_twice": b'{"key": 1, "size": 2, "size": 2}\n',
    "sized_extra_field": b'{"key": 1, "size": 2, "t": 3}\n', "sized_extra_first": b'{"t": 3, "key": 1, "size": 2}\n',
    "sized_trailing_comma": b'{"key": 1, "size": 2,}\n', "sized_no_comma": b'{"key": 1 "size": 2}\n',
    "size_upper": b'{"key": 1, "Size": 2}\n',
    "string_key": b'{"key": "a"}\n{"key": 1}\n',
    "float_key": b'{"key": 5.0}\n', "exponent": b'{"key": 1e3}\n', "leading_zero": b'{"key": 05}\n',
    "plus": b'{"key": +5}\n', "true": b'{"key": true}\n', "null": b'{"key": null}\n', "minus_alone": b'{"key": -}\n',
    "duplicate": b'{"key": 5, "key": 6}\n', "other_field": b'{"key": 5, "t": 1}\n', "empty_object": b'{}\n',
    "escaped_name": b'{"k\\u0065y": 5}\n', "upper_name": b'{"Key": 5}\n', "broken": b'{"key": 5\n',
    "trailing": b'{"key": 5} x\n', "two_objects": b'{"key": 5}{"key": 6}\n', "array": b'[5]\n', "bare": b'5\n',
    "comment": b'{"key": 5}\n# note\n', "bom_later": b'{"key": 5}\n\xef\xbb\xbf{"key": 5}\n', "form_feed": b'{"key":\x0c5}\n',
    "blank_only": b'\n \n', "empty": b'',
}


@pytest.mark.parametrize("name", sorted(EDGE_JSONL))
def test_jsonl_edge_cases_take_the_native_path(monkeypatch, capsys, tmp_path, name):
    path = tmp_path / "t.jsonl"
    path.write_bytes(EDGE_JSONL[name])
    assert native_curves(curve_args(str(path), rate=1.0), [0, 1]) is not None
    (a, ra, _), (b, rb, _) = run_both(monkeypatch, capsys, tmp_path, str(path), "--sample-rate", "1.0")
    assert a == b == 0 and ra == rb


@pytest.mark.parametrize("name", sorted(DECLINED_JSONL))
def test_jsonl_shapes_it_declines_keep_the_compiled_answer(monkeypatch, capsys, tmp_path, name):
    path = tmp_path / "t.jsonl"
    path.write_bytes(DECLINED_JSONL[name])
    assert native_curves(curve_args(str(path), rate=1.0), [0]) is None
    native_run, compiled_run = run_both(monkeypatch, capsys, tmp_path, str(path), "--sample-rate", "1.0")
    assert native_run == compiled_run
    if name in ("size_zero", "size_changes", "missing_size", "size_negative"):
        assert native_run[0] == 1 and native_run[2].count("\n") == 1, native_run  # an error, one line


def moon(ids: str = "1, 2", input_length: int = 600, extra: str = "") -> bytes:
    return f'{{"timestamp": 0, "input_length": {input_length}, "output_length": 1, "hash_ids": [{ids}]{extra}}}\n'.encode()


EDGE_MOONCAKE = {
    "bench_form": moon() * 3,
    "crlf_blank_bom": BOM + moon().replace(b"\n", b"\r\n") + b"\r\n \n" + moon("2, 1"),
    "empty_lists": b'{"timestamp": 0, "input_length": 0, "hash_ids": []}\n' + moon() + b'{"hash_ids": [ ], "timestamp": 1, "input_length": 0}\n' + moon(),
    "one_line_no_end": b'{"timestamp": 0, "input_length": 1, "hash_ids": [7]}',
    "exact_block_ends": moon("1", 512) + moon("1, 2", 1024) + moon("1, 2, 3", 1025),
    "big_ids": moon("999999999999999999, 0") * 2,
    "any_order": b'{"hash_ids": [3, 4], "output_length": 2, "input_length": 1000, "timestamp": 9}\n' * 2,
    "whitespace": b' {\t"timestamp"\r:\t0 ,"input_length" :600,"hash_ids":[ 1 ,2\t] } \r\n' * 2,
}
DECLINED_MOONCAKE = {
    "too_few_ids": moon("1", 600), "too_many_ids": moon("1, 2, 3", 600), "ids_without_length": moon("1", 0),
    "float_timestamp": b'{"timestamp": 0.5, "input_length": 600, "hash_ids": [1, 2]}\n' * 2,
    "negative_timestamp": b'{"timestamp": -1, "input_length": 600, "hash_ids": [1, 2]}\n',
    "negative_id": moon("-1, 2"), "string_id": moon('"a", 2'), "float_id": moon("1.0, 2"), "uint64_id": moon("18446744073709551615, 2"),
    "int64_max_id": moon("9223372036854775807, 2") * 2, "nineteen_digit_id": moon("1000000000000000000, 2"),
    "leading_zero": moon("01, 2"), "trailing_comma": moon("1, 2,"), "no_comma": moon("1 2"), "nested": moon("[1], 2"),
    "extra_field": moon(extra=', "session_id": 3'), "duplicate": moon(extra=', "timestamp": 1'),
    "no_timestamp": b'{"input_length": 600, "hash_ids": [1, 2]}\n', "no_length": b'{"timestamp": 0, "hash_ids": [1, 2]}\n',
    "no_ids": b'{"timestamp": 0, "input_length": 600}\n', "ids_not_list": b'{"timestamp": 0, "input_length": 1, "hash_ids": 1}\n',
    "escaped_name": b'{"time\\u0073tamp": 0, "input_length": 600, "hash_ids": [1, 2]}\n', "broken": moon()[:-3] + b"\n",
    "only_empty_lists": b'{"timestamp": 0, "input_length": 0, "hash_ids": []}\n' * 3, "access_lines": b'{"key": 1}\n', "trailing": moon().rstrip(b"\n") + b" x\n", "blank_only": b"\n\n", "empty": b"",
}


@pytest.mark.parametrize("name", sorted(EDGE_MOONCAKE))
def test_mooncake_edge_cases_take_the_native_path(monkeypatch, capsys, tmp_path, name):
    path = tmp_path / "m.jsonl"
    path.write_bytes(EDGE_MOONCAKE[name])
    assert native_curves(curve_args(str(path), "mooncake", rate=1.0), [0, 1]) is not None
    (a, ra, _), (b, rb, _) = run_both(monkeypatch, capsys, tmp_path, str(path), "--format", "mooncake", "--sample-rate", "1.0")
    assert a == b == 0 and ra == rb


@pytest.mark.parametrize("name", sorted(DECLINED_MOONCAKE))
def test_mooncake_shapes_it_declines_keep_the_compiled_answer(monkeypatch, capsys, tmp_path, name):
    path = tmp_path / "m.jsonl"
    path.write_bytes(DECLINED_MOONCAKE[name])
    assert native_curves(curve_args(str(path), "mooncake", rate=1.0), [0]) is None
    native_run, compiled_run = run_both(monkeypatch, capsys, tmp_path, str(path), "--format", "mooncake", "--sample-rate", "1.0")
    assert native_run == compiled_run


def test_several_files_and_format_flags(monkeypatch, capsys, tmp_path):
    (tmp_path / "a.ndjson").write_bytes(b'{"key": 1}\n{"key": 2}\n' * 20)
    (tmp_path / "b.csv").write_bytes(b"key\n" + b"2\n3\n" * 20)
    (tmp_path / "c.txt").write_bytes(b"".join(b'{"key": %d}\n' % k for k in range(40)))
    files = [str(tmp_path / "a.ndjson"), str(tmp_path / "b.csv")]
    assert native_curves(curve_args(files), [0]) is not None
    assert native_curves(curve_args(str(tmp_path / "c.txt"), "jsonl"), [0]) is not None
    assert native_curves(curve_args(str(tmp_path / "c.txt")), [0]) is None  # a .txt name is delimited text
    (a, ra, _), (b, rb, _) = run_both(monkeypatch, capsys, tmp_path, files, "--sample-rate", "0.7")
    assert a == b == 0 and ra == rb
    (tmp_path / "m1.log").write_bytes(moon() * 5)
    (tmp_path / "m2.jsonl").write_bytes(moon("2, 9") * 5)
    files = [str(tmp_path / "m1.log"), str(tmp_path / "m2.jsonl")]
    assert native_curves(curve_args(files, "mooncake"), [0]) is not None
    assert native_curves(curve_args(files), [0]) is None  # without --format mooncake they are access traces
    (a, ra, _), (b, rb, _) = run_both(monkeypatch, capsys, tmp_path, files, "--format", "mooncake", "--sample-rate", "0.7")
    assert a == b == 0 and ra == rb


def test_text_scanned_in_two_halves_feeds_the_same_keys(monkeypatch):
    monkeypatch.setattr(native, "_TWO_THREADS", 16)  # text of 128 bytes or more is cut in two
    rng = np.random.default_rng(4)
    for trial in range(12):
        keys = random_keys(rng, int(rng.integers(10, 300)))
        data = join_lines(rng, [jsonl_line(rng, k) for k in keys]).removeprefix(BOM)
        got = sampler(0.3)
        assert feed_jsonl(got, as_bytes(data))
        assert summary(got) == summary(sampler(0.3).feed_values(np.array(keys, np.int64)))
        requests = random_requests(rng, int(rng.integers(2, 40)))
        data = join_lines(rng, [mooncake_line(rng, ids) for ids in requests]).removeprefix(BOM)
        got = sampler(0.3)
        assert feed_mooncake(got, as_bytes(data), MOONCAKE_BLOCK_SIZE)
        assert summary(got) == summary(sampler(0.3).feed_values(np.array([i for r in requests for i in r], np.int64)))
    for trial in range(8):
        keys = random_keys(rng, int(rng.integers(10, 300)))
        sizes = random_sizes(rng, keys)
        data = join_lines(rng, [sized_line(rng, k, z) for k, z in zip(keys, sizes)]).removeprefix(BOM)
        got = sampler(0.3)
        assert feed_jsonl(got, as_bytes(data))
        assert sized_summary(got) == sized_summary(sampler(0.3).feed_sized_values(np.array(keys, np.int64), np.array(sizes)))
    for bad in (b'{"key": 1}\n' * 20 + b'{"key": 1, "size": 2}\n', b'{"key": x}\n' + b'{"key": 1}\n' * 20,
                b'{"key": 1, "size": 2}\n' * 20 + b'{"key": 1}\n', b'{"key": 1, "size": 2}\n' * 20 + b'{"key": 1, "size": 0}\n'):
        assert not feed_jsonl(sampler(), as_bytes(bad))  # in the second half, then in the first
    for bad in (moon() * 5 + moon("1"), moon("1") + moon() * 5):
        assert not feed_mooncake(sampler(), as_bytes(bad), MOONCAKE_BLOCK_SIZE)


def test_halves_of_either_shape_or_files_mixing_sized_and_unit_decline(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(native, "_TWO_THREADS", 16)
    unit, sized = b'{"key": 1}           \n{"key": 2}           \n' * 10, b'{"key": 1, "size": 3}\n{"key": 2, "size": 3}\n' * 10
    assert len(unit) == len(sized)
    for name, (first, second) in (("unit_then_sized", (unit, sized)), ("sized_then_unit", (sized, unit))):
        data = first[:-1] + b"  \n" + second  # cut just after the first part: each half one shape, the two "both"
        (tmp_path / f"{name}.jsonl").write_bytes(data)
        s = sampler()
        assert feed_jsonl(s, as_bytes(data)) and s.kind == 3
        assert native_curves(curve_args(str(tmp_path / f"{name}.jsonl")), [0]) is None
    (tmp_path / "s.jsonl").write_bytes(sized)
    (tmp_path / "u.jsonl").write_bytes(unit)
    (tmp_path / "s.csv").write_bytes(b"key,size\n" + b"2,3\n5,1\n" * 10)
    together = [str(tmp_path / "s.jsonl"), str(tmp_path / "s.csv")]
    assert native_curves(curve_args(together), [0]) is not None  # sized JSONL and sized text: one sized trace
    (a, ra, _), (b, rb, _) = run_both(monkeypatch, capsys, tmp_path, together, "--sample-rate", "0.7")
    assert a == b == 0 and ra == rb
    mixed = [str(tmp_path / "s.jsonl"), str(tmp_path / "u.jsonl")]
    assert native_curves(curve_args(mixed), [0]) is None
    native_run, compiled_run = run_both(monkeypatch, capsys, tmp_path, mixed, "--sample-rate", "0.7")
    assert native_run == compiled_run and native_run[0] == 1


@pytest.mark.parametrize(("name", "rate"), [("mooncake_conversation_trace.jsonl", "0.1"), ("mooncake_synthetic_trace.jsonl", "0.5")])
def test_the_real_mooncake_traces_give_the_compiled_answer(monkeypatch, capsys, tmp_path, name, rate):
    path = str(TRACES / name)
    assert native_curves(curve_args(path, "mooncake", float(rate)), [0, 1, 2]) is not None
    (a, ra, _), (b, rb, _) = run_both(monkeypatch, capsys, tmp_path, path, "--format", "mooncake", "--sample-rate", rate)
    assert a == b == 0 and ra == rb


def test_a_sample_past_the_limit_is_left_to_the_compiled_path(monkeypatch, capsys, tmp_path):
    from stackdist.cli import native_sample

    keys = np.random.default_rng(6).integers(0, 500, 3000).tolist()
    (tmp_path / "k.jsonl").write_text("".join(f'{{"key": {k}}}\n' for k in keys))
    (tmp_path / "s.jsonl").write_text("".join(f'{{"key": {k}, "size": {k % 5 + 1}}}\n' for k in keys))
    monkeypatch.setattr(native_sample, "SAMPLE_LIMIT", 1000)
    for name in ("k.jsonl", "s.jsonl"):
        assert native_curves(curve_args(str(tmp_path / name), rate=1.0), [0]) is None, name
        assert native_curves(curve_args(str(tmp_path / name), rate=0.1), [0]) is not None, name
        (a, ra, _), (b, rb, _) = run_both(monkeypatch, capsys, tmp_path, str(tmp_path / name), "--sample-rate", "1.0")
        assert a == b == 0 and ra == rb, name
