"""``stackdist curve``: the LRU hit curve of a trace (exact, sampled or on a cluster): parse, call
:func:`stackdist.methods.curve_of` once, render."""

from __future__ import annotations

import argparse
from typing import Any

from stackdist.output import write_atomic, write_json

from .args import SIZE_HELP, bounded_int, fraction_list, resolve_sizes, size_list
from .common import add_trace_arguments
from .names import add_model_arguments
from .scale import method_from, trace_input

__all__ = ["MAX_POINTS", "UNIT_HELP", "add_curve_parser", "capacities", "run_curve", "warn_unused_model"]

UNIT_HELP = SIZE_HELP.format(unit="the trace's unit (an access trace's size unit; a block of a request trace)")
"""What a capacity of ``curve`` and ``tiers`` may be written as."""

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
  stackdist curve trace.jsonl --format mooncake --capacities 40GiB,80GiB,2Mtokens --model qwen3-8b --targets 90%,99%
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
    group.add_argument("--capacities", metavar="C1,C2,...", help=f"report exactly these capacities: {UNIT_HELP}")
    group.add_argument("--points", type=bounded_int("--points", 2, MAX_POINTS), default=50,
                       help=f"number of evenly spread capacities, 2 to {MAX_POINTS:,} (default 50)")
    c.add_argument("--targets", default="0.5,0.9,0.95,0.99", metavar="R1,R2,...",
                   help="hit rates for which to report the smallest capacity, fractions or percentages (default "
                   "0.5,0.9,0.95,0.99; or 50%%,90%%)")
    add_model_arguments(c, "converts capacities in bytes to blocks of a request trace")
    c.add_argument("--csv", action="store_true", help="print the sampled curve as CSV instead of JSON")


def run_curve(args: argparse.Namespace) -> int:
    """Parse, compute the curve by the flags' method (:func:`stackdist.methods.curve_of`), draw the
    plot, then write the report (JSON, or the exact curve as CSV)."""
    from stackdist.errors import UsageError
    from stackdist.methods import Exact, curve_of
    from stackdist.render.reports import curve_csv, curve_report, report_capacities

    targets = fraction_list(args.targets, "--targets")
    listed = capacities(args, [args.capacities], "--capacities") if args.capacities is not None else None
    warn_unused_model(args, [args.capacities])
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


def _block_tokens(fmt: str | None, flag: str, text: str) -> int | None:
    """Tokens per block of a request trace's format (None: an access trace); a usage error when
    the format's files state their own and a unit needs it."""
    from stackdist.errors import UsageError
    from stackdist.traces.formats import get, is_request_format

    if not is_request_format(fmt):
        return None
    tokens = get(str(fmt)).block_size
    if tokens is None:
        raise UsageError(f"{flag} {text}: --format {fmt} files state their own block size, unknown before reading; give "
                         "bare integers or blocks.")
    return tokens


def _needs_blocks(texts: list[str], flag: str) -> bool:
    return any(size.unit not in ("", "blocks") for text in texts for size in size_list(text, flag))


def capacities(args: argparse.Namespace, texts: list[str], flag: str) -> list[int]:
    """The capacities of ``texts`` (comma-separated, possibly repeated flags) in the trace's unit:
    bare integers as given; tokens, pages and bytes (with ``--model``) as whole blocks of a request
    trace (:func:`~stackdist.cli.args.resolve_sizes`), bytes with the model of ``--model`` (or
    ``--model-config`` where the command has it) and ``--kv-dtype``. A usage error naming ``flag``
    otherwise. O(items)."""
    sizes = [size for text in texts for size in size_list(text, flag)]
    block = _block_tokens(args.format, flag, ",".join(texts)) if _needs_blocks(texts, flag) else None
    kv = None
    model_given = getattr(args, "model", None) is not None or getattr(args, "model_config", None) is not None
    if model_given and any(size.unit == "bytes" for size in sizes):
        # only for bytes: curve does not import the planner otherwise
        from .budget_args import resolve_spec

        kv = int(resolve_spec(args).geometry.kv_bytes_per_token)
    return resolve_sizes(sizes, flag, block, kv)


def warn_unused_model(args: argparse.Namespace, texts: list[str | None]) -> None:
    """``--model`` / ``--kv-dtype`` only convert byte sizes: given without one, say so on stderr
    (never silently ignored)."""
    import sys

    uses = [t for t in texts if t is not None]
    bytes_given = any(size.unit == "bytes" for text in uses for size in size_list(text, "--capacities"))
    given = [flag for flag, dest in (("--model", "model"), ("--model-config", "model_config"), ("--kv-dtype", "kv_dtype"))
             if getattr(args, dest, None) is not None]
    if not bytes_given and given:
        flag = given[0]
        print(f"stackdist {args.command}: warning: {flag} only converts capacities given in bytes (GiB, TiB, ...) to "
              "blocks; none is given, so it changes nothing", file=sys.stderr)
