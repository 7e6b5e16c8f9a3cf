"""How far LRU is from the best any eviction policy can do: Belady's bound at the plan's sizes.

The bound (:mod:`stackdist.engine.belady`) sees the future; it evicts the block reused furthest
ahead, leaves of the prefix tree only, and admits blocks head first like the engine semantics.
Rows are at the working-set capacities of the plan's targets, so each says how much of the
memory a perfect policy would save or how many more prefix tokens it would serve.

>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace.from_blocks([[0, 1], [2], [0, 1], [2]], block_size=4)
>>> optimal_bound(t, np.ones(4, bool), [1, 2], 4)[0]["belady_prefix_token_hit_rate"]
0.16666666666666666
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stackdist.engine.belady import belady_prefix_hits
from stackdist.traces import RequestTrace

__all__ = ["optimal_bound", "optimal_working_set"]


def optimal_bound(trace: RequestTrace, counted: np.ndarray, capacities: Sequence[int], bytes_per_block: int) -> list[dict[str, Any]]:
    """Belady's prefix token hit rate over the counted requests at each capacity (blocks).
    O(blocks log capacity) per capacity."""
    caps = sorted({int(c) for c in capacities})
    hits = belady_prefix_hits(trace.block_ids, trace.offsets, caps)
    blocks = np.repeat(counted, np.diff(trace.offsets))
    input_tokens = int(trace.input_length[counted].sum())
    rows = []
    for cap, row in zip(caps, hits):
        tokens = int(trace.block_tokens[row & blocks].sum())
        rows.append({"capacity_blocks": cap, "gib": cap * bytes_per_block / 2**30, "belady_prefix_token_hits": tokens,
                     "belady_prefix_token_hit_rate": tokens / input_tokens if input_tokens else 0.0})
    return rows


def optimal_working_set(trace: RequestTrace, counted: np.ndarray, target_tokens: int, upper: int) -> int:
    """The smallest capacity (blocks, at most ``upper``) at which Belady's prefix hits reach
    ``target_tokens``, by bisection (Belady with bypass is a stack algorithm, so its hits grow
    with the capacity). O(log upper) Belady runs.

    >>> from stackdist.traces import RequestTrace
    >>> t = RequestTrace.from_blocks([[0, 1], [2], [0, 1], [2]], block_size=4)
    >>> optimal_working_set(t, np.ones(4, bool), 12, 3)
    3
    """
    blocks = np.repeat(counted, np.diff(trace.offsets))

    def tokens(cap: int) -> int:
        hit = belady_prefix_hits(trace.block_ids, trace.offsets, [cap])[0]
        return int(trace.block_tokens[hit & blocks].sum())

    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi) // 2
        if tokens(mid) >= target_tokens:
            hi = mid
        else:
            lo = mid + 1
    return lo
