"""The ``stackdist`` command: exact hit curves, tier curves and capacity plans from a trace.

Exit status: 0 on success, 1 for bad data (a malformed trace names its file and line), 2 for
bad arguments. Data goes to stdout, messages and progress to stderr.
"""

from __future__ import annotations

import argparse
import math
import csv
import io
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NoReturn

import numpy as np

from ._args import fraction_list, int_list
from ._io import Progress, check_writable, write_json
from .curve import HitCurve
from .errors import TraceFormatError, UsageError

EXAMPLES_CURVE = """examples:
  stackdist curve trace.csv                         # 50-point curve as JSON
  stackdist curve trace.jsonl --capacities 1000,2000,4096
  stackdist curve trace.npy --points 200 --window 100000: --csv
  stackdist curve trace.csv --targets 0.5,0.9 --plot curve.png --output curve.json
  stackdist curve data/traces/mooncake_conversation_trace.jsonl --format mooncake --capacities 1000,10000
"""

EXAMPLES_TIERS = """examples:
  stackdist tiers trace.csv --gpu 4096                 # CPU curve for a 4096-unit GPU tier
  stackdist tiers trace.csv --gpu 2048 --gpu 4096 --cpu 0,8192,16384
  stackdist tiers trace.jsonl --gpu 4096 --exclusive --plot tiers.png
  stackdist tiers data/traces/mooncake_conversation_trace.jsonl --format mooncake --gpu 8000 --cpu 0,20000,40000
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 2 with one clear line, no traceback
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="key[,size] trace (.csv/.tsv/.txt, .jsonl, .npy) or a request trace (see --format)")
    p.add_argument("--format", choices=["csv", "tsv", "jsonl", "npy", "mooncake", "qwen", "tokens"],
                   help="override the format guessed from the extension; mooncake/qwen/tokens replay the request "
                   "trace's block stream (head first, one unit per block)")
    p.add_argument("--window", metavar="START:STOP", help="count hits only for accesses START..STOP-1 (Python slice rules)")
    p.add_argument("--output", "-o", metavar="FILE", default="-", help="write the JSON here (atomically) instead of stdout")
    p.add_argument("--plot", metavar="PNG", help="also draw the curve(s) to this PNG (needs matplotlib)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="stackdist", description="Exact LRU hit curves for KV-cache capacity planning.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = sub.add_parser("curve", help="the exact LRU hit curve of a key[,size] trace", epilog=EXAMPLES_CURVE,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="One replay gives the exact LRU hits at every capacity (in the trace's size unit).")
    _add_common(c)
    group = c.add_mutually_exclusive_group()
    group.add_argument("--capacities", metavar="C1,C2,...", help="report exactly these capacities")
    group.add_argument("--points", type=int, default=50, help="number of evenly spread capacities (default 50)")
    c.add_argument("--targets", default="0.5,0.9,0.95,0.99", metavar="R1,R2,...",
                   help="hit rates for which to report the smallest capacity (default 0.5,0.9,0.95,0.99)")
    c.add_argument("--csv", action="store_true", help="print the sampled curve as CSV instead of JSON")
    t = sub.add_parser("tiers", help="two-tier (GPU + CPU) hits for every CPU capacity", epilog=EXAMPLES_TIERS,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Inclusive tiers (as kvlab's TwoTierCache): one replay of the GPU-miss stream per "
                       "GPU capacity gives every CPU capacity. --exclusive adds exclusive tiers from the same histogram.")
    _add_common(t)
    t.add_argument("--gpu", action="append", required=True, metavar="C", help="GPU tier capacity (repeat for several)")
    group = t.add_mutually_exclusive_group()
    group.add_argument("--cpu", metavar="C1,C2,...", help="CPU capacities to report")
    group.add_argument("--cpu-points", type=int, default=50, help="number of evenly spread CPU capacities (default 50)")
    t.add_argument("--exclusive", action="store_true", help="also report exclusive tiers (promote on hit, demote on eviction)")
    from .plan_cli import add_plan_parser

    add_plan_parser(sub)
    return parser


def _load_curve(args: argparse.Namespace) -> HitCurve:
    from .traces import REQUEST_FORMATS, read_access_trace, read_requests

    if args.format in REQUEST_FORMATS:
        keys, sizes = read_requests(args.trace, args.format).block_ids, None
    else:
        trace = read_access_trace(args.trace, args.format)
        keys, sizes = trace.keys, trace.sizes
    progress = Progress("replay")
    try:
        return HitCurve.from_trace(keys, sizes, args.window, progress=progress)
    finally:
        progress.close()


def _capacities(curve: HitCurve, listed: str | None, points: int, name: str) -> np.ndarray:
    if listed is not None:
        return np.array(int_list(listed, name), dtype=np.int64)
    if points < 2:
        raise UsageError(f"--points must be at least 2; got {points}.")
    return curve.default_capacities(points)


def run_curve(args: argparse.Namespace) -> int:
    targets = fraction_list(args.targets, "--targets")
    curve = _load_curve(args)
    caps = _capacities(curve, args.capacities, args.points, "--capacities")
    sample = curve.sample(caps)
    if args.csv:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(list(sample))
        writer.writerows(zip(*sample.values()))
        if args.output == "-":
            sys.stdout.write(buf.getvalue())
        else:
            from ._io import write_atomic

            write_atomic(args.output, buf.getvalue())
    else:
        result = {
            "trace": args.trace,
            "summary": curve.summary(),
            "min_capacity_for_hit_rate": {f"{t:g}": curve.min_capacity_for(hit_rate=t) for t in targets},
            "min_capacity_for_fraction_of_ceiling": {
                f"{t:g}": curve.min_capacity_for(hits=math.ceil(Fraction(repr(t)) * curve.ceiling_hits)) for t in targets
            },
            "curve": sample,
        }
        write_json(args.output, result)
    if args.plot:
        from .plot import plot_curves

        steps = curve.steps(below_largest=curve.summary()["distinct_sizes"] <= 64)
        x = np.r_[steps.capacities, max(int(steps.capacities[-1]) * 1.05, 1)]
        y = np.r_[steps.hits, steps.hits[-1]] / max(curve.n_accesses, 1)
        plot_curves(args.plot, [("LRU hit rate", x, y)], xlabel="capacity (trace size units)",
                    hlines=[(f"hit rate {t:g}", t) for t in targets],
                    title=f"{args.trace}: exact LRU hit curve")
    return 0


def run_tiers(args: argparse.Namespace) -> int:
    from .tiers import exclusive_grid, inclusive_grid, inclusive_tiers

    gpus = [v for text in args.gpu for v in int_list(text, "--gpu")]
    curve = _load_curve(args)
    tiers = inclusive_tiers(gpu_capacities=gpus, curve=curve)
    cpu_caps = _capacities(curve, args.cpu, args.cpu_points, "--cpu")
    grid = inclusive_grid(tiers, cpu_caps)
    result: dict[str, Any] = {"trace": args.trace, "summary": curve.summary(), "inclusive": grid}
    if args.exclusive:
        result["exclusive"] = exclusive_grid(curve, gpus, cpu_caps)
    write_json(args.output, result)
    if args.plot:
        from .plot import plot_curves

        n = max(curve.n_accesses, 1)
        series = [(f"inclusive, GPU {g}", cpu_caps, (grid["gpu_hits"][i] + grid["cpu_hits"][i]) / n) for i, g in enumerate(gpus)]
        if args.exclusive:
            ex = result["exclusive"]
            series += [(f"exclusive, GPU {g}", cpu_caps, (ex["gpu_hits"][i] + ex["cpu_hits"][i]) / n) for i, g in enumerate(gpus)]
        plot_curves(args.plot, series, xlabel="CPU tier capacity (trace size units)", ylabel="hit rate (GPU + CPU)",
                    title=f"{args.trace}: two-tier hits")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    runners = {"curve": run_curve, "tiers": run_tiers}
    try:
        for option in ("output", "json", "plot"):
            check_writable(getattr(args, option, None), f"--{option}")
        if args.command == "plan":
            from .plan_cli import run_plan

            return run_plan(args)
        return runners[args.command](args)
    except UsageError as exc:
        print(f"stackdist {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (TraceFormatError, ValueError) as exc:
        print(f"stackdist {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except OSError as exc:
        print(f"stackdist {args.command}: error: {exc.strerror and f'{exc.filename}: {exc.strerror}' or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
