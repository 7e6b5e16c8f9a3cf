"""Per-request questions the lab asks of one replay, beyond the hit prefix of :func:`request_hits`.

``kvlab block-lab`` reports, per request and semantics at one capacity: the hit prefix
(:func:`~stackdist.serving.semantics.request_hits`), the blocks that hit at any position
(:func:`cached_blocks`) and the blocks cached when the request arrives, before any of its own
blocks is touched (:func:`resident_at_arrival`, from :func:`arrival_depths`). Each is one
vectorised pass over the blocks; no curve is built per request.

>>> from stackdist.traces import RequestTrace
>>> from stackdist.serving.semantics import replay_requests
>>> t = RequestTrace(np.array([0, 1, 2, 1, 0, 2]), np.array([0, 3, 6]), np.full(6, 4),
...                  np.array([0.0, 1.0]), np.array([12, 12]), np.array([0, 0]), block_size=4)
>>> r = replay_requests(t, "per-access")
>>> arrival_depths(r).tolist()[3:], r.depths.tolist()[3:]  # block 2 was 1 deep at arrival, 3 deep when read
([2, 3, 1], [2, 3, 3])
>>> resident_at_arrival(r, 2).tolist(), cached_blocks(r, 2).tolist()
([0, 2], [0, 1])
"""

from __future__ import annotations

import itertools

import numpy as np

from stackdist.engine import COLD

from .semantics import PrefixReplay

__all__ = ["arrival_depths", "cached_blocks", "previous_positions", "request_counts", "resident_at_arrival"]


def previous_positions(ids: np.ndarray) -> np.ndarray:
    """Per position, the previous position of the same id, or -1. O(n log n).

    >>> previous_positions(np.array([5, 7, 5, 5])).tolist()
    [-1, -1, 0, 2]
    """
    ids = np.asarray(ids)
    order = np.argsort(ids, kind="stable")
    ranked = ids[order]
    same = ranked[1:] == ranked[:-1]
    out = np.full(ids.shape[0], -1, np.int64)
    out[order[1:][same]] = order[:-1][same]
    return out


def arrival_depths(replay: PrefixReplay) -> np.ndarray:
    """Per block: its depth (in blocks) in the LRU stack when its request arrives, COLD if unseen.

    engine: the replay's depths are already arrival depths. per-access: block j of a request
    starting at s, last accessed at p = prev[j] < s, has stack distance ``depths[j]`` =
    distinct blocks in [p, j]; its arrival depth is the distinct blocks in [p, s): the same
    minus the request's earlier blocks k (s <= k < j) not seen in [p, s), i.e. those with
    prev[k] < p. Assumes a request's blocks are distinct (prefix-chained).
    O(n log n + sum of squared request lengths).
    """
    if replay.semantics == "engine":
        return replay.depths
    trace, depths = replay.trace, replay.depths
    previous = previous_positions(trace.block_ids)
    arrival = np.full(depths.shape[0], COLD, np.int64)
    offsets = trace.offsets.tolist()
    for lo, hi in itertools.pairwise(offsets):
        prev = previous[lo:hi]
        earlier_and_new = np.tril(prev[None, :] < prev[:, None], k=-1).sum(axis=1)
        seen = prev >= 0
        arrival[lo:hi][seen] = depths[lo:hi][seen] - earlier_and_new[seen]
    return arrival


def request_counts(replay: PrefixReplay, values: np.ndarray, capacity_blocks: int) -> np.ndarray:
    """Per request, how many of its blocks have ``values`` (one per block, in blocks) at most
    ``capacity_blocks``. O(blocks)."""
    within = np.r_[0, np.cumsum(np.asarray(values) <= int(capacity_blocks), dtype=np.int64)]
    offsets = replay.trace.offsets
    return (within[offsets[1:]] - within[offsets[:-1]]).astype(np.int64)


def cached_blocks(replay: PrefixReplay, capacity_blocks: int) -> np.ndarray:
    """Per request, its blocks that hit at any position: per-access, every block still cached
    when it is read (depth <= capacity); engine, the hit prefix (the only blocks an engine
    uses). O(blocks)."""
    values = replay.depths if replay.semantics == "per-access" else replay.effective
    return request_counts(replay, values, capacity_blocks)


def resident_at_arrival(replay: PrefixReplay, capacity_blocks: int) -> np.ndarray:
    """Per request, its blocks cached when it arrives (any position). O(n log n) (see
    :func:`arrival_depths`)."""
    return request_counts(replay, arrival_depths(replay), capacity_blocks)
