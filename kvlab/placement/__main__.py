"""Command line: ``python -m kvlab.placement {experiments,simulate,generate,calibration} ...``.

Exit status (:mod:`stackdist.errors`, as every command of the project): 0 on success,
:data:`~stackdist.errors.EXIT_USAGE` (2) for a bad argument
(:class:`~stackdist.errors.UsageError`, including a missing matplotlib),
:data:`~stackdist.errors.EXIT_DATA` (1) for a data error (missing or malformed trace / fixture
file, an unwritable output). Results go to stdout (or files), progress to stderr.

``simulate`` and ``experiments`` with ``--model NAME|--model-config FILE --gpu NAME`` serve that model on that GPU: KV bytes per
block from the model (migration bytes, transfer times), the HBM tier bounded by the GPU's KV pool,
and the latency model measured for Qwen2.5-1.5B on an H200 scaled to them
(:mod:`~kvlab.placement.served`; an extrapolation, said on stderr and in ``served``). Without
``--model`` one line on stderr says the measured 1.5B is used.

``generate KIND --out trace.jsonl`` writes a seeded generated workload as a Mooncake JSONL
trace, which ``stackdist plan trace.jsonl --block-size 16`` plans (see
:meth:`~kvlab.placement.workloads.Workload.to_request_trace`).
"""

from __future__ import annotations

import sys

from stackdist.errors import EXIT_OK, UsageError, install_interrupt_handler, started_as

if started_as("__main__.py"):  # python -m kvlab.placement: Ctrl-C during the imports is one line, exit 130
    install_interrupt_handler("kvlab.placement", guarded=False)

import argparse
import json
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..scenario import int_argument

if TYPE_CHECKING:
    from .served import Served
    from .workloads import Workload

#: Tokens per hash_id of a Mooncake trace (``--block-size``'s default).
MOONCAKE_BLOCK = 512
#: The largest count a generator parameter may take on the command line (n_sessions, accesses_per_session, ...).
MAX_COUNT = 10**8
COUNT_PARAMS = ("n_sessions", "accesses_per_session", "n_agents", "steps_per_agent", "n_docs", "n_questions")

EPILOG = """examples:
  python -m kvlab.placement experiments --out results/placement
  python -m kvlab.placement experiments --quick --out /tmp/placement --no-plots
  python -m kvlab.placement experiments --out results/placement \\
      --mooncake data/traces/mooncake_conversation_trace.jsonl
  python -m kvlab.placement simulate --workload chat --policy lfu --capacities 424,3392,27136
  python -m kvlab.placement simulate --workload chat --model Qwen/Qwen3-8B --gpu h100   # extrapolated TTFT
  python -m kvlab.placement simulate --workload docqa --param n_docs=8 --prefetch oracle --lookahead 1
  python -m kvlab.placement simulate --workload mooncake:data/traces/mooncake_synthetic_trace.jsonl
  python -m kvlab.placement generate chat --out /tmp/chat.jsonl --seed 1
  stackdist plan /tmp/chat.jsonl --block-size 16
  python -m kvlab.placement calibration
"""


def _capacities(text: str) -> tuple[int, ...]:
    try:
        caps = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--capacities must be 1 to 3 comma-separated non-negative ints (HBM,DRAM,SSD blocks), got {text!r}."
        ) from None
    if not 1 <= len(caps) <= 3 or any(not 0 <= c <= 2**63 - 1 for c in caps):
        raise argparse.ArgumentTypeError(
            f"--capacities must be 1 to 3 comma-separated non-negative ints (HBM,DRAM,SSD blocks), got {text!r}."
        )
    return caps


def _param(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--param must look like name=value, got {text!r}.")
    name, value = text.split("=", 1)
    try:
        parsed: Any = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return name.strip(), parsed


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used by the tests)."""
    from stackdist.version import __version__

    parser = argparse.ArgumentParser(
        prog="python -m kvlab.placement",
        description="Three-tier (HBM/DRAM/SSD) KV-cache placement simulator.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    version = f"kvlab.placement (stackdist) {__version__}"
    parser.add_argument("--version", action="version", version=version)
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("experiments", help="rerun the paper's grid; write results.json and PNG figures",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    exp.add_argument("--version", action="version", version=version)
    exp.add_argument("--out", required=True, type=_out_folder, help="output directory (created if missing)")
    exp.add_argument("--quick", action="store_true", help="tiny workloads (seconds; used by the tests)")
    exp.add_argument("--mooncake", action="append", default=[], metavar="PATH", help="also replay this Mooncake trace")
    exp.add_argument("--gpu-sessions", type=_finite(-float("inf")), default=1.0,
                     help="HBM capacity in mean session footprints (default 1.0); DRAM 8x, SSD 64x")
    exp.add_argument("--slo-ms", type=_finite(0.0), default=40.0, help="TTFT p99 SLO for the SLO sweeps (default 40)")
    exp.add_argument("--sweep-steps", type=int_argument(1, 1000), default=None, help="composition sweep grid steps (default 8, quick 3)")
    exp.add_argument("--sweep-fraction", type=_finite(0.0), default=0.5,
                     help="composition sweep budget as a fraction of the chat workload's distinct blocks (default 0.5)")
    exp.add_argument("--seed", type=int_argument(0), default=0)
    exp.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    _add_served_arguments(exp)
    _add_simulate_parser(sub, version)
    gen = sub.add_parser("generate", help="write a generated workload as a Mooncake JSONL trace (for stackdist plan)",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    gen.add_argument("--version", action="version", version=version)
    gen.add_argument("kind", choices=["chat", "agent", "docqa"], help="the generator")
    gen.add_argument("--out", required=True, metavar="TRACE.jsonl", help="trace file to write (atomically)")
    gen.add_argument("--param", action="append", type=_param, default=[], metavar="NAME=VALUE",
                     help="generator parameter, e.g. n_sessions=12 (repeatable)")
    gen.add_argument("--seed", type=int_argument(0), default=0, help="the generator's seed (default 0)")
    cal = sub.add_parser("calibration", help="print the latency defaults next to the values derived from the fixtures")
    cal.add_argument("--version", action="version", version=version)
    cal.add_argument("--fixtures", default=None, metavar="DIR", help="fixture folder (default: the fixtures shipped with kvlab)")
    return parser


def _add_simulate_parser(sub: Any, version: str) -> None:
    from .policies import POLICIES
    from .simulator import MODES, PREFETCHERS

    sim = sub.add_parser("simulate", help="one simulation; prints a JSON summary to stdout",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sim.add_argument("--version", action="version", version=version)
    sim.add_argument("--workload", default="chat", help="chat, agent, docqa or mooncake:PATH (default chat)")
    sim.add_argument("--param", action="append", type=_param, default=[], metavar="NAME=VALUE",
                     help="generator parameter, e.g. n_sessions=12 (repeatable)")
    sim.add_argument("--capacities", type=_capacities, default=None,
                     help="HBM,DRAM,SSD capacities in blocks (default: 1:8:64 with HBM = one session footprint)")
    sim.add_argument("--policy", choices=sorted(POLICIES), default="lru")
    sim.add_argument("--organisation", choices=["exclusive", "inclusive"], default="exclusive")
    sim.add_argument("--mode", choices=MODES, default="prefix")
    sim.add_argument("--prefetch", choices=PREFETCHERS, default="none")
    sim.add_argument("--lookahead", type=int_argument(0, 1_000_000), default=2)
    sim.add_argument("--block-size", type=int_argument(1, 2**31), default=None,
                     help=f"tokens per hash_id of a mooncake:PATH trace (default {MOONCAKE_BLOCK})")
    sim.add_argument("--reblock", type=int_argument(1, 2**31), default=None,
                     help="re-block a mooncake:PATH trace to this many tokens per block (a divisor of --block-size)")
    sim.add_argument("--hf-eager", action="store_true", help="add HF-eager host overhead to the latency model")
    _add_served_arguments(sim)


def _add_served_arguments(parser: argparse.ArgumentParser) -> None:
    """--model / --model-config and --gpu (simulate and experiments)."""
    from stackdist.planning.hardware import gpu_table

    model = parser.add_mutually_exclusive_group()
    model.add_argument("--model", metavar="NAME",
                       help="the served model: a bundled model or its Hugging Face repo id, any case (as stackdist plan "
                       "--model); sets the KV bytes per block (migration bytes, transfer times) and scales prefill and "
                       "decode times (default qwen2.5-1.5b, the measured model)")
    model.add_argument("--model-config", metavar="FILE",
                       help="the served model's Hugging Face config.json instead of --model")
    parser.add_argument("--gpu", type=str.lower, choices=list(gpu_table()), metavar="NAME",
                        help=f"the GPU: {', '.join(gpu_table())}; its FLOP/s and HBM and host-link bandwidths scale the "
                        "latency model, its HBM bounds the HBM tier (default h200, the measured GPU)")


def _generated(kind: str, params: dict[str, Any]) -> Workload:
    """``GENERATORS[kind](**params)``; UsageError naming ``--param`` for a bad parameter."""
    from .workloads import GENERATORS

    for name, value in params.items():  # counts of what the generator makes one by one
        if name in COUNT_PARAMS and isinstance(value, (int, float)) and value > MAX_COUNT:
            raise UsageError(f"--param {name} must be at most {MAX_COUNT:,} (the generator makes every request); "
                             f"got {value!r}.")
    try:
        return GENERATORS[kind](**params)
    except TypeError as exc:
        raise UsageError(f"--param: {exc}.") from None
    except ValueError as exc:
        raise UsageError(f"--param: {exc}") from None


def _load_workload(args: argparse.Namespace) -> Workload:
    from .workloads import GENERATORS, from_mooncake

    params = dict(args.param)
    if args.workload.startswith("mooncake:"):
        if params:
            raise UsageError("--param applies to the generators (chat, agent, docqa), not to mooncake:PATH.")
        block = args.block_size or MOONCAKE_BLOCK
        if args.reblock is not None and block % args.reblock:
            small = [d for d in range(1, math.isqrt(block) + 1) if block % d == 0]  # O(sqrt(block))
            divisors = sorted({*small, *(block // d for d in small)})
            shown = ", ".join(map(str, divisors)) if len(divisors) <= 24 else f"{', '.join(map(str, divisors[:23]))}, ..."
            raise UsageError(f"--reblock must divide the trace's block size ({block} tokens, --block-size), so that "
                             f"each block splits into whole blocks: one of {shown}; got {args.reblock}.")
        return from_mooncake(args.workload.split(":", 1)[1], block_size=block, reblock=args.reblock)
    if args.workload not in GENERATORS:
        raise UsageError(f"--workload must be one of chat, agent, docqa or mooncake:PATH; got {args.workload!r}.")
    for flag, value in (("--block-size", args.block_size), ("--reblock", args.reblock)):
        if value is not None:
            raise UsageError(f"{flag} applies to a mooncake:PATH trace; the generators make 16-token blocks "
                             "(set block_tokens with --param block_tokens=N).")
    return _generated(args.workload, params)


def _served(args: argparse.Namespace) -> Served:
    """The served model and GPU; a --model-config file that cannot be used is a data error (exit 1)."""
    from .served import Served

    if args.model_config is None:
        return Served.of(args.model, args.gpu)
    path = args.model_config
    if not os.path.isfile(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"--model-config {path}: no such file (a model's Hugging Face config.json)")
    try:
        return Served.of(path, args.gpu)
    except UsageError as exc:
        hint = str(exc).replace("pass dtype= to choose one", 'add "torch_dtype" (e.g. "bfloat16") to the config')
        raise ValueError(f"--model-config {path}: {hint}") from None


def _check_hbm(served: Served, caps: tuple[int, ...], workload: Workload, given: bool) -> None:
    """UsageError naming --capacities when the HBM tier holds more than the GPU's KV pool."""
    most = served.max_hbm_blocks(workload.block_tokens)
    if caps[0] > most:
        pool = served.pool
        what = "--capacities" if given else "the default HBM tier (one session footprint)"
        raise UsageError(
            f"{what}: an HBM tier of {caps[0]:,} blocks of {workload.block_tokens} tokens does not fit one "
            f"{served.gpu.name} serving {served.spec.name}: its KV pool holds {pool['kv_tokens']:,} tokens = {most:,} "
            f"blocks ({pool['available_kv_gib_per_gpu']:.1f} GiB after {pool['weights_gib_per_gpu']:.1f} GiB of weights, "
            f"vLLM's pool at gpu_memory_utilization {pool['gpu_memory_utilization']:g}); give "
            f"{'at most' if given else '--capacities with an HBM tier of at most'} {most:,} blocks, or another --gpu "
            "or --model.")


def _simulate(args: argparse.Namespace) -> int:
    from .calibration import LatencyModel
    from .experiments import capacities_for
    from .simulator import SimConfig, simulate

    served = _served(args)
    workload = _load_workload(args)
    caps = args.capacities or capacities_for(workload, 1.0)
    _check_hbm(served, caps, workload, args.capacities is not None)
    latency = served.latency(LatencyModel.hf_eager() if args.hf_eager else LatencyModel())
    try:
        config = SimConfig(capacities=caps, policy=args.policy, organisation=args.organisation, mode=args.mode,
                           prefetch=args.prefetch, lookahead=args.lookahead, latency=latency,
                           bytes_per_token=served.kv_bytes_per_token)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    note = served.note()
    if note:
        print(f"kvlab.placement simulate: note: {note}", file=sys.stderr)
    print(f"simulating {workload.name}: {workload.n_requests} requests, {workload.n_accesses} block accesses",
          file=sys.stderr)
    from stackdist.output import tool_header

    summary = {**tool_header("placement-simulate"), **simulate(workload, config).to_dict()}
    summary["served"] = {**served.describe(), "hbm_tier_max_blocks": served.max_hbm_blocks(workload.block_tokens)}
    summary["latency_model"] = latency.to_dict()
    summary["workload_summary"] = workload.summary()
    json.dump(summary, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    return EXIT_OK


def _generate(args: argparse.Namespace) -> int:
    from .workloads import write_mooncake

    params = dict(args.param)
    if "seed" in params:
        raise UsageError("--param seed=...: give the seed as --seed.")
    workload = _generated(args.kind, dict(params, seed=args.seed))
    write_mooncake(args.out, workload.to_request_trace())
    print(f"wrote {args.out}: {workload.name}, {workload.n_requests} requests, {workload.n_accesses} block accesses "
          f"of {workload.block_tokens} tokens; plan it with: stackdist plan {args.out} --block-size {workload.block_tokens}",
          file=sys.stderr)
    return EXIT_OK


def _calibration(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .calibration import DEFAULT_FIXTURES, LatencyModel, derive_from_fixtures

    folder = Path(args.fixtures or DEFAULT_FIXTURES)
    holding = "the folder holding gpu_busy_h200.json, tier_latency_h200.json and partial_prefix_h200.json"
    if folder.exists() and not folder.is_dir():  # the wrong kind of argument (exit 2)
        raise UsageError(f"--fixtures must be {holding}; {folder} is a file.")
    if not folder.exists():  # a missing input: a data error (exit 1), as everywhere
        raise ValueError(f"--fixtures {folder}: no such folder; it must be {holding}.")
    derived = derive_from_fixtures(folder)
    hardware, hf = LatencyModel(), LatencyModel.hf_eager()
    rows = []
    for name, value in derived.items():
        default = getattr(hf if name in ("host_floor_ms", "launch_overhead_ms", "cached_prefix_penalty_ms") else hardware, name)
        rows.append({"field": name, "default": default, "derived": value})
    from stackdist.output import tool_header

    json.dump({**tool_header("placement-calibration"), "fields": rows}, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return EXIT_OK


def _experiments(args: argparse.Namespace) -> int:
    from .experiments import run_experiments

    if args.gpu_sessions <= 0:
        raise UsageError(f"--gpu-sessions must be positive, got {args.gpu_sessions}.")
    if not args.sweep_fraction > 0:
        raise UsageError(f"--sweep-fraction must be positive, got {args.sweep_fraction}.")
    if args.sweep_steps is not None and args.sweep_steps < 1:
        raise UsageError(f"--sweep-steps must be a positive int, got {args.sweep_steps}.")
    served = _served(args)
    note = served.note()
    if note:
        print(f"kvlab.placement experiments: note: {note}", file=sys.stderr)
    run_experiments(args.out, quick=args.quick, mooncake=args.mooncake, gpu_sessions=args.gpu_sessions,
                    slo_ms=args.slo_ms, sweep_steps=args.sweep_steps, seed=args.seed,
                    sweep_fraction=args.sweep_fraction, plots=not args.no_plots, served=served)
    return EXIT_OK


_COMMANDS = {"experiments": _experiments, "simulate": _simulate, "generate": _generate, "calibration": _calibration}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (:mod:`stackdist.errors`: 0, 1 data, 2 usage, 130
    Ctrl-C, 141 broken pipe), through the one wrapper :func:`stackdist.guard.run_guarded`."""
    from stackdist.guard import run_guarded

    restore = None
    try:  # the handler is installed inside the try: a Ctrl-C right after it is caught below
        try:
            restore = install_interrupt_handler("kvlab.placement")
            args = build_parser().parse_args(argv)
            outputs = [("--out", args.out)] if args.command == "generate" else []  # a file: checked before any work
            return run_guarded(f"kvlab.placement {args.command}", lambda: _COMMANDS[args.command](args), outputs)
        finally:  # a Ctrl-C deferred out of numba's compiler may be taken here, while the handler is put back
            if restore is not None:
                restore()
    except KeyboardInterrupt:
        print("kvlab.placement: interrupted", file=sys.stderr)
        return 130


def _out_folder(text: str) -> str:
    """argparse ``type`` for --out (a folder): non-empty, not an existing file, not under a file."""
    from pathlib import Path

    if not text.strip():
        raise argparse.ArgumentTypeError("must be a folder path, got an empty string")
    path = Path(text)
    for parent in (path, *path.parents):
        if parent.exists() and not parent.is_dir():
            what = "is a file" if parent == path else f"is under the file {parent}"
            raise argparse.ArgumentTypeError(f"must be a folder; {text!r} {what}")
    return text


def _finite(lo: float, lo_open: bool = True) -> Any:
    """argparse ``type`` for a finite number above ``lo`` (at least ``lo`` when not ``lo_open``)."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if value != value or value in (float("inf"), float("-inf")) or (value <= lo if lo_open else value < lo):  # noqa: PLR0124 - NaN
            raise argparse.ArgumentTypeError(f"must be a finite number {'>' if lo_open else '>='} {lo:g}, got {text!r}")
        return value

    convert.__name__ = "number"
    return convert


if __name__ == "__main__":
    sys.exit(main())
