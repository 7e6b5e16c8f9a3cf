"""K workers of an engine model (``vllm``, ``sglang``) behind a KV-aware router, and a shared tier.

Each worker runs the engine model's own cache exactly (:mod:`.vllm`, :mod:`.sglang`: one pool
of ``--gpu-blocks`` per worker, in that engine's count), all workers under one schedule (one
event order, :func:`.schedule.event_order`). The router sees the pools as they are when a
request arrives, so a kv-aware or llm-d run is one joint simulation of the K pools per pool
size. docs/routers.md has the three product routers side by side.

**The kv-aware router** (NVIDIA Dynamo's KV router, github.com/ai-dynamo/dynamo:
``lib/llm/src/kv_router/scheduler.rs`` (read at commit db19bd2a; the repository is over the
snapshot limit, so no line numbers), ``DefaultWorkerSelector::select_worker``, the logit
``overlap_score_weight * potential_prefill_blocks + potential_active_blocks``; ``sequence.rs``,
``ActiveSequences::potential_blocks_and_tokens``; ``KvRouterConfig`` defaults
``overlap_score_weight = 1.0``, ``router_temperature = 0.0``, ``router_track_output_blocks =
false`` (generated blocks not counted, which is what is modelled; tracking them is not); later
versions moved it to ``lib/kv-router/src/scheduling/selector``). At the arrival of request r
(``P`` prompt tokens) every worker w gets a logit, lower is better::

    cost_w = W * prefill_blocks_w + active_blocks_w            (W: --router-overlap-weight, Dynamo's
    prefill_blocks_w = (pending_w + P - hit_w) / B               overlap_score_weight, default 1.0)
    active_blocks_w  = distinct prompt pages of the requests running on w, counting r's own

- ``hit_w``: the tokens w's engine would report as a prefix hit for r at that moment (vLLM's
  ``get_computed_blocks``, SGLang's ``match_prefix``, probed read-only: nothing is stamped or
  split), so ``P - hit_w`` are the prompt tokens r would still compute there; B is the engine's
  block (page) size, 16. Dynamo's indexer learns the engines' blocks from their KV events; here
  it sees them with no delay, so the routed worker's hit is exactly what its engine delivers.
- ``pending_w``: the prompt tokens still to compute of the requests routed to w that have not
  finished prefill (each counted as ``P - hit`` at its own arrival; Dynamo's active prefill tokens).
- ``active_blocks_w``: Dynamo's potential active blocks: the distinct page keys of the prompts of
  the requests on w between arrival and finish, plus r's pages not among them.
- The choice (:mod:`.router_pick`, Dynamo's ``softmax_sample``): temperature ``T`` 0 (Dynamo's
  default) the least cost, ties uniformly at random; ``T > 0`` a
  softmax sample over the logits scaled by their range. The randomness is one draw per request
  from the run's seed (the plan's ``--seed``). Dynamo has no deterministic tie rule; none is kept.
- ``W = inf``: the pure longest-prefix router (logit ``-hit_w``, sampled the same way): a router
  that ignores load. ``W = 0``: pure load balancing.

**The llm-d router** (llm-d's inference scheduler, github.com/llm-d/llm-d-inference-scheduler at
520af478, its precise-prefix-cache sample configuration
``deploy/config/epp-precise-prefix-cache-config.yaml``: the scorers below with weights 2, 1, 1 and
the ``max-score-picker``). Each worker's score is the weighted sum, in the profile's order
(``pkg/epp/scheduling/scheduler_profile.go:155-168``: from 0, ``score x weight`` added per scorer)::

    prefix_w   = min(full_w / (P // B), 1), 0 for a prompt under one page
                 (precise-prefix-cache-scorer, precise_prefix_cache.go:410-522, utils.go:14-40)
    kv_w       = 1 - usage_w                 (kv-cache-utilization-scorer, kvcache_utilization.go:76-81)
    queue_w    = (max q - q_w) / (max q - min q), 1 when all q are equal   (queue-scorer, queue.go:78-108)

- ``full_w``: the prompt's full pages w holds from the first one on, as llm-d's KV-block index
  (fed by the engine's KV events, block size = the engine's; a prompt's blocks are its full ones,
  llm-d-kv-cache v0.8.0 ``token_processor.go`` ``chunkTokens``) would match them: not capped at
  ``(P - 1) // B`` as the engine's own hit is. The index is exact at the arrival (no event lag,
  no speculative entries).
- ``usage_w``: the engine's own KV usage metric at the arrival: vLLM's ``BlockPool.get_usage``,
  ``1 - free blocks / (num_gpu_blocks - 1)`` (cached unreferenced blocks count as free); SGLang's
  ``token_usage``, ``1 - (free + evictable pages) / pool``. 0 in an infinite pool.
- ``q_w``: the requests routed to w whose prefill has not ended (arrived, first token not yet
  out): the schedule's stand-in for vLLM's ``num_requests_waiting`` (llm-d's ``WaitingQueueSize``);
  the schedule does not say when a request leaves the queue for the batch, so a request being
  prefilled counts as waiting.
- The highest score wins, ties uniformly at random (max-score-picker: shuffle, stable sort;
  :mod:`.router_pick`), one draw per request from the seed. The weights are settable
  (``weights``; the plan's ``--router-weights``).

**The sglang-cache-aware router** (SGLang's sgl-router ``cache_aware`` policy,
github.com/sgl-project/sglang: ``sgl-router/src/policies/cache_aware.rs`` at commit 026f853b,
``select_worker``; its approximate radix tree ``policies/tree.rs`` at 4d40eec0; the launcher's
defaults ``main.rs:143-161`` at 0129b029). With ``load_w`` the requests routed to w and not
finished (running between arrival and finish under the schedule)::

    imbalanced = max load - min load > 64 and max load > 1.5 x min load     (cache_aware.rs:242-243)
    imbalanced: the least-loaded worker (cache_aware.rs:263)
    otherwise:  the worker whose router tree matches the longest prefix of r's prompt, if
                matched / prompt > 0.3 (cache_threshold), else the worker with the smallest
                tree (cache_aware.rs:300-312; tree.rs:258, 540)
    then r's prompt is inserted into the chosen worker's tree (cache_aware.rs:274, 320)

The router's trees are not the engines' caches: each is a prefix tree of everything routed to
that worker (here its prompt page ids; SGLang's holds the request text's characters), evicted by
size only, every 120 s, oldest leaf first down to 2**26 characters (tree.rs:410-480; here
1,048,576 pages at 4 characters a token). It reads no engine state, so its choices are computed
before the joint run (:func:`stackdist.serving.sglang_router.sglang_cache_aware`, where the
mapping, the clock and the deterministic ties, lowest index where SGLang takes a DashMap's first
entry, are stated) and the K pools then run exactly as under a static assignment.

With a serial schedule nothing is running at an arrival, so the load terms are the same on every
worker (Dynamo: ``pending = 0``, active blocks = r's own; llm-d: no queue, and usage 0, since
both engines count cached blocks no request holds as free or evictable): for any ``W > 0`` Dynamo's rule is the longest prefix, ties at random,
the rule of the engine-semantics cluster (:mod:`.cluster`, the same formula over the trace's
tokens and blocks). That is the product's behaviour, not a modelling shortcut: the plan warns when
a router sends a worker far more than its share (``routing_balance``).

**The shared tier** (``shared_blocks`` S, in engine pages; Mooncake Store, LMCache's remote
backend): one LRU of S pages behind all workers. At r's arrival on w, after w's GPU hit of ``g``
pages the hit continues in the shared tier: pages ``g, g+1, ...`` (below the engine's cap of
``(P - 1) // B`` pages) while each is in it: ``s`` shared-tier hit pages, ``B * s`` tokens.
Written through: r's full prompt pages from ``g`` on (the shared hits refreshed, the computed ones
inserted) are made most recent, tail first, at r's arrival (as vLLM hashes a prompt's full blocks
when it allocates them); GPU-hit pages and generated blocks are not written (LMCache's default:
no decode cache). The GPU pools are exactly those without the tier: the engine allocates a block
for every prompt page past its own hit whether it is loaded from the tier or computed, and the
router scores GPU hits only, so the tier is a pass over the arrivals after the GPU simulation.
Pools with a zero-size tier report no shared hits.

**Infinite pools** (``None``) hold every block the whole trace writes on every worker (no
eviction, as in the one-pool models). For vLLM that pool is replayed as a bitmap of cached keys
per worker, exactly: with ``N - 1`` at least every block the trace ever allocates, the free queue
(always [uncached blocks][cached blocks]) has an uncached block at its head whenever one is
popped (the blocks in use or cached are at most the pops so far, fewer than ``N - 1``), so no
cached block is ever evicted and no allocation fails; a key is then cached on w iff it was hashed
there before (prompt pages at arrival, decode-reuse blocks at finish) and the hit is the run of
cached keys under the cap. Memory per pool size: O(K x (pool + page ids)) (vLLM at inf:
O(K x page ids) bytes).
Complexity: per pool size O(events + K x pages) (each arrival probes every worker along its
prompt), plus O(pages) per shared size; llm-d on a finite SGLang pool with a KV-usage weight also
scans each worker's tree at every arrival, O(arrivals x K x tree nodes) (the conversation trace,
12,031 requests on 4 workers: about 3 s of CPU, as kv-aware). Tested equal to a direct simulation
built from the reference engines (tests/serving/serving_reference.py) in tests/test_routing_models.py.

>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace.from_blocks([[1, 2], [1, 2], [3, 4], [3, 4]], block_size=16, last_tokens=[8] * 4)
>>> r = simulate_routed(t, "vllm", 2, "kv-aware", [None], [0, 8])  # seed 0: request 0's tie of 2 -> worker 1
>>> r.worker[0].tolist(), r.gpu_hit_tokens[0].tolist(), r.shared_hit_tokens[1].tolist()
([1, 1, 0, 0], [0, 16, 0, 16], [0, 0, 0, 0])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from stackdist.engine.kernels import njit
from stackdist.errors import INT64_MAX
from stackdist.traces import RequestTrace

from .cluster import KV_AWARE, ClusterResult, lru_touch
from .engine_model import ENGINE_MODELS, EngineModel
from .pages import EnginePages, engine_pages
from .results import check_pools
from .router_pick import (
    DEFAULT_TEMPERATURE,
    LLM_D,
    dynamo_pick,
    llmd_pick,
    llmd_weights,
    router_draws,
)
from .schedule import Schedule
from .sglang import (
    SglangModel,
    tree_event,
    tree_init,
    tree_inputs,
    tree_match_length,
    tree_rows,
    tree_usage,
)
from .sglang_router import SGLANG_CACHE_AWARE, sglang_cache_aware
from .vllm import (
    VllmModel,
    pool_arrive,
    pool_decode,
    pool_finish,
    pool_init,
    pool_inputs,
    resolve_schedule,
)

__all__ = ["DEFAULT_OVERLAP_WEIGHT", "JOINT_RUNS", "routed_models", "shared_tier_hits", "simulate_routed"]

DEFAULT_OVERLAP_WEIGHT = 1.0
"""Dynamo's default ``overlap_score_weight`` (``KvRouterConfig``; ``--kv-overlap-score-weight``)."""
_START, _STOP = np.int64(1), np.int64(-1)
_KV_AWARE, _LONGEST, _LLMD = 0, 1, 2  # the kernels' router modes (W = inf: the longest prefix)  # typed, not literals: numba compiles _track once, not per sign


@njit(cache=True, nogil=True)
def _pick(mode, h, full, key, a, b, act, active, pending, waiting, usage, p, W, T, wts, u, B, c):  # type: ignore[no-untyped-def]
    """The router's worker for a request of ``p`` tokens and pages ``key[a:b]``, given each
    worker's hit tokens ``h`` and full prompt pages held ``full`` (module docstring); ``c``:
    scratch of K floats."""
    if mode == _LLMD:
        total = p // B
        qlo, qhi = waiting.min(), waiting.max()
        for v in range(h.size):
            s = 0.0
            s += wts[0] * (min(full[v] / total, 1.0) if total > 0 else 0.0)
            s += wts[1] * (1.0 - usage[v])
            s += wts[2] * (1.0 if qhi == qlo else float(qhi - waiting[v]) / float(qhi - qlo))
            c[v] = s
        return llmd_pick(c, u)
    for v in range(h.size):
        if mode == _LONGEST:
            c[v] = -float(h[v])
        else:
            new = 0
            for j in range(a, b):
                if act[v, key[j]] == 0:
                    new += 1
            c[v] = W * float(pending[v] + p - h[v]) / B + float(active[v] + new)
    return dynamo_pick(c, u, T)


@njit(cache=True, nogil=True)
def _track(w, sign, key, a, b, act, active):  # type: ignore[no-untyped-def]
    """Request pages ``key[a:b]`` start (sign 1) or stop (-1) running on worker ``w``."""
    for j in range(a, b):
        k = key[j]
        if sign > 0:
            if act[w, k] == 0:
                active[w] += 1
            act[w, k] += 1
        else:
            act[w, k] -= 1
            if act[w, k] == 0:
                active[w] -= 1


@njit(cache=True, nogil=True)
def _vllm_routed(key, off, ntr, P, tbl_off, n_final, ev_kind, ev_req, ev_k, n_keys, N, B, K, assign, mode, W, T, wts, u,
                 cont, hits, out_w, avail):  # type: ignore[no-untyped-def]
    """K vLLM pools of ``N`` blocks under one event order; returns the failing request or -1."""
    HEAD = N
    TAIL = N + 1
    bs = np.empty((K, N + 2, 6), np.int32)
    for w in range(K):
        pool_init(bs[w])
    ks = np.full((K, n_keys, 2), -1, np.int32)
    nfree = np.full(K, N - 1, np.int64)
    n_req = len(P)
    tbl = np.empty(tbl_off[n_req], np.int32)
    nblk = np.zeros(n_req, np.int64)
    ncached = np.zeros(n_req, np.int64)
    widest = 1  # the longest block table (a loop: np.diff/np.max cost seconds of compilation)
    for q in range(n_req):
        widest = max(widest, tbl_off[q + 1] - tbl_off[q])
    first = np.empty(widest, np.int32)
    act = np.zeros((K, n_keys), np.int32)
    active = np.zeros(K, np.int64)
    pending = np.zeros(K, np.int64)
    waiting = np.zeros(K, np.int64)
    h = np.zeros(K, np.int64)
    full = np.zeros(K, np.int64)
    usage = np.zeros(K)
    c = np.zeros(K)
    for e in range(len(ev_kind)):
        r = ev_req[e]
        kind = ev_kind[e]
        tb = tbl_off[r]
        a, b = off[r], off[r] + ntr[r]  # the prompt's pages (the router's blocks)
        if kind == 3:
            w = assign[r]
            cap = (P[r] - 1) // B
            for v in range(K):  # every worker's prefix now (read-only): the router's view, the fleet's best
                j = 0
                while j < P[r] // B and ks[v, key[a + j], 0] >= 0:
                    j += 1
                full[v] = j
                h[v] = B * min(j, cap)
                usage[v] = 1.0 - nfree[v] / (N - 1) if N > 1 else 0.0  # BlockPool.get_usage
            avail[r] = h.max()
            if w < 0:
                w = _pick(mode, h, full, key, a, b, act, active, pending, waiting, usage, P[r], W, T, wts, u[r], B, c)
            out_w[r] = w
            nf = pool_arrive(r, key, off, P, tbl, tb, nblk, ncached, bs[w], ks[w], HEAD, nfree[w], B, hits)
            if nf < 0:
                return r
            nfree[w] = nf
            pending[w] += P[r] - hits[r]
            waiting[w] += 1
            _track(w, _START, key, a, b, act, active)
        elif kind == 2:
            pending[out_w[r]] -= P[r] - hits[r]
            waiting[out_w[r]] -= 1
        elif kind == 1:
            w = out_w[r]
            nf = pool_decode(r, ev_k[e], P, tbl, tb, nblk, bs[w], ks[w], HEAD, nfree[w], B)
            if nf < 0:
                return r
            nfree[w] = nf
        elif kind == 0:
            w = out_w[r]
            nfree[w] += pool_finish(r, tbl, tb, nblk, ncached, n_final, bs[w], ks[w], key, off, cont, HEAD, TAIL, first)
            _track(w, _STOP, key, a, b, act, active)
    return -1


@njit(cache=True, nogil=True)
def _vllm_routed_inf(key, off, ntr, P, n_final, ev_kind, ev_req, n_keys, B, K, assign, mode, W, T, wts, u, cont, hits,  # type: ignore[no-untyped-def]
                     out_w, avail):
    """K vLLM pools that never evict (module docstring, *Infinite pools*): a cached-key bitmap per
    worker; prompt pages cached at arrival, decode-reuse blocks at finish."""
    cached = np.zeros((K, n_keys), np.uint8)
    act = np.zeros((K, n_keys), np.int32)
    active = np.zeros(K, np.int64)
    pending = np.zeros(K, np.int64)
    waiting = np.zeros(K, np.int64)
    h = np.zeros(K, np.int64)
    full = np.zeros(K, np.int64)
    usage = np.zeros(K)  # an infinite pool is never used up: 0
    c = np.zeros(K)
    for e in range(len(ev_kind)):
        r = ev_req[e]
        kind = ev_kind[e]
        a, b = off[r], off[r] + ntr[r]  # the prompt's pages (the router's blocks)
        cap = (P[r] - 1) // B
        if kind == 3:
            w = assign[r]
            for v in range(K):
                j = 0
                while j < P[r] // B and cached[v, key[a + j]]:
                    j += 1
                full[v] = j
                h[v] = B * min(j, cap)
            avail[r] = h.max()
            if w < 0:
                w = _pick(mode, h, full, key, a, b, act, active, pending, waiting, usage, P[r], W, T, wts, u[r], B, c)
            out_w[r] = w
            hits[r] = h[w]
            for j in range(P[r] // B):
                cached[w, key[a + j]] = 1
            pending[w] += P[r] - hits[r]
            waiting[w] += 1
            _track(w, _START, key, a, b, act, active)
        elif kind == 2:
            pending[out_w[r]] -= P[r] - hits[r]
            waiting[out_w[r]] -= 1
        elif kind == 0:
            w = out_w[r]
            q = cont[r]
            if q >= 0:
                for j in range(P[r] // B, min(n_final[r], off[q + 1] - off[q])):
                    cached[w, key[off[q] + j]] = 1
            _track(w, _STOP, key, a, b, act, active)
    return -1


@njit(cache=True, nogil=True)
def _sglang_routed(key, off, ntr, P, ev_kind, ev_req, n_keys, N, B, K, assign, mode, W, T, wts, u, finite, heap_cap,
                   hits, out_w, avail):  # type: ignore[no-untyped-def]
    """K SGLang trees of ``N`` pages under one event order; returns the failing request or -1."""
    n_req = len(P)
    M = tree_rows(n_req)
    cap_heap = max(heap_cap, M + 1)
    nd = np.empty((K, M, 10), np.int64)
    fn = np.empty((K, n_keys + n_req), np.int64)
    ht = np.empty((K, cap_heap), np.int64)
    hn = np.empty((K, cap_heap), np.int64)
    hs = np.empty((K, 4), np.int64)
    for w in range(K):
        tree_init(nd[w], fn[w], hs[w], N)
    lock_node = np.zeros(n_req, np.int64)
    protected = np.zeros(n_req, np.int64)
    seq = np.zeros(n_req, np.int64)
    act = np.zeros((K, n_keys), np.int32)
    active = np.zeros(K, np.int64)
    pending = np.zeros(K, np.int64)
    waiting = np.zeros(K, np.int64)
    h = np.zeros(K, np.int64)
    full = np.zeros(K, np.int64)
    usage = np.zeros(K)
    c = np.zeros(K)
    scan = finite and mode == _LLMD and wts[1] != 0.0  # the utilisation scan only when it can matter
    for e in range(len(ev_kind)):
        r = ev_req[e]
        kind = ev_kind[e]
        a, b = off[r], off[r] + ntr[r]  # the prompt's pages (the router's blocks)
        if kind == 3:
            w = assign[r]
            cap = (P[r] - 1) // B
            for v in range(K):  # every worker's prefix now (read-only)
                full[v] = tree_match_length(nd[v], key, a, P[r] // B, P[r] // B, fn[v])
                h[v] = B * min(full[v], cap)
                if scan:
                    usage[v] = tree_usage(nd[v], hs[v], N)
            avail[r] = h.max()
            if w < 0:
                w = _pick(mode, h, full, key, a, b, act, active, pending, waiting, usage, P[r], W, T, wts, u[r], B, c)
            out_w[r] = w
        w = out_w[r]
        if not tree_event(kind, r, key, off, P, n_keys, B, nd[w], fn[w], ht[w], hn[w], hs[w], lock_node, protected, seq, hits):
            return r
        if kind == 3:
            pending[w] += P[r] - hits[r]
            waiting[w] += 1
            _track(w, _START, key, a, b, act, active)
        elif kind == 2:
            pending[w] -= P[r] - hits[r]
            waiting[w] -= 1
        elif kind == 0:
            _track(w, _STOP, key, a, b, act, active)
    return -1


@njit(cache=True, nogil=True)
def _shared_kernel(key, off, P, order, gpu_hits, B, S, prv, nxt, out_s):  # type: ignore[no-untyped-def]
    """The shared tier over the arrivals in ``order`` (module docstring); ``prv``/``nxt``: one
    slot per page id plus the list's sentinel, ``nxt`` all -1 (nothing cached)."""
    D = prv.size - 1
    prv[D] = D
    nxt[D] = D
    size = np.zeros(1, np.int64)
    for r in order:
        a = off[r]
        g = gpu_hits[r] // B
        j = g
        while j < (P[r] - 1) // B and nxt[key[a + j]] >= 0:
            j += 1
        out_s[r] = B * (j - g)
        if S != 0:
            for i in range(P[r] // B - 1, g - 1, -1):
                lru_touch(prv, nxt, D, key[a + i], size, np.int64(0), S)


def shared_tier_hits(pages: EnginePages, schedule: Schedule, gpu_hits: np.ndarray, shared_pages: int | None) -> np.ndarray:
    """Shared-tier hit tokens per request given each request's GPU hit tokens (module docstring).

    Arrivals in event order (time, then request). O(pages) time, O(page ids) memory.

    >>> from stackdist.traces import RequestTrace
    >>> p = engine_pages(RequestTrace.from_blocks([[1, 2], [1, 2]], block_size=16, last_tokens=[8, 8]))
    >>> shared_tier_hits(p, Schedule.serial(2), np.array([0, 0]), 4).tolist()
    [0, 16]
    """
    n = pages.n_requests
    order = np.lexsort((np.arange(n), schedule.arrival_s)).astype(np.int64)
    out = np.zeros(n, np.int64)
    S = INT64_MAX if shared_pages is None else int(shared_pages)
    slots = max(pages.n_keys, 1) + 1
    index = np.int32 if slots < 2**31 - 1 else np.int64
    _shared_kernel(pages.key, pages.offsets, pages.input_tokens, order, np.asarray(gpu_hits, np.int64),
                   pages.page_tokens, S, np.empty(slots, index), np.full(slots, -1, index), out)
    return out


def _vllm_size(pages: EnginePages, schedule: Schedule, decode: bool, pool: int | None, k: int, assign: np.ndarray,
               how: _Routing, ntr: np.ndarray, hits: np.ndarray, out_w: np.ndarray, avail: np.ndarray) -> int:
    """vLLM's K block pools at one size, jointly (the bitmap replay at an infinite pool)."""
    B, n = pages.page_tokens, pages.n_requests
    tbl_off, n_final, kind, ev = pool_inputs(pages, schedule, decode, B)
    N = int(tbl_off[-1]) + 1 if pool is None else int(pool)
    if N >= 2**31 - 2 or pages.n_keys >= 2**31:
        raise ValueError(f"num_gpu_blocks and page ids must fit in int32; got {N} blocks, {pages.n_keys} page ids")
    cont = pages.continued_by if pages.continued_by is not None else np.full(n, -1, np.int64)
    if pool is None:
        return int(_vllm_routed_inf(pages.key, pages.offsets, ntr, pages.input_tokens, n_final, kind, ev.request,
                                    max(pages.n_keys, 1), B, k, assign, *how, cont, hits, out_w, avail))
    return int(_vllm_routed(pages.key, pages.offsets, ntr, pages.input_tokens, tbl_off, n_final, kind, ev.request, ev.k,
                            max(pages.n_keys, 1), N, B, k, assign, *how, cont, hits, out_w, avail))


def _sglang_size(pages: EnginePages, schedule: Schedule, decode: bool, pool: int | None, k: int, assign: np.ndarray,
                 how: _Routing, ntr: np.ndarray, hits: np.ndarray, out_w: np.ndarray, avail: np.ndarray) -> int:
    """SGLang's K radix trees at one size, jointly (an infinite pool: every page the trace writes,
    utilisation 0)."""
    B, n = pages.page_tokens, pages.n_requests
    written, kind, ev = tree_inputs(pages, schedule, decode, B)
    N = int(((written + B - 1) // B).sum()) + 1 if pool is None else int(pool)
    return int(_sglang_routed(pages.key, pages.offsets, ntr, pages.input_tokens, kind, ev.request, max(pages.n_keys, 1),
                              N, B, k, assign, *how, pool is not None, 2 * (8 * n + 8) + 16, hits, out_w, avail))


_Routing = tuple[int, float, float, np.ndarray, np.ndarray]
"""(mode, W, T, llm-d weights, per-request draws): the kernels' router arguments."""


def _routing(router: str | None, n: int, weight: float, temperature: float, weights: dict[str, float] | None,
             seed: int) -> _Routing:
    """The kernels' router arguments (a static assignment: kv-aware's, never used)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite non-negative number; got {temperature!r}")
    mode = _LLMD if router == LLM_D else _LONGEST if math.isinf(weight) else _KV_AWARE
    return (mode, 0.0 if math.isinf(weight) else float(weight), float(temperature), llmd_weights(weights),
            router_draws(n, seed))


JOINT_RUNS: dict[type[EngineModel], Callable[..., int]] = {VllmModel: _vllm_size, SglangModel: _sglang_size}
"""The joint K-pool simulation of each engine model that routes, by the model's type (as vLLM's
``spec_manager_map`` keys a manager by its spec's type); a model with ``supports_routing`` has one."""


def routed_models() -> tuple[str, ...]:
    """The registered engine models that route (have a joint run), in registration order.

    >>> routed_models()
    ('vllm', 'sglang')
    """
    return tuple(name for name, m in ENGINE_MODELS.items() if type(m) in JOINT_RUNS)


def _one_size(pages: EnginePages, model: EngineModel, schedule: Schedule, decode: bool, pool: int | None, k: int,
              assign: np.ndarray, how: _Routing) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """(hit tokens, worker, failed request, the best worker's hit at arrival) of one joint
    simulation at one pool size."""
    B, n = pages.page_tokens, pages.n_requests
    hits, out_w, avail = np.zeros(n, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.int64)
    ntr = np.minimum(np.diff(pages.offsets), (pages.input_tokens + B - 1) // B)  # prompt pages (not answer blocks)
    failed = JOINT_RUNS[type(model)](pages, schedule, decode, pool, k, assign, how, ntr, hits, out_w, avail)
    if failed >= 0:
        hits[:], out_w[:], avail[:] = -1, -1, -1
    return hits, out_w, int(failed), avail


def _shared_sizes(sizes: Sequence[int | None]) -> tuple[int | None, ...]:
    for s in sizes:
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0):
            raise ValueError(f"shared_blocks must be None (infinite) or non-negative integers; got {s!r}")
    if not sizes:
        raise ValueError("shared_blocks must name at least one size (0: no shared tier)")
    return tuple(None if s is None else int(s) for s in sizes)


def simulate_routed(
    trace: RequestTrace | EnginePages, model: str | EngineModel, workers: int, router: np.ndarray | str,
    gpu_blocks: Sequence[int | None], shared_blocks: Sequence[int | None] = (0,), schedule: Schedule | str = "serial",
    decode: bool = False, overlap_weight: float = DEFAULT_OVERLAP_WEIGHT, block_size: int = 16, threads: int = 2,
    temperature: float = DEFAULT_TEMPERATURE, weights: dict[str, float] | None = None, seed: int = 0,
) -> ClusterResult:
    """``trace`` on ``workers`` pools of ``model`` at every (GPU, shared) pair (GPU sizes outer).

    ``router``: ``"kv-aware"`` (weight ``overlap_weight``, ``inf`` = longest prefix; Dynamo's
    ``temperature``), ``"llm-d"`` (llm-d's scorers, ``weights`` over :data:`~.router_pick.LLMD_WEIGHTS`),
    ``"sglang-cache-aware"`` (SGLang's router, default settings, under ``schedule``) or every
    request's worker. Random choices (ties, sampling) from ``seed`` (:func:`~.router_pick.router_draws`). GPU sizes in the engine's count (None = infinite), shared sizes in pages
    (0 = none). An infeasible GPU size (some worker cannot allocate) has -1 everywhere and its
    first failing request in ``failed_request``. Complexity: module docstring.
    """
    spec = model if isinstance(model, EngineModel) else ENGINE_MODELS.get(model)
    if spec is None or type(spec) not in JOINT_RUNS:
        raise ValueError(f"model must be one of {', '.join(routed_models())}; got {model!r}")
    k = int(workers)
    if k < 1:
        raise ValueError(f"workers must be a positive integer; got {workers!r}")
    if isinstance(overlap_weight, bool) or not isinstance(overlap_weight, (int, float)) or not overlap_weight >= 0:
        raise ValueError(f"overlap_weight must be a non-negative number (inf: longest prefix); got {overlap_weight!r}")
    pages = trace if isinstance(trace, EnginePages) else engine_pages(trace, block_size)
    pools, shared = check_pools(gpu_blocks, 1), _shared_sizes(shared_blocks)
    sched = resolve_schedule(schedule, trace, pages)
    n = pages.n_requests
    if isinstance(router, str) and router == SGLANG_CACHE_AWARE:
        assign = sglang_cache_aware(pages, sched, k)
    elif isinstance(router, str):
        if router not in (KV_AWARE, LLM_D):
            raise ValueError(f"router must be {KV_AWARE!r}, {LLM_D!r}, {SGLANG_CACHE_AWARE!r} or an array of workers; "
                             f"got {router!r}")
        assign = np.full(n, -1, np.int64)
    else:
        assign = np.asarray(router, np.int64)
        if assign.shape != (n,) or (n and (assign.min() < 0 or assign.max() >= k)):
            raise ValueError(f"router must give every request a worker in 0..{k - 1}")

    how = _routing(router if isinstance(router, str) else None, n, float(overlap_weight), temperature, weights, seed)

    def run(pool: int | None) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
        return _one_size(pages, spec, sched, decode, pool, k, assign, how)

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(pools)))) as ex:
        runs = list(ex.map(run, pools))
    pairs = tuple((g, s) for g in pools for s in shared)
    out = np.zeros((4, len(pairs), n), np.int64)
    failed = np.zeros(len(pairs), np.int64)
    for i, (hits, where, f, avail) in enumerate(runs):
        for j, s in enumerate(shared):
            row = i * len(shared) + j
            out[0, row], out[1, row], failed[row], out[3, row] = where, hits, f, avail
            out[2, row] = -1 if f >= 0 else (shared_tier_hits(pages, sched, hits, s) if s != 0 else 0)
    name = router if isinstance(router, str) else "static"
    return ClusterResult(k, name, pairs, out[0], out[1], out[2], failed_request=failed, model=spec.name,
                         available_hit_tokens=out[3])
