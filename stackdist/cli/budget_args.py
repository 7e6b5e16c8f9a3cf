"""``stackdist plan``'s budget, hardware and TTFT flags (``--capacity``, ``--gpu``, ``--kv-dtype``...).

Parsing only: the answers are computed in :mod:`stackdist.planning.budgets` and
:mod:`stackdist.planning.hardware`.

Names are read as people write them (:mod:`.names`): GPU and model names case-insensitively, KV
dtypes by vLLM's ``--kv-cache-dtype`` names and the usual aliases. The hardware
flags apply to a ``--gpu`` deployment: given without ``--gpu`` they are a usage error naming the
flag (:func:`check_hardware_flags`), never ignored.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from typing import Any

from stackdist.errors import UsageError
from stackdist.planning.budgets import (
    BUDGET_UNITS,
    BudgetOptions,
    budget_capacity,
    hbm_budgets,
    parse_budgets,
)
from stackdist.planning.geometry import (
    KV_DTYPES,
    ModelSpec,
    catalog,
    catalog_help,
    model_spec,
    spec_from_config,
)
from stackdist.planning.hardware import (
    HardwareOptions,
    RooflineTTFT,
    calibration_rows,
    fit_calibration,
    gpu_for,
    gpu_table,
    replica_pool,
    require_fits,
    require_holds,
    tensor_parallel_problem,
    tensor_parallel_sizes,
)
from stackdist.planning.prices import AMORTISATION_YEARS, DeploymentPrices, parse_prices
from stackdist.serving.engine_model import engine_model

from .args import InputPath, fraction_arg, size_list
from .names import gpu_name, kv_dtype_name

__all__ = ["add_budget_arguments", "budget_epilog", "budget_options", "check_hardware_flags", "kv_dtype_text",
           "model_note", "resolve_spec", "with_budget_pools"]


def _gib(flag: str) -> Any:
    """GiB as a positive number (``65``), or a size with a byte unit (``65GB``, ``60GiB``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            try:
                sizes = size_list(text, flag)
            except UsageError:
                sizes = []
            value = sizes[0].amount / 2**30 if len(sizes) == 1 and sizes[0].unit == "bytes" else -1.0
        if not (0 < value < math.inf):
            raise argparse.ArgumentTypeError(f"must be a positive size: GiB (65) or with a unit (65GB, 60GiB); got {text!r}")
        return value

    parse.__name__ = "size"
    return parse


def budget_epilog() -> str:
    """The catalog and GPU table for ``--help``."""
    gpus = ", ".join(f"{g.name} ({g.hbm_mib / 1024:.1f} GiB, ${g.usd_per_gpu_hour:.2f}/GPU-hour)" for g in gpu_table().values())
    return (f"\nbundled models (--model; KV bytes per token of the full-attention layers, model dtype):\n"
            f"{catalog_help()}\n\nGPUs (--gpu; sources in stackdist/planning/data/gpus.json; the US$ per GPU-hour are "
            f"assumed on-demand prices, --gpu-price sets yours): {gpus}\n")


def _positive(flag: str, upper: float = math.inf, integer: bool = False) -> Any:
    def parse(text: str) -> float | int:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            value = -1
        if not (0 < value <= upper) or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{flag} must be a {'positive integer' if integer else 'positive number'}"
                                             f"{'' if upper == math.inf else f' up to {upper:g}'}; got {text!r}")
        return value
    return parse


def _non_negative(flag: str) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not (0 <= value < math.inf):
            raise argparse.ArgumentTypeError(f"{flag} must be a non-negative number; got {text!r}")
        return value
    return parse


def add_budget_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of budgets (sizes in GiB, tokens or blocks), model dtype, hardware and TTFT."""
    b = p.add_argument_group("budgets, hardware and TTFT (answers at the sizes you name)")
    b.add_argument("--capacity", metavar="SIZES",
                   help=f"hit rate, tokens saved and TTFT at each size; units: {BUDGET_UNITS} (e.g. 880GiB,2TiB,40000blocks,2Mtokens,"
                   "4096pages; a bare number is refused: give its unit); "
                   "bytes are KV bytes of the model; the engine models run at these sizes unless --gpu-blocks names pools")
    b.add_argument("--kv-dtype", type=kv_dtype_name, metavar="DTYPE",
                   help=f"KV-cache element type: {', '.join(KV_DTYPES)}, or vLLM's --kv-cache-dtype names and aliases "
                   "(fp8_e4m3fn, half, bf16; any case) (default auto: the model's dtype)")
    b.add_argument("--gpu", type=gpu_name, metavar="NAME",
                   help=f"GPU of each replica (any case): {', '.join(gpu_table())}; adds the KV pool vLLM would get as a budget")
    b.add_argument("--gpus-per-replica", type=_positive("--gpus-per-replica", 1024, True), default=1, metavar="N",
                   help="GPUs per replica (the tensor-parallel size; default 1)")
    b.add_argument("--gpus", type=_positive("--gpus", 2**20, True), metavar="N",
                   help="GPUs in all (replicas = N / --gpus-per-replica; default one replica)")
    b.add_argument("--gpu-price", type=_non_negative("--gpu-price"), metavar="USD_PER_HOUR",
                   help="US$ per GPU-hour of --gpu (default: the GPU table's assumed on-demand price, with its source); "
                   "prices the deployment: US$/hour = GPUs x this + CPU/SSD GiB behind it at the --prices dram/ssd "
                   f"purchase prices amortised over {AMORTISATION_YEARS} years, and US$ per million input tokens "
                   "(the trace's input tokens per hour)")
    b.add_argument("--gpu-memory-utilization", type=fraction_arg("--gpu-memory-utilization"), default=0.9, metavar="F",
                   help="vLLM's --gpu-memory-utilization, a fraction or a percentage (default 0.9 here; vLLM 0.33.0's "
                   "own default is 0.92)")
    b.add_argument("--weights", type=_gib("--weights"), metavar="SIZE",
                   help="weights per replica: GiB (65), or with a unit (65GB, 60GiB) (default: the catalog's parameters "
                   "x bytes, or its checkpoint size)")
    for flag, default, what in (("--activation-gib", 2.0, "activation peak of vLLM's profile run"),
                                ("--non-torch-gib", 0.5, "memory outside torch (NCCL, cuBLAS workspaces)"),
                                ("--cudagraph-gib", 0.5, "CUDA-graph memory vLLM reserves")):
        b.add_argument(flag, type=_non_negative(flag), default=default, metavar="GIB",
                       help=f"assumed {what} per GPU (vLLM measures it at start-up; default {default})")
    b.add_argument("--prefill-efficiency", type=fraction_arg("--prefill-efficiency"), default=0.5, metavar="F",
                   help="TTFT: fraction (or percentage) of the GPU's dense peak FLOP/s prefill reaches (default 0.5, an "
                   "assumption)")
    b.add_argument("--load-gbps", type=_positive("--load-gbps"), metavar="GB/S",
                   help="TTFT: bandwidth of loads from the tier below HBM (default: the GPU table's host link)")
    b.add_argument("--ttft-overhead-ms", type=_non_negative("--ttft-overhead-ms"), default=0.0, metavar="MS",
                   help="TTFT: fixed time added per request (default 0)")
    b.add_argument("--ttft-calibration", type=InputPath, metavar="FILE.jsonl",
                   help="TTFT: fit a + b x uncached tokens + c x loaded tokens to a measured file (e.g. data/ttft.jsonl) "
                   "instead of the FLOP model")


def resolve_spec(args: argparse.Namespace) -> ModelSpec:
    """The model (catalog name, config.json or the default) with ``--kv-dtype`` applied."""
    kv = getattr(args, "kv_dtype", None)
    if getattr(args, "model_config", None):
        return spec_from_config(args.model_config, kv_dtype=kv)
    if getattr(args, "model", None):
        return model_spec(args.model, kv)
    return model_spec("qwen2.5-1.5b", kv) if kv else catalog()["qwen2.5-1.5b"]


def _read_calibration(path: str) -> Any:
    from stackdist.traces.side_inputs import read_json_lines

    records = read_json_lines(path, "--ttft-calibration")
    return fit_calibration(calibration_rows(records, f"--ttft-calibration {path}"), f"--ttft-calibration {path}")


_HARDWARE_FLAGS = ("--gpus-per-replica", "--gpus", "--gpu-memory-utilization", "--weights",
                   "--activation-gib", "--non-torch-gib", "--cudagraph-gib", "--prefill-efficiency", "--load-gbps",
                   "--ttft-overhead-ms", "--max-replicas", "--ttft-target")


def check_hardware_flags(args: argparse.Namespace, defaults: dict[str, Any], spec: ModelSpec) -> None:
    """Without ``--gpu`` no hardware flag applies: one given (not at its default) is a usage error
    naming it; ``--gpus-per-replica`` is first checked against the model's heads as vLLM would
    (:func:`~stackdist.planning.hardware.tensor_parallel_problem`). O(flags)."""
    tp = getattr(args, "gpus_per_replica", 1)
    problem = tensor_parallel_problem(spec, tp)
    if problem:  # a wrong argument for this model (exit 2), with or without --gpu
        raise UsageError(f"--gpus-per-replica {tp}: vLLM cannot shard {spec.name} over {tp} GPUs: {problem}; "
                         f"allowed for this model: {', '.join(map(str, tensor_parallel_sizes(spec)))}.")
    if getattr(args, "gpu", None):
        return
    for flag in _HARDWARE_FLAGS:
        dest = flag[2:].replace("-", "_")
        if hasattr(args, dest) and getattr(args, dest) != defaults.get(dest):
            raise UsageError(f"{flag} describes the --gpu deployment: add --gpu NAME ({', '.join(gpu_table())}), or "
                             "drop it.")


def budget_options(args: argparse.Namespace, spec: ModelSpec) -> BudgetOptions | None:
    """The budget answers asked for, or None when no budget flag is given."""
    if getattr(args, "gpu_price", None) is not None and not args.gpu:
        raise UsageError("--gpu-price prices the GPUs of --gpu: give --gpu too.")
    if not (args.capacity or args.gpu or args.ttft_calibration):
        return None
    if {"chunked", "mamba"} & set(spec.geometry.layer_kinds) and args.capacity:
        raise UsageError(f"--capacity sizes the KV cache of full-attention and sliding-window layers only; "
                         f"{spec.name} has chunked-local or Mamba layers: give vLLM's pool as --gpu-blocks N "
                         "(num_gpu_blocks) with --semantics vllm, or the GPUs as --gpu.")
    budgets = parse_budgets(args.capacity, "--capacity", max(args.engine_block_size, 1)) if args.capacity else ()
    hardware = None
    prices: DeploymentPrices | None = None
    if args.gpu:
        if args.gpus is not None and args.gpus % args.gpus_per_replica:
            raise UsageError(f"--gpus ({args.gpus}) must be a multiple of --gpus-per-replica ({args.gpus_per_replica}).")
        block = getattr(args, "engine_block_size_given", None) or spec.geometry.vllm_block_size or 16  # vLLM's block
        alignment = getattr(args, "gdn_checkpoint_alignment", None)
        hardware = HardwareOptions(args.gpu, args.gpus_per_replica, args.gpus, args.gpu_memory_utilization, args.weights,
                                   args.activation_gib, args.non_torch_gib, args.cudagraph_gib, block,
                                   64 if alignment is None else alignment)
        if args.weights is not None:
            spec = dataclasses.replace(spec, weights_bytes=args.weights * 2**30, weights_source="--weights")
        prices = _deployment_prices(args)
        require_fits(spec, hardware)  # weights that leave no room for the KV cache: exit 1 before reading the trace
    ttft: Any = None
    notes = []
    if args.ttft_calibration:
        ttft = _read_calibration(args.ttft_calibration)
    elif args.gpu and spec.active is not None and spec.weights_bytes is not None and spec.attention_flops_per_pair:
        ttft = RooflineTTFT(spec, gpu_for(args.gpu), args.gpus_per_replica, args.prefill_efficiency, args.load_gbps,
                            args.ttft_overhead_ms)
    else:
        notes.append("no TTFT estimate: it needs --gpu and a model with a parameter count, or --ttft-calibration")
    return BudgetOptions(budgets, spec, hardware, ttft, args.engine_block_size, notes, prices)


def _deployment_prices(args: argparse.Namespace) -> DeploymentPrices:
    """The GPU's price per hour (``--gpu-price`` or the table's, with its source) and ``--prices``."""
    gpu = gpu_for(args.gpu)
    given = getattr(args, "gpu_price", None)
    price, source = (gpu.usd_per_gpu_hour, gpu.source["usd_per_gpu_hour"]) if given is None else (given, "given: --gpu-price")
    prices = parse_prices(args.prices) if getattr(args, "prices", None) is not None else None
    return DeploymentPrices(gpu.name, price, source, prices)


def with_budget_pools(options: Any, trace: Any) -> Any:
    """The engine models also run at the budgets' pools (unless ``--gpu-blocks`` names them).

    First, before any replay: a ``--gpu`` replica whose pool cannot hold the trace's longest
    prompt is refused (:func:`~stackdist.planning.hardware.require_holds`, exit 1)."""
    budgets, engine = options.budgets, options.engine
    if budgets is not None and engine.kv_groups:  # the hybrid engine models' own pools of a byte budget
        vllm_hybrid = any(engine_model(m).supports_hybrid_groups and not engine_model(m).separate_swa_pool
                          for m in engine.models)
        sglang_swa = any(engine_model(m).supports_hybrid_groups and engine_model(m).separate_swa_pool
                         for m in engine.models)
        budgets = dataclasses.replace(budgets, hybrid_block_bytes=engine.kv_block_bytes if vllm_hybrid else 0,
                                      swa_full_tokens_ratio=engine.swa_full_tokens_ratio if sglang_swa else None)
        options = dataclasses.replace(options, budgets=budgets)
    if budgets is not None and budgets.hardware is not None and budgets.spec is not None and trace.n_requests:
        i = int(trace.input_length.argmax())
        require_holds(budgets.spec, budgets.hardware, int(trace.input_length[i]),
                      f"the trace's longest prompt (request {i + 1})")
    if budgets is None or not engine.models or engine.pools:
        return options
    sizes = list(budgets.budgets)
    if budgets.hardware is not None and budgets.spec is not None:
        pool = replica_pool(budgets.spec, budgets.hardware)
        sizes += hbm_budgets(pool, options.geometry, budgets)
    longest = int(trace.input_length.max(initial=0) + trace.output_length.max(initial=0))
    pools: set[int] = set()
    for budget in sizes:
        cap = budget_capacity(budget, trace.block_size, options.geometry, longest, engine.engine_block_size,
                              budgets.hybrid_block_bytes, budgets.swa_full_tokens_ratio)
        for model in map(engine_model, engine.models):  # a pool that holds no page (or under 2 units) is not run
            if cap[model.budget_key] >= max(model.min_pool, 2):
                pools.add(cap[model.budget_key])
    if not pools:
        return options
    return dataclasses.replace(options, engine=dataclasses.replace(engine, pools=tuple(sorted(pools)) + (None,)))


def kv_dtype_text(args: argparse.Namespace, spec: ModelSpec) -> str:
    """The KV element type as the user reads it: ``--kv-dtype`` when given, else the model's
    own, by its bytes per element (``model default, 2 B/element``), for titles and labels. O(1)."""
    given = getattr(args, "kv_dtype", None)
    if given and given != "auto":
        return f"{given}, {spec.geometry.dtype_bytes} B/element"
    return f"model default, {spec.geometry.dtype_bytes} B/element"


def model_note(command: str, args: argparse.Namespace, spec: ModelSpec) -> None:
    """One line on stderr when the KV bytes come from the default model because no ``--model``
    (or ``--model-config``) was given: the answers in bytes depend on it. O(1)."""
    if getattr(args, "model", None) or getattr(args, "model_config", None):
        return
    print(f"stackdist {command}: note: no --model given: KV bytes are {spec.name}'s "
          f"({int(spec.geometry.kv_bytes_per_token):,} B/token, {kv_dtype_text(args, spec)}); give --model or "
          "--model-config for yours", file=sys.stderr)
