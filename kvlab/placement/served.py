"""The served model and GPU: KV bytes per block, the HBM pool, and the latency model scaled to them.

The latency model (:mod:`.calibration`) is *measured* for one deployment only: Qwen2.5-1.5B
shapes in bf16 on one H200 (``data/fixtures``: :data:`REFERENCE_MODEL` on :data:`REFERENCE_GPU`).
For any other model or GPU, :meth:`Served.latency` **extrapolates** it, term by term, with the
catalogs of :mod:`stackdist.planning` (``geometry.model_spec``: parameters, weights, attention
FLOPs per (query, key) pair, KV bytes per token; ``hardware.gpu_for``: peak FLOP/s, HBM size and
bandwidth, host link):

- prefill, per new token (``prefill_ms_per_token``): x active parameters, / peak FLOP/s
  (the linear FLOPs are ``2 x active params`` per token);
- prefill, per token pair (``prefill_ms_per_token_pair``): x attention FLOPs per pair x
  full-attention layers, / peak FLOP/s;
- the fixed costs of a prefill and of a decode step (``prefill_fixed_ms``, ``decode_fixed_ms``):
  x layers (kernel launches per layer), but at least one read of the weights from HBM (a large
  model's floor: a prefill reads all of them, ``weights bytes / HBM bandwidth``; a batch-one
  decode step only the active share, ``x active / total parameters``, which matters for MoE);
- decode, per context token (``decode_ms_per_context_token``): x KV bytes per token, / HBM
  bandwidth (each step reads the context's KV);
- host-to-device and device-to-host bandwidth: x the GPU's host link (the catalog's, relative
  to the H200's; the measured 55.3 GB/s stays for the H200).

What stays as measured (or assumed) for the 1.5B on the H200 whatever is served: the per-transfer
latencies, the NVMe assumptions, the HF-eager host overheads of ``LatencyModel.hf_eager`` and
the shape of every fit (the efficiency of the measured kernels is carried over unchanged). Peak
FLOP/s are :class:`stackdist.planning.hardware.RooflineTTFT`'s (dense fp8 when the weights are
stored in one byte or less and the GPU has fp8, else bf16). For the reference model on the
reference GPU every factor is exactly 1: the measured numbers, unchanged.

The HBM tier cannot hold more than the KV pool vLLM would get on that GPU for that model
(:func:`stackdist.planning.hardware.require_fits`, one GPU, its default memory settings):
:meth:`Served.max_hbm_blocks`.

>>> served = Served.of(None, None)
>>> served.measured, served.kv_bytes_per_token, served.latency(LatencyModel()) == LatencyModel()
(True, 28672, True)
>>> big = Served.of("llama-3.1-70b", "h200")
>>> big.kv_bytes_per_token, big.measured
(327680, False)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from stackdist.errors import DeploymentError, UsageError
from stackdist.planning.geometry import DEFAULT_MODEL, ModelSpec, model_spec
from stackdist.planning.hardware import (
    GPU,
    HardwareOptions,
    RooflineTTFT,
    gpu_for,
    require_fits,
)

from .calibration import LatencyModel

__all__ = ["REFERENCE_GPU", "REFERENCE_MODEL", "Served"]

#: The measured model (``data/fixtures/README.md``) and GPU of the calibrated latency model.
REFERENCE_MODEL = DEFAULT_MODEL.name
REFERENCE_GPU = "h200"


@dataclass(frozen=True)
class Served:
    """A model on one GPU as the placement simulator needs them (build with :meth:`of`).

    ``model_given`` / ``gpu_given``: whether the caller named them (else the measured ones).
    """

    spec: ModelSpec
    gpu: GPU
    model_given: bool = False
    gpu_given: bool = False

    @classmethod
    def of(cls, model: str | None, gpu: str | None) -> Served:
        """The catalog model (name or Hugging Face repo id, case-insensitive) or ``config.json``
        path ``model`` on the catalog GPU ``gpu``; None: the measured ones. UsageError for an
        unknown name, or a model whose parameters or attention shapes are unknown (the latency
        model needs them). O(1) after the catalog is loaded."""
        spec = model_spec(model if model is not None else REFERENCE_MODEL)
        missing = [name for name, value in (("parameter count", spec.active), ("weights' bytes", spec.weights_bytes),
                                            ("attention FLOPs per token pair", spec.attention_flops_per_pair))
                   if value is None]
        if missing:
            raise UsageError(f"{spec.name}: the latency model cannot be scaled to it without its {', '.join(missing)} "
                             "(give params, or the vocab_size, hidden_size, intermediate_size and num_attention_heads "
                             "fields, in its config.json)")
        return cls(spec, gpu_for(gpu if gpu is not None else REFERENCE_GPU), model is not None, gpu is not None)

    @property
    def measured(self) -> bool:
        """True for the measured model on the measured GPU (the latency model is not extrapolated)."""
        return self.spec.name == REFERENCE_MODEL and self.gpu.name == REFERENCE_GPU

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token of the full-attention layers (what a cached block costs per token)."""
        return int(self.spec.geometry.kv_bytes_per_token)

    @cached_property
    def pool(self) -> dict[str, Any]:
        """vLLM's KV pool on this GPU for this model (:func:`~stackdist.planning.hardware.require_fits`;
        DeploymentError when the weights leave no room). O(1), computed once."""
        try:
            return require_fits(self.spec, HardwareOptions(self.gpu.name))
        except DeploymentError as exc:
            raise DeploymentError(f"{exc} The placement simulator models one GPU (no tensor parallelism): serve a "
                                  "model whose weights fit one.") from None

    def max_hbm_blocks(self, block_tokens: int) -> int:
        """The most blocks of ``block_tokens`` tokens the HBM tier can hold: the pool's tokens // block_tokens. O(1)."""
        return int(self.pool["kv_tokens"]) // block_tokens

    def factors(self) -> dict[str, float]:
        """Each latency field's scale factor (served / measured), as :meth:`latency` applies it;
        the fixed terms' weight-read floors (``*_weights_read_ms``) are in ms. O(1)."""
        ref, ref_gpu = model_spec(REFERENCE_MODEL), gpu_for(REFERENCE_GPU)
        spec, g, gref = self.spec, self.spec.geometry, ref.geometry
        peak = RooflineTTFT(ref, ref_gpu).peak_flops / RooflineTTFT(spec, self.gpu).peak_flops
        assert spec.active and ref.active and spec.attention_flops_per_pair and ref.attention_flops_per_pair  # checked in of()
        return {
            "prefill_ms_per_token": spec.active / ref.active * peak,
            "prefill_ms_per_token_pair": (spec.attention_flops_per_pair * g.num_full_layers)
            / (ref.attention_flops_per_pair * gref.num_full_layers) * peak,
            "fixed_ms_per_layer": g.num_layers / gref.num_layers,
            "prefill_weights_read_ms": float(spec.weights_bytes or 0) / (self.gpu.hbm_gbps * 1e6),
            "decode_weights_read_ms": float(spec.weights_bytes or 0) * spec.active / (spec.params or spec.active)
            / (self.gpu.hbm_gbps * 1e6),
            "decode_ms_per_context_token": g.kv_bytes_per_token / gref.kv_bytes_per_token * ref_gpu.hbm_gbps / self.gpu.hbm_gbps,
            "host_link": self.gpu.host_link_gbps / ref_gpu.host_link_gbps,
        }

    def latency(self, base: LatencyModel) -> LatencyModel:
        """``base`` (measured for the reference) scaled to this model and GPU (module docstring).
        ``base`` itself for the reference model on the reference GPU. O(1)."""
        if self.measured:
            return base
        f = self.factors()
        return dataclasses.replace(
            base,
            prefill_fixed_ms=max(base.prefill_fixed_ms * f["fixed_ms_per_layer"], f["prefill_weights_read_ms"]),
            prefill_ms_per_token=base.prefill_ms_per_token * f["prefill_ms_per_token"],
            prefill_ms_per_token_pair=base.prefill_ms_per_token_pair * f["prefill_ms_per_token_pair"],
            decode_fixed_ms=max(base.decode_fixed_ms * f["fixed_ms_per_layer"], f["decode_weights_read_ms"]),
            decode_ms_per_context_token=base.decode_ms_per_context_token * f["decode_ms_per_context_token"],
            h2d_gbps=base.h2d_gbps * f["host_link"],
            d2h_gbps=base.d2h_gbps * f["host_link"],
        )

    def describe(self) -> dict[str, Any]:
        """The served model and GPU for the JSON report, and how far the latency model is from its
        measurement. O(1)."""
        return {
            "model": self.spec.name, "hf_repo": self.spec.hf_repo, "model_given": self.model_given,
            "gpu": self.gpu.name, "gpu_given": self.gpu_given, "kv_bytes_per_token": self.kv_bytes_per_token,
            "hbm_gib": self.gpu.hbm_bytes / 2**30, "hbm_gbps": self.gpu.hbm_gbps, "host_link_gbps": self.gpu.host_link_gbps,
            "latency_basis": "measured" if self.measured else "extrapolated",
            "latency_measured_for": f"{REFERENCE_MODEL} on one {REFERENCE_GPU} (data/fixtures)",
            "latency_factors": None if self.measured else self.factors(),
        }

    def note(self) -> str | None:
        """One line for stderr when the answer is not the measured one for a named model, or the
        default model was used; None when the caller named the measured model and GPU. O(1)."""
        if not self.model_given:
            return (f"no model given: KV bytes and TTFT are for {REFERENCE_MODEL} (the measured model) on one "
                    f"{self.gpu.name}{'' if self.gpu.name == REFERENCE_GPU else ' (extrapolated)'}")
        if self.measured:
            return None
        return (f"TTFT and decode times for {self.spec.name} on {self.gpu.name} are extrapolated from the measured "
                f"{REFERENCE_MODEL} on one {REFERENCE_GPU} (scaled by parameters, attention FLOPs, layers, KV bytes "
                "and the GPU's FLOP/s and bandwidths; docs/placement.md)")
