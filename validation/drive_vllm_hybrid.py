"""Drive vLLM 0.33.0's own Scheduler and hybrid KV-cache manager through a trace, serially.

Run with the vLLM venv (../shared/engines/install.sh), e.g.

    $VLLM_PY validation/drive_vllm_hybrid.py --trace T.jsonl --hash-block-size 512 \
        --config tests/data/engines/hybrid/configs/gpt-oss-20b.json --pools 200,400,inf \
        --out out.csv [--no-decode] [--summary s.json] [--max-num-batched-tokens 8192] \
        [--block-size 16] [--gdn-checkpoint-alignment 64]

What runs is vLLM's own ``Scheduler`` (``vllm/v1/core/sched/scheduler.py``) with a *hybrid*
``KVCacheConfig`` whose groups, block sizes and pool come from vLLM's own planner
(``kv_cache_planning.get_kv_cache_groups`` and ``get_kv_cache_config_from_groups`` with
``num_gpu_blocks_override = N``, ``kv_cache_utils.resolve_kv_cache_block_sizes``), exactly the
calls ``EngineCore._initialize_kv_caches`` makes (``v1/engine/core.py:321-370``). The per-layer
specs are built the way the model layers build them (HYBRID_NOTES.md cites each):

- full attention: ``FullAttentionSpec(block_size, kv_heads, head_dim, dtype)``
  (``model_executor/layers/attention/attention.py:611-680``);
- sliding window: ``SlidingWindowSpec(..., sliding_window=W)`` (same place; the block size is the
  primary one when pages match, as for every model here);
- chunked local (Llama 4): ``ChunkedLocalAttentionSpec(..., attention_chunk_size=C)``
  (``layers/attention/chunked_local_attention.py:119-128``);
- Qwen3-Next linear attention (gated delta net): ``MambaSpec`` with the shapes of
  ``MambaStateShapeCalculator.gated_delta_net_state_shape`` and the dtypes of
  ``MambaStateDtypeCalculator.gated_delta_net_state_dtype`` (``models/qwen3_next.py:882-913``),
  ``mamba_cache_mode`` as ``MambaModelConfig`` sets it (``models/config.py:750-787``), padded to the
  attention page after ``Platform._align_hybrid_block_size`` (``platforms/interface.py:940-1137``)
  raised the attention block size; ``num_prefill_checkpoint_blocks=1`` and the checkpoint grid when
  the FlashInfer GDN prefill exports mid-prefill states (``gdn/qwen_gdn_linear_attn.py:686-750``).

``scheduler_config.disable_hybrid_kv_cache_manager`` is set False (CPU turns the hybrid manager
off; the CUDA default keeps it). The model config is a stand-in (the real one inspects model code).

Serial schedule (SPEC.md "serial", with the real scheduler's chunked prefill): request i is added
(``add_request``) only when request i-1 has finished; then ``schedule()`` /
``update_from_output`` steps run until it finishes: the prompt is prefilled in chunks of at most
``max_num_batched_tokens`` (the scheduler splits; with a Mamba group in ``align`` mode it also
aligns chunk ends, ``_mamba_block_aligned_split``), then one token per step (``max_tokens = O``,
``ignore_eos``; O = 1 with ``--no-decode``), then the scheduler frees the request. The hit is
``_get_local_prefix_cache_hit``'s answer at the request's admission (the reconciled hit of
``HybridKVCacheCoordinator.find_longest_cache_hit``); per group kind the diagnostic columns give
``find_longest_cache_hit_per_group`` at the same moment (a pure lookup). A pool where the request
cannot be admitted, or where the scheduler preempts it, is infeasible (SPEC.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

warnings.filterwarnings("ignore")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch
import vllm
from drive_vllm_offload import STUB_DEFAULTED, _Stub
from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig
from vllm.model_executor.layers.mamba.mamba_utils import (
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.utils.math_utils import cdiv
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.core.kv_cache_planning import (
    get_kv_cache_config_from_groups,
    get_kv_cache_groups,
)
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# FlashAttention (the CUDA default attention backend) supports MultipleOf(16) kernel blocks; the
# smallest is the attention kernel alignment of Platform._align_hybrid_block_size.
ATTN_KERNEL_ALIGNMENT = 16
# v1/attention/backends/gdn_attn.py:34 FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
GDN_CHECKPOINT_ALIGNMENT = 64


# Architectures whose config's mamba_ssm_dtype becomes cache_config.mamba_ssm_cache_dtype
# (Qwen3_5ForConditionalGenerationConfig.verify_and_update_config, models/config.py:953-977, 1259-1262).
QWEN3_5 = ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
           "Qwen3_5MoeForConditionalGeneration")


class ConfigError(ValueError):
    pass


def mamba_ssm_cache_dtype(cfg: dict) -> str:
    """cache_config.mamba_ssm_cache_dtype after vLLM's per-architecture config update: "auto", or
    the Qwen3.5 config's mamba_ssm_dtype (checked against vLLM's own update in HybridEngine)."""
    t = text_config(cfg)
    arch = (cfg.get("architectures") or t.get("architectures") or ["?"])[0]
    return str(t["mamba_ssm_dtype"]) if arch in QWEN3_5 and t.get("mamba_ssm_dtype") is not None else "auto"


def text_config(cfg: dict) -> dict:
    """The language model's config (Gemma 3 / Llama 4 nest it under text_config)."""
    return cfg.get("text_config", cfg)


def layer_kinds(cfg: dict) -> tuple[list[str], dict]:
    """Per-layer kind (full / sliding / chunked / linear) as vLLM's model code decides it, and the
    parameters. Rules (vLLM 0.33.0):
      gpt-oss (models/gpt_oss.py:175): sliding_window on even layers, full on odd;
      Gemma 3 (models/gemma3.py:153-155): config.layer_types, 'sliding_attention' -> window;
        transformers builds layer_types from sliding_window_pattern when absent;
      Llama 4 (models/llama4.py:184-262): no_rope_layers[i] == 0 -> full ("nope") layer, else
        chunked local attention of attention_chunk_size; transformers' default interval is 4;
      Qwen3-Next (models/qwen3_next.py:668): config.layer_types 'linear_attention' /
        'full_attention'; transformers builds them from full_attention_interval when absent.
    """
    t = text_config(cfg)
    arch = (cfg.get("architectures") or t.get("architectures") or ["?"])[0]
    n = int(t["num_hidden_layers"])
    params: dict = {"architecture": arch}
    if arch == "GptOssForCausalLM":
        w = int(t["sliding_window"])
        kinds = ["sliding" if i % 2 == 0 else "full" for i in range(n)]
        params["sliding_window"] = w
        if "layer_types" in t:
            lt = ["sliding" if x == "sliding_attention" else "full" for x in t["layer_types"]]
            if lt != kinds:
                raise ConfigError("gpt-oss layer_types differ from vLLM's even/odd rule")
    elif arch in ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"):
        w = int(t.get("sliding_window", 4096))
        lt = t.get("layer_types")
        if not lt:
            pattern = int(t.get("sliding_window_pattern", 6))
            lt = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
        kinds = ["sliding" if x == "sliding_attention" else "full" for x in lt]
        params["sliding_window"] = w
    elif arch in ("Llama4ForConditionalGeneration", "Llama4ForCausalLM"):
        chunk = int(t["attention_chunk_size"])
        nr = t.get("no_rope_layers") or []
        if not nr:
            interval = int(t.get("no_rope_layer_interval", 4))
            nr = [int((i + 1) % interval != 0) for i in range(n)]
        kinds = ["full" if nr[i] == 0 else "chunked" for i in range(n)]
        params["attention_chunk_size"] = chunk
    elif arch in ("Qwen3NextForCausalLM",) + QWEN3_5:
        # Qwen3.5 (models/qwen3_5.py:259) reads config.layer_types as Qwen3-Next does
        lt = t.get("layer_types")
        if not lt:
            k = int(t.get("full_attention_interval", 4))
            lt = ["linear_attention" if (i + 1) % k else "full_attention" for i in range(n)]
        kinds = ["linear" if x == "linear_attention" else "full" for x in lt]
    else:
        raise ConfigError(f"architecture {arch!r} not supported (gpt-oss, Gemma 3, Llama 4, Qwen3-Next, Qwen3.5)")
    if len(kinds) != n:
        raise ConfigError(f"{len(kinds)} layer kinds for {n} layers")
    return kinds, params


def build_specs(cfg: dict, block_size: int | None, mamba_cache_mode: str, gdn_alignment: int | None):
    """Per-layer specs and the derivation record. ``block_size`` None = vLLM's default (16),
    raised for Mamba hybrids by Platform._align_hybrid_block_size."""
    t = text_config(cfg)
    kinds, params = layer_kinds(cfg)
    dtype = DTYPES[str(t.get("torch_dtype", cfg.get("torch_dtype", "bfloat16")))]
    kv_heads = int(t["num_key_value_heads"])
    head = int(t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"])
    attn_1 = FullAttentionSpec(block_size=1, num_kv_heads=kv_heads, head_size=head, dtype=dtype).page_size_bytes
    derivation: dict = {"attention_page_bytes_per_token": attn_1, "dtype": str(dtype), "kv_heads": kv_heads,
                        "head_dim": head, "user_block_size": block_size}
    bs = block_size if block_size is not None else CacheConfig.DEFAULT_BLOCK_SIZE
    mamba_page = None
    mamba_padded = None
    specs: dict = {}
    if "linear" in kinds:
        if mamba_cache_mode == "none":
            raise ConfigError("--mamba-cache-mode none turns prefix caching off for Mamba hybrids")
        shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
            1, int(t["linear_num_key_heads"]), int(t["linear_num_value_heads"]), int(t["linear_key_head_dim"]),
            int(t["linear_value_head_dim"]), int(t["linear_conv_kernel_dim"]), 0)
        dts = MambaStateDtypeCalculator.gated_delta_net_state_dtype(dtype, "auto", mamba_ssm_cache_dtype(cfg))
        mamba_page = MambaSpec(shapes=tuple(shapes), dtypes=tuple(dts), block_size=-1).page_size_bytes
        # Platform._align_hybrid_block_size (platforms/interface.py:1060-1115)
        kernel = max(ATTN_KERNEL_ALIGNMENT, bs)
        align_lcm = kernel
        if mamba_cache_mode == "align":
            align_lcm = math.lcm(kernel, gdn_alignment or 1)
        attn_bs = align_lcm * cdiv(mamba_page, align_lcm * attn_1)
        attn_bs = ATTN_KERNEL_ALIGNMENT * cdiv(attn_bs, ATTN_KERNEL_ALIGNMENT)
        derivation.update(mamba_state_shapes=[list(s) for s in shapes], mamba_state_dtypes=[str(d) for d in dts],
                          mamba_page_bytes=mamba_page, kernel_block_alignment=kernel, lcm_with_gdn_checkpoint=align_lcm,
                          formula="attn_block = lcm(max(16, block), gdn_align) * cdiv(mamba_page, that * attn_page_per_token), "
                                  "rounded up to a multiple of 16",
                          attn_block_size_required=attn_bs)
        bs = max(bs, attn_bs)
        mamba_bs = bs  # align: mamba_block_size = block_size (platforms/interface.py:1114-1115)
        attn_page = bs * attn_1
        mamba_padded = attn_page if attn_page != mamba_page else None
        exports = mamba_cache_mode == "align" and gdn_alignment is not None
        grid = math.lcm(mamba_bs, gdn_alignment) if exports else None
        for i, k in enumerate(kinds):
            if k == "linear":
                spec = MambaSpec(shapes=tuple(shapes), dtypes=tuple(dts), block_size=mamba_bs,
                                 page_size_padded=mamba_padded, mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
                                 mamba_cache_mode=mamba_cache_mode, num_speculative_blocks=0,
                                 num_prefill_checkpoint_blocks=1 if exports else 0,
                                 prefill_checkpoint_alignment=grid)
                specs[f"model.layers.{i}.linear_attn"] = spec
            else:
                specs[f"model.layers.{i}.self_attn.attn"] = FullAttentionSpec(
                    block_size=bs, num_kv_heads=kv_heads, head_size=head, dtype=dtype)
        derivation.update(block_size=bs, mamba_block_size=mamba_bs, mamba_page_size_padded=mamba_padded,
                          prefill_checkpoint_alignment=grid)
    else:
        for i, k in enumerate(kinds):
            name = f"model.layers.{i}.self_attn.attn"
            if k == "full":
                specs[name] = FullAttentionSpec(block_size=bs, num_kv_heads=kv_heads, head_size=head, dtype=dtype)
            elif k == "sliding":
                specs[name] = SlidingWindowSpec(block_size=bs, num_kv_heads=kv_heads, head_size=head, dtype=dtype,
                                                sliding_window=params["sliding_window"])
            else:
                specs[name] = ChunkedLocalAttentionSpec(block_size=bs, num_kv_heads=kv_heads, head_size=head,
                                                        dtype=dtype, attention_chunk_size=params["attention_chunk_size"])
        derivation.update(block_size=bs)
    derivation["layer_kinds"] = {k: kinds.count(k) for k in sorted(set(kinds))}
    derivation.update(params)
    return specs, derivation, bs


def model_stub(max_model_len: int, dtype, kv_heads: int, hybrid_mamba: bool):
    return _Stub(
        max_model_len=max_model_len, original_max_model_len=max_model_len, uses_mrope=False,
        is_encoder_decoder=False, runner_type="generate", is_diffusion=False, supports_multimodal_inputs=False,
        return_sampling_mask=False, use_mla=False, model="stand-in", dtype=dtype,
        get_total_num_kv_heads=lambda: kv_heads, is_multimodal_model=False, skip_tokenizer_init=True,
        hf_config=None, enable_return_routed_experts=False, supports_kv_cache_grouping=False,
        is_hybrid=hybrid_mamba, has_inner_state=hybrid_mamba,
    )


class HybridEngine:
    """vLLM's Scheduler over a hybrid KVCacheConfig of num_gpu_blocks = N, driven serially."""

    def __init__(self, cfg: dict, num_gpu_blocks: int, max_model_len: int, args):
        self.args = args
        specs, deriv, bs = build_specs(cfg, args.block_size, args.mamba_cache_mode,
                                       None if args.gdn_checkpoint_alignment == 0 else args.gdn_checkpoint_alignment)
        has_mamba = any(isinstance(s, MambaSpec) for s in specs.values())
        t = text_config(cfg)
        dtype = DTYPES[str(t.get("torch_dtype", cfg.get("torch_dtype", "bfloat16")))]
        sched_cfg = SchedulerConfig(max_model_len=max_model_len, is_encoder_decoder=False,
                                    max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=16,
                                    enable_chunked_prefill=True, async_scheduling=False)
        cache = CacheConfig(block_size=bs, enable_prefix_caching=True,
                            mamba_cache_mode=args.mamba_cache_mode if has_mamba else "none")
        arch = (cfg.get("architectures") or t.get("architectures") or ["?"])[0]
        if arch in QWEN3_5:  # vLLM's own per-architecture update (models/config.py:953-977) on a stand-in
            from types import SimpleNamespace

            from vllm.model_executor.models.config import MODELS_CONFIG_MAP
            MODELS_CONFIG_MAP[arch].verify_and_update_config(SimpleNamespace(
                cache_config=cache, model_config=SimpleNamespace(hf_text_config=SimpleNamespace(**t))))
            assert cache.mamba_ssm_cache_dtype == mamba_ssm_cache_dtype(cfg), cache.mamba_ssm_cache_dtype
        if has_mamba:
            cache.mamba_block_size = deriv["mamba_block_size"]
            cache.mamba_page_size_padded = deriv["mamba_page_size_padded"]
        cache.num_gpu_blocks_override = num_gpu_blocks
        vc = VllmConfig(scheduler_config=sched_cfg, cache_config=cache, device_config=DeviceConfig("cpu"))
        vc.model_config = model_stub(max_model_len, dtype, int(t["num_key_value_heads"]), has_mamba)
        # CPU switches the hybrid manager off; the CUDA default keeps it on.
        vc.scheduler_config.disable_hybrid_kv_cache_manager = False
        vc.cache_config.num_gpu_blocks_override = num_gpu_blocks
        # resolve_kv_cache_layout (v1/attention/backends/utils.py:293-380): FlashAttention declares no
        # layouts, so the default preference's first, LBNHC (utils.py:229), unless pages mix HNC shapes.
        vc.cache_config.kv_cache_layout = "LBNHC"
        self.vllm_config = vc
        groups = get_kv_cache_groups(vc, dict(specs))
        kv_cfg = get_kv_cache_config_from_groups(vc, groups, 1 << 60)
        assert kv_cfg.num_blocks == num_gpu_blocks
        sched_bs, hash_bs = resolve_kv_cache_block_sizes(kv_cfg, vc)
        kv_cfg.hash_block_size = hash_bs
        cache.num_gpu_blocks = num_gpu_blocks
        self.kv_cfg = kv_cfg
        self.sched_bs, self.hash_bs = sched_bs, hash_bs
        tensor_sizes = {x.size for x in kv_cfg.kv_cache_tensors}
        bytes_per_block = tensor_sizes.pop() // num_gpu_blocks if len(tensor_sizes) == 1 else None
        self.layout = {
            "groups": [{"kind": type(g.kv_cache_spec).__name__, "layers": len(g.layer_names),
                        "block_size": g.kv_cache_spec.block_size,
                        "window": getattr(g.kv_cache_spec, "sliding_window", None),
                        "chunk": getattr(g.kv_cache_spec, "attention_chunk_size", None),
                        "page_bytes_per_layer": g.kv_cache_spec.page_size_bytes,
                        "first_layers": g.layer_names[:3]} for g in kv_cfg.kv_cache_groups],
            "scheduler_block_size": sched_bs, "hash_block_size": hash_bs,
            "bytes_per_block_all_layers": bytes_per_block, "derivation": deriv,
            "prefix_cache_retention_interval": kv_cfg.prefix_cache_retention_interval,
        }
        self.sched = Scheduler(vllm_config=vc, kv_cache_config=kv_cfg, structured_output_manager=StructuredOutputManager(vc),
                               block_size=sched_bs, hash_block_size=hash_bs, log_stats=False)
        hash_fn = get_hash_fn_by_name("sha256")
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(hash_bs, hash_fn, 0)
        self.coord = self.sched.kv_cache_manager.coordinator
        self.kinds = [type(g.kv_cache_spec).__name__ for g in kv_cfg.kv_cache_groups]
        self.lookup: dict[str, tuple] = {}
        self.preempted: list[str] = []
        orig = self.sched._get_local_prefix_cache_hit

        def local(request, *a, **kw):
            _, per = self.coord.find_longest_cache_hit_per_group(request.block_hashes, request.num_tokens - 1)
            res = orig(request, *a, **kw)
            self.lookup[request.request_id] = (res[1], per)
            return res

        self.sched._get_local_prefix_cache_hit = local
        orig_pre = self.sched._preempt_request

        def pre(request, *a, **kw):
            self.preempted.append(request.request_id)
            return orig_pre(request, *a, **kw)

        self.sched._preempt_request = pre

    def serve(self, r: common.Request, hash_block_size: int, decode: bool) -> dict:
        s = self.sched
        req = Request(request_id=str(r.index), prompt_token_ids=common.prompt_tokens(r, hash_block_size),
                      sampling_params=SamplingParams(max_tokens=r.output_length if decode else 1, ignore_eos=True),
                      pooling_params=None, arrival_time=float(r.index), block_hasher=self.hasher)
        s.add_request(req)
        rid = req.request_id
        chunks = 0
        steps = 0
        admitted = None
        while not req.is_finished():
            out = s.schedule()
            steps += 1
            if rid in self.lookup and admitted is None:
                admitted = self.lookup[rid]
            if self.preempted:
                raise common.Infeasible(r.index, "decode" if req.num_output_tokens else "prefill", req.num_output_tokens,
                                        f"preempted; free {s.kv_cache_manager.block_pool.get_num_free_blocks()}")
            n = out.num_scheduled_tokens.get(rid, 0)
            if n == 0:
                raise common.Infeasible(r.index, "arrival", 0,
                                        f"not schedulable; free {s.kv_cache_manager.block_pool.get_num_free_blocks()}")
            if req.num_output_tokens == 0:
                chunks += 1
            sampled = [[common.output_token(r, req.num_output_tokens + 1)]] if req.num_computed_tokens >= req.num_tokens else [[]]
            s.update_from_output(out, ModelRunnerOutput(req_ids=[rid], req_id_to_index={rid: 0}, sampled_token_ids=sampled,
                                                        logprobs=None, prompt_logprobs_dict={}, pooler_output=[]))
            if steps > 10_000_000:
                raise RuntimeError("no progress")
        hit, per = admitted
        full = [per[g] for g, k in enumerate(self.kinds) if k == "FullAttentionSpec"]
        other = [per[g] for g, k in enumerate(self.kinds) if k != "FullAttentionSpec"]
        return {"hit": hit, "full": min(full) if full else -1, "other": min(other) if other else -1, "chunks": chunks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--hash-block-size", type=int, required=True, help="B_h of the trace's hash ids (token ids only)")
    ap.add_argument("--config", required=True, help="HF config.json of the model")
    ap.add_argument("--pools", required=True, help="num_gpu_blocks of the whole cache, comma-separated, or inf")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--block-size", type=int, default=None, help="--block-size of vLLM (default 16, raised for Mamba)")
    ap.add_argument("--mamba-cache-mode", choices=["align"], default="align",
                    help="vLLM 0.33.0 has only 'align' and 'none' (config/cache.py:176), and prefix caching turns "
                         "'none' into 'align' (models/config.py:764-765); 'all' no longer exists")
    ap.add_argument("--gdn-checkpoint-alignment", type=int, default=GDN_CHECKPOINT_ALIGNMENT,
                    help="FlashInfer GDN prefill checkpoint alignment (64); 0 = Triton/FLA prefill (no mid-prefill states)")
    ap.add_argument("--out", help="per-request CSV (required unless --bisect)")
    ap.add_argument("--summary")
    ap.add_argument("--bisect", action="store_true",
                    help="print (stdout, JSON) the smallest feasible num_gpu_blocks instead of running --pools")
    args = ap.parse_args(argv)
    if not args.bisect and not args.out:
        ap.error("--out is required unless --bisect")
    try:
        with open(args.config) as fh:
            cfg = json.load(fh)
        trace = common.read_trace(args.trace)
        common.check_trace(trace, args.hash_block_size)
        pools = common.parse_pools(args.pools)
        layer_kinds(cfg)
    except (OSError, ValueError, KeyError) as e:
        print(f"drive_vllm_hybrid: {e}", file=sys.stderr)
        return 2
    decode = not args.no_decode
    max_model_len = max(r.input_length + r.output_length for r in trace) + 1024
    # No eviction: every block any request ever allocates, in every group (at most 64 groups), + 2.
    inf_n = 64 * sum(cdiv(r.input_length + (r.output_length if decode else 1), 16) + 1 for r in trace) + 2
    if args.bisect:
        def ok(n: int):
            eng = HybridEngine(cfg, n, max_model_len, args)
            try:
                for r in trace:
                    eng.serve(r, args.hash_block_size, decode)
            except common.Infeasible as e:
                return {"request": e.request, "event": e.event, "k": e.k, "detail": e.detail}
            return None
        hi = 16
        while ok(hi) is not None:
            hi *= 2
        lo, fail = hi // 2, None
        if hi == 16:
            lo = 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            f = ok(mid)
            if f is None:
                hi = mid
            else:
                lo, fail = mid, f
        fail = fail if fail is not None else ok(lo) if lo >= 2 else None
        eng = HybridEngine(cfg, inf_n, max_model_len, args)
        for r in trace:
            eng.serve(r, args.hash_block_size, decode)
        cached = sum(1 for blk in eng.sched.kv_cache_manager.block_pool.blocks if blk.block_hash is not None)
        print(json.dumps({"smallest_feasible": hi, "failure_below": fail, "cached_blocks_at_end_inf": cached}))
        return 0
    cols, runs, layout = [], [], None
    for pool in pools:
        n = inf_n if common.is_inf(pool) else int(pool)
        t0 = time.perf_counter()
        eng = HybridEngine(cfg, n, max_model_len, args)
        layout = eng.layout
        res = []
        try:
            for r in trace:
                res.append(eng.serve(r, args.hash_block_size, decode))
        except common.Infeasible as e:
            runs.append({"pool": pool, "num_gpu_blocks": n, "feasible": False,
                         "failure": {"request": e.request, "event": e.event, "k": e.k, "detail": e.detail}})
            print(f"  pool {pool}: INFEASIBLE {e}", file=sys.stderr, flush=True)
            continue
        bp = eng.sched.kv_cache_manager.block_pool
        pool_stats = {"num_gpu_blocks": n, "free_blocks_at_end": bp.get_num_free_blocks(),
                      "cached_blocks_at_end": sum(1 for blk in bp.blocks if blk.block_hash is not None),
                      "total_hit_tokens": sum(x["hit"] for x in res), "prefill_chunks": sum(x["chunks"] for x in res)}
        runs.append({"pool": pool, "feasible": True, "seconds": round(time.perf_counter() - t0, 3), "stats": pool_stats})
        cols.append((pool, res))
        print(f"  pool {pool}: ok hits={pool_stats['total_hit_tokens']} ({time.perf_counter() - t0:.1f} s)",
              file=sys.stderr, flush=True)
    times = common.service_model(trace)
    tmp = args.out + ".tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        hdr = ["request", "id", "arrival_s", "worker", "input_tokens", "output_tokens"]
        for key in ("hit_tokens", "full_group_hit_tokens", "other_group_hit_tokens", "prefill_chunks"):
            hdr += [f"{key}_{p}" for p, _ in cols]
        w.writerow(hdr)
        for r, tm in zip(trace, times):
            row = [r.index, r.index, repr(tm.arrival_s), 0, r.input_length, r.output_length]
            for key in ("hit", "full", "other", "chunks"):
                row += [res[r.index][key] for _, res in cols]
            w.writerow(row)
    os.replace(tmp, args.out)
    if args.summary:
        summary = {"engine": {"name": "vllm", "version": vllm.__version__, "scheduler": "Scheduler (sync), serial"},
                   "trace": args.trace, "config": args.config, "hash_block_size_trace": args.hash_block_size,
                   "decode": decode, "max_num_batched_tokens": args.max_num_batched_tokens,
                   "mamba_cache_mode": args.mamba_cache_mode, "gdn_checkpoint_alignment": args.gdn_checkpoint_alignment,
                   "inf_pool_size": inf_n, "layout": layout, "runs": runs,
                   "model_config_stub_attributes_defaulted_to_None": sorted(STUB_DEFAULTED)}
        with open(args.summary + ".tmp", "w") as fh:
            json.dump(summary, fh, indent=1)
            fh.write("\n")
        os.replace(args.summary + ".tmp", args.summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
