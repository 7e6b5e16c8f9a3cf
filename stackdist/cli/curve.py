"""``stackdist curve``: the LRU hit curve of a trace (exact, sampled or on a cluster): parse, call
:func:`stackdist.methods.curve_of` once, render."""

from __future__ import annotations

import argparse
from typing import Any

from stackdist.output import write_atomic, write_json

from .args import bounded_int, fraction_list, int_list
from .common import add_trace_arguments
from .scale import method_from, trace_input

__all__ = ["MAX_POINTS", "add_curve_parser", "run_curve"]

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


def run_curve(args: argparse.Namespace) -> int:
    """Parse, compute the curve by the flags' method (:func:`stackdist.methods.curve_of`), draw the
    plot, then write the report (JSON, or the exact curve as CSV)."""
    from stackdist.errors import UsageError
    from stackdist.methods import Exact, curve_of
    from stackdist.render.reports import curve_csv, curve_report, report_capacities

    targets = fraction_list(args.targets, "--targets")
    listed = int_list(args.capacities, "--capacities") if args.capacities is not None else None
    method = method_from(args)
    if args.csv and not isinstance(method, Exact):
        raise UsageError("--csv is not available with --sample-* or --dask; use the JSON output.")
    result = curve_of(trace_input(args), method)
    caps = report_capacities(result.curve, listed, args.points)
    if args.plot:
        from stackdist.render.plot import plot_hit_curve, plot_sampled_curve

        if result.sampled:
            plot_sampled_curve(args.plot, result.seeds, targets, source=args.trace, fmt=args.format)
        else:
            plot_hit_curve(args.plot, result.curve, targets, source=args.trace, window=args.window, warmup=args.warmup,
                           fmt=args.format)
    if args.csv:
        write_atomic(args.output, curve_csv(result, caps))
    else:
        write_json(args.output, curve_report(result, args.trace, targets, caps, args.window, args.warmup, "--targets"))
    return 0
