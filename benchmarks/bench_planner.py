"""Benchmark: the full `stackdist plan` against the direct request-level simulators.

On the Mooncake conversation trace at its native 512-token blocks (288,500 block accesses) and
re-blocked to 16-token pages (`stackdist.traces.reblock`, 9,055,233 accesses):

- plan: read the trace (and re-block), replay both semantics once each, build the whole report
  (ceilings, working sets, coverage, tier plan, curve); medians of ``--repeats``.
- direct: the reference simulators, one run per capacity and semantics (engine:
  ``kvlab.kvsim.EnginePrefixCache``; per-access: ``kvlab.kvsim.LRUCache`` over the block
  stream), at 20 capacities spread up to the 99 %-of-ceiling working set. At 512-token blocks all
  20 run for real; at 16-token pages, where one run takes many seconds, ``--direct-points`` of them
  run for real, spread evenly over the non-zero capacities, and the 20-capacity total is
  estimated from their mean (labelled as an estimate).
  At every capacity that runs, the plan's prefix-token hits must equal the direct simulator's.

Prints a Markdown table and writes benchmarks/results/bench_planner.json (atomically).

    python benchmarks/bench_planner.py            # the full run (a few minutes)
    python benchmarks/bench_planner.py --quick    # a smoke test on the first 1,500 requests
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    CONVERSATION_TRACE,
    RESULTS_DIR,
    fmt_ratio,
    fmt_seconds,
    format_table,
    log,
    machine_info,
    time_call,
    write_json_atomic,
)

from kvlab.kvsim import EnginePrefixCache, LRUCache
from stackdist.planning import PlanOptions, PrefixCurve
from stackdist.planning import build_plan as build_report
from stackdist.serving import replay_requests
from stackdist.traces import RequestTrace, read_mooncake
from stackdist.traces.blocks import reblock

CAPACITIES = 20


def load(path: Path, block_size: int, limit: int | None) -> RequestTrace:
    trace = read_mooncake(path)
    if limit is not None:
        trace = trace.select(slice(0, limit))
    return trace if block_size == 512 else reblock(trace, block_size)


def direct_prefix_tokens(trace: RequestTrace, capacity: int, semantics: str) -> int:
    """Prefix-token hits of the reference simulator at one capacity (blocks)."""
    tokens = trace.block_tokens.tolist()
    offsets = trace.offsets.tolist()
    blocks = trace.block_ids.tolist()
    total = 0
    if semantics == "engine":
        cache = EnginePrefixCache(capacity)
        for r in range(trace.n_requests):
            lo, hi = offsets[r], offsets[r + 1]
            hit = cache.access(blocks[lo:hi])
            total += sum(tokens[lo : lo + hit])
        return total
    cache = LRUCache(capacity)
    for r in range(trace.n_requests):
        lo, hi = offsets[r], offsets[r + 1]
        prefix = True
        for i in range(lo, hi):
            hit = cache.access(blocks[i], 1)
            prefix = prefix and hit
            if prefix:
                total += tokens[i]
    return total


def bench_one(name: str, block_size: int, args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    log(f"[{name}] plan x{args.repeats}")
    options = PlanOptions()
    plan = time_call(lambda: build_report(load(CONVERSATION_TRACE, block_size, args.limit), options), args.repeats)
    trace = load(CONVERSATION_TRACE, block_size, args.limit)
    report = plan.result
    top = report["semantics"]["engine"]["working_set"][-1]["fraction_of_ceiling"]["blocks"]
    capacities = np.unique(np.linspace(0, top, CAPACITIES).round().astype(np.int64)).tolist()
    # Where not every capacity runs, sample evenly among the non-zero ones (capacity 0 stores
    # nothing and runs fastest, so including it would flatter the plan).
    nonzero = capacities[1:]
    picks = np.linspace(0, len(nonzero) - 1, min(args.direct_points, len(nonzero))).round().astype(int)
    real_points = capacities if block_size == 512 else [nonzero[i] for i in picks]
    curves = {s: PrefixCurve(replay_requests(trace, s)) for s in ("engine", "per-access")}
    rows, detail = [], {"name": name, "block_size": block_size, "blocks": trace.n_blocks, "requests": trace.n_requests,
                        "plan_times_s": plan.times, "capacities": capacities, "direct": {}}
    for semantics in ("engine", "per-access"):
        times, checks = [], []
        for c in real_points:
            log(f"[{name}] direct {semantics} at {c:,} blocks")
            start = time.perf_counter()
            tokens = direct_prefix_tokens(trace, c, semantics)
            times.append(time.perf_counter() - start)
            expected = int(curves[semantics].prefix_token_hits_at(c))
            checks.append({"capacity": c, "direct": tokens, "plan": expected, "equal": tokens == expected})
            if tokens != expected:
                raise SystemExit(f"MISMATCH {name} {semantics} at {c}: direct {tokens} plan {expected}")
        measured = len(real_points) == len(capacities)
        total = sum(times) if measured else float(np.mean(times)) * len(capacities)
        detail["direct"][semantics] = {"times_s": times, "points": real_points, "checks": checks,
                                       "total_s": total, "total_is_estimate": not measured}
        rows.append({
            "trace": name, "method": f"direct {semantics}, {len(capacities)} capacities",
            "seconds": fmt_seconds(total) + ("" if measured else " (est.)"),
            "ratio": fmt_ratio(total / plan.median), "exact": f"{sum(c['equal'] for c in checks)}/{len(checks)} equal",
        })
    rows.insert(0, {"trace": name, "method": "plan (both semantics, all capacities)", "seconds": fmt_seconds(plan.median),
                    "ratio": "1x", "exact": "-"})
    both = sum(detail["direct"][s]["total_s"] for s in ("engine", "per-access"))
    estimated = any(detail["direct"][s]["total_is_estimate"] for s in ("engine", "per-access"))
    rows.append({"trace": name, "method": "direct, both semantics", "seconds": fmt_seconds(both) + (" (est.)" if estimated else ""),
                 "ratio": fmt_ratio(both / plan.median), "exact": "-"})
    detail["plan_median_s"] = plan.median
    detail["direct_both_total_s"] = both
    detail["speedup_vs_direct_both"] = both / plan.median
    return rows, detail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="first 1,500 requests, 1 repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--direct-points", type=int, default=3, help="direct runs measured at 16-token pages")
    parser.add_argument("--limit", type=int, help="only the first N requests")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "bench_planner.json")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.direct_points < 1:
        parser.error("--repeats and --direct-points must be at least 1")
    if args.quick:
        args.repeats, args.limit = 1, args.limit or 1500
        if args.output == RESULTS_DIR / "bench_planner.json":
            args.output = RESULTS_DIR / "bench_planner_quick.json"
    rows, details = [], []
    for name, block_size in (("conversation, 512-token blocks", 512), ("conversation, 16-token pages", 16)):
        r, d = bench_one(name, block_size, args)
        rows += r
        details.append(d)
    table = format_table(rows, [("trace", "trace"), ("method", "method"), ("seconds", "median s"),
                                ("ratio", "x plan"), ("exact", "checked")])
    print(table)
    write_json_atomic(args.output, {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()},
                                    "results": details, "table": table})
    log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
