"""vLLM 0.33.0's own scheduler (sync, or async scheduling) over the hybrid KV cache: :mod:`.scheduler`'s
step loop with :mod:`.hybrid`'s managers in place of the one full-attention pool.

The loops are :mod:`.scheduler`'s own (:func:`.scheduler.run_sync`, :func:`.scheduler.run_async`) (``v1/core/sched/scheduler.py``;
validation/SCHEDULER_NOTES.md): arrivals join the waiting queue, the running requests are served
first (tokens capped by the budget, the newest preempted until a block allocation fits), then, when
nobody was preempted, the head of the queue is admitted while the budget lasts; a step of T tokens
lasts ``step_fixed_s + T x step_per_token_s``; a request whose computed tokens reach its length
samples a token; at ``max_tokens`` it is freed. What the hybrid cache changes (vLLM 0.33.0,
read in the installed package; validation/HYBRID_NOTES.md section 4 has the driven rules):

- every allocation is :class:`.hybrid.HybridRun`'s ``allocate_slots`` (``kv_cache_manager.py:380-627``):
  skipped blocks freed first (``remove_skipped_blocks`` on ``computed - num_in_flight_tokens``,
  :564; sync scheduling has nothing in flight at ``schedule()``, async the batch in flight), then
  the count over all groups;
- admission (``scheduler.py:1108-1128``, :1431-1448): the hybrid lookup capped at ``num_tokens - 1``
  (a resumed request replays its output, ``kv_cache_manager.py:301``), the junction set anew;
  the whole sequence must fit with the recycling groups' admission cap; the watermark
  (``has_scheduled_reqs``, :518-525) is ``0.0 x num_blocks`` by default (``kv_cache_manager.py:148``,
  :210), so it changes nothing;
- a Mamba hit on a state some request cached in this step does not fit (``MambaManager.
  get_num_blocks_to_allocate`` returns ``num_gpu_blocks + 1``, ``single_type_kv_cache_manager.py:1704-1713``;
  the set is cleared by ``new_step_starts`` at the start of each ``schedule()``, ``scheduler.py:746``):
  the head waits for the next step;
- a chunk is clipped by ``_mamba_block_aligned_split`` (``scheduler.py:546-657``) in both loops; a
  running request whose split is 0 is skipped (:891), a head whose split is 0 stops admission (:1357-1358);
- preemption and finish free group by group in group order (``kv_cache_coordinator.py:404-412``);
- async scheduling (:func:`.scheduler.run_async`): the blocks of the
  processed tokens are cached through every group when a batch's output is processed
  (``scheduler.py:2402-2415``), and the sliding / chunked admission caps count two batches in
  flight (``max_concurrent_batches x max_num_batched_tokens``, ``config/vllm.py:601-609``).

Per request the outputs of :func:`.scheduler.simulate_scheduler`. Checked against vLLM's real
Scheduler with the hybrid KVCacheConfig (``validation/drive_vllm_hybrid_scheduler.py``, the
committed runs of ``tests/data/engines/hybrid_scheduler/``), and with one full-attention group
against :mod:`.scheduler` (``tests/serving/test_hybrid_scheduler.py``), sync and async. Pure
Python: O(steps x running x groups + blocks) per pool.

>>> from stackdist.traces import RequestTrace
>>> from stackdist.serving.hybrid import GroupSpec
>>> t = RequestTrace.from_blocks([[1, 2], [1, 2]], block_size=16, last_tokens=[8, 8])
>>> r = simulate_hybrid_scheduler(t, [GroupSpec("full", 16)], [8], decode=False)
>>> r.hit_tokens.tolist(), r.queue_s.tolist()
([[0, 16]], [[0.0, 0.0]])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stackdist.output import step
from stackdist.traces import RequestTrace

from .hybrid import GroupSpec, HybridRun
from .pages import EnginePages, engine_pages
from .scheduler import (
    SchedulerResult,
    SchedulerSettings,
    SchedulerStuck,
    run_async,
    run_sync,
)

__all__ = ["simulate_hybrid_scheduler"]


class _Req:
    __slots__ = ("P", "computed", "finish", "first", "first_hit", "first_longest", "first_sched", "generated", "i",
                 "in_flight", "max_tokens", "placeholders", "preemptions", "stale")

    def __init__(self, i: int, P: int, max_tokens: int) -> None:
        self.i, self.P, self.max_tokens = i, P, max_tokens
        self.generated = self.computed = self.preemptions = 0
        self.placeholders = self.in_flight = self.stale = 0  # async scheduling only (scheduler.py's _run_async)
        self.first_hit = self.first_longest = -1
        self.first_sched = self.first = self.finish = float("nan")

    @property
    def num_tokens(self) -> int:
        return self.P + self.generated


class _HybridPool:
    """The hybrid KV cache behind :mod:`.scheduler`'s step loops: the methods :class:`.scheduler`'s
    one-group pool gives them, through :class:`.hybrid.HybridRun`'s managers (the module docstring
    has what each changes, with vLLM's file:line)."""

    def __init__(self, run: HybridRun) -> None:
        self.run = run
        run.pool.step_keys = set()

    def begin_step(self) -> None:
        """``new_step_starts`` (scheduler.py:746): the Mamba keys cached in this step are forgotten."""
        assert self.run.pool.step_keys is not None
        self.run.pool.step_keys.clear()

    def split(self, q: _Req, start: int, n: int) -> int:
        """``_mamba_block_aligned_split`` of a chunk (a no-op without Mamba groups)."""
        return self.run.split(q.i, start, n)

    def grow(self, q: _Req, n: int) -> bool:
        """``allocate_slots`` of a running request, window blocks freed on the processed tokens."""
        self.run.requests[q.i].tokens = q.num_tokens
        return self.run.extend(q.i, q.computed, n, q.computed - q.in_flight)

    def admit(self, q: _Req, budget: int) -> tuple[int, int] | None:
        """The head of the queue: the hybrid lookup (capped at ``num_tokens - 1``), the split
        chunk and the whole-sequence admission check; None: it waits, and blocks the queue."""
        hit = self.run.lookup(q.i, q.generated)
        n = self.run.split(q.i, hit, min(q.num_tokens - hit, budget))
        if n == 0 or not self.run.admit(q.i, n):
            del self.run.requests[q.i]
            return None
        return hit, n

    def admitted(self, q: _Req, hit: int) -> None:
        """A first admission: the longest single-group hit beside the hybrid one."""
        q.first_longest = max(hit, int(self.run.full_hits[q.i]))

    def cache(self, q: _Req, tokens: int) -> None:
        """An async batch's output: the processed tokens' blocks cached through every group."""
        self.run.requests[q.i].tokens = q.num_tokens
        self.run.cache(q.i, tokens)

    def release(self, q: _Req) -> None:
        """Preemption or finish: every group frees its blocks, groups in order."""
        self.run.finish(q.i)


def simulate_hybrid_scheduler(trace: RequestTrace | EnginePages, groups: Sequence[GroupSpec],
                              pools: Sequence[int | None], decode: bool = True,
                              settings: SchedulerSettings | None = None,
                              arrival_s: np.ndarray | None = None) -> SchedulerResult:
    """vLLM's scheduler (``settings.async_scheduling``: its AsyncScheduler) with a hybrid KV cache
    (``groups``, :func:`.hybrid.kv_cache_groups`)
    at each ``num_gpu_blocks`` (None: a pool that never evicts); arrivals from the trace's
    timestamps unless ``arrival_s``. A pool where nothing can be scheduled with no arrival left
    (a request that never fits) has -1 / NaN rows and ``failed_request`` set. Pages are 16 tokens
    (the hash block; each group has its own block size). O(steps x running x groups + blocks) per
    pool, pure Python."""
    s = settings or SchedulerSettings()
    if isinstance(trace, EnginePages):
        pages = trace
        if arrival_s is None:
            raise ValueError("arrival_s is needed with engine pages (the trace has the timestamps)")
    else:
        pages = engine_pages(trace, 16)
        if arrival_s is None:
            arrival_s = trace.timestamps_s - (trace.timestamps_s[0] if trace.n_requests else 0.0)
    arrival = np.asarray(arrival_s, np.float64)
    written = pages.input_tokens + (np.maximum(pages.output_tokens, 1) - 1 if decode else 0)
    never_evicts = len(groups) * int((-(-written // 16) + 1).sum()) + 2
    n, k = pages.n_requests, len(pools)
    hits = np.full((k, n), -1, np.int64)
    longest = np.full((k, n), -1, np.int64)
    pre = np.full((k, n), -1, np.int64)
    queue, first, finish = (np.full((k, n), np.nan) for _ in range(3))
    failed = np.full(k, -1, np.int64)
    busy = np.full(k, np.nan)
    tokens = np.full(k, -1, np.int64)
    for p, pool in enumerate(pools):
        reqs = [_Req(r, int(pages.input_tokens[r]), max(int(pages.output_tokens[r]), 1) if decode else 1)
                for r in range(n)]
        run = HybridRun(groups, never_evicts if pool is None else int(pool), pages, s.max_num_batched_tokens)
        if s.async_scheduling:  # the recycling groups' admission cap counts two batches in flight (config/vllm.py:601-609)
            for m in run.managers:
                m.cap = m.admission_cap(2 * s.max_num_batched_tokens, 1 << 40)
        try:
            busy[p], tokens[p] = (run_async if s.async_scheduling else run_sync)(reqs, arrival, _HybridPool(run), s)
        except SchedulerStuck as e:
            failed[p] = e.request
            continue
        hits[p] = [q.first_hit for q in reqs]
        longest[p] = [q.first_longest for q in reqs]
        pre[p] = [q.preemptions for q in reqs]
        queue[p] = [q.first_sched - arrival[q.i] for q in reqs]
        first[p] = [q.first - arrival[q.i] for q in reqs]
        finish[p] = [q.finish - arrival[q.i] for q in reqs]
        step(f"hybrid scheduler: pool size {'inf' if pool is None else f'{pool:,}'} done ({p + 1}/{k})")
    return SchedulerResult(tuple(pools), hits, pre, queue, first, finish, failed, s, busy, tokens, decode,
                           group_hit_tokens=longest)
