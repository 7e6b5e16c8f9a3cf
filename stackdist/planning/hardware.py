"""GPUs, the KV pool one replica gets (as vLLM 0.33.0 computes it), and TTFT estimates.

**The KV pool.**

vLLM's own formula (file:line in the vllm-0.33.0 wheel):

1. ``requested = ceil(total_memory * gpu_memory_utilization)`` per GPU
   (``vllm/v1/worker/utils.py:724``; the default utilization is 0.92 in
   ``vllm/config/cache.py:215``; this planner's default is 0.9, set ``--gpu-memory-utilization``);
2. ``available_kv = requested - non_kv_cache_memory - cudagraph_estimate``
   (``vllm/v1/worker/gpu_worker.py:753-757``), where ``non_kv_cache_memory`` is the weights plus
   the profiled activation peak plus memory outside torch (NCCL, cuBLAS workspaces)
   (``vllm/utils/mem_utils.py:312-321``) and the CUDA-graph estimate is on by default
   (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``, ``vllm/envs.py:2219``). The activation peak,
   the non-torch memory and the CUDA-graph memory are measured by vLLM at start-up and cannot be
   read from a config: here they are settable assumptions (``--activation-gib``,
   ``--non-torch-gib``, ``--cudagraph-gib``);
3. a layer's page is ``block_size x heads x (head_size + head_size_v) x dtype bytes``
   (``vllm/v1/kv_cache_interface.py:584-594``; MLA has ``head_size_v = 0`` and one head,
   ``:743`` and ``vllm/config/model.py:1673-1675``; other models ``max(1, kv_heads // TP)`` heads
   per GPU, ``vllm/config/model.py:1683``);
4. layers are grouped (``vllm/v1/core/kv_cache_planning.py:481-557``: one group of all layers for
   a full-attention model; hybrid models get equal-sized groups per attention type, group size
   = the smallest type's layer count, or the largest when it is under 1.5x the smallest) and a
   block costs the largest group's pages (``kv_cache_planning.py:574-605``);
5. ``num_gpu_blocks = available_kv // bytes_per_block`` (``kv_cache_planning.py:681``), of which
   block 0 is the null block (``vllm/v1/core/block_pool.py:191``).

Also assumed: the weights split evenly over the replica's GPUs (tensor parallelism; replicated
embeddings and expert parallelism not modelled).

**Deployments that cannot run are refused** (never a pool of 0 blocks with exit 0):

- a tensor-parallel size vLLM 0.33.0 refuses (:func:`tensor_parallel_problem`; a usage error
  naming the flag and the allowed sizes, exit 2);
- weights (plus the assumed start-up memory) that leave no room for the KV cache
  (:func:`require_fits`; vLLM refuses to start, "No available memory for the cache blocks",
  ``vllm/v1/core/kv_cache_planning.py:56-63``): :class:`~stackdist.errors.DeploymentError`
  (exit 1) naming the model, GPUs, weights per GPU and what would fit;
- a pool that cannot hold the trace's longest prompt (:func:`require_holds`; vLLM refuses to
  start when the pool cannot hold one request of ``max_model_len`` tokens,
  ``kv_cache_planning.py:68-87``): :class:`~stackdist.errors.DeploymentError` (exit 1).

**TTFT estimates**: the prefill of the uncached tokens plus the load of hits from lower tiers.

An **estimate**, labelled as one everywhere: one request at a time (no queueing, batching or
chunked prefill), no scheduling, tokenisation or network time. Two models:

- ``roofline``: the prefill of a request with ``h`` cached tokens and ``u`` uncached ones
  (``u >= 1``: on a full hit vLLM still computes the last token) takes
  ``max(FLOPs / (TP x peak x efficiency), weight bytes / (TP x HBM bandwidth))``, with
  ``FLOPs = 2 x active params x u + attention``, attention = per layer
  ``attention_flops_per_pair x pairs``: a full layer's ``u`` new tokens see ``h + 1 .. h + u``
  keys (``u x h + u (u + 1) / 2`` pairs), a sliding layer's at most its window; plus
  ``loaded tokens x KV bytes per token / link bandwidth`` for hits from a lower tier, plus a
  fixed overhead (default 0). Peak FLOP/s: the GPU's dense fp8 peak when the weights are
  stored in one byte or less and the GPU has fp8, else dense bf16.
- ``calibrated``: ``a + b x uncached tokens + c x loaded tokens`` (ms), least squares over a
  measured TTFT file (:func:`fit_calibration`); it describes the model, GPU and software that
  were measured (e.g. ``data/ttft.jsonl``: Qwen2.5-1.5B shapes in HF eager on one H200) and is
  applied as is, not rescaled to the plan's model.

Quantiles: numpy's default (linear) interpolation over the counted requests.

>>> m = CalibratedTTFT(a_ms=20.0, b_ms_per_token=0.01, c_ms_per_token=0.001)
>>> m.estimate_s(np.array([1000]), np.array([0]), np.array([0])).round(4).tolist()
[0.03]

>>> from stackdist.planning.geometry import model_spec
>>> pool = replica_pool(model_spec("qwen3-8b"), HardwareOptions("h200"))
>>> pool["num_gpu_blocks"], pool["kv_tokens"]
(49191, 787040)
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from stackdist.errors import DeploymentError, UsageError
from stackdist.serving.vllm import VLLM

from .geometry import ModelGeometry, ModelSpec

__all__ = [
    "GIB",
    "GPU",
    "CalibratedTTFT",
    "HardwareOptions",
    "RooflineTTFT",
    "calibration_rows",
    "fit_calibration",
    "gpu_for",
    "gpu_table",
    "replica_pool",
    "require_fits",
    "require_holds",
    "sliding_pairs",
    "tensor_parallel_problem",
    "tensor_parallel_sizes",
    "ttft_summary",
    "vllm_groups",
    "vllm_layout",
]

GIB = 2**30


@dataclass(frozen=True)
class GPU:
    """One GPU's numbers (see ``data/gpus.json`` for each one's source)."""

    name: str
    hbm_mib: int
    hbm_gbps: float
    bf16_tflops: float
    fp8_tflops: float | None
    host_link_gbps: float
    usd_per_gpu_hour: float  # an assumed on-demand rental price (its source beside the others)
    source: dict[str, str]

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_mib * 2**20


@lru_cache(maxsize=1)
def gpu_table() -> dict[str, GPU]:
    """The bundled GPUs by name."""
    data = json.loads(resources.files("stackdist.planning").joinpath("data/gpus.json").read_text(encoding="utf-8"))
    return {name: GPU(name, **fields) for name, fields in data["gpus"].items()}


def gpu_for(name: str) -> GPU:
    """A bundled GPU by name (case-insensitive); UsageError naming ``--gpu`` and the choices."""
    table = gpu_table()
    key = name.strip().lower()
    if key not in table:
        raise UsageError(f"--gpu must be one of {', '.join(table)}; got {name!r}")
    return table[key]


@dataclass(frozen=True)
class HardwareOptions:
    """A replica: the GPU, how many per replica (tensor parallel), how many in all, vLLM's
    memory settings and the start-up costs vLLM measures (assumed here, per GPU, GiB)."""

    gpu: str
    gpus_per_replica: int = 1
    gpus: int | None = None
    gpu_memory_utilization: float = 0.9
    weights_gib: float | None = None
    activation_gib: float = 2.0
    non_torch_gib: float = 0.5
    cudagraph_gib: float = 0.5
    block_size: int = 16
    """vLLM's block size, its ``cache_config.block_size`` (raised for a Mamba hybrid, :func:`vllm_layout`)."""
    checkpoint_alignment: int = 64
    """A Mamba hybrid's GDN checkpoint grid (:func:`~stackdist.serving.hybrid.mamba_attention_block_size`)."""

    @property
    def replicas(self) -> int:
        return max(1, (self.gpus or self.gpus_per_replica) // self.gpus_per_replica)


def vllm_groups(geometry: ModelGeometry) -> tuple[int, int, int]:
    """(layers per group, full-attention groups, sliding-window groups) as vLLM groups layers
    (``kv_cache_planning.py:481-557``); :func:`vllm_layout` has every kind.

    >>> from stackdist.planning.geometry import model_spec
    >>> vllm_groups(model_spec("gemma-3-27b").geometry), vllm_groups(model_spec("gpt-oss-120b").geometry)
    ((10, 1, 6), (18, 1, 1))
    """
    layout = vllm_layout(geometry)
    return layout["layers_per_group"], layout["groups"].get("full", 0), layout["groups"].get("sliding", 0)


def _kinds(geometry: ModelGeometry) -> tuple[str, ...]:
    """Per-layer kinds (sliding layers first when only their count is known: order sets only the
    groups' order, not their sizes)."""
    if geometry.layer_kinds:
        return geometry.layer_kinds
    return ("sliding",) * geometry.num_sliding_layers + ("full",) * geometry.num_full_layers


def vllm_layout(geometry: ModelGeometry, tp: int = 1, block_size: int = 16, checkpoint_alignment: int = 64) -> dict[str, Any]:
    """vLLM 0.33.0's KV cache groups of a model on one GPU of a tensor-parallel replica: layers per
    group, groups per kind, the block (raised for a Mamba hybrid until an attention page holds a
    Mamba state page, with the state and the attention heads split over the ``tp`` GPUs as
    vLLM splits them: ``mamba_utils.py:272`` divides the conv and temporal state by the TP size,
    ``config/model.py:1683`` the KV heads) and the bytes of one block per GPU (one group's layers;
    a Mamba state is padded to that page). O(layers).

    >>> from stackdist.planning.geometry import model_spec
    >>> g = model_spec("qwen3-next-80b-a3b").geometry
    >>> [(vllm_layout(g, tp)["block_size_tokens"], vllm_layout(g, tp)["groups"]) for tp in (1, 2, 4)]
    [(576, {'mamba': 3, 'full': 1}), (576, {'mamba': 3, 'full': 1}), (320, {'mamba': 3, 'full': 1})]
    """
    from stackdist.serving.hybrid import layers_per_group, mamba_attention_block_size

    kinds = _kinds(geometry)
    size = layers_per_group(kinds) if len(set(kinds)) > 1 else len(kinds)
    groups = {k: math.ceil(kinds.count(k) / size) for k in dict.fromkeys(kinds)}
    token_page = _page_bytes(geometry, tp, 1)
    block = block_size
    if "mamba" in groups and block_size % 16 == 0:
        block = mamba_attention_block_size(-(-geometry.mamba_state_bytes // tp), token_page, block_size, checkpoint_alignment)
    reserve = 0  # one running request's blocks outside full attention (a window, a chunk, a state and its checkpoint)
    if geometry.sliding_window and "sliding" in groups:
        reserve += groups["sliding"] * (math.ceil((geometry.sliding_window - 1) / block) + 1)
    if geometry.attention_chunk_size and "chunked" in groups:
        reserve += groups["chunked"] * (math.ceil(geometry.attention_chunk_size / block) + 1)
    reserve += groups.get("mamba", 0) * 2
    return {"layers_per_group": size, "groups": groups, "block_size_tokens": block,
            "bytes_per_block_per_gpu": size * block * token_page, "reserve_blocks": reserve}


def _page_bytes(geometry: ModelGeometry, tp: int, block_size: int) -> int:
    """One layer's page on one GPU (``kv_cache_interface.py:584-594``)."""
    if geometry.is_mla:
        return block_size * geometry.layer_bytes_per_token  # one head, latent + rope, on every GPU
    heads = max(1, geometry.num_kv_heads // tp)
    return block_size * heads * 2 * geometry.head_dim * geometry.dtype_bytes


def replica_pool(spec: ModelSpec, options: HardwareOptions) -> dict[str, Any]:
    """vLLM's KV pool of one replica: per-GPU memory, ``num_gpu_blocks`` and what it holds.

    ``kv_tokens``: tokens of full attention the usable blocks hold (for hybrid models, after
    one window's blocks per sliding group for one running request); ``kv_gib``: those tokens
    in the model's KV bytes (the unit of ``--capacity``).
    """
    gpu = gpu_for(options.gpu)
    tp = options.gpus_per_replica
    geometry = spec.geometry
    if options.weights_gib is not None:
        weights, source = options.weights_gib * GIB, "--weights"
    elif spec.weights_bytes is not None:
        weights, source = spec.weights_bytes, spec.weights_source
    else:
        raise UsageError("--gpu needs the model's weights: give --weights GiB (the model has no parameter count)")
    requested = math.ceil(gpu.hbm_bytes * options.gpu_memory_utilization)
    weights_per_gpu = weights / tp
    non_kv = weights_per_gpu + (options.activation_gib + options.non_torch_gib) * GIB
    available = int(requested - non_kv - options.cudagraph_gib * GIB)
    layout = vllm_layout(geometry, tp, options.block_size, options.checkpoint_alignment)
    size, block = layout["layers_per_group"], layout["block_size_tokens"]
    full_groups, sliding_groups = layout["groups"].get("full", 1), layout["groups"].get("sliding", 0)
    bytes_per_block = layout["bytes_per_block_per_gpu"]
    blocks = max(0, available) // bytes_per_block
    reserve = layout["reserve_blocks"]
    usable = max(0, VLLM.pages_in_pool(blocks) - reserve)  # less the null block (the vllm model's pool unit)
    tokens = usable // full_groups * block
    return {
        "gpu": gpu.name, "gpus_per_replica": tp, "replicas": options.replicas,
        "hbm_gib_per_gpu": gpu.hbm_bytes / GIB, "gpu_memory_utilization": options.gpu_memory_utilization,
        "requested_gib_per_gpu": requested / GIB, "weights_gib_per_gpu": weights_per_gpu / GIB,
        "weights_source": source, "activation_gib_per_gpu": options.activation_gib,
        "non_torch_gib_per_gpu": options.non_torch_gib, "cudagraph_gib_per_gpu": options.cudagraph_gib,
        "available_kv_gib_per_gpu": available / GIB, "fits": available >= bytes_per_block * (VLLM.min_pool + reserve),
        "layers_per_group": size, "full_attention_groups": full_groups, "sliding_window_groups": sliding_groups,
        "bytes_per_block_per_gpu": bytes_per_block, "block_size_tokens": block,
        "kv_cache_groups": layout["groups"],
        "num_gpu_blocks": int(blocks), "sliding_reserve_blocks": reserve,
        "kv_tokens": int(tokens), "kv_gib": tokens * geometry.kv_bytes_per_token / GIB,
        "kv_tokens_all_replicas": int(tokens) * options.replicas,
        "kv_gib_all_replicas": tokens * options.replicas * geometry.kv_bytes_per_token / GIB,
        "assumptions": ["weights split evenly over the replica's GPUs",
                        "activation peak, non-torch and CUDA-graph memory as given (vLLM measures them at start-up)",
                        "hybrid models: one running request's sliding-window, chunk or Mamba-state blocks reserved"],
        "sources": gpu.source,
    }


MAX_TENSOR_PARALLEL = 1024  # the largest tensor-parallel size tried


def tensor_parallel_problem(spec: ModelSpec, tp: int) -> str | None:
    """Why vLLM 0.33.0 refuses tensor-parallel size ``tp`` for this model, or None when it accepts it.

    vLLM's rules (files of the vllm-0.33.0 wheel):

    - the attention heads split evenly: ``total_num_attention_heads % tensor_parallel_size == 0``
      (``vllm/config/model.py:1558-1564``, ``verify_with_parallel_config``, at engine start);
    - the KV heads (``QKVParallelLinear``, ``vllm/model_executor/layers/linear.py:1066-1071``):
      when ``tp >= total_num_kv_heads`` each GPU holds one KV head, replicated
      ``divide(tp, total_num_kv_heads)`` times, else ``divide(total_num_kv_heads, tp)`` heads;
      ``divide`` asserts divisibility (``vllm/distributed/utils.py:51-55, 130-134``). So
      ``tp % kv_heads == 0`` when ``tp >= kv_heads``, else ``kv_heads % tp == 0``;
    - MLA (DeepSeek-V2/V3, Kimi K2): one latent KV head on every GPU (``get_num_kv_heads``
      returns 1, ``vllm/config/model.py:1676-1678``), so only the attention heads must split:
      ``assert num_heads % tp_size == 0`` (``vllm/model_executor/models/deepseek_v2.py:484``).

    >>> from stackdist.planning.geometry import model_spec
    >>> tensor_parallel_problem(model_spec("llama-3.1-8b"), 4) is None
    True
    >>> tensor_parallel_problem(model_spec("llama-3.1-8b"), 3)
    'its 32 attention heads do not split over 3 GPUs (vLLM requires num_attention_heads % tensor_parallel_size == 0)'
    >>> tensor_parallel_problem(model_spec("qwen2.5-1.5b"), 3)
    'its 2 KV heads cannot be split over or replicated on 3 GPUs (vLLM requires tensor_parallel_size % num_kv_heads == 0 when it is larger)'
    """
    heads = spec.num_attention_heads
    if heads is not None and heads % tp:
        return (f"its {heads} attention heads do not split over {tp} GPUs (vLLM requires "
                "num_attention_heads % tensor_parallel_size == 0)")
    g = spec.geometry
    if g.is_mla:  # one latent head, replicated on every GPU
        return None
    kv = g.num_kv_heads
    if tp >= kv and tp % kv:
        return (f"its {kv} KV heads cannot be split over or replicated on {tp} GPUs (vLLM requires "
                "tensor_parallel_size % num_kv_heads == 0 when it is larger)")
    if tp < kv and kv % tp:
        return (f"its {kv} KV heads do not split over {tp} GPUs (vLLM requires num_kv_heads % "
                "tensor_parallel_size == 0 when it is smaller)")
    return None


def tensor_parallel_sizes(spec: ModelSpec, upto: int = MAX_TENSOR_PARALLEL) -> list[int]:
    """Every tensor-parallel size from 1 to ``upto`` vLLM accepts for this model.

    >>> from stackdist.planning.geometry import model_spec
    >>> tensor_parallel_sizes(model_spec("qwen2.5-1.5b")), tensor_parallel_sizes(model_spec("deepseek-v3"))[-3:]
    ([1, 2, 4, 6, 12], [32, 64, 128])
    """
    return [tp for tp in range(1, upto + 1) if tensor_parallel_problem(spec, tp) is None]


def _model_name(spec: ModelSpec) -> str:
    return spec.name if spec.hf_repo is None else f"{spec.name} ({spec.hf_repo})"


def _what_would(spec: ModelSpec, options: HardwareOptions, runs: Any) -> str:
    """The smallest larger tensor-parallel size, fp8 weights, other GPUs: each that passes ``runs(pool)``."""
    ideas = []
    for tp in tensor_parallel_sizes(spec):
        if tp > options.gpus_per_replica and runs(replica_pool(spec, dataclasses.replace(options, gpus_per_replica=tp))):
            ideas.append(f"{tp} GPUs per replica (tensor-parallel size {tp})")
            break
    if options.weights_gib is None and spec.params and spec.weights_bytes and spec.weights_bytes > spec.params * 1.01:
        fp8 = dataclasses.replace(options, weights_gib=spec.params / GIB)
        if runs(replica_pool(spec, fp8)):
            ideas.append(f"fp8 weights ({spec.params / GIB:.1f} GiB) on {options.gpus_per_replica} x {options.gpu}")
    others = [g for g in gpu_table() if g != options.gpu and runs(replica_pool(spec, dataclasses.replace(options, gpu=g)))]
    if others:
        ideas.append(f"{options.gpus_per_replica} x {' or '.join(others)}")
    if not ideas:
        return f"no tensor-parallel size up to {MAX_TENSOR_PARALLEL} would"
    return "it would run with " + "; or ".join(ideas)


def require_fits(spec: ModelSpec, options: HardwareOptions) -> dict[str, Any]:
    """The replica's pool (:func:`replica_pool`), or :class:`~stackdist.errors.DeploymentError`
    when the weights and the assumed start-up memory leave no room for the KV cache (vLLM
    refuses to start: ``vllm/v1/core/kv_cache_planning.py:56-63``).

    >>> from stackdist.planning.geometry import model_spec
    >>> require_fits(model_spec("llama-3.1-405b"), HardwareOptions("h100", 4))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    stackdist.errors.DeploymentError: llama-3.1-405b (meta-llama/Llama-3.1-405B-Instruct) does not fit on 4 x h100: ...
    """
    pool = replica_pool(spec, options)
    if pool["fits"]:
        return pool
    other = pool["activation_gib_per_gpu"] + pool["non_torch_gib_per_gpu"] + pool["cudagraph_gib_per_gpu"]
    usable = (f"the {pool['requested_gib_per_gpu']:.2f} GiB vLLM may use ({pool['hbm_gib_per_gpu']:.1f} GiB x "
              f"GPU memory utilization {options.gpu_memory_utilization:g})")
    left = pool["available_kv_gib_per_gpu"]
    smallest = pool["bytes_per_block_per_gpu"] * (VLLM.min_pool + pool["sliding_reserve_blocks"]) / 2**20
    room = (f"more than {usable}: no room for the KV cache" if left <= 0 else
            f"leaving {left * 1024:.1f} MiB of {usable} for the KV cache, under the {smallest:.1f} MiB its smallest "
            "pool needs")
    raise DeploymentError(
        f"{_model_name(spec)} does not fit on {options.gpus_per_replica} x {pool['gpu']}: per GPU "
        f"{pool['weights_gib_per_gpu']:.1f} GiB of weights ({pool['weights_source']}) + {other:.1f} GiB assumed "
        f"activation/non-torch/CUDA-graph memory = {pool['weights_gib_per_gpu'] + other:.2f} GiB, {room} (vLLM "
        f"would refuse to start); {_what_would(spec, options, lambda p: p['fits'])}.")


def require_holds(spec: ModelSpec, options: HardwareOptions, prompt_tokens: int, where: str) -> dict[str, Any]:
    """The replica's pool, or :class:`~stackdist.errors.DeploymentError` when it cannot hold a
    prompt of ``prompt_tokens`` (``where`` names that prompt): vLLM refuses to start when its
    pool cannot hold one request of ``max_model_len`` tokens (``kv_cache_planning.py:68-87``)
    and could never schedule that prompt.

    >>> from stackdist.planning.geometry import model_spec
    >>> require_holds(model_spec("qwen3-8b"), HardwareOptions("h200"), 1000, "request 1")["kv_tokens"]
    787040
    """
    pool = require_fits(spec, options)
    if pool["kv_tokens"] >= prompt_tokens:
        return pool
    raise DeploymentError(
        f"one replica of {options.gpus_per_replica} x {pool['gpu']} holds {pool['kv_tokens']:,} tokens of "
        f"{_model_name(spec)}'s KV cache (vLLM num_gpu_blocks {pool['num_gpu_blocks']:,}, "
        f"{pool['available_kv_gib_per_gpu']:.2f} GiB per GPU), fewer than the {prompt_tokens:,} tokens of {where}: "
        f"vLLM could never schedule it (it refuses to start when one request of max_model_len does not fit); "
        f"{_what_would(spec, options, lambda p: p['fits'] and p['kv_tokens'] >= prompt_tokens)}.")


def sliding_pairs(start: Any, end: Any, window: int) -> Any:
    """Sum of min(p, window) for positions p in (start, end]: the (query, key) pairs of a sliding
    layer when tokens start+1..end are prefilled.

    >>> int(sliding_pairs(0, 5, 3)), int(sliding_pairs(2, 5, 100))
    (12, 12)
    """
    def prefix(n: Any) -> Any:
        n = np.asarray(n, dtype=np.float64)
        return np.where(n <= window, n * (n + 1) / 2, window * (window + 1) / 2 + (n - window) * window)

    return prefix(end) - prefix(start)


@dataclass(frozen=True)
class RooflineTTFT:
    """The FLOP and bandwidth model of the module docstring."""

    spec: ModelSpec
    gpu: GPU
    tensor_parallel: int = 1
    efficiency: float = 0.5
    load_gbps: float | None = None
    overhead_ms: float = 0.0

    @property
    def peak_flops(self) -> float:
        fp8 = self.spec.weights_bytes is not None and self.spec.params and self.spec.weights_bytes <= self.spec.params
        tflops = self.gpu.fp8_tflops if fp8 and self.gpu.fp8_tflops else self.gpu.bf16_tflops
        return tflops * 1e12

    def estimate_s(self, input_tokens: np.ndarray, hit_tokens: np.ndarray, loaded_tokens: np.ndarray) -> np.ndarray:
        """Seconds to first token per request (arrays of equal length)."""
        spec, g = self.spec, self.spec.geometry
        if spec.active is None or spec.weights_bytes is None or spec.attention_flops_per_pair is None:
            raise UsageError("a TTFT estimate needs the model's parameter count and attention shapes (a catalog "
                             "model), or --ttft-calibration FILE")
        total = np.asarray(input_tokens, np.float64)
        hits = np.minimum(np.asarray(hit_tokens, np.float64), np.maximum(total - 1, 0))
        new = total - hits
        pairs_full = new * hits + new * (new + 1) / 2
        flops = 2 * spec.active * new + spec.attention_flops_per_pair * g.num_full_layers * pairs_full
        if g.is_hybrid and g.sliding_window:
            flops += spec.attention_flops_per_pair * g.num_sliding_layers * sliding_pairs(hits, total, g.sliding_window)
        compute = flops / (self.tensor_parallel * self.peak_flops * self.efficiency)
        weights = spec.weights_bytes / (self.tensor_parallel * self.gpu.hbm_gbps * 1e9)
        link = self.load_gbps if self.load_gbps is not None else self.gpu.host_link_gbps
        load = np.asarray(loaded_tokens, np.float64) * g.kv_bytes_per_token / (link * 1e9)
        return np.maximum(compute, weights) + load + self.overhead_ms / 1e3

    def describe(self) -> dict[str, Any]:
        link = self.load_gbps if self.load_gbps is not None else self.gpu.host_link_gbps
        return {"kind": "roofline", "estimate": True, "gpu": self.gpu.name, "tensor_parallel": self.tensor_parallel,
                "peak_tflops": self.peak_flops / 1e12, "efficiency": self.efficiency, "hbm_gbps": self.gpu.hbm_gbps,
                "load_gbps": link, "overhead_ms": self.overhead_ms, "active_params": self.spec.active,
                "weights_gib": (self.spec.weights_bytes or 0) / 2**30,
                "attention_flops_per_pair": self.spec.attention_flops_per_pair,
                "not_modelled": "queueing, batching, chunked prefill, scheduling, tokenisation, network"}


@dataclass(frozen=True)
class CalibratedTTFT:
    """``a + b x uncached tokens + c x loaded tokens`` milliseconds (a fit to measurements)."""

    a_ms: float
    b_ms_per_token: float
    c_ms_per_token: float = 0.0
    fit: dict[str, Any] | None = None

    def estimate_s(self, input_tokens: np.ndarray, hit_tokens: np.ndarray, loaded_tokens: np.ndarray) -> np.ndarray:
        total = np.asarray(input_tokens, np.float64)
        new = total - np.minimum(np.asarray(hit_tokens, np.float64), np.maximum(total - 1, 0))
        ms = self.a_ms + self.b_ms_per_token * new + self.c_ms_per_token * np.asarray(loaded_tokens, np.float64)
        return ms / 1e3

    def describe(self) -> dict[str, Any]:
        return {"kind": "calibrated", "estimate": True, "a_ms": self.a_ms, "b_ms_per_uncached_token": self.b_ms_per_token,
                "c_ms_per_loaded_token": self.c_ms_per_token, "fit": self.fit or {},
                "applies_to": "the model, GPU and software measured in the calibration file (not rescaled)"}


def calibration_rows(records: Sequence[dict[str, Any]], where: str = "calibration") -> np.ndarray:
    """(uncached tokens, loaded tokens, ttft ms) per record: either explicit ``prefill_tokens``
    (and optional ``loaded_tokens``) with ``ttft_ms``, or the fixture's form (``tier`` miss / gpu /
    cpu, ``doc_tokens``, ``question_tokens``; data/fixtures/README.md).

    >>> calibration_rows([{"tier": "cpu", "doc_tokens": 100, "question_tokens": 8, "ttft_ms": 3.0}]).tolist()
    [[8.0, 100.0, 3.0]]
    """
    out = []
    for i, r in enumerate(records):
        try:
            ttft = float(r["ttft_ms"])
            if "prefill_tokens" in r:
                row = (float(r["prefill_tokens"]), float(r.get("loaded_tokens", 0)), ttft)
            else:
                doc, question, tier = float(r["doc_tokens"]), float(r["question_tokens"]), r["tier"]
                if tier not in ("miss", "gpu", "cpu"):
                    raise ValueError(f"tier {tier!r}")
                row = (doc + question if tier == "miss" else question, doc if tier == "cpu" else 0.0, ttft)
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: record {i + 1} needs ttft_ms and prefill_tokens (or tier, doc_tokens, "
                             f"question_tokens): {exc}") from None
        if not all(np.isfinite(row)) or min(row) < 0:
            raise UsageError(f"{where}: record {i + 1} has a negative or non-finite value")
        out.append(row)
    return np.asarray(out, np.float64).reshape(-1, 3)


def fit_calibration(rows: np.ndarray, where: str = "calibration") -> CalibratedTTFT:
    """Least squares ``ttft_ms = a + b x uncached + c x loaded`` (c only when some row loads)."""
    if rows.shape[0] < 2 or np.unique(rows[:, 0]).size < 2:
        raise UsageError(f"{where}: a TTFT fit needs at least two different uncached-token counts")
    loads = bool((rows[:, 1] > 0).any())
    design = np.column_stack([np.ones(len(rows)), rows[:, 0]] + ([rows[:, 1]] if loads else []))
    coef, *_ = np.linalg.lstsq(design, rows[:, 2], rcond=None)
    residual = rows[:, 2] - design @ coef
    fit = {"rows": len(rows), "rmse_ms": float(np.sqrt(np.mean(residual**2))),
           "max_abs_residual_ms": float(np.abs(residual).max()),
           "uncached_tokens_range": [float(rows[:, 0].min()), float(rows[:, 0].max())]}
    return CalibratedTTFT(float(coef[0]), float(coef[1]), float(coef[2]) if loads else 0.0, fit)


def ttft_summary(seconds: np.ndarray) -> dict[str, Any]:
    """p50, p99 and mean in ms over the requests (zeros for none)."""
    ms = np.asarray(seconds, np.float64) * 1e3
    if ms.size == 0:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "mean_ms": 0.0}
    return {"p50_ms": float(np.quantile(ms, 0.5)), "p99_ms": float(np.quantile(ms, 0.99)), "mean_ms": float(ms.mean())}
