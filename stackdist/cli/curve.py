"""``stackdist curve``: the exact LRU hit curve of a trace."""

from __future__ import annotations

import argparse
import csv
import io
from typing import Any

import numpy as np

from stackdist.output import write_atomic, write_json

from .args import bounded_int, fraction_list, int_list
from .common import add_trace_arguments, load_curve, tool_header

__all__ = ["MAX_POINTS", "add_curve_parser", "capacities", "run_curve"]

MAX_POINTS = 100_000
"""The most evenly spread capacities ``--points`` / ``--cpu-points`` may ask for."""

EXAMPLES_CURVE = """examples:
  stackdist curve trace.csv                         # 50-point curve as JSON
  stackdist curve trace.jsonl --capacities 1000,2000,4096
  stackdist curve trace.npy --points 200 --window=100000: --csv
  stackdist curve trace.csv --warmup 10% --targets 0.5,0.9 --plot curve.png --output curve.json
  stackdist curve trace.csv --window=-1000000:               # count the last million accesses only
  stackdist curve requests.jsonl --format mooncake --window 10m:50% --warmup 5m
  stackdist curve data/traces/mooncake_conversation_trace.jsonl --format mooncake --capacities 1000,10000
  stackdist curve logs/day-*.csv.zst --points 100    # several files (or a quoted glob): one trace, in order
  zcat big.csv.gz | stackdist curve - --sample-rate 0.01   # standard input; SHARDS sampling, with error bars
"""


def add_curve_parser(sub: Any) -> None:
    """Register ``curve`` on the subcommand parsers ``sub``."""
    c = sub.add_parser("curve", help="the exact LRU hit curve of a key[,size] trace", epilog=EXAMPLES_CURVE,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="One replay gives the exact LRU hits at every capacity (in the trace's size unit).")
    add_trace_arguments(c)
    group = c.add_mutually_exclusive_group()
    group.add_argument("--capacities", metavar="C1,C2,...", help="report exactly these capacities")
    group.add_argument("--points", type=bounded_int("--points", 2, MAX_POINTS), default=50,
                       help=f"number of evenly spread capacities, 2 to {MAX_POINTS:,} (default 50)")
    c.add_argument("--targets", default="0.5,0.9,0.95,0.99", metavar="R1,R2,...",
                   help="hit rates for which to report the smallest capacity (default 0.5,0.9,0.95,0.99)")
    c.add_argument("--csv", action="store_true", help="print the sampled curve as CSV instead of JSON")


def capacities(curve: Any, listed: str | None, points: int, name: str, points_name: str = "--points") -> np.ndarray:
    """The capacities to report: the listed ones (``name``), or ``points`` (``points_name``) spread over the curve."""
    from stackdist.errors import UsageError

    if listed is not None:
        return np.array(int_list(listed, name), dtype=np.int64)
    if not 2 <= points <= MAX_POINTS:
        raise UsageError(f"{points_name} must be an integer from 2 to {MAX_POINTS:,}; got {points}.")
    return curve.default_capacities(points)


def unreachable_reason(curve: Any, target: float) -> str:
    """Why no capacity reaches a hit-rate target: the cold misses cap every cache."""
    return (f"no capacity reaches {target:g}: {curve.cold_misses:,} of {curve.n_accesses:,} counted accesses are "
            f"first accesses (cold misses), so even an infinite cache hits {curve.ceiling_hit_rate:.4%}")


def curve_report(args: argparse.Namespace, curve: Any, targets: list[float], sample: dict[str, list]) -> dict[str, Any]:
    """The JSON report of ``curve``: header, summary, target capacities (with reasons), the sample."""
    from stackdist.engine.histogram import exact_count

    by_rate = {f"{t:g}": curve.min_capacity_for(hit_rate=t) for t in targets}
    return {
        **tool_header("curve"),
        "trace": args.trace,
        "sampled": False,
        "window": args.window, "warmup": args.warmup,
        "summary": curve.summary(),
        "min_capacity_for_hit_rate": by_rate,
        "unreachable": {k: {"reason": unreachable_reason(curve, float(k))} for k, v in by_rate.items() if v is None},
        **({"no_reuse": "no key is accessed twice in the counted accesses: every access is a cold miss, at every "
            "capacity"} if not curve.ceiling_hits else {}),
        "min_capacity_for_fraction_of_ceiling": {  # no reuse at all: the ceiling is 0 and no target means anything
            f"{t:g}": curve.min_capacity_for(hits=exact_count(t, curve.ceiling_hits, "--targets")) if curve.ceiling_hits
            else None for t in targets
        },
        "curve": sample,
    }


def run_curve(args: argparse.Namespace) -> int:
    """Replay once; write the plot, then the sampled curve and the target capacities (JSON or CSV)."""
    targets = fraction_list(args.targets, "--targets")
    caps = np.array(int_list(args.capacities, "--capacities"), np.int64) if args.capacities is not None else None
    curve = load_curve(args, bounded=True)
    if caps is None:
        caps = capacities(curve, None, args.points, "--capacities")
    sample = curve.sample(caps)
    if args.plot:
        from stackdist.render.plot import plot_hit_curve

        plot_hit_curve(args.plot, curve, targets, source=args.trace, window=args.window, warmup=args.warmup,
                       fmt=args.format)
    if args.csv:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(list(sample))
        writer.writerows(zip(*sample.values()))
        write_atomic(args.output, buf.getvalue())
    else:
        write_json(args.output, curve_report(args, curve, targets, sample))
    return 0
