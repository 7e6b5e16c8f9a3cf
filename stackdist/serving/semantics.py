"""Prefix-cache semantics: how an engine turns each request into block lookups and updates.

Two semantics, one replay each, every capacity at once (capacities in blocks):

``per-access`` (KVSET, LMCache's simulator): every block access updates the LRU stack at once,
head first, so it equals ``LRUCache`` over the block stream; a block hits at capacity C iff its
stack distance is at most C, so the head of a request is the least recent of its blocks and is
evicted first.

``engine`` (an idealized engine prefix LRU, as kvcache-simulator): a request is looked up
against the cache as it was when it arrived, its hit is the longest contiguous prefix of cached
blocks, and then its blocks are committed tail first, so its head ends most recent and the tail
is evicted first. A block is cached at arrival iff its depth in the arrival-time stack is at
most C; it is in the hit prefix iff every block before it is cached too, i.e. iff the running
maximum of the depths up to it (its *effective depth*) is at most C. So one replay that reads
each request's depths before committing it gives the hit prefix at every capacity. (Tested
against a direct ``OrderedDict`` simulator with exactly these rules.)

>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace(np.array([0, 1, 0, 1]), np.array([0, 2, 4]), np.array([4, 4, 4, 4]),
...                  np.array([0.0, 1.0]), np.array([8, 8]), np.array([0, 0]), block_size=4)
>>> r = replay_requests(t, "engine")
>>> request_hits(r, 1).tolist(), request_hits(r, 2).tolist(), request_hits(r, 2, tokens=True).tolist()
([0, 1], [0, 2], [0, 8])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stackdist.engine import kernels
from stackdist.engine.distances import replay_arrival_depths, replay_distances
from stackdist.engine.kernels import COLD
from stackdist.engine.keys import dense_keys
from stackdist.traces import RequestTrace

__all__ = ["SEMANTICS", "PrefixReplay", "replay_requests", "request_hits"]

SEMANTICS = ("engine", "per-access")


@dataclass
class PrefixReplay:
    """One replay of a request trace: per-block depths (in blocks) and effective depths.

    ``depths[i]``: block i's LRU stack distance (per-access) or its depth in the stack as its
    request found it (engine); :data:`~stackdist.engine.COLD` if never seen before. ``effective[i]``:
    the running maximum of ``depths`` within the request, the smallest capacity at which block i
    is part of the request's contiguous hit prefix.
    """

    trace: RequestTrace
    semantics: str
    depths: np.ndarray
    effective: np.ndarray


def replay_requests(
    trace: RequestTrace, semantics: str = "engine", progress: Callable[[int, int], None] | None = None
) -> PrefixReplay:
    """Replay a request trace once under ``semantics`` ("engine" or "per-access").

    O(n log k) for n block accesses over k distinct blocks (unit block sizes).
    """
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics must be one of {', '.join(SEMANTICS)}; got {semantics!r}.")
    dense = dense_keys(trace.block_ids)
    if semantics == "per-access":
        depths = replay_distances(dense, None, progress)
    else:
        depths = replay_arrival_depths(dense, None, trace.offsets, progress)
    effective = kernels.segment_running_max(depths, trace.offsets)
    return PrefixReplay(trace, semantics, depths, effective)


def request_hits(replay: PrefixReplay, capacity_blocks: int, tokens: bool = False) -> np.ndarray:
    """Per request, the blocks (or, with ``tokens``, the tokens) of its contiguous hit prefix at
    one capacity: one vectorised pass, no curve per request. O(blocks).
    """
    trace = replay.trace
    in_prefix = replay.effective <= min(int(capacity_blocks), COLD - 1)  # cold (COLD) never hits
    weights = trace.block_tokens if tokens else np.ones(trace.n_blocks, np.int64)
    cumulative = np.r_[0, np.cumsum(np.where(in_prefix, weights, 0))]
    return (cumulative[trace.offsets[1:]] - cumulative[trace.offsets[:-1]]).astype(np.int64)
