"""Benchmark the stack-distance engine against the reference simulators and libcachesim.

For each trace (seeded Zipf(0.9) over 100k keys with unit and with varied sizes at 1e5, 1e6, 4e6
and 1e7 accesses; a cyclic scan; the Mooncake conversation trace expanded to 16-token pages)
it times, side by side in one run (medians of ``--repeats``, default 5):

- ``engine.curve``: ``stackdist.hit_curve(keys, sizes)`` plus ``curve.steps(below_largest=False)``
  (the whole exact curve from the largest object size up); every ratio is against this row;
- ``engine.hit_curve`` (replay + histogram, no step table) and ``engine.stack_distances`` alone;
- ``python.fenwick``: the pure-Python reference ``FenwickStackDistance().distances``;
- ``kvsim.LRUCache@C``: the OrderedDict reference at one capacity C (10% of the working set);
- ``kvsim.LRUCache.sweep100``: the same at 100 capacities (1%, 2%, ..., 100% of the working set);
- ``libcachesim.LRU@C``: libcachesim's LRU via ``process_trace`` on an oracleGeneral binary
  file, with the hash table sized for the trace (``hashpower`` = ceil(log2(distinct keys)))
  and with the default ``hashpower=24``; first checked to count the same hits.

Slow baselines are measured for real where affordable and estimated beyond (rows marked
``estimate``, with their basis in the JSON): the pure-Python reference from its throughput on a
measured prefix; the 100-capacity sweep from measured single-capacity runs at 11 of the 100
capacities, interpolated over the rest. Peak memory is measured per method in a fresh
subprocess (see ``_common.PeakRSS``). Results: a Markdown table on stdout and JSON in
``benchmarks/results/``.

Usage::

    python benchmarks/bench_engine.py                 # the full run (~15-20 min, 2 cores)
    python benchmarks/bench_engine.py --quick         # small sizes, 1 repeat (smoke test)
    python benchmarks/bench_engine.py --only 'zipf-unit-*' --methods 'engine.*,libcachesim.*'
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as C
import numpy as np

import stackdist
from kvlab.kvsim import LRUCache
from stackdist.engine import COLD
from stackdist.engine.reference import FenwickStackDistance

SCRIPT = Path(__file__).resolve()
SWEEP_POINTS = 100
SINGLE_CAPACITY_INDEX = 9  # capacity (9 + 1)% of the working set: the single-capacity runs
SWEEP_SAMPLE_INDICES = (0, 9, 19, 29, 39, 49, 59, 69, 79, 89, 99)  # capacities timed when the sweep is estimated
DEFAULT_HASHPOWER = 24  # libcachesim.LRU's default
ORACLE_GENERAL = np.dtype([("timestamp", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access_vtime", "<i8")])
ENGINE = "engine.curve"
METHODS = (
    ENGINE,
    "engine.hit_curve",
    "engine.stack_distances",
    "python.fenwick",
    "kvsim.LRUCache@C",
    "kvsim.LRUCache.sweep100",
    "libcachesim.LRU@C(hashpower=fit)",
    "libcachesim.LRU@C(hashpower=24)",
)


@dataclass(frozen=True)
class Scale:
    """Sizes and limits of one run (the default run or ``--quick``)."""

    zipf_sizes: tuple[int, ...]
    cyclic_n: int
    conversation_requests: int | None  # None: the whole trace
    python_real_max: int  # run the pure-Python reference for real up to this many accesses
    python_full_repeats_max: int  # ... with every repeat up to this many (else once)
    sweep_real_max: int  # run the 100-capacity sweep for real up to this many accesses
    oversize_check_n: int


DEFAULT = Scale((100_000, 1_000_000, 4_000_000, 10_000_000), 10_000_000, None, 1_000_000, 100_000, 100_000, 100_000)
QUICK = Scale((10_000, 100_000), 100_000, 300, 10_000, 10_000, 10_000, 10_000)


def trace_specs(scale: Scale) -> list[tuple[str, Callable[[], C.Trace]]]:
    """(name, factory) for every trace of the run, in order; factories run only when selected."""
    specs: list[tuple[str, Callable[[], C.Trace]]] = []
    for n in scale.zipf_sizes:
        for sized in (False, True):
            name = f"zipf-{'sized' if sized else 'unit'}-{C.short_count(n)}"
            specs.append((name, lambda n=n, sized=sized: C.zipf_trace(n, sized=sized)))
    specs.append((f"cyclic-{C.short_count(scale.cyclic_n)}", lambda: C.cyclic_trace(scale.cyclic_n)))
    requests = scale.conversation_requests
    conv_name = "conversation-pages16" if requests is None else f"conversation-pages16-{requests}req"
    specs.append((conv_name, lambda: C.conversation_pages_trace(limit=requests)))
    return specs


# ----------------------------------------------------------------------------- the methods
def engine_curve(keys: np.ndarray, sizes: np.ndarray | None) -> tuple[stackdist.HitCurve, stackdist.CurveSteps]:
    """The engine's whole exact curve: one replay, the histogram, the step table."""
    curve = stackdist.hit_curve(keys, sizes)
    return curve, curve.steps(below_largest=False)


def lru_hits(keys: list[int], sizes: list[int], capacity: int) -> int:
    """Hits of the OrderedDict reference ``LRUCache(capacity)`` over the trace."""
    return sum(map(LRUCache(capacity).access, keys, sizes))  # the loop runs in C: kind to the baseline


def write_oracle_general(path: Path, keys: np.ndarray, sizes: np.ndarray | None) -> None:
    """Write the trace as libCacheSim's oracleGeneral binary records (24 bytes, packed).

    struct { uint32 timestamp; uint64 obj_id; uint32 obj_size; int64 next_access_vtime; }.
    All timestamps are 0 and next_access_vtime is -1 ("no future use"): LRU reads neither.
    """
    records = np.zeros(keys.shape[0], ORACLE_GENERAL)
    records["obj_id"] = keys
    records["obj_size"] = 1 if sizes is None else sizes
    records["next_access_vtime"] = -1
    records.tofile(path)


def lcs_prepare(path: Path, capacity: int, hashpower: int) -> tuple[Any, Any]:
    """A fresh libcachesim reader and LRU cache (untimed setup of one repeat)."""
    import libcachesim as lcs

    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    return reader, lcs.LRU(cache_size=capacity, hashpower=hashpower)


def lcs_run(prepared: tuple[Any, Any]) -> tuple[float, float]:
    """libcachesim's own replay loop: (object miss ratio, byte miss ratio)."""
    reader, cache = prepared
    return cache.process_trace(reader)


def lcs_hits(ratios: tuple[float, float], n: int, total_size: int) -> tuple[int, int]:
    """(hits, hit size) from process_trace's miss ratios (exact: doubles carry n <= 2**53)."""
    miss_ratio, byte_miss_ratio = ratios
    return n - round(miss_ratio * n), total_size - round(byte_miss_ratio * total_size)


def fit_hashpower(distinct_keys: int) -> int:
    """The smallest hash table (2**p buckets) holding every distinct key: ceil(log2(k))."""
    return max(4, math.ceil(math.log2(max(distinct_keys, 2))))


def reference_distances(keys: list[int], sizes: list[int]) -> list[int | None]:
    """The pure-Python Fenwick reference's distances (None for a cold access)."""
    return FenwickStackDistance().distances(keys, sizes)


# ----------------------------------------------------------------------------- one trace
class TraceBench:
    """Runs every selected method on one trace and collects rows, checks and raw timings."""

    def __init__(self, trace: C.Trace, scale: Scale, repeats: int, methods: list[str], memory: bool, tmp: Path):
        self.trace, self.scale, self.repeats, self.methods, self.memory, self.tmp = trace, scale, repeats, methods, memory, tmp
        self.summary = trace.summary()
        working_set = self.summary["working_set_size"]
        self.sweep = np.array([max(1, round(working_set * (j + 1) / SWEEP_POINTS)) for j in range(SWEEP_POINTS)], np.int64)
        self.capacity = int(self.sweep[SINGLE_CAPACITY_INDEX])
        self.total_size = trace.n if trace.sizes is None else int(trace.sizes.sum())
        self.results: dict[str, dict[str, Any]] = {}
        self.checks: dict[str, Any] = {}
        self._lists: tuple[list[int], list[int]] | None = None
        self._probe_dir: Path | None = None

    def lists(self) -> tuple[list[int], list[int]]:
        """The trace as Python lists (input of the pure-Python methods; built once, untimed)."""
        if self._lists is None:
            start = time.perf_counter()
            self._lists = (self.trace.keys.tolist(), self.trace.size_list())
            self.list_setup_s = time.perf_counter() - start
        return self._lists

    def record(self, method: str, timing: C.Timing | None, kind: str = "measured", **extra: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {"kind": kind}
        if timing is not None:
            entry["times_s"] = timing.times
            entry["median_s"] = timing.median
            entry["cpu_times_s"] = timing.cpu_times
            entry["cpu_median_s"] = timing.cpu_median
        entry.update(extra)
        if entry.get("median_s"):
            entry["macc_per_s"] = self.trace.n / entry["median_s"] / 1e6
        self.results[method] = entry
        return entry

    # ------------------------------------------------------------------ engine
    def run_engine(self) -> None:
        keys, sizes = self.trace.keys, self.trace.sizes
        timing = C.time_call(lambda: engine_curve(keys, sizes), self.repeats)
        curve, steps = timing.result
        self.curve = curve
        self.engine_hits = int(curve.hits_at(self.capacity))
        self.engine_hit_size = int(curve.hit_size_at(self.capacity))
        self.record(ENGINE, timing, hits_at_capacity=self.engine_hits, hit_size_at_capacity=self.engine_hit_size,
                    curve_steps=int(steps.capacities.size))
        if "engine.hit_curve" in self.methods:
            self.record("engine.hit_curve", C.time_call(lambda: stackdist.hit_curve(keys, sizes), self.repeats))
        if "engine.stack_distances" in self.methods:
            timing = C.time_call(lambda: stackdist.stack_distances(keys, sizes), self.repeats)
            self.checks["stack_distances_equal_curve_distances"] = bool(np.array_equal(timing.result, curve.distances))
            self.record("engine.stack_distances", timing)

    # ------------------------------------------------------------------ pure-Python reference
    def run_python(self) -> None:
        n, scale = self.trace.n, self.scale
        if n <= scale.python_real_max:
            keys, sizes = self.lists()
            repeats = self.repeats if n <= scale.python_full_repeats_max else 1
            timing = C.time_call(lambda: reference_distances(keys, sizes), repeats)
            self.checks["python_reference_distances_equal"] = _same_distances(timing.result, self.curve.distances)
            self.record("python.fenwick", timing, repeats=repeats, input_lists_setup_s=self.list_setup_s)
            return
        prefix = scale.python_real_max
        keys = self.trace.keys[:prefix].tolist()
        sizes = [1] * prefix if self.trace.sizes is None else self.trace.sizes[:prefix].tolist()
        timing = C.time_call(lambda: reference_distances(keys, sizes), 1)
        # The engine's distances of a prefix are the first distances of the whole trace.
        self.checks["python_reference_distances_equal_on_prefix"] = _same_distances(timing.result, self.curve.distances[:prefix])
        throughput = prefix / timing.median
        self.record(
            "python.fenwick", None, kind="estimate", median_s=n / throughput,
            estimate_basis={
                "rule": "n / throughput measured on the trace's first accesses (one run); linear, so it "
                        "understates the O(n log n) reference (its Fenwick tree grows with n)",
                "prefix_accesses": prefix, "prefix_times_s": timing.times,
            },
        )

    # ------------------------------------------------------------------ LRUCache
    def run_lru_single(self) -> None:
        keys, sizes = self.lists()
        timing = C.time_call(lambda: lru_hits(keys, sizes, self.capacity), self.repeats)
        self.lru_hits = int(timing.result)
        self.checks["engine_equals_LRUCache_at_C"] = self.lru_hits == self.engine_hits
        self.record("kvsim.LRUCache@C", timing, capacity=self.capacity, hits=self.lru_hits,
                    input_lists_setup_s=self.list_setup_s)

    def run_lru_sweep(self) -> None:
        keys, sizes = self.lists()
        engine_hits = np.asarray(self.curve.hits_at(self.sweep))
        if self.trace.n <= self.scale.sweep_real_max:
            per_capacity: list[list[float]] = []

            def sweep() -> list[int]:
                hits, times = [], []
                for capacity in self.sweep.tolist():
                    start = time.perf_counter()
                    hits.append(lru_hits(keys, sizes, capacity))
                    times.append(time.perf_counter() - start)
                per_capacity.append(times)
                return hits

            timing = C.time_call(sweep, self.repeats)
            self.checks["engine_equals_LRUCache_at_all_100_capacities"] = bool(np.array_equal(timing.result, engine_hits))
            medians = np.median(np.array(per_capacity), axis=0)
            estimate = _interpolated_total([float(medians[i]) for i in SWEEP_SAMPLE_INDICES])
            self.record("kvsim.LRUCache.sweep100", timing, capacities=self.sweep.tolist(), hits=timing.result,
                        per_capacity_times_s=per_capacity,
                        estimator_validation={
                            "rule": "the estimator used at larger n, applied to the per-capacity medians of this real sweep",
                            "estimate_from_samples_s": estimate, "sum_of_per_capacity_medians_s": float(medians.sum()),
                            "estimate_over_real": estimate / float(medians.sum())})
            return
        samples: dict[int, dict[str, Any]] = {}
        for index in SWEEP_SAMPLE_INDICES:
            if index == SINGLE_CAPACITY_INDEX and "kvsim.LRUCache@C" in self.results:
                single = self.results["kvsim.LRUCache@C"]
                samples[index] = {"capacity": self.capacity, "time_s": single["median_s"], "hits": single["hits"],
                                  "from": "kvsim.LRUCache@C median"}
                continue
            capacity = int(self.sweep[index])
            timing = C.time_call(lambda capacity=capacity: lru_hits(keys, sizes, capacity), 1)
            samples[index] = {"capacity": capacity, "time_s": timing.median, "hits": int(timing.result)}
        self.checks["engine_equals_LRUCache_at_sampled_sweep_capacities"] = all(
            s["hits"] == int(engine_hits[i]) for i, s in samples.items()
        )
        total = _interpolated_total([samples[i]["time_s"] for i in SWEEP_SAMPLE_INDICES])
        self.record(
            "kvsim.LRUCache.sweep100", None, kind="estimate", median_s=total, capacities=self.sweep.tolist(),
            estimate_basis={
                "rule": "sum over the 100 capacities of the single-capacity time, measured (one run each) at "
                        "the sampled capacity indices and linearly interpolated in between",
                "samples": {str(i): s for i, s in samples.items()},
            },
        )

    # ------------------------------------------------------------------ libcachesim
    def run_libcachesim(self) -> None:
        try:
            import libcachesim  # noqa: F401
        except ImportError:
            self.checks["libcachesim"] = "not installed"
            return
        path = self.tmp / f"{self.trace.name}.oracleGeneral.bin"
        start = time.perf_counter()
        write_oracle_general(path, self.trace.keys, self.trace.sizes)
        write_s = time.perf_counter() - start
        self.lcs_file = path
        self.hashpower_fit = fit_hashpower(self.summary["distinct_keys"])
        check: dict[str, Any] = {"capacity": self.capacity, "engine_hits": self.engine_hits,
                                 "LRUCache_hits": getattr(self, "lru_hits", None),
                                 "engine_hit_size": self.engine_hit_size}
        for method, hashpower in (("libcachesim.LRU@C(hashpower=fit)", self.hashpower_fit),
                                  ("libcachesim.LRU@C(hashpower=24)", DEFAULT_HASHPOWER)):
            if method not in self.methods:
                continue
            timing = C.time_call(lcs_run, self.repeats, setup=lambda hp=hashpower: lcs_prepare(path, self.capacity, hp))
            hits, hit_size = lcs_hits(timing.result, self.trace.n, self.total_size)
            check[f"hashpower={hashpower}"] = {"hits": hits, "hit_size": hit_size}
            self.record(method, timing, hashpower=hashpower, hits=hits, hit_size=hit_size,
                        trace_file_write_setup_s=write_s, trace_file_bytes=path.stat().st_size)
        counted = [v["hits"] for k, v in check.items() if k.startswith("hashpower=")]
        sizes_hit = [v["hit_size"] for k, v in check.items() if k.startswith("hashpower=")]
        check["hits_equal_engine"] = all(h == self.engine_hits for h in counted)
        check["hit_sizes_equal_engine"] = all(s == self.engine_hit_size for s in sizes_hit)
        if check["LRUCache_hits"] is not None:
            check["hits_equal_LRUCache"] = all(h == check["LRUCache_hits"] for h in counted)
        if self.trace.sizes is not None:
            check["oversize"] = self._oversize_check()
        self.checks["libcachesim"] = check

    def _oversize_check(self) -> dict[str, Any]:
        """libcachesim vs LRUCache vs engine on a prefix at a capacity below the largest object."""
        n = min(self.scale.oversize_check_n, self.trace.n)
        keys, sizes = self.trace.keys[:n], self.trace.sizes[:n]
        capacity = int(sizes.max()) * 5 // 8  # 40 for sizes 1..64: a quarter of the keys never fit
        path = self.tmp / "oversize.oracleGeneral.bin"
        write_oracle_general(path, keys, sizes)
        ratios = lcs_run(lcs_prepare(path, capacity, self.hashpower_fit))
        lcs_h, lcs_size = lcs_hits(ratios, n, int(sizes.sum()))
        lru = lru_hits(keys.tolist(), sizes.tolist(), capacity)
        curve = stackdist.hit_curve(keys, sizes)
        engine = int(curve.hits_at(capacity))
        path.unlink()
        return {"accesses": n, "capacity": capacity, "largest_size": int(sizes.max()),
                "accesses_larger_than_capacity": int(np.count_nonzero(sizes > capacity)),
                "libcachesim_hits": lcs_h, "libcachesim_hit_size": lcs_size, "LRUCache_hits": lru,
                "engine_hits": engine, "engine_hit_size": int(curve.hit_size_at(capacity)),
                "all_equal": lcs_h == lru == engine and lcs_size == int(curve.hit_size_at(capacity))}

    # ------------------------------------------------------------------ memory
    def run_memory(self) -> None:
        probe_dir = self.tmp / "probe"
        probe_dir.mkdir(exist_ok=True)
        C.save_trace(self.trace, probe_dir)
        for method, entry in self.results.items():
            if entry["kind"] != "measured" or method == "kvsim.LRUCache.sweep100":
                entry["peak_mib"] = None
                entry["memory_note"] = ("not measured: estimate" if entry["kind"] != "measured"
                                        else "same process shape as kvsim.LRUCache@C, one capacity at a time")
                continue
            args = ["--probe", method, "--probe-dir", str(probe_dir), "--capacity", str(self.capacity)]
            if method.startswith("libcachesim"):
                args += ["--hashpower", str(entry["hashpower"]), "--lcs-file", str(self.lcs_file)]
            C.log(f"    memory probe: {method}")
            probe = C.run_probe(SCRIPT, args)
            entry["memory_probe"] = probe
            entry["peak_mib"] = probe["peak_bytes"] / C.MIB if "peak_bytes" in probe else None
            entry["peak_over_trace_arrays"] = probe["peak_bytes"] / self.trace.nbytes if "peak_bytes" in probe else None
        for name in list(probe_dir.iterdir()):
            name.unlink()

    # ------------------------------------------------------------------ all
    def run(self) -> dict[str, Any]:
        steps = [
            ("engine", self.run_engine, True),
            ("python.fenwick", self.run_python, "python.fenwick" in self.methods),
            ("kvsim.LRUCache@C", self.run_lru_single, "kvsim.LRUCache@C" in self.methods),
            ("kvsim.LRUCache.sweep100", self.run_lru_sweep, "kvsim.LRUCache.sweep100" in self.methods),
            ("libcachesim", self.run_libcachesim, any(m.startswith("libcachesim") for m in self.methods)),
            ("memory", self.run_memory, self.memory),
        ]
        for label, step, wanted in steps:
            if wanted:
                C.log(f"  {self.trace.name}: {label}")
                step()
        self._lists = None
        if getattr(self, "lcs_file", None) is not None:
            self.lcs_file.unlink(missing_ok=True)
        engine_s, engine_cpu = self.results[ENGINE]["median_s"], self.results[ENGINE].get("cpu_median_s")
        for entry in self.results.values():
            entry["ratio_vs_engine"] = entry["median_s"] / engine_s if entry.get("median_s") else None
            entry["cpu_ratio_vs_engine"] = entry["cpu_median_s"] / engine_cpu if entry.get("cpu_median_s") and engine_cpu else None
        return {"trace": self.summary, "capacity": self.capacity, "capacity_rule": "10% of the working set size",
                "sweep_capacities": self.sweep.tolist(), "methods": self.results, "checks": self.checks}


def _interpolated_total(sample_times: list[float]) -> float:
    """Sum over the 100 sweep capacities of times interpolated from the sampled indices."""
    return float(np.interp(np.arange(SWEEP_POINTS), SWEEP_SAMPLE_INDICES, sample_times).sum())


def _same_distances(reference: list[int | None], engine: np.ndarray) -> bool:
    ref = np.array([COLD if d is None else d for d in reference], dtype=np.int64)
    return bool(np.array_equal(ref, engine))


# ----------------------------------------------------------------------------- probe mode
def probe(method: str, directory: Path, capacity: int, hashpower: int | None, lcs_file: Path | None) -> dict[str, Any]:
    """Run one method once in this (fresh) process and measure its peak memory growth."""
    keys, sizes = C.load_trace_arrays(directory)
    if method.startswith("engine"):  # load the compiled kernels outside the measurement
        engine_curve(keys[:1000], None if sizes is None else sizes[:1000])
    held: Any = None
    start = time.perf_counter()
    with C.PeakRSS() as meter:
        if method == ENGINE:
            held = engine_curve(keys, sizes)
        elif method == "engine.hit_curve":
            held = stackdist.hit_curve(keys, sizes)
        elif method == "engine.stack_distances":
            held = stackdist.stack_distances(keys, sizes)
        elif method == "python.fenwick":
            key_list = keys.tolist()
            held = reference_distances(key_list, [1] * len(key_list) if sizes is None else sizes.tolist())
        elif method == "kvsim.LRUCache@C":
            key_list = keys.tolist()
            held = lru_hits(key_list, [1] * len(key_list) if sizes is None else sizes.tolist(), capacity)
        elif method.startswith("libcachesim"):
            held = lcs_run(lcs_prepare(lcs_file, capacity, hashpower))
        else:
            raise SystemExit(f"unknown probe method {method!r}")
    seconds = time.perf_counter() - start
    del held
    return {"method": method, "peak_bytes": meter.peak_bytes, "retained_bytes": meter.retained_bytes,
            "measure": meter.method, "includes": _PROBE_INCLUDES.get(method.split("(")[0], "the call"),
            "seconds_with_measurement": seconds}


_PROBE_INCLUDES = {
    "python.fenwick": "converting the arrays to Python lists, then the replay",
    "kvsim.LRUCache@C": "converting the arrays to Python lists, then the replay",
    "libcachesim.LRU@C": "opening the reader (mmap), building the cache and its hash table, process_trace",
}


# ----------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small traces, 1 repeat (a smoke test)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per method (default 5; 1 with --quick)")
    parser.add_argument("--only", default="*", help="comma-separated glob patterns of trace names to run (default all)")
    parser.add_argument("--methods", default="*", help="comma-separated glob patterns of methods (engine.curve always runs)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--list", action="store_true", help="list the trace and method names and exit")
    parser.add_argument("--out", type=Path, default=None, help="JSON output path (default benchmarks/results/bench_engine[_quick|_partial].json)")
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--capacity", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--hashpower", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--lcs-file", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}.")
    return args


def select(names: list[str], patterns: str, what: str) -> list[str]:
    """The names matching any comma-separated glob pattern; a pattern matching nothing is an error."""
    chosen = []
    for pattern in [p.strip() for p in patterns.split(",") if p.strip()]:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise C.BenchUsageError(f"{what} pattern {pattern!r} matches none of: {', '.join(names)}.")
        chosen += [h for h in hits if h not in chosen]
    return [n for n in names if n in chosen]


TABLE_COLUMNS = [("trace", "trace"), ("n", "n"), ("method", "method"), ("kind", "kind"), ("median", "median s"),
                 ("cpu", "median CPU s"), ("macc", "M acc/s"), ("ratio", "time / engine.curve"), ("peak", "peak MiB"), ("check", "exact")]


def table_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    checks = report["checks"]
    lcs = checks.get("libcachesim", {}) if isinstance(checks.get("libcachesim"), dict) else {}
    check_of = {
        ENGINE: checks.get("engine_equals_LRUCache_at_C"),
        "engine.stack_distances": checks.get("stack_distances_equal_curve_distances"),
        "python.fenwick": checks.get("python_reference_distances_equal", checks.get("python_reference_distances_equal_on_prefix")),
        "kvsim.LRUCache@C": checks.get("engine_equals_LRUCache_at_C"),
        "kvsim.LRUCache.sweep100": checks.get("engine_equals_LRUCache_at_all_100_capacities",
                                              checks.get("engine_equals_LRUCache_at_sampled_sweep_capacities")),
        "libcachesim.LRU@C(hashpower=fit)": lcs.get("hits_equal_engine"),
        "libcachesim.LRU@C(hashpower=24)": lcs.get("hits_equal_engine"),
    }
    for method, entry in report["methods"].items():
        label = method
        if method.startswith("libcachesim") and "hashpower" in entry:
            label = f"libcachesim.LRU@C(hashpower={entry['hashpower']})"
        ok = check_of.get(method)
        rows.append({
            "trace": report["trace"]["name"], "n": f"{report['trace']['accesses']:,}", "method": label,
            "kind": "estimate" if entry["kind"] == "estimate" else "measured",
            "median": C.fmt_seconds(entry.get("median_s")),
            "cpu": C.fmt_seconds(entry.get("cpu_median_s")),
            "macc": f"{entry['macc_per_s']:.3g}" if entry.get("macc_per_s") else None,
            "ratio": C.fmt_ratio(entry.get("ratio_vs_engine")),
            "peak": f"{entry['peak_mib']:.0f}" if entry.get("peak_mib") is not None else None,
            "check": None if ok is None else ("yes" if ok else "NO"),
        })
    return rows


def targets(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issues' targets, evaluated on every trace of at least 4e6 accesses (and reported for the rest)."""
    out = []
    for report in reports:
        methods = report["methods"]
        engine = methods[ENGINE]
        fit = methods.get("libcachesim.LRU@C(hashpower=fit)")
        sweep = methods.get("kvsim.LRUCache.sweep100")
        peak = engine.get("peak_over_trace_arrays")
        out.append({
            "trace": report["trace"]["name"],
            "accesses": report["trace"]["accesses"],
            "applies": report["trace"]["accesses"] >= 4_000_000,
            "engine_macc_per_s": engine["macc_per_s"],
            "at_least_20_macc_per_s": engine["macc_per_s"] >= 20,
            "engine_over_libcachesim_fit_time": engine["median_s"] / fit["median_s"] if fit else None,
            "engine_over_libcachesim_fit_cpu_time": (engine["cpu_median_s"] / fit["cpu_median_s"]
                                                     if fit and engine.get("cpu_median_s") and fit.get("cpu_median_s") else None),
            "no_slower_than_libcachesim_fit": engine["median_s"] <= fit["median_s"] if fit else None,
            "at_least_1_5x_faster_than_libcachesim_fit": engine["median_s"] <= 0.67 * fit["median_s"] if fit else None,
            "sweep_over_engine": sweep["ratio_vs_engine"] if sweep else None,
            "sweep_kind": sweep["kind"] if sweep else None,
            "at_least_100x_faster_than_sweep": sweep["ratio_vs_engine"] >= 100 if sweep else None,
            "engine_peak_over_trace_arrays": peak,
        })
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.probe:
        print(__import__("json").dumps(probe(args.probe, args.probe_dir, args.capacity, args.hashpower, args.lcs_file)))
        return 0
    scale = QUICK if args.quick else DEFAULT
    repeats = args.repeats or (1 if args.quick else 5)
    specs = trace_specs(scale)
    if args.list:
        print("traces: " + ", ".join(n for n, _ in specs))
        print("methods: " + ", ".join(METHODS))
        return 0
    try:
        names = select([n for n, _ in specs], args.only, "--only")
        methods = select(list(METHODS), args.methods, "--methods")
    except C.BenchUsageError as exc:
        print(f"bench_engine: {exc}", file=sys.stderr)
        return 2
    if ENGINE not in methods:
        methods.insert(0, ENGINE)
    partial = args.only != "*" or args.methods != "*" or args.no_memory or args.repeats is not None
    out = args.out or C.RESULTS_DIR / ("bench_engine_quick.json" if args.quick else
                                      "bench_engine_partial.json" if partial else "bench_engine.json")
    started = time.perf_counter()
    info = C.machine_info()
    _warm_up()
    reports = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench_engine.") as tmp:
            for name, factory in specs:
                if name not in names:
                    continue
                C.log(f"trace {name}: generating")
                trace = factory()
                reports.append(TraceBench(trace, scale, repeats, methods, not args.no_memory, Path(tmp)).run())
                del trace
    except C.BenchDataError as exc:
        print(f"bench_engine: {exc}", file=sys.stderr)
        return 1
    rows = [row for report in reports for row in table_rows(report)]
    print(C.format_table(rows, TABLE_COLUMNS))
    goal = targets(reports)
    for t in goal:
        if t["applies"]:
            print(f"\ntargets on {t['trace']}: {t['engine_macc_per_s']:.1f} M acc/s (>= 20: {t['at_least_20_macc_per_s']}); "
                  f"engine / libcachesim(fit) time {_num(t['engine_over_libcachesim_fit_time'])} "
                  f"(<= 0.67: {t['at_least_1_5x_faster_than_libcachesim_fit']}); sweep / engine {_num(t['sweep_over_engine'])} "
                  f"({t['sweep_kind']}; >= 100: {t['at_least_100x_faster_than_sweep']}); "
                  f"engine peak / trace arrays {_num(t['engine_peak_over_trace_arrays'])}")
    info["load_average_at_end"] = list(__import__("os").getloadavg())
    C.write_json_atomic(out, {
        "benchmark": "bench_engine",
        "command": [Path(sys.executable).name, "benchmarks/bench_engine.py", *(argv if argv is not None else sys.argv[1:])],
        "quick": args.quick,
        "repeats": repeats,
        "timing": "time.perf_counter, GC off during each call, median of the repeats; ratios are method median / engine.curve median",
        "memory": "fresh subprocess per method: VmHWM (reset via /proc/self/clear_refs) minus VmRSS just before the call, "
                  "after loading the trace arrays from .npy, importing and warming up the JIT",
        "machine": info,
        "elapsed_s": time.perf_counter() - started,
        "traces": reports,
        "targets": goal,
    })
    C.log(f"wrote {out} in {time.perf_counter() - started:.0f} s")
    return 0


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _warm_up() -> None:
    """Load the engine's compiled kernels (numba cache) before anything is timed."""
    keys = np.arange(2000, dtype=np.int64) % 300
    for sizes in (None, keys % 7 + 1):
        engine_curve(keys, sizes)
        stackdist.stack_distances(keys, sizes)


if __name__ == "__main__":
    sys.exit(main())
