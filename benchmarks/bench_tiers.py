"""Benchmark the two-tier (GPU x CPU) curves against replaying TwoTierCache at every grid point.

For each trace (a seeded 1e6-access Zipf(0.9) trace over 100k keys, unit sizes; the Mooncake
conversation trace at its native 512-token blocks, 288,500 accesses, unit sizes) and a 10 x 100
grid (GPU capacity 1%, 2%, ..., 10% of the working set; CPU capacity 1%, 2%, ..., 100%):

- ``curve.grid``: ``hit_curve`` + ``stackdist.engine.tiers.inclusive_tiers`` (one replay of the GPU-miss
  stream per GPU capacity) + ``inclusive_grid`` over the 100 CPU capacities: the whole 1000-point
  grid for real, median of ``--repeats`` (default 5);
- ``TwoTierCache.direct``: ``kvlab.kvsim.TwoTierCache(gpu, cpu)`` replayed over the whole trace at a
  sample of grid points (3 GPU rows x 6 CPU columns = 18 points by default, one run each; every
  point checked equal to the curve's gpu/cpu/miss counts), and the full 1000-point direct grid
  time estimated from them by interpolating the per-point time over the grid (marked
  ``estimate``). ``--direct-points all`` replays every grid point for real instead.

Usage::

    python benchmarks/bench_tiers.py                 # default run (a few minutes)
    python benchmarks/bench_tiers.py --quick         # small traces, 1 repeat (smoke test)
    python benchmarks/bench_tiers.py --only 'conversation-*' --direct-points all
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as C
import numpy as np

import stackdist
from kvlab.kvsim import TwoTierCache
from stackdist.engine.tiers import inclusive_grid, inclusive_tiers

GPU_POINTS, CPU_POINTS = 10, 100
SAMPLE_GPU = (0, 4, 9)  # grid rows replayed directly by default
SAMPLE_CPU = (0, 9, 24, 49, 74, 99)  # grid columns replayed directly by default


@dataclass(frozen=True)
class Scale:
    """Trace sizes of one run (the default run or ``--quick``)."""

    zipf_n: int
    conversation_requests: int | None  # None: the whole trace


DEFAULT = Scale(1_000_000, None)
QUICK = Scale(100_000, 1000)


def trace_specs(scale: Scale) -> list[tuple[str, Callable[[], C.Trace]]]:
    """(name, factory) for each trace of the run."""
    requests = scale.conversation_requests
    return [
        (f"zipf-unit-{C.short_count(scale.zipf_n)}", lambda: C.zipf_trace(scale.zipf_n)),
        ("conversation-blocks" if requests is None else f"conversation-blocks-{requests}req",
         lambda: C.conversation_blocks_trace(limit=requests)),
    ]


def grid_capacities(working_set: int) -> tuple[np.ndarray, np.ndarray]:
    """GPU capacities 1..10% and CPU capacities 1..100% of the working set (at least 1 each)."""
    gpu = np.array([max(1, round(working_set * (i + 1) / 100)) for i in range(GPU_POINTS)], np.int64)
    cpu = np.array([max(1, round(working_set * (j + 1) / 100)) for j in range(CPU_POINTS)], np.int64)
    return gpu, cpu


def curve_grid(keys: np.ndarray, sizes: np.ndarray | None, gpu: np.ndarray, cpu: np.ndarray) -> dict[str, Any]:
    """The whole GPU x CPU grid from the curves: one trace replay + one GPU-miss replay per row."""
    curve = stackdist.hit_curve(keys, sizes)
    return inclusive_grid(inclusive_tiers(gpu_capacities=gpu.tolist(), curve=curve), cpu)


def direct_point(keys: list[int], sizes: list[int], gpu: int, cpu: int) -> tuple[int, int, int]:
    """(GPU hits, CPU hits, misses) of ``TwoTierCache(gpu, cpu)`` replayed over the trace."""
    counts = Counter(map(TwoTierCache(gpu, cpu).access, keys, sizes))  # the loop runs in C
    return counts["gpu"], counts["cpu"], counts["miss"]


def estimate_grid_total(times: dict[tuple[int, int], float]) -> float:
    """Sum over all 10 x 100 points of the per-point time, interpolated from sampled rows x columns."""
    rows = sorted({i for i, _ in times})
    cols = sorted({j for _, j in times})
    per_row = np.array([np.interp(np.arange(CPU_POINTS), cols, [times[i, j] for j in cols]) for i in rows])
    full = np.array([np.interp(np.arange(GPU_POINTS), rows, per_row[:, j]) for j in range(CPU_POINTS)]).T
    return float(full.sum())


def bench_trace(trace: C.Trace, repeats: int, direct_all: bool, direct_repeats: int) -> dict[str, Any]:
    """Time the curve grid and the direct replays on one trace; check exactness at every replayed point."""
    summary = trace.summary()
    gpu, cpu = grid_capacities(summary["working_set_size"])
    C.log(f"  {trace.name}: curve grid x{repeats}")
    timing = C.time_call(lambda: curve_grid(trace.keys, trace.sizes, gpu, cpu), repeats)
    grid = timing.result
    keys, sizes = trace.keys.tolist(), trace.size_list()
    points = [(i, j) for i in range(GPU_POINTS) for j in range(CPU_POINTS)] if direct_all else \
             [(i, j) for i in SAMPLE_GPU for j in SAMPLE_CPU]
    C.log(f"  {trace.name}: {len(points)} direct TwoTierCache replays x{direct_repeats}")
    direct: list[dict[str, Any]] = []
    for i, j in points:
        g, c = int(gpu[i]), int(cpu[j])
        point = C.time_call(lambda g=g, c=c: direct_point(keys, sizes, g, c), direct_repeats)
        expected = (int(grid["gpu_hits"][i, j]), int(grid["cpu_hits"][i, j]), int(grid["misses"][i, j]))
        direct.append({"gpu_index": i, "cpu_index": j, "gpu_capacity": g, "cpu_capacity": c,
                       "times_s": point.times, "median_s": point.median,
                       "direct": list(point.result), "curve": list(expected), "equal": tuple(point.result) == expected})
    measured_total = sum(p["median_s"] for p in direct)
    exact = all(p["equal"] for p in direct)
    curve_s = timing.median
    if direct_all:
        full = {"kind": "measured", "median_s": measured_total,
                "basis": "every grid point replayed (sum of per-point medians)"}
    else:
        full = {"kind": "estimate",
                "median_s": estimate_grid_total({(p["gpu_index"], p["cpu_index"]): p["median_s"] for p in direct}),
                "basis": f"per-point times measured at {len(direct)} points (GPU rows {list(SAMPLE_GPU)} x CPU columns "
                         f"{list(SAMPLE_CPU)}), linearly interpolated over the other points, summed over all "
                         f"{GPU_POINTS * CPU_POINTS}"}
    full["ratio_vs_curve"] = full["median_s"] / curve_s
    return {
        "trace": summary,
        "gpu_capacities": gpu.tolist(),
        "cpu_capacities": cpu.tolist(),
        "grid_rule": "GPU 1..10% and CPU 1..100% of the working set, inclusive tiers (TwoTierCache rules)",
        "curve_grid": {"kind": "measured", "times_s": timing.times, "median_s": curve_s, "points": GPU_POINTS * CPU_POINTS,
                       "per_point_s": curve_s / (GPU_POINTS * CPU_POINTS),
                       "misses": grid["misses"].tolist(), "gpu_hits": grid["gpu_hits"][:, 0].tolist(),
                       "cpu_hits": grid["cpu_hits"].tolist()},
        "direct_points": direct,
        "direct_points_measured_s": measured_total,
        "direct_mean_point_s": measured_total / len(direct),
        "direct_full_grid": full,
        "exact_at_every_replayed_point": exact,
        "replayed_points": len(direct),
    }


TABLE_COLUMNS = [("trace", "trace"), ("n", "n"), ("method", "method"), ("kind", "kind"), ("points", "grid points"),
                 ("median", "time s"), ("per_point", "s / point"), ("ratio", "time / curve.grid"), ("exact", "exact")]


def table_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    name, n = report["trace"]["name"], f"{report['trace']['accesses']:,}"
    curve, full = report["curve_grid"], report["direct_full_grid"]
    replayed = report["replayed_points"]
    exact = f"{'yes' if report['exact_at_every_replayed_point'] else 'NO'} ({replayed} pts)"
    return [
        {"trace": name, "n": n, "method": "curve.grid (hit_curve + inclusive_tiers + inclusive_grid)", "kind": "measured",
         "points": curve["points"], "median": C.fmt_seconds(curve["median_s"]),
         "per_point": f"{curve['per_point_s']:.2g}", "ratio": "1.00x", "exact": exact},
        {"trace": name, "n": n, "method": "TwoTierCache.direct, replayed points", "kind": "measured",
         "points": replayed, "median": C.fmt_seconds(report["direct_points_measured_s"]),
         "per_point": f"{report['direct_mean_point_s']:.3g}",
         "ratio": C.fmt_ratio(report["direct_points_measured_s"] / curve["median_s"]), "exact": exact},
        {"trace": name, "n": n, "method": "TwoTierCache.direct, full grid", "kind": full["kind"],
         "points": GPU_POINTS * CPU_POINTS, "median": C.fmt_seconds(full["median_s"]),
         "per_point": f"{full['median_s'] / (GPU_POINTS * CPU_POINTS):.3g}", "ratio": C.fmt_ratio(full["ratio_vs_curve"]),
         "exact": None},
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small traces, 1 repeat (a smoke test)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats of the curve grid (default 5; 1 with --quick)")
    parser.add_argument("--direct-repeats", type=int, default=1, help="timed repeats of each direct replay (default 1)")
    parser.add_argument("--direct-points", choices=("sample", "all"), default="sample",
                        help="replay TwoTierCache at 18 sampled grid points (default) or at all 1000")
    parser.add_argument("--only", default="*", help="comma-separated glob patterns of trace names (default all)")
    parser.add_argument("--list", action="store_true", help="list the trace names and exit")
    parser.add_argument("--out", type=Path, default=None, help="JSON output path (default benchmarks/results/bench_tiers[_quick|_partial].json)")
    args = parser.parse_args(argv)
    for name in ("repeats", "direct_repeats"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1; got {value}.")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scale = QUICK if args.quick else DEFAULT
    repeats = args.repeats or (1 if args.quick else 5)
    specs = trace_specs(scale)
    if args.list:
        print("traces: " + ", ".join(n for n, _ in specs))
        return 0
    names = [n for n, _ in specs]
    patterns = [p.strip() for p in args.only.split(",") if p.strip()]
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            print(f"bench_tiers: --only pattern {pattern!r} matches none of: {', '.join(names)}.", file=sys.stderr)
            return 2
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    partial = args.only != "*" or args.repeats is not None or args.direct_repeats != 1 or args.direct_points != "sample"
    out = args.out or C.RESULTS_DIR / ("bench_tiers_quick.json" if args.quick else
                                      "bench_tiers_partial.json" if partial else "bench_tiers.json")
    started = time.perf_counter()
    info = C.machine_info()
    curve_grid(np.arange(500, dtype=np.int64) % 50, None, np.array([5]), np.array([10]))  # load the compiled kernels
    reports = []
    try:
        for name, factory in specs:
            if name in chosen:
                C.log(f"trace {name}: generating")
                reports.append(bench_trace(factory(), repeats, args.direct_points == "all", args.direct_repeats))
    except C.BenchDataError as exc:
        print(f"bench_tiers: {exc}", file=sys.stderr)
        return 1
    print(C.format_table([row for r in reports for row in table_rows(r)], TABLE_COLUMNS))
    for r in reports:
        full = r["direct_full_grid"]
        print(f"\ntarget on {r['trace']['name']}: direct full grid ({full['kind']}) / curve grid = "
              f"{full['ratio_vs_curve']:,.0f}x (>= 100: {full['ratio_vs_curve'] >= 100}); "
              f"exact at all {r['replayed_points']} replayed points: {r['exact_at_every_replayed_point']}")
    info["load_average_at_end"] = list(os.getloadavg())
    C.write_json_atomic(out, {
        "benchmark": "bench_tiers",
        "command": [Path(sys.executable).name, "benchmarks/bench_tiers.py", *(argv if argv is not None else sys.argv[1:])],
        "quick": args.quick,
        "repeats": repeats,
        "direct_repeats": args.direct_repeats,
        "timing": "time.perf_counter, GC off during each call; curve grid: median of the repeats; direct: median per point",
        "machine": info,
        "elapsed_s": time.perf_counter() - started,
        "traces": reports,
    })
    C.log(f"wrote {out} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
