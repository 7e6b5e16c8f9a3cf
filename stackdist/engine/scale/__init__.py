"""Beyond one machine: SHARDS sampling (:mod:`.sampling`, :mod:`.estimate`) and exact
distributed replay (:mod:`.distributed`). This ``__init__`` only re-exports, lazily (:mod:`stackdist.lazy`)."""

from typing import TYPE_CHECKING

from stackdist.lazy import lazy_exports

if TYPE_CHECKING:  # the eager form, for type checkers
    from .distributed import connect, dask_map, distributed_distances, merge_chunks
    from .estimate import SampledCurve, spread
    from .sampling import (
               ShardsSampler,
               key_hashes,
               sample_mask,
               sampled_curve,
               sampled_curves,
    )

__getattr__, __dir__ = lazy_exports(__name__, {
    "distributed": ("connect", "dask_map", "distributed_distances", "merge_chunks",),
    "estimate": ("SampledCurve", "spread",),
    "sampling": ("ShardsSampler", "key_hashes", "sample_mask", "sampled_curve", "sampled_curves",),
})

__all__ = ["SampledCurve", "ShardsSampler", "connect", "dask_map", "distributed_distances", "key_hashes",
           "merge_chunks", "sample_mask", "sampled_curve", "sampled_curves", "spread"]
