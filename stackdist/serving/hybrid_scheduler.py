"""vLLM 0.33.0's own scheduler (sync, or async scheduling) over the hybrid KV cache: :mod:`.scheduler`'s
step loop with :mod:`.hybrid`'s managers in place of the one full-attention pool.

The loop is :func:`.scheduler._run` / ``_schedule`` rule for rule (``v1/core/sched/scheduler.py``;
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
- async scheduling (:func:`_run_async`, :func:`.scheduler._run_async`'s rules): the blocks of the
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

from collections import deque
from collections.abc import Sequence

import numpy as np

from stackdist.output import step
from stackdist.traces import RequestTrace

from .hybrid import GroupSpec, HybridRun
from .pages import EnginePages, engine_pages
from .scheduler import SchedulerResult, SchedulerSettings

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


def _schedule(run: HybridRun, running: list[_Req], waiting: deque[_Req], s: SchedulerSettings,
              start: float) -> dict[_Req, int]:
    """One ``schedule()`` (sync; async: the rules of :func:`.scheduler._schedule_async`, no-ops
    without output placeholders): the tokens scheduled per request, in vLLM's order."""
    assert run.pool.step_keys is not None
    run.pool.step_keys.clear()  # new_step_starts (scheduler.py:746)
    budget = s.max_num_batched_tokens
    scheduled: dict[_Req, int] = {}
    preempted = False
    i = 0
    while i < len(running) and budget > 0:
        q = running[i]
        if q.placeholders > 0 and q.computed + 2 - q.placeholders >= q.P + q.max_tokens:
            i += 1  # async: its last token is in flight (scheduler.py:800-814)
            continue
        n = run.split(q.i, q.computed, min(q.num_tokens + q.placeholders - q.computed, budget))
        if n == 0:
            i += 1
            continue
        run.requests[q.i].tokens = q.num_tokens
        ok = run.extend(q.i, q.computed, n, q.computed - q.in_flight)
        while not ok:
            victim = running.pop()
            run.finish(victim.i)  # _preempt_request -> kv_cache_manager.free
            victim.computed = 0
            victim.stale = victim.in_flight  # async: its in-flight output is delivered, stale (scheduler.py:1835)
            victim.placeholders = 0
            victim.preemptions += 1
            waiting.appendleft(victim)
            preempted = True
            if victim is q:
                break
            ok = run.extend(q.i, q.computed, n, q.computed - q.in_flight)
        if not ok:
            break
        scheduled[q] = n
        budget -= n
        i += 1
    if not preempted:
        while waiting and budget > 0 and len(running) < s.max_num_seqs:
            q = waiting[0]
            if q.stale:  # scheduler.py:1084-1089 (skip); unreachable with a batch queue of 2
                raise AssertionError("a preempted request's stale output still in flight at schedule()")
            hit = run.lookup(q.i, q.generated)
            n = run.split(q.i, hit, min(q.num_tokens - hit, budget))
            if n == 0 or not run.admit(q.i, n):
                del run.requests[q.i]
                break
            waiting.popleft()
            running.append(q)
            q.computed = hit
            if q.first_hit < 0:
                q.first_hit, q.first_sched = hit, start
                q.first_longest = max(hit, int(run.full_hits[q.i]))
            scheduled[q] = n
            budget -= n
    return scheduled


def _run(pages: EnginePages, groups: Sequence[GroupSpec], arrival: np.ndarray, n_blocks: int, decode: bool,
         s: SchedulerSettings) -> tuple[list[_Req], float, int]:
    """The sync engine loop (:func:`.scheduler._run`): the requests, GPU time and tokens scheduled."""
    reqs = [_Req(r, int(pages.input_tokens[r]), max(int(pages.output_tokens[r]), 1) if decode else 1)
            for r in range(pages.n_requests)]
    order = sorted(range(len(reqs)), key=lambda i: (float(arrival[i]), i))
    run = HybridRun(groups, n_blocks, pages, s.max_num_batched_tokens)
    run.pool.step_keys = set()
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    clock, nxt, done = 0.0, 0, 0
    busy, tokens = 0.0, 0
    limit = 64 * int((pages.input_tokens + pages.output_tokens + 1).sum()) + 100_000  # tokens: a preemption livelock
    while done < len(reqs):
        if tokens > limit:
            raise _stuck(running, waiting)
        while nxt < len(order) and arrival[order[nxt]] <= clock:
            waiting.append(reqs[order[nxt]])
            nxt += 1
        if not waiting and not running:
            clock = float(arrival[order[nxt]])
            continue
        scheduled = _schedule(run, running, waiting, s, clock)
        total = sum(scheduled.values())
        if total == 0:
            if nxt < len(order):  # nothing fits now: an arrival may change nothing, but time moves on
                clock = max(clock, float(arrival[order[nxt]]))
                continue
            raise _stuck(running, waiting)
        end = clock + s.step_fixed_s + total * s.step_per_token_s
        busy += end - clock
        tokens += total
        for q, n in scheduled.items():
            q.computed += n
        for q in scheduled:
            if q.computed < q.num_tokens:
                continue
            q.generated += 1
            if q.generated == 1:
                q.first = end
            if q.generated >= q.max_tokens:
                q.finish = end
                running.remove(q)
                run.finish(q.i)
                done += 1
        clock = end
    return reqs, busy, tokens


def _update_from_output(run: HybridRun, running: list[_Req], waiting: deque[_Req], scheduled: dict[_Req, int],
                        samplers: set[_Req], end: float) -> int:
    """``Scheduler.update_from_output`` for an async batch that ended at ``end``: as
    :func:`.scheduler._update_from_output` (its docstring has vLLM's file:line), the blocks of the
    processed tokens cached through the hybrid managers. Returns how many requests finished."""
    done = 0
    for q, n in scheduled.items():
        q.in_flight -= n
        stale = q.stale > 0
        if stale:
            q.stale -= n
        if q not in samplers:
            continue
        q.generated += 1
        if q.generated == 1:
            q.first = end
        if not stale:
            q.placeholders -= 1
            run.requests[q.i].tokens = q.num_tokens
            run.cache(q.i, q.computed - q.in_flight)  # scheduler.py:2402-2415
        if q.generated >= q.max_tokens:
            q.finish = end
            if stale:
                waiting.remove(q)
            else:
                running.remove(q)
                run.finish(q.i)
            done += 1
    return done


def _run_async(pages: EnginePages, groups: Sequence[GroupSpec], arrival: np.ndarray, n_blocks: int, decode: bool,
               s: SchedulerSettings) -> tuple[list[_Req], float, int]:
    """vLLM's ``AsyncScheduler`` stepped as ``EngineCore.step_with_batch_queue`` with a batch queue
    of 2, in the driver's time: :func:`.scheduler._run_async` rule for rule (its docstring has the
    rules and vLLM's file:line) over the hybrid managers; the recycling groups' admission cap
    counts two batches in flight (``max_concurrent_batches x max_num_batched_tokens``,
    ``config/vllm.py:601-609``)."""
    reqs = [_Req(r, int(pages.input_tokens[r]), max(int(pages.output_tokens[r]), 1) if decode else 1)
            for r in range(pages.n_requests)]
    order = sorted(range(len(reqs)), key=lambda i: (float(arrival[i]), i))
    run = HybridRun(groups, n_blocks, pages, s.max_num_batched_tokens)
    for m in run.managers:
        m.cap = m.admission_cap(2 * s.max_num_batched_tokens, 1 << 40)
    run.pool.step_keys = set()
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    batches: deque[tuple[dict[_Req, int], set[_Req], float]] = deque()
    cpu = gpu = 0.0
    busy, tokens = 0.0, 0
    nxt = done = empty = 0
    limit = 64 * int((pages.input_tokens + pages.output_tokens + 1).sum()) + 100_000
    while done < len(reqs):
        if tokens > limit or empty > 10_000:
            raise _stuck(running, waiting)
        while nxt < len(order) and arrival[order[nxt]] <= cpu:
            waiting.append(reqs[order[nxt]])
            nxt += 1
        if running or waiting:
            start = max(cpu, gpu)
            scheduled = _schedule(run, running, waiting, s, start)
            samplers = set()
            for q, n in scheduled.items():  # _update_after_schedule
                q.computed += n
                q.in_flight += n
                if q.computed >= q.num_tokens + q.placeholders:
                    q.placeholders += 1
                    samplers.add(q)
            total = sum(scheduled.values())
            gpu = start + (s.step_fixed_s + total * s.step_per_token_s if total else 0.0)
            busy += gpu - start
            tokens += total
            batches.appendleft((scheduled, samplers, gpu))
            empty = 0 if total else empty + 1
            if len(batches) < 2 and (total or running or waiting):
                continue
        elif not batches:
            cpu = max(cpu, float(arrival[order[nxt]]))
            continue
        scheduled, samplers, end = batches.pop()
        cpu = max(cpu, end)
        done += _update_from_output(run, running, waiting, scheduled, samplers, end)
        if not scheduled and not batches and nxt < len(order) and not running:
            cpu = max(cpu, float(arrival[order[nxt]]))
    return reqs, busy, tokens


class _Stuck(Exception):
    """Nothing schedulable and no arrival left: the pool cannot serve ``request``."""

    def __init__(self, request: int) -> None:
        super().__init__(request)
        self.request = request


def _stuck(running: list[_Req], waiting: deque[_Req]) -> _Stuck:
    """The pool cannot serve the head of the queue (else the oldest running request)."""
    if waiting:
        return _Stuck(waiting[0].i)
    if running:
        return _Stuck(running[0].i)
    raise RuntimeError("the hybrid scheduler model stopped with no request waiting or running (a defect)")


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
        try:
            reqs, busy[p], tokens[p] = (_run_async if s.async_scheduling else _run)(
                pages, groups, arrival, never_evicts if pool is None else int(pool), decode, s)
        except _Stuck as e:
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
