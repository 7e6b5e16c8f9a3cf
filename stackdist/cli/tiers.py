"""``stackdist tiers``: two-tier (GPU + CPU) hits for every CPU capacity."""

from __future__ import annotations

import argparse
from typing import Any

from stackdist.output import write_json

from .args import int_list
from .common import add_trace_arguments, load_curve
from .curve import capacities

__all__ = ["add_tiers_parser", "run_tiers"]

EXAMPLES_TIERS = """examples:
  stackdist tiers trace.csv --gpu 4096                 # CPU curve for a 4096-unit GPU tier
  stackdist tiers trace.csv --gpu 2048 --gpu 4096 --cpu 0,8192,16384
  stackdist tiers trace.jsonl --gpu 4096 --exclusive --plot tiers.png
  stackdist tiers data/traces/mooncake_conversation_trace.jsonl --format mooncake --gpu 8000 --cpu 0,20000,40000
"""




def add_tiers_parser(sub: Any) -> None:
    """Register ``tiers`` on the subcommand parsers ``sub``."""
    t = sub.add_parser("tiers", help="two-tier (GPU + CPU) hits for every CPU capacity", epilog=EXAMPLES_TIERS,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Inclusive tiers (as kvlab's TwoTierCache): one replay of the GPU-miss stream per "
                       "GPU capacity gives every CPU capacity. --exclusive adds exclusive tiers from the same histogram.")
    add_trace_arguments(t)
    t.add_argument("--gpu", action="append", required=True, metavar="C", help="GPU tier capacity (repeat for several)")
    group = t.add_mutually_exclusive_group()
    group.add_argument("--cpu", metavar="C1,C2,...", help="CPU capacities to report")
    group.add_argument("--cpu-points", type=int, default=50, help="number of evenly spread CPU capacities (default 50)")
    t.add_argument("--exclusive", action="store_true", help="also report exclusive tiers (promote on hit, demote on eviction)")


def run_tiers(args: argparse.Namespace) -> int:
    """Replay once; write the inclusive (and exclusive) tier grid as JSON, then a plot."""
    from stackdist.engine.tiers import exclusive_grid, inclusive_grid, inclusive_tiers

    gpus = [v for text in args.gpu for v in int_list(text, "--gpu")]
    curve = load_curve(args)
    tiers = inclusive_tiers(gpu_capacities=gpus, curve=curve)
    cpu_caps = capacities(curve, args.cpu, args.cpu_points, "--cpu")
    grid = inclusive_grid(tiers, cpu_caps)
    result: dict[str, Any] = {"trace": args.trace, "summary": curve.summary(), "inclusive": grid}
    if args.exclusive:
        result["exclusive"] = exclusive_grid(curve, gpus, cpu_caps)
    write_json(args.output, result)
    if args.plot:
        from stackdist.render.plot import plot_curves

        n = max(curve.n_accesses, 1)
        series = [(f"inclusive, GPU {g}", cpu_caps, (grid["gpu_hits"][i] + grid["cpu_hits"][i]) / n) for i, g in enumerate(gpus)]
        if args.exclusive:
            ex = result["exclusive"]
            series += [(f"exclusive, GPU {g}", cpu_caps, (ex["gpu_hits"][i] + ex["cpu_hits"][i]) / n) for i, g in enumerate(gpus)]
        plot_curves(args.plot, series, xlabel="CPU tier capacity (trace size units)", ylabel="hit rate (GPU + CPU)",
                    title=f"{args.trace}: two-tier hits")
    return 0


