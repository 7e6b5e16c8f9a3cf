"""SGLang's cache-aware router (sgl-router's ``cache_aware`` policy) over a trace's engine pages.

The rule, as read in github.com/sgl-project/sglang (``sgl-router``; ``policies/cache_aware.rs``
at commit 026f853b, ``policies/tree.rs`` at 4d40eec0, the launcher's defaults in ``main.rs`` at
0129b029). At the arrival of a request, with ``load_w`` the requests routed to worker w and not
finished (the worker's load counter: incremented when the router sends, decremented when the
response ends):

1. **Imbalanced** (cache_aware.rs:242-243): ``max_load - min_load > balance_abs_threshold`` and
   ``max_load > min_load * balance_rel_threshold`` (f32) -> the least-loaded worker
   (cache_aware.rs:263, ``min_by_key``: ties to the lowest index); the request's text is still
   inserted into that worker's tree (:274), no prefix match is made.
2. Otherwise (cache_aware.rs:300-312): ``prefix_match`` of the request's text in the router's
   approximate radix tree (one tree shared by all workers, each node holding the workers
   ("tenants") that inserted it, tree.rs:258-320); ``match_rate = matched chars / text chars``;
   ``match_rate > cache_threshold`` -> the worker with the longest match, else the worker with
   the smallest tree (``get_smallest_tenant``, tree.rs:540, fewest characters). ``prefix_match``
   refreshes the matched worker's timestamps from the deepest matched node to the root
   (tree.rs:304-314) whichever worker is then chosen.
3. The text is inserted into the chosen worker's tree (cache_aware.rs:320; tree.rs:108: every node
   on the path is stamped with the current time, new characters counted in the worker's size).
4. Every ``eviction_interval_secs`` a background thread (cache_aware.rs:97-104) runs
   ``evict_tenant_by_size(max_tree_size)`` (tree.rs:410-480): per worker over ``max_tree_size``
   characters, its leaves (nodes it holds and none of whose children it holds) are removed
   oldest timestamp first, a parent pushed when it becomes a leaf, until the worker's size is at
   most ``max_tree_size``.

Defaults: the launcher's (``main.rs:143-161``): ``cache_threshold 0.3``,
``balance_abs_threshold 64``, ``balance_rel_threshold 1.5``, ``eviction_interval 120`` s,
``max_tree_size 2**26`` characters (``CacheAwareConfig::default()`` in ``policies/mod.rs`` holds
other values, 0.5 / 32 / 1.1 / 30 s / 10,000, used by tests and library callers, not by a
launched router).

**How it is modelled here** (the router reads no engine state, only its own trees and the load,
and the schedule fixes arrivals and finishes, so its choices are computed before the engines run
and are exact for any engine model and pool size):

- The text is the request's prompt pages (16-token pages, :mod:`.pages`; equal page ids mean
  equal whole prefixes, so one node per page id is the tree uncompressed). SGLang matches
  characters of the request text; here a match ends at a page boundary (a prompt sharing 20
  tokens with an earlier one matches 16). ``match_rate = min(16 x matched pages, P) / P``
  (tokens for characters, the ratio computed in float32 as SGLang does); sizes are counted in
  pages, ``max_tree_size`` as ``2**26 / (4 characters per token x 16)`` = 1,048,576 pages.
  (:func:`router_pages`: a trace whose blocks do not split into 16-token pages, or with an
  empty prompt, is read in its own blocks; an empty prompt matches nothing.)
- Eviction removes pages, not radix nodes: the same order (each insert or match stamps a whole
  path, so a parent is never older than its children and "oldest leaf first" is "oldest page
  first, deeper first"), but it stops exactly at the size limit where SGLang removes whole
  nodes (one node can hold many characters, so it can end below the limit).
- Time: a logical clock, one tick per request (SGLang: milliseconds, equal within one ms). The
  eviction thread runs at ``t0 + m x interval`` on the schedule's clock, ``t0`` the first
  arrival (serial schedule: one request per second); an eviction due at or before an arrival
  runs before that request is routed.
- Load: the requests whose schedule interval covers the arrival (finished at or before it:
  not counted), in arrival order (ties by index), as the least-loaded router.
- Ties, deterministic: the longest match, the smallest tree and the least load each go to the
  lowest worker index (SGLang: the first tenant of a node's or the sizes' DashMap, an order set
  by the workers' URLs' hashes; ``min_by_key``, the first, for the load); eviction ties
  (equal timestamps and depths) by the lower page id (SGLang: the binary heap's order).

>>> import numpy as np
>>> from stackdist.traces import RequestTrace
>>> from .schedule import Schedule
>>> t = RequestTrace.from_blocks([[1, 2], [3, 4], [1, 2], [3, 5]], block_size=16, last_tokens=[16] * 4)
>>> sglang_cache_aware(engine_pages(t), Schedule.serial(4), 2).tolist()
[0, 1, 0, 1]
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from stackdist.engine.kernels import njit
from stackdist.engine.keys import dense_keys
from stackdist.traces import RequestTrace

from .pages import PAGE_TOKENS, EnginePages, engine_pages
from .schedule import Schedule

__all__ = ["SGLANG_CACHE_AWARE", "CacheAwareConfig", "describe", "router_pages", "sglang_cache_aware"]

SGLANG_CACHE_AWARE = "sglang-cache-aware"
"""The router's name, as the plan's routers are named."""


@dataclass(frozen=True)
class CacheAwareConfig:
    """sgl-router's ``cache_aware`` settings, defaults the launcher's (``main.rs:143-161``), and
    the characters per token that turn ``max_tree_size`` (characters) into pages."""

    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    eviction_interval_s: float = 120.0
    max_tree_size: int = 2**26
    chars_per_token: float = 4.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be in [0, 1]; got {self.cache_threshold!r}")
        if self.balance_abs_threshold < 0 or not self.balance_rel_threshold >= 0:
            raise ValueError("balance thresholds must be non-negative")
        if not self.eviction_interval_s >= 0 or self.max_tree_size < 0 or not self.chars_per_token > 0:
            raise ValueError("eviction_interval_s, max_tree_size must be non-negative, chars_per_token positive")

    def max_tree_pages(self, page_tokens: int) -> int:
        """``max_tree_size`` characters in pages of ``page_tokens`` tokens (at least 0).

        >>> CacheAwareConfig().max_tree_pages(16)
        1048576
        """
        return int(self.max_tree_size // (self.chars_per_token * page_tokens))


def describe(config: CacheAwareConfig = CacheAwareConfig(), page_tokens: int = PAGE_TOKENS) -> str:
    """The router and its settings in words (the plan's ``cluster`` section).

    >>> describe().split(";")[0]
    'SGLang sgl-router cache_aware: running requests imbalanced (max - min > 64 and max > 1.5 x min) -> the least loaded'
    """
    return (f"SGLang sgl-router cache_aware: running requests imbalanced (max - min > {config.balance_abs_threshold} and "
            f"max > {config.balance_rel_threshold:g} x min) -> the least loaded; else the longest prefix in the router's "
            f"own tree of the prompts it sent each worker if over {config.cache_threshold:g} of the prompt, else the "
            f"smallest tree (ties: lowest index); trees of {page_tokens}-token pages evicted to "
            f"{config.max_tree_pages(page_tokens):,} pages every {config.eviction_interval_s:g} s of the schedule")


@njit(cache=True, nogil=True)
def _longest(ts, key, a, m):  # type: ignore[no-untyped-def]
    """(worker, pages) of the longest match of ``key[a:a+m]`` among the workers' trees, ties to
    the lowest index (a worker's tree holds a page iff ``ts[w, page] >= 0``)."""
    best_w, best_j = 0, -1
    for w in range(ts.shape[0]):
        j = 0
        while j < m and ts[w, key[a + j]] >= 0:
            j += 1
        if j > best_j:
            best_w, best_j = w, j
    return best_w, best_j


@njit(cache=True, nogil=True)
def _stamp(ts, w, key, a, m, clock):  # type: ignore[no-untyped-def]
    """Pages ``key[a:a+m]`` into (or refreshed in) worker ``w``'s tree at ``clock``; returns how
    many were new."""
    new = 0
    for j in range(m):
        k = key[a + j]
        if ts[w, k] < 0:
            new += 1
        ts[w, k] = clock
    return new


def _evict(ts: np.ndarray, size: np.ndarray, depth: np.ndarray, limit: int) -> None:
    """``evict_tenant_by_size``: per worker over ``limit`` pages, its oldest pages (deeper first,
    then the lower id) removed until it holds ``limit``."""
    for w in range(ts.shape[0]):
        excess = int(size[w]) - limit
        if excess <= 0:
            continue
        held = np.flatnonzero(ts[w] >= 0)
        order = np.lexsort((held, -depth[held], ts[w, held]))
        ts[w, held[order[:excess]]] = -1
        size[w] = limit


def router_prompts(pages: EnginePages, schedule: Schedule,
                   workers: int) -> tuple[int, int, int, np.ndarray, np.ndarray, np.ndarray]:
    """A prefix router's inputs, checked: ``(K, requests, page tokens, offsets, prompt tokens,
    prompt pages per request)`` (the prompt's pages, not its answer's blocks). O(requests).

    >>> p = EnginePages(np.array([0, 1, 2]), np.array([0, 3]), np.array([20]), np.array([9]), 3, 16)
    >>> router_prompts(p, Schedule.serial(1), 2)[5].tolist()
    [2]
    """
    k = int(workers)
    if k < 1:
        raise ValueError(f"workers must be a positive integer; got {workers!r}")
    n, B = pages.n_requests, pages.page_tokens
    if schedule.n_requests != n:
        raise ValueError(f"the schedule has {schedule.n_requests} requests, the trace {n}")
    off = pages.offsets.astype(np.int64)
    P = pages.input_tokens.astype(np.int64)
    return k, n, B, off, P, np.minimum(np.diff(off), (P + B - 1) // B)


def router_pages(trace: RequestTrace, page_tokens: int = PAGE_TOKENS) -> EnginePages:
    """The router's text of every request: its engine pages of ``page_tokens`` tokens, or the
    trace's own blocks where those do not split into them or a prompt is empty (the engine
    semantics' small-block traces). O(blocks).

    >>> t = RequestTrace.from_blocks([[1, 2], []], block_size=4)
    >>> router_pages(t).key.tolist(), router_pages(t).page_tokens
    ([1, 2], 4)
    """
    if trace.block_size % page_tokens == 0 and (trace.input_length >= 1).all():
        return engine_pages(trace, page_tokens)
    dense = dense_keys(trace.block_ids)
    return EnginePages(dense.ids.astype(np.int64), np.asarray(trace.offsets, np.int64),
                       np.asarray(trace.input_length, np.int64), np.asarray(trace.output_length, np.int64),
                       int(dense.n_keys), int(trace.block_size))


def sglang_cache_aware(pages: EnginePages, schedule: Schedule, workers: int,
                       config: CacheAwareConfig = CacheAwareConfig()) -> np.ndarray:
    """Every request's worker under SGLang's cache-aware router (module docstring).

    O(prompt pages x workers) for the matches, O(requests log requests) for the load, O(page ids
    x workers) memory (4 bytes each), plus O(held log held) per eviction over the limit.
    """
    k, n, B, off, P, ntr = router_prompts(pages, schedule, workers)
    key = pages.key.astype(np.int64)
    n_keys = max(int(pages.n_keys), 1)
    lengths = np.diff(off)
    depth = np.zeros(n_keys, np.int64)
    depth[key] = np.arange(key.size, dtype=np.int64) - np.repeat(off[:-1], lengths)
    ts = np.full((k, n_keys), -1, np.int32 if n < 2**31 - 2 else np.int64)
    size = np.zeros(k, np.int64)
    limit = config.max_tree_pages(B)
    thr = np.float32(config.cache_threshold)
    rel = np.float32(config.balance_rel_threshold)
    arrival, finish = schedule.arrival_s, schedule.finish_s
    order = np.lexsort((np.arange(n), arrival))
    out = np.zeros(n, np.int64)
    load = [0] * k
    running: list[tuple[float, int]] = []  # (finish, worker)
    interval = float(config.eviction_interval_s)
    t0 = float(arrival[order[0]]) if n else 0.0
    next_evict = t0 + interval if interval > 0 else math.inf
    for clock, r in enumerate(order.tolist(), start=1):
        t = float(arrival[r])
        while running and running[0][0] <= t:
            load[heapq.heappop(running)[1]] -= 1
        if t >= next_evict:
            _evict(ts, size, depth, limit)
            next_evict = t0 + (math.floor((t - t0) / interval) + 1) * interval
        a, m = int(off[r]), int(ntr[r])
        hi, lo = max(load), min(load)
        if hi - lo > config.balance_abs_threshold and np.float32(hi) > np.float32(lo) * rel:
            w = load.index(lo)
        else:
            best, j = _longest(ts, key, a, m)
            if j > 0:  # prefix_match refreshes the matched worker's path
                _stamp(ts, best, key, a, j, clock)
            rate = np.float32(min(B * j, int(P[r]))) / np.float32(P[r]) if P[r] > 0 else np.float32(0)
            w = int(best) if rate > thr else int(np.argmin(size))
        size[w] += _stamp(ts, w, key, a, m, clock)
        out[r] = w
        load[w] += 1
        heapq.heappush(running, (float(finish[r]), w))
    return out
