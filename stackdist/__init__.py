"""stackdist: exact LRU hit curves for KV-cache capacity planning, from one replay.

A tour:

>>> import stackdist
>>> d = stackdist.stack_distances([0, 1, 2, 0, 1, 2])
>>> d[3:].tolist()
[3, 3, 3]
"""

from .distances import COLD, StackDistanceStream, dense_keys, engine_depths, stack_distances

__version__ = "0.1.0"

__all__ = ["COLD", "StackDistanceStream", "dense_keys", "engine_depths", "stack_distances", "__version__"]
