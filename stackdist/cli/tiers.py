"""``stackdist tiers``: two-tier (GPU + CPU) hits for every CPU capacity."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from stackdist.errors import UsageError
from stackdist.output import stage, write_json

from .args import bounded_int, int_list
from .common import add_trace_arguments, load_curve, tool_header
from .curve import MAX_POINTS, capacities

__all__ = ["MAX_GPUS", "add_tiers_parser", "run_tiers"]

MAX_GPUS = 256
"""The most GPU capacities one ``tiers`` run may ask for (each costs a replay of its miss stream)."""

EXAMPLES_TIERS = """examples:
  stackdist tiers trace.csv --gpu 4096                 # CPU curve for a 4096-unit GPU tier
  stackdist tiers trace.csv --gpu 2048 --gpu 4096 --cpu 0,8192,16384
  stackdist tiers trace.jsonl --gpu 4096 --exclusive --plot tiers.png -o tiers.json
  stackdist tiers data/traces/mooncake_conversation_trace.jsonl --format mooncake --gpu 8000 --cpu 0,20000,40000
"""


def add_tiers_parser(sub: Any) -> None:
    """Register ``tiers`` on the subcommand parsers ``sub``."""
    t = sub.add_parser("tiers", help="two-tier (GPU + CPU) hits for every CPU capacity", epilog=EXAMPLES_TIERS,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Inclusive tiers (as kvlab's TwoTierCache): one replay of the GPU-miss stream per "
                       "GPU capacity gives every CPU capacity. --exclusive adds exclusive tiers from the same histogram.")
    add_trace_arguments(t)
    t.add_argument("--gpu", action="append", required=True, metavar="C",
                   help="GPU tier capacity, 0 to 2^63-1 (repeat, or C1,C2, for several)")
    group = t.add_mutually_exclusive_group()
    group.add_argument("--cpu", metavar="C1,C2,...", help="CPU capacities to report")
    group.add_argument("--cpu-points", type=bounded_int("--cpu-points", 2, MAX_POINTS), default=50,
                       help=f"number of evenly spread CPU capacities, 2 to {MAX_POINTS:,} (default 50)")
    t.add_argument("--exclusive", action="store_true", help="also report exclusive tiers (promote on hit, demote on eviction)")


def run_tiers(args: argparse.Namespace, replay: Callable[[argparse.Namespace, list[int]], Any] | None = None) -> int:
    """Replay once; draw the plot, then write the inclusive (and exclusive) tier grid as JSON.
    ``replay(args, gpus)``, when given, returns ``(curve, inclusive tiers, extra report keys)``
    in place of the one-process replay (``--dask``: :func:`stackdist.cli.scale.run_dask_tiers`)."""
    from stackdist.engine.tiers import exclusive_grid, inclusive_grid, inclusive_tiers

    gpus = [v for text in args.gpu for v in int_list(text, "--gpu")]
    if len(gpus) > MAX_GPUS:
        raise UsageError(f"--gpu: at most {MAX_GPUS} GPU capacities (each costs one replay); got {len(gpus):,}.")
    if args.cpu is not None:
        int_list(args.cpu, "--cpu")  # a bad --cpu is a usage error before any reading
    extra: dict[str, Any] = {}
    if replay is None:
        curve = load_curve(args)
        stage("stackdist tiers", f"replaying the GPU-miss stream of {len(gpus)} GPU capacit{'y' if len(gpus) == 1 else 'ies'}")
        tiers = inclusive_tiers(gpu_capacities=gpus, curve=curve)
    else:
        curve, tiers, extra = replay(args, gpus)
    cpu_caps = capacities(curve, args.cpu, args.cpu_points, "--cpu", "--cpu-points")
    grid = inclusive_grid(tiers, cpu_caps)
    result: dict[str, Any] = {**tool_header("tiers"), "trace": args.trace, "sampled": False, "window": args.window,
                              "warmup": args.warmup, "summary": curve.summary(), "inclusive": grid, **extra}
    if args.exclusive:
        result["exclusive"] = exclusive_grid(curve, gpus, cpu_caps)
    if args.plot:
        from stackdist.render.plot import plot_tiers

        plot_tiers(args.plot, result, source=args.trace, fmt=args.format)
    write_json(args.output, result)
    return 0
