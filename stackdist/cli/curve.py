"""``stackdist curve``: the exact LRU hit curve of a trace."""

from __future__ import annotations

import argparse
import csv
import io
import sys
from typing import Any

import numpy as np

from stackdist.output import write_atomic, write_json

from .args import fraction_list, int_list
from .common import add_trace_arguments, load_curve

__all__ = ["add_curve_parser", "run_curve", "capacities"]

EXAMPLES_CURVE = """examples:
  stackdist curve trace.csv                         # 50-point curve as JSON
  stackdist curve trace.jsonl --capacities 1000,2000,4096
  stackdist curve trace.npy --points 200 --window 100000: --csv
  stackdist curve trace.csv --targets 0.5,0.9 --plot curve.png --output curve.json
  stackdist curve data/traces/mooncake_conversation_trace.jsonl --format mooncake --capacities 1000,10000
"""



def add_curve_parser(sub: Any) -> None:
    """Register ``curve`` on the subcommand parsers ``sub``."""
    c = sub.add_parser("curve", help="the exact LRU hit curve of a key[,size] trace", epilog=EXAMPLES_CURVE,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="One replay gives the exact LRU hits at every capacity (in the trace's size unit).")
    add_trace_arguments(c)
    group = c.add_mutually_exclusive_group()
    group.add_argument("--capacities", metavar="C1,C2,...", help="report exactly these capacities")
    group.add_argument("--points", type=int, default=50, help="number of evenly spread capacities (default 50)")
    c.add_argument("--targets", default="0.5,0.9,0.95,0.99", metavar="R1,R2,...",
                   help="hit rates for which to report the smallest capacity (default 0.5,0.9,0.95,0.99)")
    c.add_argument("--csv", action="store_true", help="print the sampled curve as CSV instead of JSON")


def capacities(curve: Any, listed: str | None, points: int, name: str) -> np.ndarray:
    """The capacities to report: the listed ones, or ``points`` spread over the curve."""
    from stackdist.errors import UsageError

    if listed is not None:
        return np.array(int_list(listed, name), dtype=np.int64)
    if points < 2:
        raise UsageError(f"--points must be at least 2; got {points}.")
    return curve.default_capacities(points)


def run_curve(args: argparse.Namespace) -> int:
    """Replay once; write the sampled curve and the target capacities (JSON or CSV), then a plot."""
    from stackdist.engine.histogram import exact_count

    targets = fraction_list(args.targets, "--targets")
    curve = load_curve(args)
    caps = capacities(curve, args.capacities, args.points, "--capacities")
    sample = curve.sample(caps)
    if args.csv:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(list(sample))
        writer.writerows(zip(*sample.values()))
        if args.output == "-":
            sys.stdout.write(buf.getvalue())
        else:
            write_atomic(args.output, buf.getvalue())
    else:
        result = {
            "trace": args.trace,
            "summary": curve.summary(),
            "min_capacity_for_hit_rate": {f"{t:g}": curve.min_capacity_for(hit_rate=t) for t in targets},
            "min_capacity_for_fraction_of_ceiling": {
                f"{t:g}": curve.min_capacity_for(hits=exact_count(t, curve.ceiling_hits, "--targets")) for t in targets
            },
            "curve": sample,
        }
        write_json(args.output, result)
    if args.plot:
        from stackdist.render.plot import plot_curves

        steps = curve.steps(below_largest=curve.summary()["distinct_sizes"] <= 64)
        x = np.r_[steps.capacities, max(int(steps.capacities[-1]) * 1.05, 1)]
        y = np.r_[steps.hits, steps.hits[-1]] / max(curve.n_accesses, 1)
        plot_curves(args.plot, [("LRU hit rate", x, y)], xlabel="capacity (trace size units)",
                    hlines=[(f"hit rate {t:g}", t) for t in targets],
                    title=f"{args.trace}: exact LRU hit curve")
    return 0


