"""Serving models: what an engine does with each request, turned into what the engine replays.

- :mod:`.semantics`: the ``engine`` (idealized prefix LRU) and ``per-access`` (KVSET) models,
  one replay each for every capacity, and the per-request hit query.
- :mod:`.engine_model`: the engine models' protocol and registry (``ENGINE_MODELS``,
  ``engine_model``); :mod:`.vllm` and :mod:`.sglang` register themselves when imported here.

This ``__init__`` only re-exports.
"""

from .engine_model import (
           ENGINE_MODELS,
           EngineModel,
           engine_model,
           engine_model_names,
           register_engine_model,
)
from .semantics import SEMANTICS, PrefixReplay, replay_requests, request_hits
from .sglang import SGLANG
from .vllm import VLLM

__all__ = ["ENGINE_MODELS", "SEMANTICS", "SGLANG", "VLLM", "EngineModel", "PrefixReplay", "engine_model",
           "engine_model_names", "register_engine_model", "replay_requests", "request_hits"]
