"""The numba-free sampled curve (stackdist.engine.scale.native, stackdist.cli.native_sample):
its C replay against a naive LRU stack, its samples against the compiled ShardsSampler field
for field, its CLI answers against the compiled path's, and the inputs it must leave alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from stackdist.cli import main
from stackdist.cli.native_sample import native_curves
from stackdist.engine.scale import native
from stackdist.engine.scale.estimate import (
    collapse_sized,
    fixed_rate_curve,
    fixed_rate_sized_curve,
)
from stackdist.engine.scale.native import NativeShards, library
from stackdist.engine.scale.sampling import ShardsSampler, feed_all
from stackdist.engine.scale.thresholds import seed_mix, threshold_for_rate

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler: the native path is off and the compiled one answers")

FIELDS = ("n_accesses", "total_size", "sampled_weight", "sampled_size_weight", "cold_weight", "cold_size_weight",
          "rate", "max_keys", "seed", "n_sampled_accesses", "n_sampled_keys", "unit")


def naive_depths(keys: list[int]) -> tuple[list[int], int]:
    """Each re-access's 1-based depth in a plain list LRU stack, and the cold accesses."""
    stack: list[int] = []
    depths, cold = [], 0
    for k in keys:
        if k in stack:
            depths.append(stack.index(k) + 1)
            stack.remove(k)
        else:
            cold += 1
        stack.insert(0, k)
    return depths, cold


def native_sample(keys: np.ndarray, rate: float, seeds: list[int], chunks: int = 1) -> NativeShards:
    sampler = NativeShards(library(), [seed_mix(s) for s in seeds], [threshold_for_rate(rate)] * len(seeds))
    for part in np.array_split(keys, chunks):
        sampler.feed_values(part)
    return sampler


def assert_same_curve(got, want) -> None:
    for name in ("values", "cum_weight", "cum_size_weight"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    for name in FIELDS:
        assert getattr(got, name) == getattr(want, name), name


def test_library_builds_here():
    assert library() is not None


def test_replay_equals_a_naive_stack_at_rate_one():
    rng = np.random.default_rng(5)
    cases = [[], [7], [7] * 5, list(range(6)) * 3, [1, 2, 1, 3, 2, 1, 1]]
    cases += [rng.integers(0, int(rng.integers(1, 40)), int(rng.integers(1, 300))).tolist() for _ in range(40)]
    for keys in cases:
        (hist, cold, n_keys), = native_sample(np.array(keys, np.int64), 1.0, [0]).histograms()
        depths, want_cold = naive_depths(keys)
        assert cold == want_cold == n_keys == len(set(keys))
        assert hist.tolist() == np.bincount(depths, minlength=2).tolist()[: hist.size] and hist.sum() == len(depths)


def test_samples_equal_the_compiled_sampler_field_for_field():
    rng = np.random.default_rng(11)
    for trial in range(60):
        n, m = int(rng.integers(0, 2500)), int(rng.integers(1, 400))
        keys = rng.integers(-m, m, n) if trial % 2 else rng.zipf(1.3, n) % m
        keys = keys.astype(np.int64)
        rate = float(rng.choice([1.0, 0.5, 0.1, 0.02]))
        chunks = int(rng.integers(1, 4))
        seeds = [trial, trial + 1]
        got = native_sample(keys, rate, seeds, chunks).histograms()
        samplers = [ShardsSampler(rate, None, s) for s in seeds]
        for part in np.array_split(keys, chunks):
            feed_all(samplers, part)
        for (hist, cold, n_keys), sampler in zip(got, samplers):
            assert_same_curve(fixed_rate_curve(hist, cold, n_keys, rate=sampler.rate, n_accesses=n, seed=sampler.seed),
                              sampler.curve())


def test_a_large_chunk_fed_on_two_threads_equals_the_compiled_sampler():
    keys = np.random.default_rng(3).integers(0, 200_000, (1 << 20) + 7).astype(np.uint64)
    got = native_sample(keys, 0.05, [0, 1, 2]).histograms()
    samplers = [ShardsSampler(0.05, None, s) for s in (0, 1, 2)]
    feed_all(samplers, keys)
    for (hist, cold, n_keys), sampler in zip(got, samplers):
        assert_same_curve(fixed_rate_curve(hist, cold, n_keys, rate=sampler.rate, n_accesses=keys.size, seed=sampler.seed),
                          sampler.curve())


def run_both(monkeypatch, tmp_path: Path, trace: str | list[str], *extra: str) -> tuple[int, dict, int, dict]:
    """The curve of ``trace`` with the native path on and off: (code, report) each."""
    out = []
    for flag in ("1", "0"):
        monkeypatch.setenv("STACKDIST_NATIVE", flag)
        path = tmp_path / f"out{flag}.json"
        code = main(["curve", *([trace] if isinstance(trace, str) else trace), *extra, "-o", str(path)])
        out += [code, json.loads(path.read_text()) if code == 0 else {}]
    monkeypatch.delenv("STACKDIST_NATIVE")
    return out[0], out[1], out[2], out[3]


def curve_args(trace: str | list[str], rate: float = 0.5, **over) -> Namespace:
    base = {"trace": trace, "sample_rate": rate, "sample_size": None, "dask": None, "window": None, "warmup": None,
            "format": None}
    return Namespace(**{**base, **over})


TEXT_FORMS = {  # name: (first line or "", the body repeated after it)
    "plain.csv": ("", "5\n6\n5\n7\n6\n5\n"),
    "header.csv": ("key\n", "5\n6\n5\n7\n6\n5\n"),
    "bom_crlf.csv": ("\ufeffKey \r\n", "5\r\n6\r\n\r\n5\r\n-7\r\n+6\r\n"),
    "signs.txt": ("\n\n", "-0\n0\n007\n7\n-9223372036854775\n123456789012345678\n7\n"),
    "wide.csv": ("", ("-9223372036854775808\n18446744073709551615\n1234567890123456789\n12345678\n"
                      "00000000000000000009\n+9\n9\n-1\n18446744073709551615\n")),
    "tabs.tsv": ("KEY\n", "1\n2\n1\n"),
    "sized.csv": ("key,size\n", "1,3\n2,5\n1,3\n-4,1\n2,5\n+7,1099511627776\n"),
    "sized_bom_crlf.csv": ("\ufeffKEY , Bytes\r\n", "1,3\r\n\r\n2,5\r\n1,3\r\n"),
    "sized_headerless.tsv": ("", "1\t3\n2\t5\n1\t3\n"),
    "sized_sniffed.txt": ("", "9\t2\n8\t2\n9\t2\n"),
    "sized_comma.txt": ("key,size\n", "9,2\n8,2\n9,2\n"),
    "no_final_newline.csv": ("", "1\n2\n1"),
    "named_header.csv": ("block_id\r\n", "5\r\n6\r\n5\r\n"),  # read as a text key, one access
    "spaced_header.txt": ("\ufeff Block ID \n", "5\n6\n5\n"),
    "utf8_header.csv": ("clé\n", "5\n6\n5\n"),
    "number_like_header.csv": ("1.5\n", "5\n6\n5\n"),
}


@pytest.mark.parametrize("name", sorted(TEXT_FORMS))
def test_text_forms_take_the_native_path_with_the_compiled_answer(monkeypatch, tmp_path, name):
    first, body = TEXT_FORMS[name]
    path = tmp_path / name
    path.write_text(first + (body if name.startswith("no_final") else body * 40), encoding="utf-8")
    assert native_curves(curve_args(str(path)), [0, 1, 2]) is not None
    a, ra, b, rb = run_both(monkeypatch, tmp_path, str(path), "--sample-rate", "0.5", "--points", "9")
    assert a == b == 0 and ra == rb


def test_sized_npy_forms_take_the_native_path(monkeypatch, tmp_path):
    rng = np.random.default_rng(12)
    keys, sizes = rng.integers(0, 200, 4000), rng.integers(1, 50, 200)
    pairs = np.stack([keys, sizes[keys]], axis=1)
    structured = np.zeros(keys.size, dtype=[("key", np.int32), ("size", np.uint16)])
    structured["key"], structured["size"] = keys, sizes[keys]
    keyed = np.zeros(keys.size, dtype=[("key", np.int64)])
    keyed["key"] = keys
    for name, array in (("pairs.npy", pairs), ("structured.npy", structured), ("keyed.npy", keyed)):
        np.save(tmp_path / name, array)
        assert native_curves(curve_args(str(tmp_path / name)), [0, 1]) is not None, name
        a, ra, b, rb = run_both(monkeypatch, tmp_path, str(tmp_path / name), "--sample-rate", "0.4")
        assert a == b == 0 and ra == rb, name
    changed = pairs.copy()
    changed[-1, 1] += 1  # a key's size changes: the compiled path's error, the same exit code
    np.save(tmp_path / "changed.npy", changed)
    a, _, b, _ = run_both(monkeypatch, tmp_path, str(tmp_path / "changed.npy"), "--sample-rate", "1.0")
    assert a == b == 1
    (tmp_path / "unit.csv").write_text("1\n2\n")  # sized and unit files together: the compiled path's error
    a, _, b, _ = run_both(monkeypatch, tmp_path, [str(tmp_path / "pairs.npy"), str(tmp_path / "unit.csv")],
                          "--sample-rate", "1.0")
    assert a == b == 1


def test_sized_samples_equal_the_compiled_sampler_field_for_field():
    rng = np.random.default_rng(21)
    for trial in range(40):
        n, m = int(rng.integers(1, 2000)), int(rng.integers(1, 300))
        keys = (rng.zipf(1.2, n) % m).astype(np.int64)
        size_of = rng.integers(1, [2, 10, 5000, 2**40][trial % 4] + 1, m)
        sizes = size_of[keys]
        rate, seeds, chunks = float(rng.choice([1.0, 0.5, 0.1])), [trial, trial + 7], int(rng.integers(1, 4))
        sampler = NativeShards(library(), [seed_mix(s) for s in seeds], [threshold_for_rate(rate)] * 2)
        compiled = [ShardsSampler(rate, None, s) for s in seeds]
        for kpart, zpart in zip(np.array_split(keys, chunks), np.array_split(sizes, chunks)):
            sampler.feed_sized_values(kpart, zpart)
            feed_all(compiled, kpart, zpart)
        got = sampler.sized_histograms()
        assert got is not None
        for (d, z, cold, cold_size, n_keys, _), want in zip(got, compiled):
            curve = fixed_rate_sized_curve(collapse_sized(d, z), (cold, cold_size), n_keys, rate=want.rate,
                                           totals=(n, int(sizes.sum())), seed=want.seed, unit=False)
            assert_same_curve(curve, want.curve())


def test_sized_replay_equals_a_naive_stack():
    rng = np.random.default_rng(2)
    for _ in range(30):
        keys = rng.integers(0, 25, int(rng.integers(1, 200)))
        size_of = rng.integers(1, 9, 25)
        sampler = NativeShards(library(), [seed_mix(0)], [threshold_for_rate(1.0)])
        (d, z, cold, cold_size, n_keys, _), = sampler.feed_sized_values(keys, size_of[keys]).sized_histograms()
        stack: list[int] = []
        want = []
        for k in keys.tolist():
            if k in stack:
                at = stack.index(k)
                want.append((sum(int(size_of[x]) for x in stack[:at]) + int(size_of[k]), int(size_of[k])))
                stack.remove(k)
            stack.insert(0, k)
        assert list(zip(d.tolist(), z.tolist())) == want and n_keys == cold == len(set(keys.tolist()))
        assert cold_size == sum(int(size_of[k]) for k in set(keys.tolist()))


def test_npy_dtypes_and_several_files_take_the_native_path(monkeypatch, tmp_path):
    rng = np.random.default_rng(2)
    for dtype in (np.int64, np.int32, np.uint16, np.uint64):
        keys = rng.integers(0, 300, 5000).astype(dtype)
        if dtype == np.uint64:
            keys += np.uint64(2**63)
        np.save(tmp_path / "k.npy", keys)
        assert native_curves(curve_args(str(tmp_path / "k.npy")), [0]) is not None
        if dtype in (np.int32, np.uint64):  # a narrow dtype and the top half of uint64: the CLI's answers
            a, ra, b, rb = run_both(monkeypatch, tmp_path, str(tmp_path / "k.npy"), "--sample-rate", "0.3")
            assert a == b == 0 and ra == rb, dtype
    np.save(tmp_path / "p1.npy", rng.integers(0, 50, 999))
    (tmp_path / "p2.csv").write_text("".join(f"{k}\n" for k in rng.integers(0, 50, 999)))
    files = [str(tmp_path / "p1.npy"), str(tmp_path / "p2.csv")]
    assert native_curves(curve_args(files), [0]) is not None
    a, ra, b, rb = run_both(monkeypatch, tmp_path, files, "--sample-rate", "0.4", "--sample-seeds", "4", "--seed", "9")
    assert a == b == 0 and ra == rb


@pytest.mark.parametrize("text", ["# comment\n1\n2\n", "block_id,size\n1,2\n", "block_id\n1,2\n", "\xff\n1\n", "1\n 2\n", "1,3\n2\n", "1\n2,3\n", "1,0\n", "1,-3\n",
                                  "1,3,4\n", "key,size,x\n1,2,3\n", "1, 3\n", "1,1099511627777\n", "key\n1,2\n",
                                  "1,3\n1,4\n", "1\t3\n", "1\nx\n", "1\n-\n",
                                  "1\n18446744073709551616\n", "1\n-9223372036854775809\n", "1\n000000000000000000009\n",
                                  "1\n1234567\r\r\n", "1\n+\n", "key,size\n1,2\n", "1\n2 \n", "1\n\t\n"])
def test_other_lines_leave_the_file_to_the_compiled_path(monkeypatch, tmp_path, text):
    path = tmp_path / "t.csv"
    path.write_text(text * 3)
    assert native_curves(curve_args(str(path)), [0]) is None
    a, ra, b, rb = run_both(monkeypatch, tmp_path, str(path), "--sample-rate", "1.0")
    assert a == b and ra == rb


@pytest.mark.parametrize("name", ["mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl"])
def test_the_real_traces_block_ids_give_the_compiled_answer(monkeypatch, tmp_path, name):
    from stackdist.traces import read_mooncake

    ids = read_mooncake(Path(__file__).parents[1] / "data" / "traces" / name).block_ids
    np.save(tmp_path / "ids.npy", ids)
    for rate in ("0.5", "0.1"):
        a, ra, b, rb = run_both(monkeypatch, tmp_path, str(tmp_path / "ids.npy"), "--sample-rate", rate)
        assert a == b == 0 and ra == rb


def test_runs_it_does_not_serve_are_left_alone(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("1\n2\n1\n")
    assert native_curves(curve_args(str(path), rate=1.0), list(range(62))) is not None
    assert native_curves(curve_args(str(path), rate=1.0), list(range(63))) is None  # the compiled path takes 64 seeds
    for over in ({"sample_size": 5}, {"dask": "local:2"}, {"window": "1:"}, {"warmup": "1"}, {"format": "jsonl"}):
        assert native_curves(curve_args(str(path), **over), [0]) is None, over
    np.save(tmp_path / "wide.npy", np.array([[1, 2, 3], [3, 4, 5]]))
    np.save(tmp_path / "float.npy", np.array([1.0, 2.0]))
    np.save(tmp_path / "zero.npy", np.array([[1, 2], [3, 0]]))
    for spec in ("-", str(tmp_path / "none-*.csv"), str(tmp_path / "wide.npy"), str(tmp_path / "float.npy"),
                 str(tmp_path / "zero.npy"), str(tmp_path / "missing.csv")):
        assert native_curves(curve_args(spec), [0]) is None, spec
    import gzip

    with gzip.open(tmp_path / "t.csv.gz", "wt") as f:
        f.write("1\n2\n1\n")
    assert native_curves(curve_args(str(tmp_path / "t.csv.gz")), [0]) is None


def test_empty_inputs_and_empty_samples_exit_1_as_before(monkeypatch, tmp_path, capsys):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "blank.csv").write_text("\n\n")
    (tmp_path / "one.csv").write_text("5\n")
    for name, rate in (("empty.csv", "0.5"), ("blank.csv", "0.5"), ("one.csv", "0.000001")):
        a, _, b, _ = run_both(monkeypatch, tmp_path, str(tmp_path / name), "--sample-rate", rate)
        assert a == b == 1, name
    assert "kept none" in capsys.readouterr().err


def test_no_compiler_means_the_compiled_path(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("STACKDIST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the fallback folder: empty too
    assert library() is None
    (tmp_path / "t.csv").write_text("1\n2\n1\n" * 10)
    assert native_curves(curve_args(str(tmp_path / "t.csv")), [0]) is None
    assert main(["curve", str(tmp_path / "t.csv"), "--sample-rate", "1.0", "-o", str(tmp_path / "o.json")]) == 0
    monkeypatch.setenv("STACKDIST_NATIVE", "0")
    assert library() is None


def test_a_fresh_cache_compiles_once_and_the_process_imports_no_numba(tmp_path):
    # One process: its cache folder cannot be made (it is under a file, even for root), so the
    # library is compiled once into a private folder of the temporary one; the run imports no numba.
    np.save(tmp_path / "k.npy", np.arange(3000) % 70)
    (tmp_path / "a-file").write_text("")
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "STACKDIST_CACHE_DIR": str(tmp_path / "a-file" / "cache"), "STACKDIST_NATIVE": "1",
           "TMPDIR": str(tmp_path / "tmp")}
    code = ("import sys; from stackdist.cli import main; "
            f"rc = main(['curve', {str(tmp_path / 'k.npy')!r}, '--sample-rate', '0.5', '-o', {str(tmp_path / 'o.json')!r}]); "
            "print(rc, 'numba' in sys.modules)")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert got.stdout.split() == ["0", "False"], got.stderr
    assert len(list((tmp_path / "tmp").glob("stackdist-*/native_shards-*.so"))) == 1
    assert json.loads((tmp_path / "o.json").read_text())["sampled"] is True


def test_the_most_seeds_the_cli_takes(monkeypatch, tmp_path):
    (tmp_path / "t.csv").write_text("".join(f"{k}\n" for k in np.random.default_rng(8).integers(0, 30, 400)))
    for seeds in ("62", "64"):
        a, ra, b, rb = run_both(monkeypatch, tmp_path, str(tmp_path / "t.csv"), "--sample-rate", "0.5", "--sample-seeds", seeds)
        assert a == b == 0 and ra == rb and len(ra["seeds"]) == int(seeds)


def test_a_sample_past_the_limit_is_left_to_the_compiled_path(monkeypatch, tmp_path):
    from stackdist.cli import native_sample

    keys = np.random.default_rng(6).integers(0, 500, 3000)
    np.save(tmp_path / "k.npy", keys)
    (tmp_path / "k.csv").write_text("".join(f"{k}\n" for k in keys))
    (tmp_path / "s.csv").write_text("".join(f"{k},{k % 5 + 1}\n" for k in keys))
    monkeypatch.setattr(native_sample, "SAMPLE_LIMIT", 1000)
    for name in ("k.npy", "k.csv", "s.csv"):
        assert native_curves(curve_args(str(tmp_path / name), rate=1.0), [0]) is None, name
        assert native_curves(curve_args(str(tmp_path / name), rate=0.1), [0]) is not None, name
        a, ra, b, rb = run_both(monkeypatch, tmp_path, str(tmp_path / name), "--sample-rate", "1.0")
        assert a == b == 0 and ra == rb, name
    big = np.arange((1 << 20) + 10, dtype=np.int64)  # fed on two threads: both halves pass the limit
    sampler = NativeShards(library(), [seed_mix(0)], [threshold_for_rate(1.0)], limit=1000)
    assert sampler.feed_values(big).too_large


@pytest.mark.xdist_group("matplotlib")  # the tests drawing PNGs share one worker: one matplotlib import
def test_plot_of_a_sampled_curve_and_sampled_tiers(tmp_path):
    pytest.importorskip("matplotlib")
    np.save(tmp_path / "k.npy", np.random.default_rng(1).zipf(1.3, 3000) % 400)
    png = tmp_path / "s.png"  # the plot is drawn after the curves, whichever path made them
    assert main(["curve", str(tmp_path / "k.npy"), "--sample-rate", "0.5", "--plot", str(png), "-o",
                 str(tmp_path / "s.json")]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    png = tmp_path / "tiers.png"  # sampled tiers draw their grid too
    assert main(["tiers", str(tmp_path / "k.npy"), "--gpu", "40", "--sample-rate", "0.5", "--plot", str(png), "-o",
                 str(tmp_path / "t.json")]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_library_in_a_folder_others_may_write_is_not_loaded(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "lib.so").write_bytes(b"")
    native._check_private(shared / "lib.so")  # this user's, writable by no one else: taken
    shared.chmod(0o777)
    with pytest.raises(OSError, match="not this user's alone"):
        native._check_private(shared / "lib.so")
    shared.chmod(0o755)
    (shared / "lib.so").chmod(0o666)
    with pytest.raises(OSError, match="not this user's alone"):
        native._check_private(shared / "lib.so")


def test_an_error_on_the_second_thread_is_raised_not_lost():
    sampler = NativeShards(library(), [seed_mix(0)], [threshold_for_rate(1.0)])

    def broken(handle, ptr, n):
        raise RuntimeError("second half")

    data = np.frombuffer(b"1\n" * (8 << 20), np.uint8)  # large: cut in halves, one per thread
    with pytest.raises(RuntimeError, match="second half"):
        sampler.feed_text(data, broken)


def test_the_vector_pass_equals_the_scalar_one():
    # Where the CPU has AVX-512, sd_feed_block hashes 8 keys at a time; sd_set_simd(0) forces the
    # scalar loop. The same samples, in the same order, either way (here both may be scalar).
    lib = library()
    rng = np.random.default_rng(13)
    keys = np.concatenate([rng.integers(-2**63, 2**63 - 1, 50_003, dtype=np.int64), np.arange(5_000)])
    try:
        got = []
        for on in (1, 0):
            lib.sd_set_simd(on)
            sampler = NativeShards(lib, [seed_mix(s) for s in (0, 1, 2)], [threshold_for_rate(r) for r in (0.3, 0.01, 1.0)])
            got.append([(h.tolist(), cold, n) for h, cold, n in sampler.feed_values(keys).histograms()])
        assert got[0] == got[1]
        for trial in range(40):  # the line scan: 64-byte newline search against the 8-byte one
            n = int(rng.integers(0, 3000))
            digits = 10 ** rng.integers(1, 19, n)
            breaks = rng.choice(["\n", "\r\n", "\n\n"], n).tolist()
            text = "".join(str(k) + end for k, end in zip(rng.integers(-digits, digits).tolist(), breaks))
            data = np.frombuffer((text + ("77" if trial % 2 else "")).encode(), np.uint8)
            seen = []
            for on in (1, 0):
                lib.sd_set_simd(on)
                sampler = NativeShards(lib, [seed_mix(0), seed_mix(1)], [threshold_for_rate(1.0), threshold_for_rate(0.3)])
                ok = sampler.feed_lines(data)
                seen.append((ok, sampler.n_accesses, [(h.tolist(), c, k) for h, c, k in sampler.histograms()]))
            assert seen[0] == seen[1], trial
    finally:
        lib.sd_set_simd(1)
