"""K workers with their own engine-semantics GPU caches, an optional shared tier, and routing.

The rules, exactly (tested against a direct ``OrderedDict`` simulation in tests/test_cluster.py):

- **Order.** Requests are served one at a time in trace order (serial), as in the ``engine``
  semantics (:mod:`.semantics`): each is looked up against the caches as it found them, then
  committed, before the next one arrives.
- **Workers.** Worker ``w`` has a GPU cache of ``C`` blocks with exactly the ``engine``
  semantics: the request's GPU hit is the longest prefix of its blocks cached on ``w``; then
  *all* its blocks are committed to ``w``'s cache tail first (each made the most recent, the
  least recent evicted beyond ``C``), so its head ends most recent. Capacity 0 stores nothing,
  ``None`` is infinite.
- **Shared tier** (Mooncake Store, LMCache's remote backend, Dynamo's block manager): one LRU of
  ``S`` blocks for all workers. After the GPU prefix of ``g`` blocks the hit continues in the
  shared tier: the next ``s`` blocks are shared-tier hits while each is in it (stopping at the
  first that is not, even if the GPU holds a later one), so the request hits ``g + s`` blocks.
  Shared-tier hits are copied into the worker's GPU cache (the commit above covers them).
  Written through: every block the worker *receives* (the ``s`` shared hits, refreshed) or
  *computes* (the rest, blocks ``g + s`` on, inserted or refreshed) is committed to the shared
  tier, tail first, after the lookup; the ``g`` GPU-hit blocks do not touch it. Neither
  inclusive nor exclusive: a GPU eviction writes nothing back (the block went through already)
  and a shared-tier eviction leaves GPU copies alone. ``S = 0`` leaves K independent caches.
- **Routers.** A static assignment (any array of workers, e.g. from the plan's round-robin,
  random, session, prefix-hash or least-loaded routers), or ``"kv-aware"``: NVIDIA Dynamo's KV
  router cost, the rule of :mod:`.routed` for the engine models: at its arrival a request of
  ``P`` tokens and ``n`` blocks goes to the worker of least
  ``cost_w = W * (P - hit_w) / block_size + n`` (``hit_w``: the tokens of its longest prefix in
  w's GPU cache; ``n``: Dynamo's active blocks, since in the serial replay nothing else is
  running; ``W`` the overlap weight, Dynamo's default 1.0), sampled as Dynamo samples
  (:mod:`.router_pick`: temperature 0, Dynamo's default, the least cost, ties uniformly at
  random from the run's seed). For any ``W > 0`` that is the longest cached prefix (the load
  term is the same on every worker: nothing else is running), ``W = inf`` is the same rule by
  name, ``W = 0`` ignores the caches (every worker tied: uniformly random). It depends on the
  caches' contents, so it runs per pool size; it records the best worker's GPU prefix at each
  arrival (``available_hit_tokens``, the regret's reference).

Complexity: O(blocks) per pool size for a static assignment (plus O(blocks) once to index the
(worker, block) pairs); O(blocks x K) per size for ``kv-aware`` (each request probes every
worker's cache along its prefix; state of (distinct blocks x K) entries).

>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace.from_blocks([[1, 2], [1, 2], [1, 3]], block_size=4)
>>> r = simulate_cluster(t, 2, np.array([0, 1, 0]), [4], [4])
>>> r.gpu_hit_tokens[0].tolist(), r.shared_hit_tokens[0].tolist()
([0, 0, 4], [0, 8, 0])
>>> simulate_cluster(t, 2, "kv-aware", [4]).worker[0].tolist()  # seed 0's first draw 0.64: tie of 2 -> worker 1
[1, 1, 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stackdist.engine.kernels import njit
from stackdist.engine.keys import dense_keys
from stackdist.errors import INT64_MAX
from stackdist.traces import RequestTrace

from .router_pick import DEFAULT_TEMPERATURE, dynamo_pick, router_draws

__all__ = ["KV_AWARE", "ClusterResult", "lru_touch", "simulate_cluster"]

KV_AWARE = "kv-aware"


@dataclass(frozen=True)
class ClusterResult:
    """Per pool pair and request: the worker, the GPU and the shared-tier hit tokens (the
    engine semantics here; the engine models in :mod:`.routed`).

    ``pools[i]`` is ``(gpu_blocks, shared_blocks)`` (per-worker GPU cache, shared tier; ``None``
    = infinite); ``worker[i]``, ``gpu_hit_tokens[i]`` and ``shared_hit_tokens[i]`` have one
    int64 entry per request in trace order.
    """

    workers: int
    router: str
    pools: tuple[tuple[int | None, int | None], ...]
    worker: np.ndarray
    gpu_hit_tokens: np.ndarray
    shared_hit_tokens: np.ndarray
    failed_request: np.ndarray | None = None
    """Engine models (:mod:`.routed`): per pool pair the first request that could not allocate
    (its row is then all -1), else -1; None for the engine semantics (never infeasible)."""
    model: str = "engine"
    available_hit_tokens: np.ndarray | None = None
    """Per pool pair and request the GPU prefix hit the best worker held when the request arrived
    (every worker probed, read-only), so ``available - gpu_hit_tokens`` is the router's regret:
    the engine models (:mod:`.routed`), and the engine semantics for kv-aware or with
    ``available``; None where not computed."""

    @property
    def hit_tokens(self) -> np.ndarray:
        """GPU plus shared-tier hit tokens, per pool pair and request."""
        return self.gpu_hit_tokens + self.shared_hit_tokens


@njit(cache=True, nogil=True)
def lru_touch(prv, nxt, head, x, size, w, cap):  # type: ignore[no-untyped-def]
    """(Package-internal, with routed.py.) Make slot ``x`` the most recent of the circular list at sentinel ``head`` (inserting it,
    and evicting the least recent when ``size[w]`` is at ``cap``). ``nxt[x] < 0``: not cached."""
    if nxt[x] >= 0:
        p, q = prv[x], nxt[x]
        nxt[p] = q
        prv[q] = p
    elif cap == 0:
        return
    elif size[w] >= cap:
        lru = prv[head]
        p = prv[lru]
        nxt[p] = head
        prv[head] = p
        nxt[lru] = -1
    else:
        size[w] += 1
    first = nxt[head]
    nxt[head] = x
    prv[x] = head
    nxt[x] = first
    prv[first] = x


@njit(cache=True, nogil=True)
def _cluster_kernel(block, off, tok, assign, slot, joint, K, C, S, W, T, u, BT, prv, nxt, sprv, snxt, out_w, out_g,  # type: ignore[no-untyped-def]
                    out_s, out_a):
    """One serial replay at one pool pair. ``assign[r] < 0``: route request r kv-aware (draw
    ``u[r]``, temperature ``T``); such requests, and all of them when ``joint``, live on slot
    ``block * K + w``, where every worker is probed (``out_a``: the best worker's GPU prefix);
    otherwise on ``slot[j]`` (the dense (worker, block) pair of access j)."""
    n_slots = prv.size - K
    D = sprv.size - 1
    for w in range(K):
        prv[n_slots + w] = n_slots + w
        nxt[n_slots + w] = n_slots + w
    sprv[D] = D
    snxt[D] = D
    size = np.zeros(K, np.int64)
    ssize = np.zeros(1, np.int64)
    cost = np.zeros(K)
    for r in range(off.size - 1):
        a, b = off[r], off[r + 1]
        w = assign[r]
        kv = joint or w < 0
        if kv:
            p = 0
            for j in range(a, b):
                p += tok[j]
            best_g = 0
            for v in range(K):
                g_v = 0
                for j in range(a, b):
                    if nxt[block[j] * K + v] < 0:
                        break
                    g_v += tok[j]
                best_g = max(best_g, g_v)
                cost[v] = W * float(p - g_v) / BT + float(b - a) if W < np.inf else -float(g_v)
            out_a[r] = best_g
            if w < 0:
                w = dynamo_pick(cost, u[r], T)
        j = a
        g_tok = 0
        while j < b:
            x = block[j] * K + w if kv else slot[j]
            if nxt[x] < 0:
                break
            g_tok += tok[j]
            j += 1
        first_miss = j
        s_tok = 0
        while j < b and snxt[block[j]] >= 0:
            s_tok += tok[j]
            j += 1
        out_w[r], out_g[r], out_s[r] = w, g_tok, s_tok
        if S != 0:
            for i in range(b - 1, first_miss - 1, -1):
                lru_touch(sprv, snxt, D, block[i], ssize, np.int64(0), S)  # typed 0: one signature
        for i in range(b - 1, a - 1, -1):
            lru_touch(prv, nxt, n_slots + w, block[i] * K + w if kv else slot[i], size, w, C)


def _capacity(blocks: int | None, flag: str) -> int:
    if blocks is None:
        return INT64_MAX
    if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)) or blocks < 0:
        raise ValueError(f"{flag} must be None (infinite) or non-negative integers; got {blocks!r}")
    return int(blocks)


def simulate_cluster(
    trace: RequestTrace, workers: int, router: np.ndarray | str, gpu_blocks: Sequence[int | None],
    shared_blocks: Sequence[int | None] = (0,), overlap_weight: float = 1.0, temperature: float = DEFAULT_TEMPERATURE,
    seed: int = 0, available: bool = False,
) -> ClusterResult:
    """Serve ``trace`` on ``workers`` workers at every (GPU, shared) pool pair (GPU sizes outer).

    ``router``: ``"kv-aware"`` (``overlap_weight`` W of the cost, Dynamo's ``temperature``, random
    choices from ``seed``: module docstring) or the worker of every request (ints in ``0..workers-1``). Pool
    sizes are in blocks of the trace's block size, ``None`` infinite, 0 allowed. ``available``: a
    static assignment also records the best worker's GPU prefix at each arrival (kv-aware always
    does), on kv-aware's state. O(blocks) per pair for a static assignment, O(blocks x workers)
    for kv-aware or with ``available``.

    >>> t = RequestTrace.from_blocks([[1, 2], [1, 2]], block_size=4)
    >>> simulate_cluster(t, 1, np.zeros(2, np.int64), [0, 2]).gpu_hit_tokens.tolist()
    [[0, 0], [0, 8]]
    """
    k = int(workers)
    if k < 1:
        raise ValueError(f"workers must be a positive integer; got {workers!r}")
    if isinstance(overlap_weight, bool) or not isinstance(overlap_weight, (int, float)) or not overlap_weight >= 0:
        raise ValueError(f"overlap_weight must be a non-negative number (inf: longest prefix); got {overlap_weight!r}")
    dense = dense_keys(trace.block_ids)
    block, n_keys = dense.ids, max(dense.n_keys, 1)
    n = trace.n_requests
    joint = isinstance(router, str) or bool(available)
    if isinstance(router, str):
        if router != KV_AWARE:
            raise ValueError(f"router must be {KV_AWARE!r} or an array of workers; got {router!r}")
        assign = np.full(n, -1, np.int64)
        slot, n_slots = np.zeros(1, np.int64), n_keys * k
    else:
        assign = np.asarray(router, np.int64)
        if assign.shape != (n,) or (n and (assign.min() < 0 or assign.max() >= k)):
            raise ValueError(f"router must give every request a worker in 0..{k - 1}")
        if joint:
            slot, n_slots = np.zeros(1, np.int64), n_keys * k
        else:
            per_block = np.repeat(assign, np.diff(trace.offsets))
            pairs = dense_keys(per_block * n_keys + block)
            slot, n_slots = pairs.ids, max(pairs.n_keys, 1)
    index = np.int32 if n_slots + k < 2**31 - 1 else np.int64
    pools = tuple((g, s) for g in gpu_blocks for s in shared_blocks)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < np.inf:
        raise ValueError(f"temperature must be a finite non-negative number; got {temperature!r}")
    draws = router_draws(n, seed)
    out = np.zeros((4, len(pools), n), np.int64)
    for i, (g, s) in enumerate(pools):
        C, S = _capacity(g, "gpu_blocks"), _capacity(s, "shared_blocks")
        prv, nxt = np.empty(n_slots + k, index), np.full(n_slots + k, -1, index)
        sprv, snxt = np.empty(n_keys + 1, index), np.full(n_keys + 1, -1, index)
        _cluster_kernel(block, trace.offsets, trace.block_tokens, assign, slot, joint, k, C, S, float(overlap_weight),
                        float(temperature), draws, float(trace.block_size), prv, nxt, sprv, snxt, out[0, i], out[1, i],
                        out[2, i], out[3, i])
    name = router if isinstance(router, str) else "static"
    return ClusterResult(k, name, pools, out[0], out[1], out[2],
                         available_hit_tokens=out[3] if joint else None)
