"""AIBrix's ``prefix-cache`` routing algorithm (its gateway plugin) over a trace's engine pages.

The rule, as read in github.com/vllm-project/aibrix at commit e3e10f9e
(``pkg/plugins/gateway/algorithms/prefix_cache.go``, ``prefixCacheRouter.routeOriginal``, lines
374-489, its helpers ``getTargetPodFromMatchedPods`` :950-987 and
``getTargetPodListOnLoadImbalance`` :991-1025; ``least_request.go``
``selectTargetPodWithLeastRequestCount`` :148-167 and ``getRequestCounts`` :262-273; ``util.go``
``mean``, ``standardDeviation`` :31-54; the router's table ``pkg/utils/prefixcacheindexer/hash.go``
and its store ``pkg/utils/lrustore/lru_store.go``). The defaults: the ``character`` tokenizer (the
prompt's bytes), blocks of 4 bytes, a table of at most 200,000 blocks whose entries expire 20
minutes after their last write (checked every second), a load imbalance above 8 running requests,
a standard-deviation factor of 1 (prefix_cache.go:44-58, hash.go:32-47). With ``load_w`` the
requests the gateway sent to w that have not finished (``RealtimeNumRequestsRunning``: +1 when
routed, -1 when the response is done, cache_trace.go:58-127), at the arrival of a request:

1. **Imbalance** (prefix_cache.go:401-420, :991-1025): ``max load - min load > 8`` -> only the
   workers of the least load take part in the match below.
2. **Match** (hash.go:127-158, ``seqSearchPrefix``): the prompt's chained block hashes in order
   (full blocks only, hash.go:206-241); for block i present in the table, every taking-part
   worker that holds it gets ``(i + 1) x 100 // blocks`` percent and every one that does not
   stops taking part (``matchPods``, hash.go:193-204); the walk ends at the first block absent,
   or when no worker holds the block. The table is not refreshed by a match (``Get``).
3. **Choice among the matched** (prefix_cache.go:950-987): over all workers the mean and the
   sample standard deviation (n - 1; 0 for one worker) of the loads; the matched workers
   shuffled, then stably sorted by percent (higher first) and load (lower first); the first whose
   load is at most ``mean + 1 x std``. Equivalently: among the matched workers within that bound,
   the highest percent, then the least load, one of the tied at random.
4. **Fallback** (prefix_cache.go:443-465; least_request.go:148-167): nothing matched, or no
   matched worker within the bound -> one of the least-loaded workers (all of them) at random.
5. **Record** (``PostRouteUpdate`` -> ``AddPrefix``, hash.go:160-190): every block of the prompt,
   head first, is written with the chosen worker added to its set and stamped now; a write moves
   the block to the head of the store's LRU list, a new block past the capacity removes the
   list's tail (lru_store.go:78-101). Every second, blocks whose last write is more than 20
   minutes old are removed (lru_store.go:131-150). A worker is never removed from a block's set;
   a removed block comes back with the one worker that wrote it.

**How it is modelled here** (the router reads only its own table and the running counts, and the
schedule fixes arrivals and finishes, so its choices are computed before the engines run, exact
for any engine model and pool size, as SGLang's router in :mod:`.sglang_router`):

- Blocks are 16-token pages (:func:`~.sglang_router.router_pages`, equal page ids mean equal whole
  prefixes); the product's 4-byte blocks of text are about one token each (4 characters a token),
  so a page stands for 16 of its blocks written together, and the capacity is
  ``200,000 x 4 / (4 x 16)`` = 12,500 pages. A prompt's last page, when shorter, is its own key
  (page and tokens: it matches only an equal prompt end), and the percent is the tokens matched,
  ``min(16 x pages, P) x 100 // P``, as the product's blocks matched over its blocks. A match can
  therefore end up to one page earlier than the product's.
- Time is the schedule's (serial: request i at i seconds); expiry runs at ``t0 + m x 1 s`` (``t0``
  the first arrival), a run due at or before an arrival before it is routed, and only the last
  one due matters (the entries expired at an earlier run would be at the later one too).
- Load: the requests whose schedule interval covers the arrival (finished at or before it: not
  counted), in arrival order (ties by index), as the least-loaded router.
- The random choices (Go's ``rand.Shuffle`` and ``rand.Intn``, unseeded): worker
  ``tied[floor(u_r x len(tied))]`` with ``tied`` in index order and ``u_r`` request r's draw from
  ``numpy.random.default_rng(seed).random(n)``: uniform, as the product, and reproducible.
- Not modelled: the remote tokenizer and KV-event sync (``AIBRIX_PREFIX_CACHE_KV_EVENT_SYNC_ENABLED``:
  the engines' own cache events instead of the router's table), several gateway replicas (each
  counts only its own requests), several models in one table.

>>> import numpy as np
>>> from stackdist.traces import RequestTrace
>>> from .schedule import Schedule
>>> from .sglang_router import router_pages
>>> t = RequestTrace.from_blocks([[1, 2], [3, 4], [1, 2], [3, 5]], block_size=16, last_tokens=[16] * 4)
>>> w = aibrix_prefix_cache(router_pages(t), Schedule.serial(4), 2)
>>> bool(w[2] == w[0] and w[3] == w[1])
True
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from stackdist.engine.kernels import njit

from .pages import PAGE_TOKENS, EnginePages
from .production_stack_router import chunk_keys
from .schedule import Schedule
from .sglang_router import router_prompts

__all__ = ["AIBRIX_PREFIX_CACHE", "PrefixCacheConfig", "aibrix_prefix_cache", "describe", "load_bound"]

AIBRIX_PREFIX_CACHE = "aibrix-prefix-cache"
"""The router's name, as the plan's routers are named."""


@dataclass(frozen=True)
class PrefixCacheConfig:
    """AIBrix ``prefix-cache`` settings, defaults the product's (prefix_cache.go:44-58,
    hash.go:32-47), and the characters per token that turn its byte blocks into pages."""

    imbalance_abs_count: int = 8
    std_factor: float = 1.0
    block_number: int = 200_000
    block_bytes: int = 4
    ttl_s: float = 20 * 60.0
    eviction_interval_s: float = 1.0
    chars_per_token: float = 4.0

    def __post_init__(self) -> None:
        if self.imbalance_abs_count < 0 or not self.std_factor >= 0:
            raise ValueError("imbalance_abs_count and std_factor must be non-negative")
        if self.block_number < 0 or self.block_bytes < 1 or not self.chars_per_token > 0:
            raise ValueError("block_number must be non-negative, block_bytes and chars_per_token positive")
        if not self.ttl_s >= 0 or not self.eviction_interval_s >= 0:
            raise ValueError("ttl_s and eviction_interval_s must be non-negative")

    def capacity_pages(self, page_tokens: int) -> int:
        """The table's ``block_number`` blocks of ``block_bytes`` bytes in pages of ``page_tokens``
        tokens (at ``chars_per_token`` one-byte characters a token).

        >>> PrefixCacheConfig().capacity_pages(16)
        12500
        """
        return int(self.block_number * self.block_bytes // (self.chars_per_token * page_tokens))


def describe(config: PrefixCacheConfig = PrefixCacheConfig(), page_tokens: int = PAGE_TOKENS, seed: int = 0) -> str:
    """The router and its settings in words (the plan's ``cluster`` section).

    >>> print(describe().split(";")[0])
    AIBrix prefix-cache: running requests imbalanced (max - min > 8) -> only the least loaded take part
    """
    return (f"AIBrix prefix-cache: running requests imbalanced (max - min > {config.imbalance_abs_count}) -> only the "
            "least loaded take part; of the workers holding the longest prefix in the router's table of what it sent "
            f"(an LRU of {config.block_number:,} {config.block_bytes}-byte blocks of text, "
            f"{config.capacity_pages(page_tokens):,} {page_tokens}-token pages at {config.chars_per_token:g} characters "
            "a token (or the trace's own blocks where they do not split into pages), expired "
            f"{config.ttl_s:g} s after the last write), those loaded at most mean + {config.std_factor:g} x std, the "
            "highest match, then the least loaded, one at random; else one of the least loaded at random; draws "
            f"seeded {seed}")


@njit(cache=True, nogil=True)
def _match(key, a, m, P, B, held, stored, ready, pct):  # type: ignore[no-untyped-def]
    """``seqSearchPrefix``: each taking-part worker's percent (-1: unmatched) over ``key[a:a+m]``;
    ``ready`` is narrowed as the product narrows its map."""
    pct[:] = -1
    for i in range(m):
        pg = key[a + i]
        if not stored[pg]:
            break
        percent = min(B * (i + 1), P) * 100 // P
        hit = False
        for w in range(ready.size):
            if ready[w]:
                if held[pg, w]:
                    pct[w] = percent
                    hit = True
                else:
                    ready[w] = False
        if not hit:
            break


@njit(cache=True, nogil=True)
def _unlink(prev, nxt, x):  # type: ignore[no-untyped-def]
    nxt[prev[x]] = nxt[x]
    prev[nxt[x]] = prev[x]


@njit(cache=True, nogil=True)
def _to_head(prev, nxt, head, x):  # type: ignore[no-untyped-def]
    prev[x] = head
    nxt[x] = nxt[head]
    prev[nxt[head]] = x
    nxt[head] = x


@njit(cache=True, nogil=True)
def _drop(held, stored, prev, nxt, x):  # type: ignore[no-untyped-def]
    _unlink(prev, nxt, x)
    stored[x] = False
    held[x, :] = False


@njit(cache=True, nogil=True)
def _add(key, a, m, w, t, held, stored, prev, nxt, last, head, size, cap):  # type: ignore[no-untyped-def]
    """``AddPrefix``: the pages head first, each stamped ``t`` with ``w`` added and moved to the
    LRU head; a new page past ``cap`` removes the tail. Returns the new size."""
    for i in range(m):
        pg = key[a + i]
        if stored[pg]:
            _unlink(prev, nxt, pg)
        else:
            stored[pg] = True
            held[pg, :] = False
            size += 1
        held[pg, w] = True
        last[pg] = t
        _to_head(prev, nxt, head, pg)
        if size > cap:
            _drop(held, stored, prev, nxt, prev[head])
            size -= 1
    return size


@njit(cache=True, nogil=True)
def _expire(held, stored, prev, nxt, last, head, size, now, ttl):  # type: ignore[no-untyped-def]
    """The store's ``evict(now)``: every page with ``now - last > ttl``, the tail side of the list
    (writes are stamped in time order). Returns the new size."""
    while size > 0 and now - last[prev[head]] > ttl:
        _drop(held, stored, prev, nxt, prev[head])
        size -= 1
    return size


def load_bound(load: np.ndarray, factor: float) -> float:
    """``mean + factor x std`` of the loads as Go computes them (``util.go``: the mean, the sample
    standard deviation from the sum of squared deviations over n - 1, 0 for one value). O(workers).

    >>> load_bound(np.array([0, 2]), 1.0) == 1 + 2 ** 0.5
    True
    """
    values = [float(x) for x in load.tolist()]
    mean = sum(values) / len(values) if values else 0.0
    if len(values) <= 1:
        return mean
    return mean + factor * math.sqrt(sum((x - mean) * (x - mean) for x in values) / (len(values) - 1))


def aibrix_prefix_cache(pages: EnginePages, schedule: Schedule, workers: int,
                        config: PrefixCacheConfig = PrefixCacheConfig(), seed: int = 0) -> np.ndarray:
    """Every request's worker under AIBrix's ``prefix-cache`` router (module docstring).

    O(prompt pages x workers) for the matches and writes, O(requests x workers) for the choices,
    O(requests log requests) for the load; O(page ids x workers) bytes.
    """
    k, n, B, off, P, ntr = router_prompts(pages, schedule, workers)
    key, n_keys = chunk_keys(pages.key.astype(np.int64), off, ntr, P, B, int(pages.n_keys))
    held = np.zeros((n_keys, k), np.bool_)
    stored = np.zeros(n_keys, np.bool_)
    head = n_keys  # the list's sentinel: nxt[head] the most recent, prev[head] the least
    prev = np.full(n_keys + 1, head, np.int64)
    nxt = np.full(n_keys + 1, head, np.int64)
    last = np.zeros(n_keys + 1, np.float64)
    cap = config.capacity_pages(B)
    draw = np.random.default_rng(seed).random(n)
    arrival, finish = schedule.arrival_s, schedule.finish_s
    order = np.lexsort((np.arange(n), arrival))
    out = np.zeros(n, np.int64)
    load = np.zeros(k, np.int64)
    running: list[tuple[float, int]] = []  # (finish, worker)
    ready = np.zeros(k, np.bool_)
    pct = np.zeros(k, np.int64)
    size = 0
    interval = float(config.eviction_interval_s)
    t0 = float(arrival[order[0]]) if n else 0.0
    next_tick = t0 + interval if interval > 0 else math.inf
    for r in order.tolist():
        t = float(arrival[r])
        while running and running[0][0] <= t:
            load[heapq.heappop(running)[1]] -= 1
        if t >= next_tick:
            tick = t0 + math.floor((t - t0) / interval) * interval
            size = _expire(held, stored, prev, nxt, last, head, size, tick, float(config.ttl_s))
            next_tick = tick + interval
        lo, hi = int(load.min()), int(load.max())
        ready[:] = load == lo if hi - lo > config.imbalance_abs_count else True
        a, m, p = int(off[r]), int(ntr[r]), int(P[r])
        if p > 0:
            _match(key, a, m, p, B, held, stored, ready, pct)
        else:
            pct[:] = -1
        bound = load_bound(load, config.std_factor)
        within = (pct >= 0) & (load <= bound)
        if within.any():
            best = pct[within].max()
            within &= pct == best
            least = load[within].min()
            tied = np.flatnonzero(within & (load == least))
        else:
            tied = np.flatnonzero(load == lo)
        w = int(tied[min(int(draw[r] * tied.size), tied.size - 1)])
        size = _add(key, a, m, w, t, held, stored, prev, nxt, last, head, size, cap)
        out[r] = w
        load[w] += 1
        heapq.heappush(running, (float(finish[r]), w))
    return out
