"""SGLang 0.5.23's radix prefix cache (``RadixCache``, page size 16, LRU) with its paged
allocator, exactly.

The compiled kernel follows the engine's code, call for call, at page granularity:

- **Tree** (``radix_cache.py``): a node is a run of pages; children are keyed by their first
  page. Because page ids are prefix-chained (SPEC.md: equal ids mean equal whole prefixes), the
  node that starts with page id k is unique in the tree, so one array ``first_node[k]`` replaces
  the per-node children dicts. A prompt node's pages are a slice of the trace's page ids
  (``src``, ``length``); a node of generated pages (inserted at finish) gets the id
  ``n_keys + request`` and is only ever reached by its own request.
- **Times**: every ``time.monotonic()`` call of the engine is one tick of a logical clock: a
  match or insert stamps its whole path with one tick (``access_time``), a node created by a
  split or an insert gets a fresh tick. Only the order of times matters to eviction.
- **Match** (``match_prefix``): the key is the prompt limited to ``P - 1`` tokens
  (``_compute_max_prefix_len``), page aligned: at most ``(P - 1) // 16`` pages; a match ending
  inside a node splits it (``_split_node``).
- **Insert** (``_insert_helper``): walks, splits at the end of the shared part, adds one leaf.
- **Locks** (``inc_lock_ref`` / ``dec_lock_ref``): counts up the path to the root.
- **Evict** (``evict``): repeatedly the evictable leaf (unlocked, childless) with the smallest
  ``last_access_time``; the whole leaf is freed; a parent left childless and unlocked joins the
  heap; stops once the freed tokens reach the request. Kept as a lazy heap across calls (an entry
  is valid while its node is alive, evictable and still has the time it was pushed with), which
  pops exactly what a heap rebuilt from ``evictable_leaves`` at each call pops.
- **Allocator** (``allocator/paged.py``): ``N`` usable pages (page 0 is the padding page, not
  counted). Prompt: ``alloc_paged_token_slots_extend`` first evicts until
  ``extend_tokens + 16`` tokens are free (the conservative estimate, one page per request), then
  ``alloc_extend`` needs ``cdiv(P, 16) - hit`` pages (fails if fewer are free). Decode step:
  ``alloc_paged_token_slots_decode`` evicts until 16 tokens are free on *every* step, then
  ``alloc_decode`` takes a page when the new token starts one.
- **Request life** (``common.py``, ``RadixCache.checkpoint``): arrival = match, lock, allocate;
  prefill_end = ``checkpoint(up_to=P)`` (insert the full prompt pages, free the request's own
  pages that the insert found already cached, re-match, move the lock); finish =
  ``release_kv_cache``: ``checkpoint(up_to=P + O' - 1)`` (also inserting the full pages of
  generated tokens, and re-inserting the prompt so the leaf splits at the prompt,
  ``split_prompt``), free the partial last page, unlock.

**Feasibility.** With a serial schedule the running request holds ``cdiv(P + O' - 1, 16)``
pages at its peak (its locked path included) and everything else in the tree is evictable, so
every allocation succeeds iff ``N >= max_r cdiv(P_r + O'_r - 1, 16)``: monotone in N, and that
bound is the smallest feasible pool (``min_feasible_proved``). With a timed schedule the search
returns a feasible N whose N - 1 is infeasible (bisection), not proved minimal.

**No one replay.** Hits are not monotone in the pool size, so no stack (inclusion) property
holds and every pool size runs its own exact simulation. A counterexample, serial, no decode
(B_h = 32): with 14 pages request 3 hits 64 tokens and request 4 none; with 13 pages request 3
hits none and request 4 hits 32. Whole leaves are evicted (a run of pages at once, the
conservative estimate over-asks by a page), so what survives depends on how the leaves were cut,
not on recency alone:

>>> import numpy as np
>>> ids = [0, 1, 2, 3, 4, 5, 6, 4, 5, 6, 0, 1, 7, 8, 4, 9]
>>> tok = [32, 32, 32, 23, 32, 32, 29, 32, 32, 29, 32, 32, 32, 8, 32, 31]
>>> cx = RequestTrace(np.array(ids), np.array([0, 4, 7, 10, 14, 16]), np.array(tok),
...     np.zeros(5), np.array([119, 93, 93, 104, 63]), np.ones(5, np.int64), block_size=32)
>>> simulate_sglang(cx, [13, 14], "serial").hit_tokens.tolist()
[[0, 0, 80, 0, 32], [0, 0, 80, 64, 0]]

>>> import numpy as np
>>> t = RequestTrace(np.array([1, 2, 1, 2]), np.array([0, 2, 4]), np.array([16, 8, 16, 8]),
...     np.zeros(2), np.array([24, 24]), np.array([1, 1]), block_size=16)
>>> res = simulate_sglang(t, [1, 2, None], "serial", decode=False)
>>> res.hit_tokens.tolist(), res.failed_request.tolist()
([[-1, -1], [0, 16], [0, 16]], [0, -1, -1])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from stackdist.engine.kernels import njit
from stackdist.traces import RequestTrace

from .engine_model import EngineModel, register_engine_model
from .pages import EnginePages, engine_pages
from .results import ServingResult, bisect_feasible, check_pools, run_pools
from .schedule import Events, Schedule, event_order
from .sglang_hybrid import simulate_hybrid_groups
from .sglang_mamba import simulate_mamba_groups
from .vllm import resolve_schedule

if TYPE_CHECKING:
    from .hybrid import GroupSpec

__all__ = ["SGLANG", "SglangModel", "sglang_pool_run", "simulate_sglang", "tree_event", "tree_init", "tree_inputs",
           "tree_match_length", "tree_rows", "tree_usage"]

_B = 16
_ROOT = 0
# Flags and deltas passed to the compiled helpers as typed values, not Python literals: numba
# compiles a helper once per literal argument value (``_walk`` twice, ``_lock`` twice otherwise).
_MATCH, _INSERT = np.bool_(False), np.bool_(True)
_LOCK_ONE, _UNLOCK_ONE = np.int64(1), np.int64(-1)


@njit(cache=True, nogil=True)
def _heap_push(ht, hn, size, t, node):  # type: ignore[no-untyped-def]
    """Push (t, node) on the min-heap of ``size`` entries held in ``ht``/``hn`` (room assumed)."""
    i = size
    while i > 0:
        par = (i - 1) // 2
        if ht[par] < t or (ht[par] == t and hn[par] <= node):
            break
        ht[i] = ht[par]
        hn[i] = hn[par]
        i = par
    ht[i] = t
    hn[i] = node


@njit(cache=True, nogil=True)
def _heap_pop(ht, hn, size):  # type: ignore[no-untyped-def]
    """Pop the minimum of a heap of ``size`` entries; returns (t, node). Caller decrements size."""
    t0 = ht[0]
    n0 = hn[0]
    size -= 1
    t = ht[size]
    node = hn[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and (ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hn[c + 1] < hn[c])):
            c += 1
        if t < ht[c] or (t == ht[c] and node <= hn[c]):
            break
        ht[i] = ht[c]
        hn[i] = hn[c]
        i = c
    ht[i] = t
    hn[i] = node
    return t0, n0


# node fields (rows of ``nd``)
_PARENT, _SRC, _LEN, _FIRST, _NCHILD, _LOCK, _TIME, _ALIVE, _HTIME, _GEN = range(10)
# scalar state (``hs``): heap size, node count, clock, free pages
_HSIZE, _NNODES, _CLOCK, _FREE = range(4)


@njit(cache=True, nogil=True)
def _evictable(nd, c):  # type: ignore[no-untyped-def]
    return c != _ROOT and nd[c, _ALIVE] == 1 and nd[c, _LOCK] == 0 and nd[c, _NCHILD] == 0


@njit(cache=True, nogil=True)
def _maybe_push(nd, c, ht, hn, hs):  # type: ignore[no-untyped-def]
    """Keep the heap invariant: an evictable leaf has one entry with its current time."""
    if not _evictable(nd, c) or nd[c, _HTIME] == nd[c, _TIME]:
        return
    if hs[_HSIZE] == len(ht):
        _compact(nd, ht, hn, hs)
        if nd[c, _HTIME] == nd[c, _TIME]:
            return
    _heap_push(ht, hn, hs[_HSIZE], nd[c, _TIME], c)
    hs[_HSIZE] += 1
    nd[c, _HTIME] = nd[c, _TIME]


@njit(cache=True, nogil=True)
def _compact(nd, ht, hn, hs):  # type: ignore[no-untyped-def]
    """Rebuild a full heap from the evictable leaves only (drops stale entries)."""
    hs[_HSIZE] = 0
    for x in range(1, hs[_NNODES]):
        if _evictable(nd, x):
            _heap_push(ht, hn, hs[_HSIZE], nd[x, _TIME], x)
            hs[_HSIZE] += 1
            nd[x, _HTIME] = nd[x, _TIME]
        else:
            nd[x, _HTIME] = -1


@njit(cache=True, nogil=True)
def _common(nd, c, key, base, i, L, plen):  # type: ignore[no-untyped-def]
    """Pages node ``c`` shares with the request key from page ``i`` (key length ``L``)."""
    n = nd[c, _LEN]
    if nd[c, _GEN] >= 0:  # generated pages: reached only by their own request
        return min(n, L - i)
    src = nd[c, _SRC]
    t = 0
    while t < n and i + t < L and i + t < plen and key[src + t] == key[base + i + t]:
        t += 1
    return t


@njit(cache=True, nogil=True)
def _split(nd, c, m, key, first_node, hs):  # type: ignore[no-untyped-def]
    """_split_node: a new upper node of ``m`` pages above ``c`` (fresh time); returns it."""
    nn = hs[_NNODES]
    hs[_NNODES] += 1
    hs[_CLOCK] += 1
    nd[nn, _PARENT] = nd[c, _PARENT]
    nd[nn, _SRC] = nd[c, _SRC]
    nd[nn, _LEN] = m
    nd[nn, _FIRST] = nd[c, _FIRST]
    nd[nn, _NCHILD] = 1
    nd[nn, _LOCK] = nd[c, _LOCK]
    nd[nn, _TIME] = hs[_CLOCK]
    nd[nn, _ALIVE] = 1
    nd[nn, _HTIME] = -1
    nd[nn, _GEN] = nd[c, _GEN]
    first_node[nd[nn, _FIRST]] = nn
    nd[c, _PARENT] = nn
    nd[c, _SRC] += m
    nd[c, _LEN] -= m
    nd[c, _FIRST] = key[nd[c, _SRC]]
    first_node[nd[c, _FIRST]] = c
    return nn


@njit(cache=True, nogil=True)
def _walk(nd, key, base, L, plen, gkey, first_node, ht, hn, hs, inserting):  # type: ignore[no-untyped-def]
    """match_prefix (``inserting`` False) or _insert_helper (True) over ``L`` key pages.

    Returns (pages matched, last node). Insert adds the unmatched rest as one new leaf."""
    hs[_CLOCK] += 1
    t = hs[_CLOCK]
    node = _ROOT
    i = np.int64(0)  # typed: _common gets one signature, not also Literal[int](0)
    while i < L:
        ck = key[base + i] if i < plen else gkey
        c = first_node[ck]
        if c < 0:
            break
        nd[c, _TIME] = t
        _maybe_push(nd, c, ht, hn, hs)
        m = _common(nd, c, key, base, i, L, plen)
        i += m
        if m < nd[c, _LEN]:
            node = _split(nd, c, m, key, first_node, hs)
            if not inserting:
                return i, node
        else:
            node = c
    if inserting and i < L:
        nn = hs[_NNODES]
        hs[_NNODES] += 1
        hs[_CLOCK] += 1
        ck = key[base + i] if i < plen else gkey
        nd[nn, _PARENT] = node
        nd[nn, _SRC] = base + i if i < plen else -1
        nd[nn, _LEN] = L - i
        nd[nn, _FIRST] = ck
        nd[nn, _NCHILD] = 0
        nd[nn, _LOCK] = 0
        nd[nn, _TIME] = hs[_CLOCK]
        nd[nn, _ALIVE] = 1
        nd[nn, _HTIME] = -1
        nd[nn, _GEN] = -1 if i < plen else gkey
        first_node[ck] = nn
        nd[node, _NCHILD] += 1
        _maybe_push(nd, nn, ht, hn, hs)
        node = nn
    return i, node


@njit(cache=True, nogil=True)
def _lock(nd, node, delta, ht, hn, hs):  # type: ignore[no-untyped-def]
    """inc_lock_ref (delta 1) / dec_lock_ref (delta -1) from ``node`` up to the root."""
    while node != _ROOT:
        nd[node, _LOCK] += delta
        if delta < 0:
            _maybe_push(nd, node, ht, hn, hs)
        node = nd[node, _PARENT]


@njit(cache=True, nogil=True)
def _evict(nd, num_tokens, B, first_node, ht, hn, hs):  # type: ignore[no-untyped-def]
    """RadixCache.evict: whole least-recently-used evictable leaves until ``num_tokens`` freed."""
    evicted = 0
    while evicted < num_tokens and hs[_HSIZE] > 0:
        t, c = _heap_pop(ht, hn, hs[_HSIZE])
        hs[_HSIZE] -= 1
        if not (_evictable(nd, c) and nd[c, _TIME] == t):
            if nd[c, _HTIME] == t:
                nd[c, _HTIME] = -1
            continue
        hs[_FREE] += nd[c, _LEN]
        evicted += nd[c, _LEN] * B
        nd[c, _ALIVE] = 0
        first_node[nd[c, _FIRST]] = -1
        p = nd[c, _PARENT]
        nd[p, _NCHILD] -= 1
        _maybe_push(nd, p, ht, hn, hs)


@njit(cache=True, nogil=True)
def _evict_to_free(nd, num_tokens, B, first_node, ht, hn, hs):  # type: ignore[no-untyped-def]
    """evict_to_free_tokens: evict the shortfall below ``num_tokens`` free tokens, if any."""
    shortfall = num_tokens - hs[_FREE] * B
    if shortfall > 0:
        _evict(nd, shortfall, B, first_node, ht, hn, hs)


@njit(cache=True, nogil=True)
def _init_tree(nd, first_node, hs, N):  # type: ignore[no-untyped-def]
    """A fresh tree (only the root, locked) and allocator of ``N`` free pages."""
    nd[:, :] = 0
    nd[_ROOT, _LOCK] = 1
    nd[_ROOT, _ALIVE] = 1
    nd[_ROOT, _GEN] = -1
    first_node[:] = -1
    hs[:] = 0
    hs[_NNODES] = 1
    hs[_FREE] = N


@njit(cache=True, nogil=True)
def _match_length(nd, key, base, L, plen, first_node):  # type: ignore[no-untyped-def]
    """The pages ``match_prefix`` would match over ``L`` key pages, read only (no time stamp,
    no split): what the engine would report as a hit at this moment."""
    i = np.int64(0)
    while i < L:
        c = first_node[key[base + i]]
        if c < 0:
            break
        m = _common(nd, c, key, base, i, L, plen)
        i += m
        if m < nd[c, _LEN]:
            break
    return i


@njit(cache=True, nogil=True)
def _event(kind, r, key, off, P, n_keys, B, nd, first_node, ht, hn, hs, lock_node, protected, seq, hits):  # type: ignore[no-untyped-def]
    """One event of request ``r`` on one tree; returns False when its allocation fails."""
    p = P[r]
    base = off[r]
    plen = p // B
    gkey = n_keys + r
    if kind == 3:  # arrival: match (P - 1 tokens, page aligned), lock, allocate the prompt
        cap = (p - 1) // B
        m = 0
        node = _ROOT
        if cap > 0:
            m, node = _walk(nd, key, base, cap, plen, gkey, first_node, ht, hn, hs, _MATCH)
        hits[r] = B * m
        _lock(nd, node, _LOCK_ONE, ht, hn, hs)
        lock_node[r] = node
        protected[r] = m
        _evict_to_free(nd, p - B * m + B, B, first_node, ht, hn, hs)
        need = (p + B - 1) // B - m
        if need > hs[_FREE]:
            return False
        hs[_FREE] -= need
        seq[r] = p
    elif kind == 2:  # prefill_end: checkpoint(up_to=P)
        _checkpoint(nd, key, base, plen, plen, gkey, first_node, ht, hn, hs, lock_node, protected, r)
    elif kind == 1:  # decode step: evict to one free page, a page when the token starts one
        seq[r] += 1
        _evict_to_free(nd, B, B, first_node, ht, hn, hs)
        if (seq[r] - 1) % B == 0:
            if hs[_FREE] < 1:
                return False
            hs[_FREE] -= 1
    elif kind == 0:  # finish: release_kv_cache(checkpoint=True)
        L = seq[r] // B
        _checkpoint(nd, key, base, L, plen, gkey, first_node, ht, hn, hs, lock_node, protected, r)
        if seq[r] % B:
            hs[_FREE] += 1
        _lock(nd, lock_node[r], _UNLOCK_ONE, ht, hn, hs)
    return True


@njit(cache=True, nogil=True)
def _sglang_kernel(key, off, P, n_written, ev_kind, ev_req, n_keys, N, B, hits, heap_cap):  # type: ignore[no-untyped-def]
    """Replay the events with ``N`` pages; fill ``hits``; return the failing request or -1.

    Complexity: O(pages matched + nodes on the paths walked + events) time (log factor for the
    heap), O(requests + keys) memory. ``heap_cap`` sizes the lazy heap (at least nodes + 1).
    """
    n_req = len(P)
    M = tree_rows(n_req)
    nd = np.empty((M, 10), np.int64)
    first_node = np.empty(n_keys + n_req, np.int64)
    cap = max(heap_cap, M + 1)  # compaction leaves at most M entries: room for one push
    ht = np.empty(cap, np.int64)
    hn = np.empty(cap, np.int64)
    hs = np.empty(4, np.int64)
    _init_tree(nd, first_node, hs, N)
    lock_node = np.zeros(n_req, np.int64)
    protected = np.zeros(n_req, np.int64)
    seq = np.zeros(n_req, np.int64)
    for e in range(len(ev_kind)):
        r = ev_req[e]
        if not _event(ev_kind[e], r, key, off, P, n_keys, B, nd, first_node, ht, hn, hs, lock_node, protected, seq, hits):
            return r
    return -1


@njit(cache=True, nogil=True)
def tree_rows(n_req):  # type: ignore[no-untyped-def]
    """Node rows a tree needs for ``n_req`` requests (package-internal, with routed.py)."""
    return 8 * n_req + 8


@njit(cache=True, nogil=True)
def _checkpoint(nd, key, base, L, plen, gkey, first_node, ht, hn, hs, lock_node, protected, r):  # type: ignore[no-untyped-def]
    """RadixCache.checkpoint: insert ``L`` pages, free the duplicates found, split at the prompt
    (``split_prompt``), re-match, move the lock to the new last node."""
    pre = 0
    if L > 0:
        pre, _n = _walk(nd, key, base, L, plen, gkey, first_node, ht, hn, hs, _INSERT)
    else:
        hs[_CLOCK] += 1
    if pre > protected[r]:
        hs[_FREE] += pre - protected[r]
    if 0 < plen < L:
        _walk(nd, key, base, plen, plen, gkey, first_node, ht, hn, hs, _INSERT)
    node = _ROOT
    if L > 0:
        _m, node = _walk(nd, key, base, L, plen, gkey, first_node, ht, hn, hs, _MATCH)
    protected[r] = L
    _lock(nd, lock_node[r], _UNLOCK_ONE, ht, hn, hs)
    _lock(nd, node, _LOCK_ONE, ht, hn, hs)
    lock_node[r] = node


def sglang_pool_run(pages: EnginePages, schedule: Schedule, decode: bool, num_pages: int | None, page_size: int = _B) -> tuple[np.ndarray, int]:
    """One exact simulation with ``num_pages`` KV pages (None = a pool that never evicts).

    Returns ``(hit_tokens per request, first failing request or -1)``. Complexity: see the kernel.

    >>> import numpy as np
    >>> t = RequestTrace(np.array([1, 2, 1, 2]), np.array([0, 2, 4]), np.array([16, 16, 16, 16]),
    ...     np.zeros(2), np.array([32, 32]), np.array([1, 1]), block_size=16)
    >>> sglang_pool_run(engine_pages(t), Schedule.serial(2), False, 2)[0].tolist()
    [0, 16]
    """
    return _run(pages, _prepare(pages, schedule, decode, page_size), num_pages, page_size)


def _prepare(pages: EnginePages, schedule: Schedule, decode: bool, B: int) -> tuple[np.ndarray, np.ndarray, Events]:
    """Kernel inputs shared by every pool size: tokens written per request, event kinds, events."""
    P, O = pages.input_tokens, pages.output_tokens
    written = P + (np.maximum(O, 1) - 1 if decode else 0)
    ev = event_order(schedule, O, decode)
    return written, ev.kind.astype(np.int64), ev


def _run(pages: EnginePages, prep: tuple[np.ndarray, np.ndarray, Events], num_pages: int | None, B: int,
         heap_cap: int | None = None) -> tuple[np.ndarray, int]:
    """The kernel on prepared inputs (``heap_cap`` only to test the heap's compaction)."""
    written, kind, ev = prep
    N = int(((written + B - 1) // B).sum()) + 1 if num_pages is None else int(num_pages)
    hits = np.zeros(pages.n_requests, np.int64)
    failed = _sglang_kernel(pages.key, pages.offsets, pages.input_tokens, written, kind, ev.request,
                            max(pages.n_keys, 1), N, B, hits, 2 * (8 * pages.n_requests + 8) + 16 if heap_cap is None else heap_cap)
    if failed >= 0:
        hits[:] = -1
    return hits, int(failed)


def _serial_min_pages(pages: EnginePages, decode: bool, B: int) -> int:
    """Smallest feasible page count for a serial schedule: one request's peak pages."""
    P, O = pages.input_tokens, pages.output_tokens
    written = P + (np.maximum(O, 1) - 1 if decode else 0)
    return max(int(((written + B - 1) // B).max(initial=0)), 1)


def simulate_sglang(
    trace: RequestTrace | EnginePages,
    pool_pages: Sequence[int | None],
    schedule: Schedule | str = "serial",
    decode: bool = False,
    page_size: int = _B,
    threads: int = 2,
    find_min_pool: bool = True,
) -> ServingResult:
    """SGLang's per-request prefix hits at each pool of ``pool_pages`` pages (None = infinite).

    ``schedule`` is a :class:`Schedule`, ``"serial"`` or ``"model"``. Every size runs its own
    exact simulation (no inclusion property, see the module docstring), two sizes at a time.
    When a pool is infeasible and ``find_min_pool``, ``min_feasible_pool`` is computed (proved
    minimal for serial schedules).
    Complexity: per size O(pages + events + path nodes walked, x log nodes for the heap).

    >>> import numpy as np
    >>> t = RequestTrace(np.array([1, 1]), np.array([0, 1, 2]), np.array([16, 16]),
    ...     np.zeros(2), np.array([16, 16]), np.array([1, 1]), block_size=16)
    >>> simulate_sglang(t, [1, None]).hit_tokens.tolist()
    [[0, 0], [0, 0]]
    """
    pages = trace if isinstance(trace, EnginePages) else engine_pages(trace, page_size)
    pools = check_pools(pool_pages, 1)
    sched = resolve_schedule(schedule, trace, pages)
    B = page_size
    prep = _prepare(pages, sched, decode, B)
    runs = run_pools(lambda n: _run(pages, prep, n, B), pools, threads, "sglang model:")
    hits = np.stack([h for h, _ in runs])
    failed = np.array([f for _, f in runs], np.int64)
    bound = _serial_min_pages(pages, decode, B)
    min_pool, proved = None, False
    if (failed >= 0).any() and find_min_pool:
        proved = sched.is_serial
        if proved:
            min_pool = bound
        else:
            P, O = pages.input_tokens, pages.output_tokens
            hi = int(((P + np.maximum(O, 1) + B - 1) // B).sum()) + 1
            min_pool = bisect_feasible(lambda n: _run(pages, prep, n, B)[1] < 0, bound, hi)
    return ServingResult("sglang", pools, hits, failed, min_pool, "per-size", proved)


@njit(cache=True, nogil=True)
def tree_usage(nd, hs, N):  # type: ignore[no-untyped-def]
    """SGLang's ``token_usage`` of a tree over ``N`` pages: ``1 - (free + evictable) / N``
    (scheduler: ``num_used = max_total_num_tokens - (available_size + evictable_size)``; the
    evictable size is every alive unlocked node's length, as ``RadixCache.evictable_size_``
    counts it). O(nodes).

    >>> nd, fn, hs = np.zeros((2, 10), np.int64), np.zeros(3, np.int64), np.zeros(4, np.int64)
    >>> _init_tree(nd, fn, hs, 8)
    >>> float(tree_usage(nd, hs, 8))
    0.0
    """
    evictable = 0
    for c in range(1, hs[_NNODES]):
        if nd[c, _ALIVE] == 1 and nd[c, _LOCK] == 0:
            evictable += nd[c, _LEN]
    return 1.0 - (hs[_FREE] + evictable) / N if N > 0 else 0.0


# Package-internal: the kernel steps serving/routed.py drives on K trees at once (one tree per
# worker; per-request arrays shared). Same code as the one-tree kernel above.
tree_init, tree_match_length, tree_event = _init_tree, _match_length, _event
tree_inputs = _prepare


class SglangModel(EngineModel):
    """SGLang's radix cache as an engine model (:mod:`.engine_model`): :func:`simulate_sglang`;
    a pool of N pages holds N pages (the padding page 0 is not counted).

    >>> SGLANG.pool_for_pages(455), SGLANG.min_pool, SGLANG.supports_decode_reuse
    (455, 1, False)
    """

    name = "sglang"
    follows = "SGLang 0.5.23 RadixCache and paged allocator, LRU eviction"
    engine = "SGLang"
    version = "0.5.23"
    pool_unit = "pages of the KV pool (SGLang)"
    budget_key = "sglang_pages"
    min_pool = 1
    supports_tiers = True
    supports_routing = True
    supports_hybrid_groups = True
    hybrid_kinds = ("full", "sliding", "mamba")
    hybrid_serial_only = True
    separate_swa_pool = True

    def pool_for_pages(self, pages: int) -> int:
        return pages

    def pages_in_pool(self, pool: int) -> int:
        return pool

    def simulate(self, trace: RequestTrace | EnginePages, pools: Sequence[int | None], schedule: Schedule | str = "serial",
                 decode: bool = False, page_tokens: int = _B, threads: int = 2) -> ServingResult:
        return simulate_sglang(trace, pools, schedule, decode, page_tokens, threads)

    def simulate_hybrid(self, trace: RequestTrace | EnginePages, pools: Sequence[int | None], schedule: Schedule | str,
                        decode: bool, groups: Sequence[GroupSpec], chunk_tokens: int = 8192,
                        swa_full_tokens_ratio: float = 0.8) -> ServingResult:
        """SGLang's FULL + SWA tree (:mod:`.sglang_hybrid`): exact at pools where SGLang evicts
        nothing, refused (ValueError) elsewhere and for group kinds it does not model; full
        attention + Mamba groups go to :mod:`.sglang_mamba` (same contract)."""
        if any(g.kind == "mamba" for g in groups):
            return simulate_mamba_groups(trace, groups, pools, schedule, decode, chunk_tokens)
        return simulate_hybrid_groups(trace, groups, pools, schedule, decode, chunk_tokens, swa_full_tokens_ratio)


SGLANG = register_engine_model(SglangModel())
"""The registered SGLang model."""
