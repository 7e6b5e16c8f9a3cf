"""stackdist: exact LRU hit curves for KV-cache capacity planning, from one replay.

A tour:

>>> import stackdist
>>> d = stackdist.stack_distances([0, 1, 2, 0, 1, 2])
>>> d[3:].tolist()
[3, 3, 3]
"""

from .curve import CurveSteps, HitCurve, parse_window
from .distances import COLD, StackDistanceStream, dense_keys, engine_depths, stack_distances


def hit_curve(keys, sizes=None, window=None) -> HitCurve:
    """The exact LRU hit curve of a trace (every capacity at once), hits counted in ``window``.

    Shorthand for :meth:`HitCurve.from_trace`.

    >>> hit_curve([0, 1, 0, 1]).hits_at([1, 2]).tolist()
    [0, 2]
    """
    return HitCurve.from_trace(keys, sizes, window)


__version__ = "0.1.0"

__all__ = ["COLD", "CurveSteps", "HitCurve", "StackDistanceStream", "hit_curve", "parse_window", "dense_keys", "engine_depths", "stack_distances", "__version__"]
