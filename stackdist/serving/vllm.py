"""vLLM 0.33.0's prefix cache (v1 ``KVCacheManager``, one full-attention group), exactly.

The compiled kernel follows the engine's code, call for call:

- **Pool** (``block_pool.BlockPool``): ``num_gpu_blocks = N`` blocks; block 0 is popped at start
  as the null block, so N - 1 are usable. The free queue (``FreeKVCacheBlockQueue``) is an
  intrusive doubly linked list over block ids (links in one int32 row per block, with a fake
  head and tail), initially blocks 1..N-1 in id order. ``ref`` counts holders; a block is *cached* when it
  has a block hash. The hash map (``BlockHashToBlockMap``) maps a page key to its cached blocks
  in insertion order (a key can hold several blocks: vLLM does not de-duplicate), kept as a
  per-key linked list; ``get_one_block`` returns the first.
- **Lookup** (``get_computed_blocks`` -> ``FullAttentionManager.find_longest_cache_hit``):
  ``max_cache_hit_length = P - 1``, so at most ``(P - 1) // 16`` pages; the longest run of
  cached full pages from the head. Hit tokens = 16 x that run.
- **Prompt allocation** (``allocate_slots``): ``need = cdiv(P, 16) - hit``; fails (returns None)
  when ``need + (hit blocks with ref 0) > free blocks``; else touches the hit blocks (out of the
  free queue, ref + 1), pops ``need`` blocks from the head (``get_new_blocks``: a popped cached
  block loses its hash = eviction) and caches the new full prompt blocks (``cache_full_blocks``).
- **Decode** step k (``allocate_slots(request, 1)``): a new block when ``cdiv(P + k, 16)``
  exceeds the request's blocks (fails when the free queue is empty); blocks that become full
  get hashed too (their keys are unique to the request: SPEC.md makes the first output token
  unique, so they are never hit, but they are freed as cached blocks).
- **Finish** (``free``): blocks in reverse order, ref - 1; those reaching 0 go to the front
  of the free queue in that order if uncached (``prepend_n``) and to the back if cached
  (``append_n``).

Only decode steps that allocate are replayed (a step that allocates nothing changes nothing
the model observes: the hashing of a generated block is done at finish, where it first matters,
since a running request's blocks are never in the free queue and generated keys are never
looked up).

**Feasibility.** With a serial schedule the request running holds exactly
``cdiv(P + O' - 1, 16)`` distinct blocks at its peak (``O' = O`` with decode, else 1) and every
other block is in the free queue, so every allocation succeeds iff
``N - 1 >= max_r cdiv(P_r + O'_r - 1, 16)``: feasibility is monotone in N and the smallest
feasible pool is that bound + 1 (``min_feasible_proved``). With a timed schedule the blocks in
use are the *union* of the running requests' blocks, which depends on what they share, hence on
the hits, which are not monotone in N; the search then returns a feasible N whose N - 1 is
infeasible (bisection between the serial bound and a pool that never evicts), not proved minimal.

**One replay for every pool size** (serial schedules, with or without decode). Let
``W = P + O' - 1`` be the tokens whose KV a request writes, ``a = W // 16`` its blocks hashed
at finish (full prompt pages, then full blocks holding generated tokens, whose keys are unique).
Claim: if no request with ``P % 16 == 0`` has its last full page already seen earlier in the
trace, then at every N the hit of request i is
``16 * #{j < (P_i - 1) // 16 : D_i(j) <= N - 1 - [W_{i-1} % 16 != 0]}``, where ``D_i(j)`` is
page j's depth (1 = most recent) before request i in the LRU stack of hashed blocks in which
each request pushes its blocks tail first (block a-1, ..., block 0; page 0 ends on top).
Proof. (1) Serial: at each lookup every block is in the free queue, which is always
[uncached blocks][cached blocks, least recently freed first]: uncached blocks are only
prepended, cached ones only appended, pops (prompt or decode) take the head. (2) A page j+1 is
last freed in the same request as page j or earlier, and ``free`` appends page j after page
j+1, so along a chain the cached pages are a prefix, each more recent than the next: the
cached set is prefix-closed and the hit is its cached prefix under the cap. (3) Without
duplicates (the hypothesis: a prompt page is cached twice only when the capped last page of a
16-aligned prompt is cached already, which needs it seen before; generated blocks are unique),
cached blocks are distinct stack items ordered exactly as the stack above, and every eviction
takes the bottom, so the cached set is a top segment of the stack. (4) Its size: let u be the
number of uncached free blocks. A request allocates ``n >= 1`` blocks in all (prompt and decode)
and frees ``[W % 16 != 0]`` uncached ones, so ``u' = max(u - n, 0) + [W % 16 != 0]``; before the
first eviction nothing cached was ever lost (all stack items are cached), after it u equals the
previous request's partial flag, so request i sees the top ``N - 1 - [W_{i-1} % 16 != 0]``
items (or all, if fewer). Hence the formula; inclusion holds and one depth replay answers every
N. When the hypothesis fails (the trace repeats such a prompt) the per-size simulation is used;
the test suite checks the replay against the simulation, and that without the hypothesis it
can differ. Timed (concurrent) schedules break (1): running requests pin blocks (how many
depends on what they share, hence on the hits) and free them out of arrival order, and the
per-size simulation is used. Whether hits stay monotone in N there (or with duplicates) is not
proved; a search over 3,000 random timed traces at 60 pool sizes each found no counterexample.

>>> import numpy as np
>>> t = RequestTrace(np.array([1, 2, 1, 2]), np.array([0, 2, 4]), np.array([16, 8, 16, 8]),
...     np.zeros(2), np.array([24, 24]), np.array([1, 1]), block_size=16)
>>> res = simulate_vllm(t, [2, 3, None], Schedule.serial(2), decode=False)
>>> res.hit_tokens.tolist(), res.failed_request.tolist(), res.method
([[-1, -1], [0, 16], [0, 16]], [0, -1, -1], 'one-replay')
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stackdist.engine.kernels import njit
from stackdist.traces import RequestTrace

from .engine_model import EngineModel, register_engine_model
from .hybrid import GroupSpec
from .hybrid_kernel import simulate_hybrid_fast
from .hybrid_scheduler import simulate_hybrid_scheduler
from .pages import EnginePages, engine_pages
from .results import ServingResult, bisect_feasible, check_pools, run_pools
from .schedule import Events, Schedule, event_order
from .scheduler import SchedulerResult, SchedulerSettings, simulate_scheduler

__all__ = ["VLLM", "VllmModel", "pool_arrive", "pool_decode", "pool_finish", "pool_init", "pool_inputs", "simulate_vllm",
           "vllm_one_replay", "vllm_pool_run"]

_B = 16


# Per-block state, one int32 row per block (fields side by side: one cache line per block):
# free-queue links, ref count, hash key (-1 uncached, -2 cached under a key nobody looks up),
# links of the key's list of cached blocks (insertion order).
_NXT, _PRV, _REF, _KEY, _MNEXT, _MPREV = range(6)


@njit(cache=True, nogil=True)
def _pop_head(bs, HEAD, ks):  # type: ignore[no-untyped-def]
    """get_new_blocks for one block: pop the free queue's head, evict its hash, ref = 1."""
    b = bs[HEAD, _NXT]
    q = bs[b, _NXT]
    bs[HEAD, _NXT] = q
    bs[q, _PRV] = HEAD
    kk = bs[b, _KEY]
    if kk >= 0:  # _maybe_evict_cached_block: unlink b from its key's block list
        p = bs[b, _MPREV]
        n = bs[b, _MNEXT]
        if p >= 0:
            bs[p, _MNEXT] = n
        else:
            ks[kk, 0] = n
        if n >= 0:
            bs[n, _MPREV] = p
        else:
            ks[kk, 1] = p
    bs[b, _KEY] = -1
    bs[b, _REF] = 1
    return b


@njit(cache=True, nogil=True)
def _cache_block(bs, ks, b, kk):  # type: ignore[no-untyped-def]
    """cache_full_blocks for one block: hash ``b`` under page id ``kk``, appended to the id's list
    of cached blocks (vLLM keeps every copy; a lookup takes the first)."""
    bs[b, _KEY] = kk
    t = ks[kk, 1]
    bs[b, _MPREV] = t
    bs[b, _MNEXT] = -1
    if t >= 0:
        bs[t, _MNEXT] = b
    else:
        ks[kk, 0] = b
    ks[kk, 1] = b


@njit(cache=True, nogil=True)
def _arrive(r, key, off, P, tbl, tb, nblk, ncached, bs, ks, HEAD, nfree, B, hits):  # type: ignore[no-untyped-def]
    """get_computed_blocks + allocate_slots(prompt) for request ``r``; returns the new free
    count, or -1 when the allocation fails (allocate_slots returns None)."""
    p = P[r]
    base = off[r]
    cap = (p - 1) // B
    h = 0
    evictable = 0
    while h < cap:  # longest run of cached full pages, at most (P - 1) // B
        b = ks[key[base + h], 0]
        if b < 0:
            break
        tbl[tb + h] = b
        if bs[b, _REF] == 0:
            evictable += 1
        h += 1
    hits[r] = B * h
    need = (p + B - 1) // B - h
    if need + evictable > nfree:
        return -1
    for j in range(h):  # touch
        b = tbl[tb + j]
        if bs[b, _REF] == 0:
            pp = bs[b, _PRV]
            q = bs[b, _NXT]
            bs[pp, _NXT] = q
            bs[q, _PRV] = pp
            nfree -= 1
        bs[b, _REF] += 1
    for j in range(need):
        tbl[tb + h + j] = _pop_head(bs, HEAD, ks)
    nblk[r] = h + need
    for j in range(h, p // B):  # cache_full_blocks
        _cache_block(bs, ks, tbl[tb + j], key[base + j])
    ncached[r] = p // B
    return nfree - need


@njit(cache=True, nogil=True)
def _finish(r, tbl, tb, nblk, ncached, n_final, bs, ks, key, off, cont, HEAD, TAIL, first):  # type: ignore[no-untyped-def]
    """free(request): hash its full generated blocks (under the continuing request's page ids
    when decode reuse names one, else under ids nobody looks up), then free its blocks in reverse
    order (uncached to the head in that order, cached to the tail); returns the blocks freed."""
    q = cont[r]
    for j in range(ncached[r], n_final[r]):
        b = tbl[tb + j]
        if q < 0 or j >= off[q + 1] - off[q]:
            bs[b, _KEY] = -2
            continue
        _cache_block(bs, ks, b, key[off[q] + j])
    nf = 0
    freed = 0
    for j in range(nblk[r] - 1, -1, -1):
        b = tbl[tb + j]
        bs[b, _REF] -= 1
        if bs[b, _REF] == 0:
            freed += 1
            if bs[b, _KEY] == -1:
                first[nf] = b
                nf += 1
            else:  # append_n
                t = bs[TAIL, _PRV]
                bs[t, _NXT] = b
                bs[b, _PRV] = t
                bs[b, _NXT] = TAIL
                bs[TAIL, _PRV] = b
    for i in range(nf - 1, -1, -1):  # prepend_n
        b = first[i]
        q = bs[HEAD, _NXT]
        bs[HEAD, _NXT] = b
        bs[b, _PRV] = HEAD
        bs[b, _NXT] = q
        bs[q, _PRV] = b
    nblk[r] = 0
    return freed


@njit(cache=True, nogil=True)
def _init_pool(bs):  # type: ignore[no-untyped-def]
    """A fresh pool of ``N = len(bs) - 2`` blocks: nothing cached, ref 0, the free queue
    1..N-1 in id order between the fake head (row N) and tail (row N + 1)."""
    N = bs.shape[0] - 2
    bs[:, :] = -1
    bs[:, _REF] = 0
    last = N
    for b in range(1, N):  # block 0 is the null block, never queued
        bs[last, _NXT] = b
        bs[b, _PRV] = last
        last = b
    bs[last, _NXT] = N + 1
    bs[N + 1, _PRV] = last


@njit(cache=True, nogil=True)
def _decode(r, k, P, tbl, tb, nblk, bs, ks, HEAD, nfree, B):  # type: ignore[no-untyped-def]
    """Decode step ``k`` of request ``r`` (allocate_slots(request, 1)): a new block when the
    token starts one; returns the new free count, or -1 when the free queue is empty."""
    need = (P[r] + k + B - 1) // B - nblk[r]
    if need > nfree:
        return -1
    for _j in range(need):
        tbl[tb + nblk[r]] = _pop_head(bs, HEAD, ks)
        nblk[r] += 1
    return nfree - need


@njit(cache=True, nogil=True)
def _vllm_kernel(key, off, P, tbl_off, n_final, ev_kind, ev_req, ev_k, n_keys, N, B, hits, cont):  # type: ignore[no-untyped-def]
    """Replay the events at ``num_gpu_blocks = N``; fill ``hits``; return the failing request or -1.

    Complexity: O(pages touched + events) time, O(N + n_keys + table) memory.
    """
    HEAD = N
    TAIL = N + 1
    bs = np.empty((N + 2, 6), np.int32)
    _init_pool(bs)
    nfree = N - 1
    ks = np.full((n_keys, 2), -1, np.int32)  # first and last cached block of each key
    n_req = len(P)
    tbl = np.empty(tbl_off[n_req], np.int32)
    nblk = np.zeros(n_req, np.int64)
    ncached = np.zeros(n_req, np.int64)
    widest = 1  # the longest block table (a loop: np.diff/np.max cost seconds of compilation)
    for r in range(n_req):
        widest = max(widest, tbl_off[r + 1] - tbl_off[r])
    first = np.empty(widest, np.int32)
    for e in range(len(ev_kind)):
        r = ev_req[e]
        kind = ev_kind[e]
        tb = tbl_off[r]
        if kind == 3:  # arrival
            nfree = _arrive(r, key, off, P, tbl, tb, nblk, ncached, bs, ks, HEAD, nfree, B, hits)
            if nfree < 0:
                return r
        elif kind == 1:  # decode step k: allocate_slots(request, 1)
            nfree = _decode(r, ev_k[e], P, tbl, tb, nblk, bs, ks, HEAD, nfree, B)
            if nfree < 0:
                return r
        elif kind == 0:  # finish
            nfree += _finish(r, tbl, tb, nblk, ncached, n_final, bs, ks, key, off, cont, HEAD, TAIL, first)
    return -1


def _prepare(pages: EnginePages, schedule: Schedule, decode: bool, B: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, Events]:
    """Kernel inputs: per-request block-table offsets, blocks hashed at finish, and the events
    (decode steps kept only where they allocate: ``(P + k - 1) % B == 0``)."""
    P = pages.input_tokens
    O = pages.output_tokens
    written = P + (np.maximum(O, 1) - 1 if decode else 0)  # tokens whose KV is written
    tbl_off = np.concatenate(([0], np.cumsum((written + B - 1) // B))).astype(np.int64)
    n_final = written // B
    events = event_order(schedule, O, decode, keep_decode=lambda r, k: (P[r] + k - 1) % B == 0)
    return tbl_off, n_final, events.kind.astype(np.int64), events


def vllm_pool_run(pages: EnginePages, schedule: Schedule, decode: bool, num_gpu_blocks: int | None, block_size: int = _B) -> tuple[np.ndarray, int]:
    """One exact simulation at ``num_gpu_blocks`` (None = a pool that never evicts).

    Returns ``(hit_tokens per request, first failing request or -1)``. Complexity: O(pages +
    events) time, O(N + keys + pages) memory.

    >>> import numpy as np
    >>> t = RequestTrace(np.array([1, 1]), np.array([0, 1, 2]), np.array([16, 16]),
    ...     np.zeros(2), np.array([16, 16]), np.array([1, 1]), block_size=16)
    >>> hits, failed = vllm_pool_run(engine_pages(t), Schedule.serial(2), False, 2)
    >>> hits.tolist(), failed
    ([0, 0], -1)
    """
    return _run(pages, _prepare(pages, schedule, decode, block_size), num_gpu_blocks, block_size)


def _run(pages: EnginePages, prep: tuple[np.ndarray, np.ndarray, np.ndarray, Events], num_gpu_blocks: int | None, B: int) -> tuple[np.ndarray, int]:
    """The kernel on prepared inputs (shared by every pool size of one call)."""
    tbl_off, n_final, kind, ev = prep
    N = int(tbl_off[-1]) + 1 if num_gpu_blocks is None else int(num_gpu_blocks)
    if N >= 2**31 - 2 or pages.n_keys >= 2**31:
        raise ValueError(f"num_gpu_blocks and page ids must fit in int32; got {N} blocks, {pages.n_keys} page ids")
    hits = np.zeros(pages.n_requests, np.int64)
    cont = pages.continued_by if pages.continued_by is not None else np.full(pages.n_requests, -1, np.int64)
    failed = _vllm_kernel(pages.key, pages.offsets, pages.input_tokens, tbl_off, n_final, kind,
                          ev.request, ev.k, max(pages.n_keys, 1), N, B, hits, cont)
    if failed >= 0:
        hits[:] = -1
    return hits, int(failed)


def _no_duplicates(pages: EnginePages, B: int) -> bool:
    """True when no request with ``P % B == 0`` finds its last full page seen before (the
    hypothesis of the one-replay claim in the module docstring)."""
    P = pages.input_tokens
    f = P // B
    n = pages.n_requests
    req_of_page = np.repeat(np.arange(n), np.diff(pages.offsets))
    j = np.arange(len(pages.key)) - pages.offsets[req_of_page]
    full = j < f[req_of_page]
    fk = pages.key[full]
    if len(fk) == 0:
        return True
    _, first_idx = np.unique(fk, return_index=True)
    first_req = np.full(pages.n_keys, n, np.int64)
    first_req[fk[first_idx]] = req_of_page[full][first_idx]
    aligned = np.flatnonzero((P % B == 0) & (f > 0))
    last_key = pages.key[pages.offsets[aligned] + f[aligned] - 1]
    return bool(np.all(first_req[last_key] >= aligned))


def vllm_hit_pools(pages: EnginePages, decode: bool = False, block_size: int = _B) -> tuple[np.ndarray, np.ndarray]:
    """Serial, under the one-replay claim (module docstring): every page that hits at some pool,
    as its request and the smallest ``num_gpu_blocks`` at which it hits,
    ``D_i(j) + 1 + [W_{i-1} % 16 != 0]`` (it hits at every larger pool too: inclusion). The hit
    of request i at pool N is ``block_size`` x its entries with pool <= N (feasibility aside).

    Valid only when ``_no_duplicates``. Complexity: one stack-depth pass, O(blocks log blocks).

    >>> import numpy as np
    >>> t = RequestTrace(np.array([1, 2, 1, 2]), np.array([0, 2, 4]), np.array([16, 8, 16, 8]),
    ...     np.zeros(2), np.array([24, 24]), np.array([1, 1]), block_size=16)
    >>> [x.tolist() for x in vllm_hit_pools(engine_pages(t))]
    [[1], [3]]
    """
    B = block_size
    P = pages.input_tokens
    f = P // B
    written = P + (np.maximum(pages.output_tokens, 1) - 1 if decode else 0)
    a = written // B  # blocks cached at finish: full prompt pages, then generated blocks
    cap = np.maximum(P - 1, 0) // B
    n = pages.n_requests
    starts = np.concatenate(([0], np.cumsum(a)))[:-1]
    req = np.repeat(np.arange(n), a)
    t = np.arange(int(a.sum())) - starts[req]  # position in the tail-first free order
    jblk = a[req] - 1 - t
    prompt = jblk < f[req]
    seq = np.empty(len(req), np.int64)
    seq[prompt] = pages.key[pages.offsets[req[prompt]] + jblk[prompt]]
    seq[~prompt] = pages.n_keys + np.arange(int((~prompt).sum()))  # generated: unique keys
    sd = _stack_depths(seq, pages.n_keys + len(seq) + 1)
    ok = (jblk < cap[req]) & (sd >= 0)  # under the lookup's cap, and seen before
    partial_prev = np.concatenate(([0], (written[:-1] % B != 0).astype(np.int64)))
    depth = sd[ok] - t[ok]  # D(j) = sd - (a - 1 - j)
    return req[ok], depth + 1 + partial_prev[req[ok]]


def vllm_one_replay(pages: EnginePages, pools: Sequence[int | None], decode: bool = False, block_size: int = _B) -> np.ndarray:
    """Serial hits at every pool from one stack-depth replay (module docstring; :func:`vllm_hit_pools`).

    Valid only when ``_no_duplicates``; infeasible pools are not detected here. Returns int64
    ``(len(pools), n_requests)``. Complexity: one stack-depth pass, O(blocks log blocks), plus
    O(pages) per pool, vectorised.

    >>> import numpy as np
    >>> t = RequestTrace(np.array([1, 2, 1, 2]), np.array([0, 2, 4]), np.array([16, 8, 16, 8]),
    ...     np.zeros(2), np.array([24, 24]), np.array([1, 1]), block_size=16)
    >>> vllm_one_replay(engine_pages(t), [3, None]).tolist()
    [[0, 16], [0, 16]]
    """
    req, need = vllm_hit_pools(pages, decode, block_size)
    n = pages.n_requests
    out = np.empty((len(pools), n), np.int64)
    for i, pool in enumerate(pools):
        hit = req if pool is None else req[need <= int(pool)]
        out[i] = block_size * np.bincount(hit, minlength=n)
    return out


@njit(cache=True, nogil=True)
def _stack_depths(seq, n_keys):  # type: ignore[no-untyped-def]
    """LRU stack depth (1 = most recent) of each access before it moves to the top; -1 if cold.

    A Fenwick tree over access positions marks each key's latest access; the depth is the
    number of marks at or after the key's previous access. Complexity: O(n log n).
    """
    n = len(seq)
    tree = np.zeros(n + 1, np.int64)
    last = np.full(n_keys, -1, np.int64)
    out = np.empty(n, np.int64)
    marked = 0
    for t in range(n):
        k = seq[t]
        p = last[k]
        if p >= 0:
            s = 0  # marks at positions < p
            i = p
            while i > 0:
                s += tree[i]
                i -= i & -i
            out[t] = marked - s
            i = p + 1
            while i <= n:
                tree[i] -= 1
                i += i & -i
            marked -= 1
        else:
            out[t] = -1
        i = t + 1
        while i <= n:
            tree[i] += 1
            i += i & -i
        marked += 1
        last[k] = t
    return out


def _serial_min_pool(pages: EnginePages, decode: bool, B: int) -> int:
    """Smallest feasible ``num_gpu_blocks`` for a serial schedule: the peak blocks of one request + 1."""
    P, O = pages.input_tokens, pages.output_tokens
    written = P + (np.maximum(O, 1) - 1 if decode else 0)
    return int(((written + B - 1) // B).max(initial=0)) + 1


def simulate_vllm(
    trace: RequestTrace | EnginePages,
    pool_blocks: Sequence[int | None],
    schedule: Schedule | str = "serial",
    decode: bool = False,
    block_size: int = _B,
    threads: int = 2,
    method: str = "auto",
    find_min_pool: bool = True,
) -> ServingResult:
    """vLLM's per-request prefix hits at each ``num_gpu_blocks`` (None = infinite).

    ``schedule`` is a :class:`Schedule`, ``"serial"`` or ``"model"`` (the service model with
    its defaults). ``method="auto"`` uses the one-replay path when the module docstring's
    claim applies (serial schedule, no duplicate-producing repeat), else the exact per-size
    simulation (``"per-size"`` forces it). Complexity: per size O(pages + events); one replay
    O(pages log pages) in all. When a pool is infeasible and ``find_min_pool``,
    ``min_feasible_pool`` is computed (proved minimal for serial schedules, see *Feasibility*).

    >>> import numpy as np
    >>> t = RequestTrace(np.array([1, 1]), np.array([0, 1, 2]), np.array([16, 16]),
    ...     np.zeros(2), np.array([16, 16]), np.array([1, 1]), block_size=16)
    >>> simulate_vllm(t, [2, None], "serial", decode=False, method="per-size").hit_tokens.tolist()
    [[0, 0], [0, 0]]
    """
    if method not in ("auto", "per-size", "one-replay"):
        raise ValueError(f"method must be 'auto', 'per-size' or 'one-replay'; got {method!r}")
    pages = trace if isinstance(trace, EnginePages) else engine_pages(trace, block_size)
    pools = check_pools(pool_blocks, 1)
    sched = resolve_schedule(schedule, trace, pages)
    B = block_size
    reuse = pages.continued_by is not None and bool((pages.continued_by >= 0).any())
    one = sched.is_serial and not reuse and _no_duplicates(pages, B)
    if method == "one-replay" and not one:
        raise ValueError("method='one-replay' needs a serial schedule and no 16-aligned prompt repeating its last page")
    if method == "per-size":
        one = False
    bound = _serial_min_pool(pages, decode, B)
    if one:
        hits = vllm_one_replay(pages, pools, decode, B)
        failed = np.full(len(pools), -1, np.int64)
        P, O = pages.input_tokens, pages.output_tokens
        need = (P + (np.maximum(O, 1) - 1 if decode else 0) + B - 1) // B
        for i, pool in enumerate(pools):
            if pool is not None and pool < bound:
                failed[i] = int(np.flatnonzero(need > pool - 1)[0])
                hits[i] = -1
    else:
        prep = _prepare(pages, sched, decode, B)
        runs = run_pools(lambda n: _run(pages, prep, n, B), pools, threads, "vllm model:")
        hits = np.stack([h for h, _ in runs]) if runs else np.zeros((0, pages.n_requests), np.int64)
        failed = np.array([f for _, f in runs], np.int64)
    min_pool, proved = None, False
    if (failed >= 0).any() and find_min_pool:
        proved = sched.is_serial
        if sched.is_serial:
            min_pool = bound
        else:
            prep = _prepare(pages, sched, decode, B)
            min_pool = bisect_feasible(lambda n: _run(pages, prep, n, B)[1] < 0, bound, int(prep[0][-1]) + 1)
    return ServingResult("vllm", pools, hits, failed, min_pool, "one-replay" if one else "per-size", proved)


def resolve_schedule(schedule: Schedule | str, trace: object, pages: EnginePages) -> Schedule:
    """Resolve ``"serial"`` / ``"model"`` / a Schedule, checking its length (package-internal:
    shared with :mod:`.sglang`)."""
    if isinstance(schedule, Schedule):
        if schedule.n_requests != pages.n_requests:
            raise ValueError(f"schedule must have one row per request ({pages.n_requests}); got {schedule.n_requests}")
        return schedule
    if schedule == "serial":
        return Schedule.serial(pages.n_requests)
    if schedule == "model":
        if not isinstance(trace, RequestTrace):
            raise ValueError("schedule='model' needs the RequestTrace (for its timestamps); got pages")
        return Schedule.from_service_model(trace)
    raise ValueError(f"schedule must be a Schedule, 'serial' or 'model'; got {schedule!r}")


# Package-internal: the kernel steps serving/routed.py drives on K pools at once (one ``bs``/``ks``
# pair per worker; block-table arrays per request). Same code as the one-pool kernel above.
pool_init, pool_arrive, pool_decode, pool_finish = _init_pool, _arrive, _decode, _finish
pool_inputs = _prepare


class VllmModel(EngineModel):
    """vLLM's prefix cache as an engine model (:mod:`.engine_model`): :func:`simulate_vllm`;
    a pool of N ``num_gpu_blocks`` holds N - 1 pages (block 0 is the null block).

    >>> VLLM.pool_for_pages(0), VLLM.pages_in_pool(2), VLLM.supports_decode_reuse
    (1, 1, True)
    """

    name = "vllm"
    follows = "vLLM 0.33.0 v1 KVCacheManager / BlockPool, one full-attention group"
    engine = "vLLM"
    version = "0.33.0"
    pool_unit = "num_gpu_blocks (vLLM; block 0 is its null block)"
    budget_key = "vllm_gpu_blocks"
    min_pool = 2
    supports_decode_reuse = True
    supports_tiers = True
    supports_routing = True

    def pool_for_pages(self, pages: int) -> int:
        return pages + 1

    def pages_in_pool(self, pool: int) -> int:
        return pool - 1

    supports_scheduler = True
    supports_hybrid_groups = True

    def simulate_hybrid(self, trace: RequestTrace | EnginePages, pools: Sequence[int | None], schedule: Schedule | str,
                        decode: bool, groups: Sequence[GroupSpec], chunk_tokens: int = 8192,
                        swa_full_tokens_ratio: float = 0.8) -> ServingResult:
        return simulate_hybrid_fast(trace, groups, pools, schedule, decode, chunk_tokens, threads=2)  # one pool: no ratio

    def simulate(self, trace: RequestTrace | EnginePages, pools: Sequence[int | None], schedule: Schedule | str = "serial",
                 decode: bool = False, page_tokens: int = _B, threads: int = 2) -> ServingResult:
        return simulate_vllm(trace, pools, schedule, decode, page_tokens, threads)

    def simulate_scheduler(self, trace: RequestTrace, pools: Sequence[int | None], decode: bool,
                           settings: SchedulerSettings, arrival_s: np.ndarray | None = None,
                           groups: Sequence[GroupSpec] = ()) -> SchedulerResult:
        if groups:  # the hybrid KV cache under the scheduler (pure Python, sync)
            return simulate_hybrid_scheduler(trace, groups, pools, decode, settings, arrival_s)
        return simulate_scheduler(trace, pools, decode, settings, arrival_s)

    def hit_pools(self, pages: EnginePages, decode: bool) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The one-replay curve (:func:`vllm_hit_pools`) when its claim holds for ``pages``
        (no decode reuse, no duplicate-producing repeat), with the proved smallest feasible pool."""
        B = pages.page_tokens
        if (pages.continued_by is not None and bool((pages.continued_by >= 0).any())) or not _no_duplicates(pages, B):
            return None
        req, pool = vllm_hit_pools(pages, decode, B)
        return req, pool, _serial_min_pool(pages, decode, B)


VLLM = register_engine_model(VllmModel())
"""The registered vLLM model."""
