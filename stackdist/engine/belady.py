"""The optimal bound: Belady's MIN (evict the key reused furthest in the future), compiled.

For unit-size keys Belady's rule is optimal: no eviction policy gets more hits at the same
capacity (Belady 1966; Mattson et al. 1970, with bypass: a missed key whose next use is
furthest is not admitted). It needs the future, so it is a bound to compare LRU against, not a
policy to run.

With requests (``offsets``), a request hits the longest prefix of its blocks that is cached
when it arrives, then its blocks are admitted head first. In a prefix-chained trace every use of
a block is also a use of its parent, so a parent's next use is never later than its child's:
evicting the furthest next use, ties to the deepest block, only ever evicts leaves of the
cached prefix tree, so every cached block stays usable (the "leaves only" rule of prefix caches).
The tests compare it with an exhaustive search over every eviction choice on small traces.

State: a max-heap of (next use, depth) with lazy deletion (an entry is valid while it equals its
key's ``due``; at most one push per access, so the heap never outgrows the trace); O(n log C)
per capacity.

>>> belady_hits([0, 1, 2, 0, 1, 2], [2]).tolist()
[[False, False, False, True, True, False]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .kernels import njit
from .keys import dense_keys

__all__ = ["belady_hits", "belady_prefix_hits", "next_uses"]

NEVER = np.iinfo(np.int64).max // 4


def next_uses(ids: np.ndarray) -> np.ndarray:
    """For every access, the position of the next access to the same key (``NEVER`` if none). O(n).

    >>> next_uses(np.array([0, 1, 0])).tolist()[:2]
    [2, 2305843009213693951]
    """
    out = np.full(ids.shape[0], NEVER, np.int64)
    order = np.lexsort((np.arange(ids.shape[0]), ids))
    same = ids[order[1:]] == ids[order[:-1]]
    out[order[:-1][same]] = order[1:][same]
    return out


@njit(cache=True, nogil=True)
def _push(heap_t, heap_d, heap_k, size, t, d, k):  # type: ignore[no-untyped-def]
    i = size
    heap_t[i], heap_d[i], heap_k[i] = t, d, k
    while i > 0:
        p = (i - 1) >> 1
        if heap_t[p] > heap_t[i] or (heap_t[p] == heap_t[i] and heap_d[p] >= heap_d[i]):
            break
        heap_t[p], heap_t[i] = heap_t[i], heap_t[p]
        heap_d[p], heap_d[i] = heap_d[i], heap_d[p]
        heap_k[p], heap_k[i] = heap_k[i], heap_k[p]
        i = p
    return size + 1


@njit(cache=True, nogil=True)
def _pop(heap_t, heap_d, heap_k, size):  # type: ignore[no-untyped-def]
    size -= 1
    heap_t[0], heap_d[0], heap_k[0] = heap_t[size], heap_d[size], heap_k[size]
    i = 0
    while True:
        a, b, m = 2 * i + 1, 2 * i + 2, i
        for c in (a, b):
            if c < size and (heap_t[c] > heap_t[m] or (heap_t[c] == heap_t[m] and heap_d[c] > heap_d[m])):
                m = c
        if m == i:
            return size
        heap_t[m], heap_t[i] = heap_t[i], heap_t[m]
        heap_d[m], heap_d[i] = heap_d[i], heap_d[m]
        heap_k[m], heap_k[i] = heap_k[i], heap_k[m]
        i = m


@njit(cache=True, nogil=True)
def _belady(ids, nxt, depth, offsets, n_keys, capacity, hit):  # type: ignore[no-untyped-def]
    """One capacity. Per request: look up the cached prefix, then admit head first, evicting the
    furthest next use (ties: deepest); a key's heap entry is valid iff it equals its ``due``."""
    due = np.full(n_keys, -1, np.int64)  # next use of a cached key, -1 if not cached
    m = ids.shape[0] + 1
    heap_t = np.empty(m + n_keys, np.int64)
    heap_d = np.empty(m + n_keys, np.int64)
    heap_k = np.empty(m + n_keys, np.int64)
    size = np.int64(0)  # typed: a literal 0 would make numba compile _pop a second time
    cached = 0
    for r in range(offsets.shape[0] - 1):
        lo, hi = offsets[r], offsets[r + 1]
        prefix = True
        for i in range(lo, hi):
            prefix = prefix and due[ids[i]] >= 0
            hit[i] = prefix
        for i in range(lo, hi):
            k = ids[i]
            if due[k] < 0:
                if capacity == 0:
                    continue
                if cached == capacity:
                    while True:  # the furthest valid entry, or bypass when the new key is furthest
                        t, d, v = heap_t[0], heap_d[0], heap_k[0]
                        if due[v] == t and t >= 0:
                            break
                        size = _pop(heap_t, heap_d, heap_k, size)
                    if t < nxt[i] or (t == nxt[i] and d < depth[i]):
                        continue  # bypass: nothing cached is reused later than this key
                    size = _pop(heap_t, heap_d, heap_k, size)
                    due[v] = -1
                    cached -= 1
                cached += 1
            due[k] = nxt[i]
            size = _push(heap_t, heap_d, heap_k, size, nxt[i], depth[i], k)
    return hit


def _run(keys: Any, capacities: Sequence[int], offsets: np.ndarray, depth: np.ndarray) -> np.ndarray:
    dense = dense_keys(keys)
    ids = dense.ids
    nxt = next_uses(ids)
    caps = [int(c) for c in capacities]
    if any(c < 0 for c in caps):
        raise ValueError(f"capacities must be non-negative integers; got {list(capacities)}.")
    out = np.zeros((len(caps), ids.shape[0]), bool)
    for j, c in enumerate(caps):
        _belady(ids, nxt, depth, offsets, max(dense.n_keys, 1), min(c, max(dense.n_keys, 1)), out[j])
    return out


def belady_hits(keys: Any, capacities: Sequence[int]) -> np.ndarray:
    """Which accesses hit under Belady's MIN with bypass at each capacity (unit sizes): a bool
    array of shape (capacities, accesses). O(n log C) per capacity.

    >>> belady_hits([0, 1, 2, 0, 1, 2], [1, 3]).sum(axis=1).tolist()
    [1, 3]
    """
    n = len(keys)
    return _run(keys, capacities, np.arange(n + 1, dtype=np.int64), np.zeros(n, np.int64))


def belady_prefix_hits(keys: Any, offsets: Any, capacities: Sequence[int]) -> np.ndarray:
    """Prefix-cache hits under Belady's rule (module docstring): per capacity, which blocks are in
    their request's cached prefix at arrival. ``keys[offsets[r]:offsets[r+1]]`` is request r, head
    first, prefix-chained. O(n log C) per capacity.

    >>> belady_prefix_hits([0, 1, 0, 2, 0, 1], [0, 2, 4, 6], [2]).astype(int).tolist()
    [[0, 0, 1, 0, 1, 1]]
    """
    offs = np.asarray(offsets, np.int64)
    depth = np.arange(len(keys), dtype=np.int64) - np.repeat(offs[:-1], np.diff(offs))
    return _run(keys, capacities, offs, depth)
