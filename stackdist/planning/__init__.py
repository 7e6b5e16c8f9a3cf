"""Planning: answers in the user's units (blocks, tokens, GiB, US$), computed once and typed.

- :mod:`.prefix_curve`: :class:`PrefixCurve`, the exact metrics of a replay over capacity.
- :mod:`.geometry`: KV bytes per token from a model's geometry or its ``config.json``.
- :mod:`.prices`: the one price table.  :mod:`.tier_plan`: HBM / DRAM / SSD bands and cost.
- :mod:`.plan`: :func:`build_plan`, the whole plan as one :class:`~.schema.Plan`.

This ``__init__`` only re-exports.
"""

from .geometry import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    ModelGeometry,
    from_hf_config,
    geometry_for,
)
from .plan import PlanOptions, build_plan, parse_duration, warmup_mask
from .prefix_curve import PrefixCurve, coverage_needs
from .prices import PRICES_USD_PER_GB, TIERS
from .schema import SCHEMA_VERSION, Plan
from .tier_plan import tier_plan

__all__ = [
    "DEFAULT_MODEL",
    "KNOWN_MODELS",
    "PRICES_USD_PER_GB",
    "SCHEMA_VERSION",
    "TIERS",
    "ModelGeometry",
    "Plan",
    "PlanOptions",
    "PrefixCurve",
    "build_plan",
    "coverage_needs",
    "from_hf_config",
    "geometry_for",
    "parse_duration",
    "tier_plan",
    "warmup_mask",
]
