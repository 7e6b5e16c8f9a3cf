"""``stackdist tiers``: two-tier (GPU + CPU) hits for every CPU capacity."""

from __future__ import annotations

import argparse
from typing import Any

from stackdist.errors import UsageError
from stackdist.output import write_json

from .args import InputPath, bounded_int
from .common import add_trace_arguments
from .curve import MAX_POINTS, UNIT_HELP, capacities, warn_unused_model
from .names import KV_DTYPE_NAMES, kv_dtype_name, model_name
from .scale import method_from, trace_input

__all__ = ["MAX_GPUS", "add_tiers_parser", "run_tiers"]

MAX_GPUS = 256
"""The most GPU capacities one ``tiers`` run may ask for (each costs a replay of its miss stream)."""

EXAMPLES_TIERS = """examples:
  stackdist tiers trace.csv --gpu 4096                 # CPU curve for a 4096-unit GPU tier
  stackdist tiers trace.csv --gpu 2048 --gpu 4096 --cpu 0,8192,16384
  stackdist tiers trace.jsonl --gpu 4096 --exclusive --plot tiers.png -o tiers.json
  stackdist tiers data/traces/mooncake_conversation_trace.jsonl --format mooncake --gpu 8000 --cpu 0,20000,40000
  stackdist tiers data/traces/mooncake_conversation_trace.jsonl --format mooncake --gpu 8000 --model qwen3-8b --plot t.png
  stackdist tiers trace.jsonl --format mooncake --model qwen3-8b --gpu 80GiB --cpu 256GiB,512GiB,1TiB
"""


def add_tiers_parser(sub: Any) -> None:
    """Register ``tiers`` on the subcommand parsers ``sub``."""
    t = sub.add_parser("tiers", help="two-tier (GPU + CPU) hits for every CPU capacity", epilog=EXAMPLES_TIERS,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Inclusive tiers (as kvlab's TwoTierCache): one replay of the GPU-miss stream per "
                       "GPU capacity gives every CPU capacity. --exclusive adds exclusive tiers from the same histogram.")
    add_trace_arguments(t)
    t.add_argument("--gpu", action="append", required=True, metavar="C",
                   help=f"GPU tier capacity (repeat, or C1,C2, for several): {UNIT_HELP}")
    group = t.add_mutually_exclusive_group()
    group.add_argument("--cpu", metavar="C1,C2,...", help="CPU capacities to report, in the same units as --gpu")
    group.add_argument("--cpu-points", type=bounded_int("--cpu-points", 2, MAX_POINTS), default=50,
                       help=f"number of evenly spread CPU capacities, 2 to {MAX_POINTS:,} (default 50)")
    t.add_argument("--exclusive", action="store_true", help="also report exclusive tiers (promote on hit, demote on eviction)")
    _add_plot_model_arguments(t)


def _add_plot_model_arguments(t: Any) -> None:
    """``--model``, ``--model-config``, ``--kv-dtype``: the plot's x axis in KV GiB (request traces)."""
    model = t.add_mutually_exclusive_group()
    model.add_argument("--model", type=model_name, metavar="NAME",
                       help="request traces: the model whose KV bytes per token convert --gpu/--cpu sizes in bytes to "
                       "blocks and draw --plot's CPU axis in KV GiB (a bundled model or Hugging Face repo id, any case, "
                       "as plan's); without it sizes in bytes are refused and the axis is in blocks")
    model.add_argument("--model-config", type=InputPath, metavar="FILE", help="a Hugging Face config.json instead of --model")
    t.add_argument("--kv-dtype", type=kv_dtype_name, metavar="DTYPE",
                   help=f"with --model: the KV-cache element type, {', '.join(KV_DTYPE_NAMES)} or vLLM's and torch's "
                   "names (default auto: the model's)")


def _plot_bytes(args: argparse.Namespace) -> tuple[float | None, str | None]:
    """KV bytes per block and the model's name for the plot, when a model is given for a
    request trace of a fixed block size; else (None, None)."""
    from stackdist.traces.formats import REQUESTS, get, is_request_format

    if not (getattr(args, "model", None) or getattr(args, "model_config", None)):
        if getattr(args, "kv_dtype", None):
            raise UsageError("--kv-dtype sets the KV bytes of --model: give --model or --model-config too.")
        return None, None
    if not is_request_format(args.format):
        raise UsageError("--model gives KV bytes per token: it needs a request trace (--format mooncake, qwen, ...).")
    block = get(args.format, REQUESTS).block_size
    if block is None:
        raise UsageError(f"--model: the {args.format} log states its own block size; the plot stays in blocks "
                         "(drop --model).")
    from .budget_args import kv_dtype_text, resolve_spec

    spec = resolve_spec(args)
    return float(spec.geometry.kv_bytes_per_token * block), f"{spec.name}, KV {kv_dtype_text(args, spec)}"


def run_tiers(args: argparse.Namespace) -> int:
    """Parse, compute the tier grids by the flags' method (:func:`stackdist.methods.tiers_of`), draw
    the plot, then write the grids as JSON."""
    from stackdist.methods import Sampled, tiers_of
    from stackdist.render.reports import tiers_report

    gpus = capacities(args, list(args.gpu), "--gpu")
    if len(gpus) > MAX_GPUS:
        raise UsageError(f"--gpu: at most {MAX_GPUS} GPU capacities (each costs one replay); got {len(gpus):,}.")
    cpu = capacities(args, [args.cpu], "--cpu") if args.cpu is not None else None  # a usage error before any reading
    bytes_per_unit, model = _plot_bytes(args) if args.plot else (None, None)
    if not args.plot:
        warn_unused_model(args, [*args.gpu, args.cpu])
    method = method_from(args)
    if isinstance(method, Sampled) and method.cluster is not None:
        raise UsageError("tiers: --dask is exact; it takes no --sample-rate/--sample-size.")
    result = tiers_of(trace_input(args), gpus, method, cpu, args.cpu_points, args.exclusive)
    report = tiers_report(result, args.trace, args.window, args.warmup)
    if args.plot:
        from stackdist.render.plot import plot_tiers

        if result.sampled:  # the first seed's estimate at the reported grid
            plot_tiers(args.plot, {**report, "summary": {"accesses": result.accesses}}, source=args.trace,
                       fmt=args.format, note=f"SHARDS-sampled at rate {result.rate:.3g}: estimates",
                       bytes_per_unit=bytes_per_unit, model=model)
        else:
            plot_tiers(args.plot, report, source=args.trace, fmt=args.format, bytes_per_unit=bytes_per_unit, model=model)
    write_json(args.output, report)
    return 0
