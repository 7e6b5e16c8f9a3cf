"""The offload-tier protocol and its registry: every engine's offload tier is one :class:`OffloadModel`.

An offload model answers what an engine's offload tiers (CPU DRAM, local disk) add behind its GPU
prefix cache, request by request: the tokens each tier serves after the GPU hit and the chunks
written into each tier. It sits *behind* a registered GPU engine model (``behind``: the engine
model whose GPU hits it extends, :mod:`stackdist.serving.engine_model`) and says

- ``name`` (what an offload specification ``NAME:tier=SIZE`` calls it), ``follows`` (the engine code and version it
  follows, call for call) and ``driven`` (whether its per-request results were checked against the
  engine's own code driven on a CPU, or only followed in the code: "followed, not driven");
- ``tiers`` (the tier names it models, in lookup order: ``("cpu",)``, ``("cpu", "disk")``) and
  ``unit`` (the unit of a tier's size, the engine's own: vLLM's 16-token blocks, LMCache's chunks);
- ``options`` (its ``key=value`` options with defaults, e.g. ``policy=lru``) and
  :meth:`~OffloadModel.chunk_tokens` (tokens per unit under those options);
- :meth:`~OffloadModel.units_for_bytes` (a tier size in bytes as the engine converts it) and
  :meth:`~OffloadModel.simulate` (an :class:`OffloadResult`).

The registry (:data:`OFFLOAD_MODELS`) is filled by the models' own modules (one
:func:`register_offload_model` line each), as :data:`~stackdist.serving.engine_model.ENGINE_MODELS`
is; nothing outside ``serving/`` names an offload model by string.

>>> from stackdist.serving.offload import offload_model
>>> m = offload_model("vllm-native")
>>> m.behind, m.tiers, m.unit, m.driven
('vllm', ('cpu',), 'blocks', True)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from ..pages import EnginePages

__all__ = ["OFFLOAD_MODELS", "OffloadInfeasible", "OffloadModel", "OffloadResult", "TierConfig", "offload_model", "offload_model_names",
           "register_offload_model"]


class OffloadInfeasible(ValueError):
    """A configuration the engine cannot serve the trace with (it would wait forever, or do
    something the model does not follow); the message says why."""


@dataclass(frozen=True)
class TierConfig:
    """One offload configuration: a size per tier in the model's ``unit`` (``None`` = never
    evicts; 0 = no such tier), and the model's options.

    >>> TierConfig((("cpu", 128),), (("policy", "arc"),)).label
    'cpu128'
    """

    sizes: tuple[tuple[str, int | None], ...]
    options: tuple[tuple[str, str], ...] = ()

    def size(self, tier: str) -> int | None:
        """The size of ``tier`` (0 when the configuration has no such tier)."""
        return dict(self.sizes).get(tier, 0)

    def option(self, key: str) -> str:
        """The value of option ``key`` (KeyError when unset)."""
        return dict(self.options)[key]

    @property
    def label(self) -> str:
        """``cpu128`` / ``cpu64_disk1024`` / ``cpuinf``: the configuration in column names."""
        return "_".join(f"{t}{'inf' if s is None else s}" for t, s in self.sizes if s != 0) or "none"


@dataclass(frozen=True)
class OffloadResult:
    """An offload model's per-request results at each (GPU pool, configuration).

    ``gpu_pools[i]`` and ``configs[j]`` index the first two axes of ``tier_hit_tokens[tier]``
    (int64 ``(pools, configs, requests)``: prompt tokens served by that tier beyond the GPU hit)
    and ``offload_hit_tokens`` (what the engine's connector reports as loadable beyond the GPU hit,
    the sum over tiers; the engine still computes the last prompt token when GPU + offload cover
    the prompt, which the plan accounts for: :func:`stackdist.planning.offload_plan.effective_tier_hits`). ``written[tier]``
    (int64 ``(pools, configs)``) counts the units written into the tier, ``evicted[tier]`` those
    evicted from it; ``failed_stores`` (``(pools, configs)``) counts store attempts the tier refused.
    Rows of an infeasible GPU pool are -1. ``config_gpu_hit_tokens`` (``(pools, configs, requests)``)
    is set by a model whose tier changes the GPU hits themselves (HiCache keeps host-backed nodes
    in the device tree): the GPU hits at each configuration, which :meth:`gpu_hits` reads instead
    of the engine model's ``gpu_hit_tokens``.
    """

    model: str
    gpu_pools: tuple[int | None, ...]
    configs: tuple[TierConfig, ...]
    gpu_hit_tokens: np.ndarray
    tier_hit_tokens: Mapping[str, np.ndarray]
    offload_hit_tokens: np.ndarray
    written: Mapping[str, np.ndarray]
    evicted: Mapping[str, np.ndarray]
    failed_stores: np.ndarray
    unit_tokens: int
    config_gpu_hit_tokens: np.ndarray | None = None
    infeasible: Mapping[tuple[int, int], str] = field(default_factory=dict)
    """(GPU pool index, configuration index) -> why the engine cannot serve the trace there (its
    rows are -1)."""

    def feasible(self, i: int) -> bool:
        """Whether GPU pool ``i`` is feasible (its hits are not -1)."""
        return bool((self.gpu_hit_tokens[i] >= 0).all())

    def config_feasible(self, i: int, j: int) -> bool:
        """Whether GPU pool ``i`` and configuration ``j`` are both feasible."""
        return self.feasible(i) and (i, j) not in self.infeasible

    def gpu_hits(self, i: int, j: int) -> np.ndarray:
        """The GPU hits per request at GPU pool ``i`` and configuration ``j``. O(1)."""
        return self.gpu_hit_tokens[i] if self.config_gpu_hit_tokens is None else self.config_gpu_hit_tokens[i, j]


class OffloadModel(ABC):
    """One engine's offload tiers behind its GPU prefix cache. Subclasses set the class
    attributes and implement :meth:`simulate` (and :meth:`chunk_tokens` when a unit is not a page)."""

    name: str
    """What a specification ``NAME:tier=SIZE`` calls it (unique in the registry)."""
    follows: str
    """The engine code and version the model follows."""
    behind: str
    """The registered GPU engine model whose hits it extends."""
    driven: bool
    """True when checked request by request against the engine's code driven on a CPU."""
    tiers: tuple[str, ...]
    """Tier names in lookup order."""
    tier_memory: ClassVar[Mapping[str, str]] = {}
    """Tier -> the memory it is priced as: ``dram`` (the default) or ``ssd``."""
    unit: str
    """The unit of a tier's size (plural noun: ``blocks``, ``chunks``, ``pages``)."""
    options: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    """Option key -> allowed values, the first being the default (an empty tuple: any positive integer)."""
    defaults: ClassVar[Mapping[str, str]] = {}
    """Option key -> default value."""
    organisation: str
    """How the tiers are organised, in one sentence (what the plan's answers say they assume)."""

    def chunk_tokens(self, options: Mapping[str, str], page_tokens: int) -> int:
        """Tokens per unit of a tier's size under ``options`` (default: one engine page)."""
        return page_tokens

    def units_for_bytes(self, size_bytes: int, bytes_per_token: int, options: Mapping[str, str], page_tokens: int) -> int:
        """A tier of ``size_bytes`` bytes in units (default: whole units of the unit's KV bytes). O(1).

        >>> offload_model("vllm-native").units_for_bytes(2**30, 2**10, {}, 16)
        65536
        """
        return size_bytes // (self.chunk_tokens(options, page_tokens) * bytes_per_token)

    @abstractmethod
    def simulate(self, pages: EnginePages, gpu_pools: Sequence[int | None], gpu_hits: np.ndarray,
                 configs: Sequence[TierConfig], decode: bool) -> OffloadResult:
        """Per-request tier hits for each GPU pool (its hits ``gpu_hits[i]``, -1 rows infeasible)
        and each configuration, on the serial schedule."""

    def __repr__(self) -> str:
        return f"<offload model {self.name}: {self.follows}>"


OFFLOAD_MODELS: dict[str, OffloadModel] = {}
"""Every registered offload model by name, in registration order."""


def register_offload_model(model: OffloadModel) -> OffloadModel:
    """Add ``model`` to :data:`OFFLOAD_MODELS` and return it; ValueError if another model has its name."""
    if not isinstance(model, OffloadModel):
        raise TypeError(f"an offload model must be an OffloadModel; got {model!r}")
    have = OFFLOAD_MODELS.get(model.name)
    if have is not None and have is not model:
        raise ValueError(f"an offload model named {model.name!r} is registered already ({have!r})")
    OFFLOAD_MODELS[model.name] = model
    return model


def offload_model(name: str | OffloadModel) -> OffloadModel:
    """The registered offload model called ``name``; ValueError listing the registered names otherwise.

    >>> offload_model("kvbm")
    Traceback (most recent call last):
    ValueError: no offload model named 'kvbm'; the offload models are hicache, lmcache, vllm-native
    """
    if isinstance(name, OffloadModel):
        return name
    model = OFFLOAD_MODELS.get(name)
    if model is None:
        raise ValueError(f"no offload model named {name!r}; the offload models are {', '.join(OFFLOAD_MODELS)}")
    return model


def offload_model_names() -> tuple[str, ...]:
    """The registered offload models' names, in registration order."""
    return tuple(OFFLOAD_MODELS)
