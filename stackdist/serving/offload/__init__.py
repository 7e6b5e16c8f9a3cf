"""Offload tiers behind the engines' GPU prefix caches (CPU DRAM, local disk), as the engines implement them.

- :mod:`.base`: the protocol (:class:`OffloadModel`), its registry (``OFFLOAD_MODELS``,
  ``offload_model``), a configuration (:class:`TierConfig`) and the result (:class:`OffloadResult`);
- :mod:`.spec`: ``MODEL:tier=SIZE,...`` as the user writes it, sizes in the model's units, tokens or bytes;
- :mod:`.vllm_native` (vLLM's ``OffloadingConnector`` CPU tier, lru / arc), :mod:`.lmcache` (LMCache's
  CPU and disk backends behind vLLM), :mod:`.hicache` (SGLang's HiCache host tier; followed, not
  driven) register themselves when imported here.

This ``__init__`` only re-exports.
"""

from .base import (
    OFFLOAD_MODELS,
    OffloadModel,
    OffloadResult,
    TierConfig,
    offload_model,
    offload_model_names,
    register_offload_model,
)
from .hicache import HICACHE
from .lmcache import LMCACHE
from .spec import OffloadSpec, describe_sizes, parse_offload, resolve_offload
from .vllm_native import VLLM_NATIVE

__all__ = ["HICACHE", "LMCACHE", "OFFLOAD_MODELS", "VLLM_NATIVE", "OffloadModel", "OffloadResult", "OffloadSpec", "TierConfig",
           "describe_sizes", "offload_model", "offload_model_names", "parse_offload", "register_offload_model",
           "resolve_offload"]
