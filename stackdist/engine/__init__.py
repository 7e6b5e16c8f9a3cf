"""The engine: exact LRU stack distances and hit curves. It knows nothing about LLMs.

Data flows one way: keys (:mod:`.keys`) -> compiled replay (:mod:`.kernels`, driven by
:mod:`.distances`) -> distance histogram (:mod:`.histogram`) -> curves (:mod:`.curve`,
:mod:`.tiers`, :mod:`.stream`). :mod:`.reference` holds the readable references the compiled
paths are tested against. This ``__init__`` only re-exports, lazily (:mod:`stackdist.lazy`).
"""

from typing import TYPE_CHECKING

from stackdist.lazy import lazy_exports

if TYPE_CHECKING:  # the eager form, for type checkers
    from .curve import CurveSteps, HitCurve, hit_curve, parse_window
    from .distances import COLD, engine_depths, stack_distances
    from .keys import DenseKeys, dense_keys
    from .stream import StackDistanceStream
    from .tiers import (
        OUTCOMES,
        InclusiveTierCurve,
        compare_organisations,
        exclusive_grid,
        exclusive_hits,
        inclusive_grid,
        inclusive_tiers,
    )

__getattr__, __dir__ = lazy_exports(__name__, {
    "curve": ("CurveSteps", "HitCurve", "hit_curve", "parse_window",),
    "distances": ("COLD", "engine_depths", "stack_distances",),
    "keys": ("DenseKeys", "dense_keys",),
    "stream": ("StackDistanceStream",),
    "tiers": ("OUTCOMES", "InclusiveTierCurve", "compare_organisations", "exclusive_grid", "exclusive_hits", "inclusive_grid", "inclusive_tiers",),
})

__all__ = [
    "COLD",
    "OUTCOMES",
    "CurveSteps",
    "DenseKeys",
    "HitCurve",
    "InclusiveTierCurve",
    "StackDistanceStream",
    "compare_organisations",
    "dense_keys",
    "engine_depths",
    "exclusive_grid",
    "exclusive_hits",
    "hit_curve",
    "inclusive_grid",
    "inclusive_tiers",
    "parse_window",
    "stack_distances",
]
