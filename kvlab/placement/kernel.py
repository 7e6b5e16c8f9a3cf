"""The tiered cache compiled (numba): every built-in policy, both organisations, both lookup modes, prefetch.

The cache's evolution never depends on time: which blocks a request finds, what moves between
tiers and which blocks a prefetch brings up depend only on the block stream and the candidate
lists (the oracle's next requests, or the causal predictor's, which reads sessions and arrival
times only). So :func:`replay` runs the whole cache in one compiled pass and returns, per
request, what the simulator's time model needs (:class:`CacheTrace`); the request-level timing
(links, GPU queue, TTFT, TPOT) then runs over those counts in
:mod:`kvlab.placement.simulator`. The pure-Python :class:`~kvlab.placement.hierarchy.TieredCache`
is the reference; tests check both give identical results on seeded random workloads.

State, one slot per dense block id (ids renumbered in sorted order, so ties between equal keys
still go to the smaller original id): every tier is an indexed binary heap ordered by
``(key0, key1, key2, block)``, the key the tier computed when it last inserted or touched the
block, as :class:`~kvlab.placement.policies.HeapTier` does (the victim is the smallest live
entry). LRU's key is a stamp taken at every insertion and touch (the tier's recency order);
LFU's ``(count, last access, 0)``; predicted / EWMA: ``(0, 0, last)`` for a block never reused,
else ``(1, -(last + gap), last)``. Every key component is an integer below 2**53 or the same
float the Python policy computes, so the order is the Python order exactly.

Complexity: O(accesses x tiers x log(tier size)) time, O(tiers x distinct blocks) memory.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.engine.kernels import HAVE_NUMBA, njit

from .policies import (
    POLICIES,
    EWMANextTouch,
    Policy,
    PredictedReuse,
    Recency,
    ReuseFrequency,
    make_policy,
)

__all__ = ["HAVE_NUMBA", "CacheTrace", "compiled_policy", "dense_blocks", "replay"]

LRU, LFU, PREDICTED, EWMA = 0, 1, 2, 3
_CODES: dict[type, int] = {Recency: LRU, ReuseFrequency: LFU, PredictedReuse: PREDICTED, EWMANextTouch: EWMA}
_DENSE: dict[int, tuple[Any, np.ndarray, int]] = {}


@dataclass
class CacheTrace:
    """What the cache did, per request, in the simulator's order (lookup, then prefetch).

    ``cached[r]`` blocks usable from cache; ``up``/``down``/``prefetch_up``/``prefetch_down``
    (requests x links) the block moves of request r's lookup and of its prefetch round;
    ``moved[r]`` blocks that round brought up; request r waits for the prefetch rounds
    ``waits[wait_offsets[r]:wait_offsets[r + 1]]`` (the rounds that last brought up one of its
    blocks since that block was last used); ``found`` each access's tier (-1 = miss), when recorded.
    """

    cached: np.ndarray
    up: np.ndarray
    down: np.ndarray
    prefetch_up: np.ndarray
    prefetch_down: np.ndarray
    moved: np.ndarray
    wait_offsets: np.ndarray
    waits: np.ndarray
    hits: list[int]
    misses: int
    stale: int
    found: np.ndarray | None


def compiled_policy(policy: str | Policy) -> tuple[int, float] | None:
    """``(policy code, alpha)`` when the compiled cache implements ``policy`` exactly, else None.

    Names and plain instances of the four built-in classes qualify (subclasses do not).

    >>> compiled_policy("lfu"), compiled_policy(EWMANextTouch(alpha=0.5))
    ((1, 0.0), (3, 0.5))
    """
    if isinstance(policy, str):
        if policy not in POLICIES:
            return None
        policy = make_policy(policy)
    code = _CODES.get(type(policy))
    if code is None:
        return None
    return code, float(getattr(policy, "alpha", 0.0))


def dense_blocks(blocks: np.ndarray, owner: Any = None) -> tuple[np.ndarray, int]:
    """Block ids renumbered 0..D-1 in sorted order (order-preserving) and D; cached per ``owner``.

    >>> dense_blocks(np.array([40, 7, 40, 9]))
    (array([2, 0, 2, 1]), 3)
    """
    if owner is not None:
        hit = _DENSE.get(id(owner))
        if hit is not None and hit[0]() is owner:
            return hit[1], hit[2]
    uniques, inverse = np.unique(np.asarray(blocks, dtype=np.int64), return_inverse=True)
    dense = inverse.astype(np.int64).reshape(-1)
    if owner is not None:
        key = id(owner)
        _DENSE[key] = (weakref.ref(owner), dense, len(uniques))
        weakref.finalize(owner, _DENSE.pop, key, None)
    return dense, len(uniques)


# --------------------------------------------------------------------------------------------- heap
# The heap's leaves are inlined by numba (``inline="always"``: measured 25-30% faster on the agent
# workload; inlining the callers too made the compile blow up).
@njit(cache=True, nogil=True, inline="always")
def _less(key, k, x, y):  # pragma: no cover - compiled
    if key[k, x, 0] != key[k, y, 0]:
        return key[k, x, 0] < key[k, y, 0]
    if key[k, x, 1] != key[k, y, 1]:
        return key[k, x, 1] < key[k, y, 1]
    if key[k, x, 2] != key[k, y, 2]:
        return key[k, x, 2] < key[k, y, 2]
    return x < y


@njit(cache=True, nogil=True, inline="always")
def _sift_up(key, heap, pos, k, i):  # pragma: no cover - compiled
    b = heap[k, i]
    while i > 0:
        parent = (i - 1) >> 1
        p = heap[k, parent]
        if not _less(key, k, b, p):
            break
        heap[k, i] = p
        pos[k, p] = i
        i = parent
    heap[k, i] = b
    pos[k, b] = i


@njit(cache=True, nogil=True, inline="always")
def _sift_down(key, heap, size, pos, k, i):  # pragma: no cover - compiled
    n = size[k]
    b = heap[k, i]
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        c = heap[k, child]
        if child + 1 < n and _less(key, k, heap[k, child + 1], c):
            child += 1
            c = heap[k, child]
        if not _less(key, k, c, b):
            break
        heap[k, i] = c
        pos[k, c] = i
        i = child
    heap[k, i] = b
    pos[k, b] = i


@njit(cache=True, nogil=True)
def _remove(key, heap, size, pos, k, b):  # pragma: no cover - compiled
    i = pos[k, b]
    n = size[k] - 1
    size[k] = n
    pos[k, b] = -1
    if i < n:
        moved = heap[k, n]
        heap[k, i] = moved
        pos[k, moved] = i
        _sift_up(key, heap, pos, k, i)
        _sift_down(key, heap, size, pos, k, pos[k, moved])


@njit(cache=True, nogil=True)
def _insert(st, policy, k, b):  # pragma: no cover - compiled
    """Insert ``b`` into tier k, or re-score it there (a touch), with the policy's current key."""
    key, heap, size, pos, meta, gap, clock = st[0], st[1], st[2], st[3], st[4], st[5], st[6]
    if policy == 0:
        clock[1] += 1
        key[k, b, 0], key[k, b, 1], key[k, b, 2] = 0.0, 0.0, float(clock[1])
    elif policy == 1:
        key[k, b, 0], key[k, b, 1], key[k, b, 2] = float(meta[0, b]), float(meta[1, b]), 0.0
    elif gap[b] < 0:
        key[k, b, 0], key[k, b, 1], key[k, b, 2] = 0.0, 0.0, float(meta[1, b])
    else:
        key[k, b, 0], key[k, b, 1], key[k, b, 2] = 1.0, -(float(meta[1, b]) + gap[b]), float(meta[1, b])
    i = pos[k, b]
    if i < 0:
        i = size[k]
        size[k] = i + 1
        heap[k, i] = b
        pos[k, b] = i
        _sift_up(key, heap, pos, k, i)
    else:
        _sift_up(key, heap, pos, k, i)
        _sift_down(key, heap, size, pos, k, pos[k, b])


@njit(cache=True, nogil=True)
def _pop(st, k):  # pragma: no cover - compiled
    b = st[1][k, 0]
    _remove(st[0], st[1], st[2], st[3], k, b)
    return b


@njit(cache=True, nogil=True)
def _on_access(st, policy, alpha, b, now):  # pragma: no cover - compiled
    meta, gap = st[4], st[5]
    if policy == 1:
        meta[0, b] += 1
    elif policy >= 2 and meta[1, b] > 0:
        g = now - meta[1, b]
        if policy == 2 or gap[b] < 0:
            gap[b] = float(g)
        else:
            gap[b] = alpha * float(g) + (1.0 - alpha) * gap[b]
    meta[1, b] = now


@njit(cache=True, nogil=True)
def _insert_exclusive(st, policy, top, b, row):  # pragma: no cover - compiled
    """Insert into the top tier and demote victims down the active tiers (counted in ``ctr[row]``)."""
    size, where, ctr, caps, nxt = st[2], st[7], st[8], st[9], st[10]
    n_tiers = caps.shape[0]
    k = top
    _insert(st, policy, k, b)
    where[b] = k
    while size[k] > caps[k]:
        victim = _pop(st, k)
        j = nxt[k]
        if j == n_tiers:
            where[victim] = -1
            return
        for link in range(k, j):
            ctr[row, link] += 1
        _insert(st, policy, j, victim)
        where[victim] = j
        k = j


@njit(cache=True, nogil=True)
def _insert_dropping(st, policy, k, b):  # pragma: no cover - compiled
    _insert(st, policy, k, b)
    if st[2][k] > st[9][k]:
        _pop(st, k)


# --------------------------------------------------------------------------------------------- accesses
@njit(cache=True, nogil=True)
def _locate(st, exclusive, b):  # pragma: no cover - compiled
    if exclusive:
        return st[7][b]
    active, pos = st[11], st[3]
    for a in range(active.shape[0]):
        if pos[active[a], b] >= 0:
            return active[a]
    return -1


@njit(cache=True, nogil=True)
def _access(st, policy, exclusive, top, b, usable):  # pragma: no cover - compiled
    """One demand access (after the policy's ``on_access``); the tier that held ``b`` or -1."""
    pos, where, ctr, active = st[3], st[7], st[8], st[11]
    n_tiers = st[9].shape[0]
    if exclusive:
        t = where[b]
        if t == top:
            _insert(st, policy, t, b)
            if usable:
                for link in range(t):
                    ctr[0, link] += 1
            return t
        if top == n_tiers:
            return -1
        if t > 0:
            _remove(st[0], st[1], st[2], pos, t, b)
        if usable and t > 0:
            for link in range(t):
                ctr[0, link] += 1
        else:
            for link in range(top):
                ctr[1, link] += 1
        _insert_exclusive(st, policy, top, b, np.int64(1))
        return t
    t = _locate(st, np.bool_(False), b)
    if t >= 0 and usable:
        _insert(st, policy, t, b)
        for link in range(t):
            ctr[0, link] += 1
        for a in range(active.shape[0]):
            if active[a] >= t:
                break
            _insert_dropping(st, policy, active[a], b)
        return t
    deepest = -1
    for a in range(active.shape[0]):
        k = active[a]
        if pos[k, b] >= 0:
            _insert(st, policy, k, b)
        else:
            _insert_dropping(st, policy, k, b)
            deepest = k
    for link in range(deepest):
        ctr[1, link] += 1
    return t


@njit(cache=True, nogil=True)
def _prefetch(st, policy, exclusive, top, b):  # pragma: no cover - compiled
    """Bring ``b`` up from below the top tier (not an access); its source tier, or -1."""
    ctr, active = st[8], st[11]
    t = _locate(st, exclusive, b)
    if t <= top:
        return -1
    for link in range(top, t):
        ctr[2, link] += 1
    if exclusive:
        _remove(st[0], st[1], st[2], st[3], t, b)
        _insert_exclusive(st, policy, top, b, np.int64(3))
    else:
        for a in range(active.shape[0]):
            if active[a] >= t:
                break
            _insert_dropping(st, policy, active[a], b)
    return t


@njit(cache=True, nogil=True)
def _replay(st, policy, alpha, exclusive, top, prefix, budget, blocks, offsets, cand_offsets, candidates,
            found, out, hits, waits, wait_offsets):  # pragma: no cover - compiled
    """Every request in order: its ready-wait rounds, its lookup (``prefix`` or block mode), its prefetch round.

    ``out[r]`` = (cached, moved, up..., down..., prefetch_up..., prefetch_down...); ``hits`` = per tier, misses, stale.
    """
    ctr, clock = st[8], st[6]
    n_links = ctr.shape[1]
    n_req = offsets.shape[0] - 1
    n_blocks = st[7].shape[0]
    ready = np.full(n_blocks, -1, np.int64)
    seen = np.full(n_blocks, -1, np.int64)
    round_mark = np.full(max(n_req, 1), -1, np.int64)
    before = np.zeros((4, n_links), np.int64)
    n_tiers = hits.shape[0] - 2
    n_waits = 0
    for r in range(n_req):
        lo, hi = offsets[r], offsets[r + 1]
        n = hi - lo
        wait_offsets[r] = n_waits
        for i in range(lo, hi):
            q = ready[blocks[i]]
            if q >= 0:
                ready[blocks[i]] = -1
                if round_mark[q] != r:
                    round_mark[q] = r
                    waits[n_waits] = q
                    n_waits += 1
        for row in range(ctr.shape[0]):  # loops: an array assignment compiles a shape check (seconds)
            for link in range(n_links):
                before[row, link] = ctr[row, link]
        cached = 0
        if prefix:
            for i in range(lo, hi):
                found[i] = _locate(st, exclusive, blocks[i])
            usable = 0
            while usable < n and found[lo + usable] >= 0:
                usable += 1
            for i in range(n - 1, -1, -1):
                clock[0] += 1
                if policy != 0:
                    _on_access(st, policy, alpha, blocks[lo + i], clock[0])
                _access(st, policy, exclusive, top, blocks[lo + i], i < usable)
            for i in range(n):
                if i < usable:
                    hits[found[lo + i]] += 1
                elif found[lo + i] >= 0:
                    hits[n_tiers + 1] += 1
            cached = usable
        else:
            for i in range(lo, hi):
                clock[0] += 1
                if policy != 0:
                    _on_access(st, policy, alpha, blocks[i], clock[0])
                t = _access(st, policy, exclusive, top, blocks[i], np.bool_(True))
                found[i] = t
                if t >= 0:
                    hits[t] += 1
                    cached += 1
        hits[n_tiers] += n - cached
        moved = 0
        for c in range(cand_offsets[r], cand_offsets[r + 1]):
            q = candidates[c]
            for i in range(offsets[q], offsets[q + 1]):
                if moved >= budget:
                    break
                b = blocks[i]
                if seen[b] == r:
                    continue
                seen[b] = r
                if _prefetch(st, policy, exclusive, top, b) > 0:
                    ready[b] = r
                    moved += 1
        out[r, 0], out[r, 1] = cached, moved
        for row in range(4):
            for link in range(n_links):
                out[r, 2 + row * n_links + link] = ctr[row, link] - before[row, link]
    wait_offsets[n_req] = n_waits


def replay(
    blocks: np.ndarray, n_blocks: int, offsets: np.ndarray, capacities: tuple[int, ...], policy: tuple[int, float],
    exclusive: bool, prefix: bool, cand_offsets: np.ndarray, candidates: np.ndarray, record: bool = False,
) -> CacheTrace:
    """Run every request through the compiled tiers (dense ``blocks`` in 0..``n_blocks``-1).

    ``candidates[cand_offsets[r]:cand_offsets[r + 1]]`` are the requests whose blocks request
    r's prefetch round tries (in order, at most ``capacities[0]`` blocks moved); empty = no prefetch.
    Complexity: O(accesses x tiers x log(tier size)).
    """
    code, alpha = policy
    n_tiers = len(capacities)
    n_links = n_tiers - 1
    caps = np.array([min(c, n_blocks + 1) for c in capacities], dtype=np.int64)
    active = np.array([k for k, c in enumerate(capacities) if c > 0], dtype=np.int64)
    nxt = np.array([next((j for j in active.tolist() if j > k), n_tiers) for k in range(n_tiers)], dtype=np.int64)
    top = int(active[0]) if len(active) else n_tiers
    width = int(min(max(capacities), n_blocks + 1)) + 1
    st = (
        np.zeros((n_tiers, n_blocks, 3)), np.zeros((n_tiers, width), np.int64), np.zeros(n_tiers, np.int64),
        np.full((n_tiers, n_blocks), -1, np.int64), np.zeros((2, n_blocks), np.int64), np.full(n_blocks, -1.0),
        np.zeros(2, np.int64), np.full(n_blocks, -1, np.int64), np.zeros((4, n_links), np.int64), caps, nxt, active,
    )
    n_req = len(offsets) - 1
    found = np.empty(len(blocks), np.int64)
    out = np.zeros((n_req, 2 + 4 * n_links), np.int64)
    hits = np.zeros(n_tiers + 2, np.int64)
    waits = np.empty(len(blocks), np.int64)
    wait_offsets = np.zeros(n_req + 1, np.int64)
    budget = min(int(capacities[0]), len(blocks) + 1)
    _replay(st, code, alpha, exclusive, top, prefix, budget, blocks, np.asarray(offsets, np.int64),
            cand_offsets, candidates, found, out, hits, waits, wait_offsets)
    parts = [out[:, 2 + row * n_links: 2 + (row + 1) * n_links] for row in range(4)]
    return CacheTrace(
        cached=out[:, 0], up=parts[0], down=parts[1], prefetch_up=parts[2], prefetch_down=parts[3], moved=out[:, 1],
        wait_offsets=wait_offsets, waits=waits[: wait_offsets[-1]], hits=hits[:n_tiers].tolist(),
        misses=int(hits[n_tiers]), stale=int(hits[n_tiers + 1]), found=found if record else None,
    )
