"""The engine-model protocol and its registry: every engine model is one :class:`EngineModel`.

An engine model answers what one engine's own cache does with each request, at pool sizes in
that engine's own count (in the spirit of SGLang's ``BasePrefixCache``, the base every tree
implements, and vLLM's ``spec_manager_map``, one manager per spec). It says

- ``name`` (what ``--semantics`` and the plan's JSON call it), ``follows`` (the engine and
  version whose code it follows, call for call), ``engine`` and ``version`` (the same as a
  structured pair, e.g. ``vLLM`` and ``0.33.0``: the plan's table, JSON and plot name them), ``pool_unit`` (its pool's unit, in words) and
  ``budget_key`` (the key of its pool in the plan's ``budgets`` rows);
- its pool from a KV budget: :meth:`~EngineModel.pool_for_pages` (the pool whose usable KV is
  ``pages`` full pages, rounded down; vLLM's ``num_gpu_blocks`` has a null block 0, SGLang's
  pages do not), its inverse :meth:`~EngineModel.pages_in_pool`, and ``min_pool`` (the smallest
  pool that holds one page), from which :meth:`~EngineModel.pool_for_bytes` and
  :meth:`~EngineModel.pool_for_tokens` follow;
- :meth:`~EngineModel.simulate` (per-request hits at each pool size, a :class:`.ServingResult`);
- :meth:`~EngineModel.hit_pools` (optional: when the model's hits are monotone in the pool and
  one replay gives them, the smallest pool at which each page hits: the exact hit curve over
  every pool size, from which the plan's working sets and plot are read; None otherwise);
- what it supports: ``supports_decode_reuse`` (a later prompt reusing an answer's KV),
  ``supports_tiers`` (a shared tier after the GPU hit), ``supports_hybrid_groups`` (sliding-window
  groups in the same pool) and ``supports_routing`` (K workers simulated jointly under the
  kv-aware router: :func:`stackdist.serving.routed.simulate_routed`, whose per-model joint kernels
  are keyed by the model's type there, as vLLM keys its managers by spec type).

The registry (:data:`ENGINE_MODELS`, name -> model, in registration order) is filled by the
models' own modules (:mod:`.vllm`, :mod:`.sglang`: one :func:`register_engine_model` line each),
which the package's ``__init__`` imports; nothing outside ``serving/`` names a model by string:
planning, rendering and the command line read the registry. :func:`engine_model` looks a name up
(a ValueError listing the registered names otherwise). A new model is one file that subclasses
:class:`EngineModel` and registers itself, and one import in ``serving/__init__.py``;
``tests/serving/test_engine_registry.py`` is the contract every registered model passes.

>>> from stackdist.serving import engine_model
>>> m = engine_model("vllm")
>>> m.pool_unit, m.pool_for_pages(455), m.pages_in_pool(456), m.min_pool
('num_gpu_blocks (vLLM; block 0 is its null block)', 456, 455, 2)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from stackdist.traces import RequestTrace

    from .hybrid import GroupSpec
    from .pages import EnginePages
    from .results import ServingResult
    from .schedule import Schedule
    from .scheduler import SchedulerResult, SchedulerSettings

__all__ = ["ENGINE_MODELS", "EngineModel", "engine_model", "engine_model_names", "register_engine_model"]


class EngineModel(ABC):
    """One engine's cache rules: what it is, its pool unit and size from a budget, its simulation.

    Subclasses set the class attributes and implement :meth:`pool_for_pages`,
    :meth:`pages_in_pool` and :meth:`simulate`; the byte and token forms are derived."""

    name: str
    """What the semantics list and the plan call it (unique in the registry)."""
    follows: str
    """The engine and version whose code the model follows (e.g. ``vLLM 0.33.0 v1 KVCacheManager``)."""
    pool_unit: str
    """The pool's unit in words, as the plan reports it."""
    budget_key: str
    """The key of the pool a budget gives, in the plan's ``budgets`` rows."""
    min_pool: int
    """The smallest pool that holds one page (``pages_in_pool(min_pool) >= 1``)."""
    supports_decode_reuse: bool = False
    supports_tiers: bool = False
    supports_hybrid_groups: bool = False
    supports_routing: bool = False
    supports_scheduler: bool = False
    """Whether :meth:`simulate_scheduler` models the engine's own scheduler under load."""
    hybrid_kinds: tuple[str, ...] | None = None
    """With ``supports_hybrid_groups``: the group kinds :meth:`simulate_hybrid` runs (None: every kind)."""
    hybrid_serial_only: bool = False
    """With ``supports_hybrid_groups``: whether :meth:`simulate_hybrid` runs a serial schedule only."""
    separate_swa_pool: bool = False
    """With ``supports_hybrid_groups``: whether sliding-window KV has its own pool, sized by
    ``swa_full_tokens_ratio`` (SGLang), rather than sharing the full-attention pool (vLLM)."""

    @abstractmethod
    def pool_for_pages(self, pages: int) -> int:
        """The pool, in this model's unit, whose usable KV is ``pages`` full pages (rounded down). O(1)."""

    @abstractmethod
    def pages_in_pool(self, pool: int) -> int:
        """The full pages a pool of ``pool`` units holds (its usable KV). O(1)."""

    def pool_for_tokens(self, kv_tokens: int, page_tokens: int) -> int:
        """The pool a KV budget of ``kv_tokens`` tokens gives (whole pages of ``page_tokens``). O(1).

        >>> engine_model("sglang").pool_for_tokens(100, 16)
        6
        """
        return self.pool_for_pages(kv_tokens // page_tokens)

    def pool_for_bytes(self, kv_bytes: int, kv_bytes_per_token: int, page_tokens: int) -> int:
        """The pool a KV budget of ``kv_bytes`` bytes gives, at ``kv_bytes_per_token`` (the model
        geometry's full-attention bytes per token) and ``page_tokens``-token pages. O(1).

        >>> engine_model("vllm").pool_for_bytes(2**30, 147456, 16)
        456
        """
        return self.pool_for_pages(kv_bytes // (page_tokens * kv_bytes_per_token))

    @abstractmethod
    def simulate(self, trace: RequestTrace | EnginePages, pools: Sequence[int | None], schedule: Schedule | str = "serial",
                 decode: bool = False, page_tokens: int = 16, threads: int = 2) -> ServingResult:
        """Per-request prefix hits at each pool size (None = infinite), in this model's unit.

        ``trace`` is a :class:`~stackdist.traces.RequestTrace` or its engine pages;
        ``schedule`` a :class:`.Schedule`, ``"serial"`` or ``"model"``. Complexity: the model's."""

    def simulate_scheduler(self, trace: RequestTrace, pools: Sequence[int | None], decode: bool,
                           settings: SchedulerSettings, arrival_s: np.ndarray | None = None,
                           groups: Sequence[GroupSpec] = ()) -> SchedulerResult:
        """The engine's own scheduler under load at each pool, arrivals from the trace's
        timestamps unless ``arrival_s`` is given; only for models with ``supports_scheduler``;
        ``groups``: the hybrid KV cache groups (models with ``supports_hybrid_groups``)."""
        raise NotImplementedError(f"the {self.name} model has no scheduler model")

    def simulate_hybrid(self, trace: RequestTrace | EnginePages, pools: Sequence[int | None], schedule: Schedule | str,
                        decode: bool, groups: Sequence[GroupSpec], chunk_tokens: int = 8192,
                        swa_full_tokens_ratio: float = 0.8) -> ServingResult:
        """Per-request hits with the model's KV cache groups (full attention beside sliding-window,
        chunked-local or Mamba groups, :mod:`.hybrid`), prefilled in chunks of ``chunk_tokens`` on a
        serial schedule; only for models with ``supports_hybrid_groups``. vLLM's groups share one
        pool; SGLang keeps the sliding-window KV in a pool of ``swa_full_tokens_ratio`` x the full
        pool's tokens (ignored by a one-pool model)."""
        raise NotImplementedError(f"the {self.name} model has no hybrid KV cache model")

    @property
    def engine(self) -> str:
        """The engine the model follows, as its project spells it (``vLLM``); a model sets it,
        else the first word of :attr:`follows`."""
        return (self.follows.split() or [""])[0]

    @property
    def version(self) -> str:
        """The engine's version the model follows (``0.33.0``); a model sets it, else the first
        word of :attr:`follows` with a digit."""
        return next((w for w in self.follows.split() if any(c.isdigit() for c in w)), "")

    def hit_pools(self, pages: EnginePages, decode: bool) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The exact hit curve over every pool at once, when the model has one for these pages
        under a serial schedule: ``(request, pool, min_feasible)``, one entry per page that hits
        at some pool (the request it belongs to and the smallest pool at which it hits: it hits
        at every pool from there on, each page ``page_tokens`` tokens), and the smallest feasible
        pool (below it the trace cannot run). None (the default) when hits are not known to be
        monotone in the pool: the planner then probes pools one simulation each."""
        return None

    def __repr__(self) -> str:
        return f"<engine model {self.name}: {self.follows}>"


ENGINE_MODELS: dict[str, EngineModel] = {}
"""Every registered engine model by name, in registration order (vllm, then sglang)."""


def register_engine_model(model: EngineModel) -> EngineModel:
    """Add ``model`` to :data:`ENGINE_MODELS` and return it; ValueError if another model has its name.

    >>> register_engine_model(engine_model("vllm")) is engine_model("vllm")
    True
    """
    if not isinstance(model, EngineModel):
        raise TypeError(f"an engine model must be an EngineModel; got {model!r}")
    have = ENGINE_MODELS.get(model.name)
    if have is not None and have is not model:
        raise ValueError(f"an engine model named {model.name!r} is registered already ({have!r})")
    ENGINE_MODELS[model.name] = model
    return model


def engine_model(name: str | EngineModel) -> EngineModel:
    """The registered model called ``name`` (a model is returned as it is); ValueError listing
    the registered names otherwise. O(1).

    >>> engine_model("tgi")
    Traceback (most recent call last):
    ValueError: no engine model named 'tgi'; the engine models are vllm, sglang
    """
    if isinstance(name, EngineModel):
        return name
    model = ENGINE_MODELS.get(name)
    if model is None:
        raise ValueError(f"no engine model named {name!r}; the engine models are {', '.join(ENGINE_MODELS)}")
    return model


def engine_model_names() -> tuple[str, ...]:
    """The registered models' names, in registration order.

    >>> engine_model_names()
    ('vllm', 'sglang')
    """
    return tuple(ENGINE_MODELS)
