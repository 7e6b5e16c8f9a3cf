"""Beyond one machine: SHARDS sampling (:mod:`.sampling`, :mod:`.sampled_curve`) and exact
distributed replay (:mod:`.distributed`). This ``__init__`` only re-exports."""

from .distributed import connect, dask_map, distributed_distances, merge_chunks
from .sampled_curve import SampledCurve, spread
from .sampling import (
           ShardsSampler,
           key_hashes,
           sample_mask,
           sampled_curve,
           sampled_curves,
)

__all__ = ["SampledCurve", "ShardsSampler", "connect", "dask_map", "distributed_distances", "key_hashes",
           "merge_chunks", "sample_mask", "sampled_curve", "sampled_curves", "spread"]
