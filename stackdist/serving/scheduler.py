"""vLLM 0.33.0's own scheduler under load (sync, or async scheduling), a direct simulation: who
waits, who is preempted, what each request hits when it is admitted, and when its first token and
its end come.

Follows ``vllm/v1/core/sched/scheduler.py`` as read and driven in ``validation/SCHEDULER_NOTES.md``
(``drive_vllm_scheduler.py`` runs vLLM's real ``Scheduler`` / ``AsyncScheduler`` in simulated
time; this module equals it on every request of every committed run, sync and async,
``tests/serving/test_scheduler.py``):

- **A step**: arrivals up to the clock join the waiting queue (arrival order); if nothing is
  waiting or running the clock jumps to the next arrival. ``schedule()`` gives each running
  request, in order, its remaining tokens capped by the token budget
  (``max_num_batched_tokens``: chunked prefill); when a block cannot be allocated the newest
  running request is preempted (its blocks freed tail first, its computed tokens reset, it goes
  back to the head of the queue) until it can, or the request itself was the victim. Only if no
  request was preempted in the step, the head of the waiting queue is admitted while the budget
  lasts and fewer than ``max_num_seqs`` run: its prefix hit is looked up **now** (capped at
  ``num_tokens - 1``, whole blocks), the **whole current sequence** must fit in the free blocks,
  and a head that does not fit blocks the queue. A chunk's full blocks are cached when allocated
  (a request admitted in the same step can hit them).
- **Time**: a step of T scheduled tokens lasts ``step_fixed_s + T x step_per_token_s``; every
  request whose computed tokens reach its length samples one token at the end of the step; at
  ``max_tokens`` (the trace's output length, or 1 without decode) it finishes and its blocks are
  freed (reverse order; uncached to the free queue's head, cached to its tail).
- **Async scheduling** (``SchedulerSettings.async_scheduling``: vLLM's ``AsyncScheduler`` with a
  batch queue of 2, ``EngineCore.step_with_batch_queue``; :func:`run_async` has the rules with
  vLLM's file:line): the next batch is scheduled while the previous one runs on the GPU, so a
  request's token is in flight (an output placeholder) when its next slot is scheduled; a batch
  starts at max(CPU clock at its ``schedule()``, end of the previous batch); outputs (tokens,
  finishing, freeing) are processed one batch late, when the queue is full. A running request
  whose last token is in flight is not scheduled again; a preempted request's in-flight token is
  still delivered and can finish it in the waiting queue; blocks completed by a token scheduled
  before it was known are cached when its output is processed (or at the next allocation).

Per request: ``hit_tokens`` (the hit at first admission: what the engine reports as cached
tokens), ``preemptions``, ``queue_s`` (first scheduled minus arrival; async: the start of the
admitting batch on the GPU), ``first_token_s`` and ``finish_s`` (from arrival; the end of the step,
async: of the batch whose output carried the token). The rules here are the pure-Python reference
(``simulate_scheduler(..., reference=True)``); :mod:`.scheduler_kernel` runs the same on flat arrays,
compiled, and is what the plan uses. O(steps x running + blocks) per pool.

>>> import numpy as np
>>> from stackdist.traces import RequestTrace
>>> t = RequestTrace.from_blocks([[1, 2], [1, 2]], block_size=16, last_tokens=[8, 8])
>>> r = simulate_scheduler(t, [8], decode=False)
>>> r.hit_tokens.tolist(), r.queue_s.tolist()
([[0, 16]], [[0.0, 0.0]])
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stackdist.output import step
from stackdist.traces import RequestTrace

from .pages import EnginePages, engine_pages
from .scheduler_kernel import scheduler_run

__all__ = ["SchedulerResult", "SchedulerSettings", "SchedulerStuck", "run_async", "run_sync", "simulate_scheduler"]


@dataclass(frozen=True)
class SchedulerSettings:
    """vLLM's scheduler settings and the step-time rule (seconds per step: fixed + per token; where
    the two numbers came from: :mod:`stackdist.planning.step_time`)."""

    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    step_fixed_s: float = 0.020
    step_per_token_s: float = 0.00001
    step_time_source: str = "assumed"
    step_time_detail: str = "an assumed step time"
    async_scheduling: bool = False  # vLLM's AsyncScheduler with a batch queue of 2 (run_async)


@dataclass(frozen=True)
class SchedulerResult:
    """Per pool (rows, ``pools`` order) and request: the hit at first admission, preemptions, and
    times from arrival; a pool that cannot hold some request has -1 / NaN rows and
    ``failed_request`` set (the engine would never admit it). Per pool: ``busy_s``, the GPU time
    of all steps, and ``scheduled_tokens``, every token computed (recomputation after preemption
    included); ``workers``: GPUs (schedulers) the rows come from."""

    pools: tuple[int | None, ...]
    hit_tokens: np.ndarray
    preemptions: np.ndarray
    queue_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    failed_request: np.ndarray
    settings: SchedulerSettings
    busy_s: np.ndarray
    scheduled_tokens: np.ndarray
    decode: bool = True
    workers: int = 1
    group_hit_tokens: np.ndarray | None = None
    """A hybrid KV cache (:mod:`.hybrid_scheduler`): per pool and request, the longest single-group
    hit at first admission (as :class:`.hybrid.HybridResult`'s); None otherwise."""


class _Req:
    __slots__ = (
        "P",
        "blocks",
        "cached",
        "computed",
        "finish",
        "first",
        "first_hit",
        "first_sched",
        "generated",
        "i",
        "in_cached",
        "in_flight",
        "keys",
        "max_tokens",
        "n_prompt_keys",
        "placeholders",
        "preemptions",
        "stale",
    )

    def __init__(self, i: int, keys: list[int], P: int, max_tokens: int):
        self.i, self.keys, self.P, self.max_tokens = i, keys, P, max_tokens
        self.n_prompt_keys = len(keys)
        self.generated = self.computed = self.cached = self.preemptions = 0
        self.placeholders = self.in_flight = self.stale = 0  # async scheduling only (run_async)
        self.blocks: list[int] = []
        self.in_cached = False
        self.first_hit = -1
        self.first_sched = self.first = self.finish = float("nan")

    @property
    def num_tokens(self) -> int:
        return self.P + self.generated

    def key(self, j: int) -> object:
        return self.keys[j] if j < self.n_prompt_keys else (self.i, j)  # a block holding generated tokens: unique


class _Pool:
    """vLLM's BlockPool and KVCacheManager, one full-attention group (the rules of :mod:`.vllm`)."""

    def __init__(self, n: int, page: int):
        self.page = page
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, n))  # block 0: the null block
        self.ref = [0] * n
        self.hash: list[object] = [None] * n
        self.map: dict[object, OrderedDict[int, None]] = {}

    def lookup(self, q: _Req) -> list[int]:
        out = []
        for j in range((q.num_tokens - 1) // self.page):
            blocks = self.map.get(q.key(j))
            if not blocks:
                break
            out.append(next(iter(blocks)))
        return out

    def _need(self, q: _Req, tokens: int, comp: list[int]) -> int:
        required = -(-tokens // self.page)
        if q.in_cached:
            return max(required - len(q.blocks), 0)
        return max(required - len(comp) - len(q.blocks), 0) + sum(1 for b in comp if self.ref[b] == 0)

    def allocate(self, q: _Req, num_new: int, comp: list[int], whole: bool) -> bool:
        local = q.computed + len(comp) * self.page
        if whole and self._need(q, q.num_tokens, comp) > len(self.free):
            return False
        if self._need(q, local + num_new, comp) > len(self.free):
            return False
        for b in comp:  # touch
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1
        q.blocks += comp
        for _ in range(-(-(local + num_new) // self.page) - len(q.blocks)):
            b = self.free.popitem(last=False)[0]
            h = self.hash[b]
            if h is not None:  # evicted from the prefix cache
                del self.map[h][b]
                if not self.map[h]:
                    del self.map[h]
                self.hash[b] = None
            self.ref[b] = 1
            q.blocks.append(b)
        self.cache(q, local + num_new)
        q.in_cached = True
        return True

    def cache(self, q: _Req, tokens: int) -> None:
        """``cache_blocks(request, tokens)``: the full blocks of the first ``tokens`` tokens, capped
        at the tokens known (``num_tokens``: the block hashes), enter the prefix cache."""
        upto = min(tokens, q.num_tokens) // self.page
        for j in range(q.cached, upto):
            b = q.blocks[j]
            if self.hash[b] is None:
                self.hash[b] = q.key(j)
                self.map.setdefault(q.key(j), OrderedDict())[b] = None
        q.cached = max(q.cached, upto)

    # --- what the step loops call (a hybrid KV cache gives the same, :mod:`.hybrid_scheduler`) ---
    def begin_step(self) -> None:
        """The start of a ``schedule()``: nothing for one full-attention group."""

    def split(self, q: _Req, start: int, n: int) -> int:
        """The tokens of a chunk from ``start`` the scheduler may schedule: all ``n`` here."""
        return n

    def grow(self, q: _Req, n: int) -> bool:
        """A running request's ``allocate_slots`` for ``n`` more tokens."""
        return self.allocate(q, n, [], False)

    def admit(self, q: _Req, budget: int) -> tuple[int, int] | None:
        """The head of the queue: its hit now, and the tokens it is scheduled, if its whole
        sequence fits (None: it does not, and blocks the queue)."""
        comp = self.lookup(q)
        hit = len(comp) * self.page
        n = min(q.num_tokens - hit, budget)
        return (hit, n) if self.allocate(q, n, comp, True) else None

    def admitted(self, q: _Req, hit: int) -> None:
        """A first admission (nothing more to record for one group)."""

    def release(self, q: _Req) -> None:
        first: list[int] = []
        last: list[int] = []
        for b in reversed(q.blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (first if self.hash[b] is None else last).append(b)
        for b in reversed(first):  # prepend_n: the list's first block ends at the head
            self.free[b] = None
            self.free.move_to_end(b, last=False)
        for b in last:
            self.free[b] = None
        q.blocks, q.cached, q.in_cached = [], 0, False


class SchedulerStuck(Exception):
    """Nothing schedulable and no arrival left: the pool cannot serve ``request``."""

    def __init__(self, request: int) -> None:
        super().__init__(request)
        self.request = request


def _stuck(running: list[Any], waiting: deque[Any]) -> SchedulerStuck:
    """The pool cannot serve the head of the queue (else the oldest running request)."""
    if waiting:
        return SchedulerStuck(waiting[0].i)
    if running:
        return SchedulerStuck(running[0].i)
    raise RuntimeError("the scheduler model stopped with no request waiting or running (a defect)")


def _livelock_limit(reqs: list[Any]) -> int:
    """Tokens scheduled past which the loop is a preemption livelock, not progress."""
    return 64 * sum(q.P + q.max_tokens + 1 for q in reqs) + 100_000


def run_sync(reqs: list[Any], arrival: np.ndarray, pool: Any, s: SchedulerSettings) -> tuple[float, int]:
    """The sync engine loop over ``pool`` (:class:`_Pool`, or a hybrid KV cache with its methods,
    :mod:`.hybrid_scheduler`): the GPU time of all steps and the tokens scheduled; the requests'
    fields are filled in. :class:`SchedulerStuck` when nothing can be scheduled and no request is
    left to arrive. O(steps x running)."""
    order = sorted(range(len(reqs)), key=lambda i: (float(arrival[i]), i))
    waiting: deque[Any] = deque()
    running: list[Any] = []
    clock, nxt, done = 0.0, 0, 0
    busy, tokens = 0.0, 0
    limit = _livelock_limit(reqs)
    while done < len(reqs):
        if tokens > limit:
            raise _stuck(running, waiting)
        while nxt < len(order) and arrival[order[nxt]] <= clock:
            waiting.append(reqs[order[nxt]])
            nxt += 1
        if not waiting and not running:
            clock = float(arrival[order[nxt]])
            continue
        scheduled = _schedule(pool, running, waiting, s, clock)
        total = sum(scheduled.values())
        if total == 0:
            if nxt < len(order):  # nothing fits now: time moves on to the next arrival
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
                pool.release(q)
                done += 1
        clock = end
    return busy, tokens


def _requests(pages: EnginePages, decode: bool) -> list[_Req]:
    """The requests of the full-attention model (prompt keys, ``max_tokens``)."""
    B = pages.page_tokens
    out = []
    for r in range(pages.n_requests):
        P = int(pages.input_tokens[r])
        keys = pages.key[pages.offsets[r]:pages.offsets[r] + P // B].tolist()
        out.append(_Req(r, keys, P, max(int(pages.output_tokens[r]), 1) if decode else 1))
    return out


# --- async scheduling ----------------------------------------------------------------------------
# vLLM's AsyncScheduler stepped as EngineCore.step_with_batch_queue with a batch queue of 2, in the
# driver's simulated time (validation/drive_vllm_scheduler.py, run_async). The block pool, the
# requests and the admission rules are the sync model's; what differs is spelled out below, with
# vllm/ paths relative to the installed package (0.33.0). Per request, besides the sync state:
# ``placeholders`` (num_output_placeholders: tokens sampled by batches still in flight),
# ``in_flight`` (num_in_flight_tokens: scheduled tokens of batches still in flight) and ``stale``
# (num_stale_output_tokens: the in-flight tokens of a request preempted since they were scheduled).
# ``computed`` counts the in-flight tokens too (num_computed_tokens advances at schedule()).


def _schedule(pool: Any, running: list[Any], waiting: deque[Any], s: SchedulerSettings,
              start: float) -> dict[Any, int]:
    """The two loops of one ``schedule()``, sync or async (the async rules, explained in
    :func:`_schedule_async`, are no-ops without output placeholders): the running requests, then
    (when nobody was preempted) the head of the waiting queue; the tokens scheduled per request,
    in vLLM's order. ``start``: the step's start (a first admission's ``first_sched``). ``pool``:
    :class:`_Pool`, or a hybrid KV cache with the same methods (:mod:`.hybrid_scheduler`)."""
    pool.begin_step()
    budget = s.max_num_batched_tokens
    scheduled: dict[Any, int] = {}
    preempted = False
    i = 0
    while i < len(running) and budget > 0:
        q = running[i]
        if q.placeholders > 0 and q.computed + 2 - q.placeholders >= q.P + q.max_tokens:
            i += 1  # its last token is in flight (scheduler.py:800-814)
            continue
        n = pool.split(q, q.computed, min(q.num_tokens + q.placeholders - q.computed, budget))
        if n == 0:
            i += 1
            continue
        ok = pool.grow(q, n)
        while not ok:
            victim = running.pop()
            pool.release(victim)
            victim.computed = 0
            victim.stale = victim.in_flight  # its in-flight output: delivered, stale (scheduler.py:1835)
            victim.placeholders = 0
            victim.preemptions += 1
            waiting.appendleft(victim)
            preempted = True
            if victim is q:
                break
            ok = pool.grow(q, n)
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
            got = pool.admit(q, budget)
            if got is None:
                break
            hit, n = got
            waiting.popleft()
            running.append(q)
            q.computed = hit
            if q.first_hit < 0:
                q.first_hit, q.first_sched = hit, start
                pool.admitted(q, hit)
            scheduled[q] = n
            budget -= n
    return scheduled


def _schedule_async(pool: Any, running: list[Any], waiting: deque[Any], s: SchedulerSettings,
                    start: float) -> tuple[dict[Any, int], set[Any]]:
    """One ``AsyncScheduler.schedule()``: the tokens scheduled per request (in vLLM's order) and
    the requests that sample a token in this batch. ``start``: the batch's start on the GPU (the
    driver's ``queue_s`` reference for a first admission).

    The loops are :func:`_schedule`'s; what async changes there (with ``placeholders`` 0 it vanishes):

    - the running loop skips a request whose in-flight batch already carries its last token:
      ``num_output_placeholders > 0 and num_computed_tokens + 2 - num_output_placeholders >=
      num_prompt_tokens + max_tokens`` (``v1/core/sched/scheduler.py:800-814``); it still runs
      (holds its blocks, counts in ``max_num_seqs``, can be the preemption victim);
    - a running request's new tokens are ``num_tokens + num_output_placeholders -
      num_computed_tokens`` (``scheduler.py:839-843``): a decode schedules the slot of the token
      still in flight; the max_model_len cap (``:852-857``) never binds (the driver's
      max_model_len is the largest prompt + output + 16);
    - preemption (``_preempt_request``, ``scheduler.py:1799-1843``) also sets
      ``num_stale_output_tokens = num_in_flight_tokens`` and ``num_output_placeholders = 0``
      (``:1832-1836``); the victim's in-flight output is still delivered (``update_from_output``);
    - a waiting request with stale output in flight is skipped, not admitted (``:1084-1089``).
      With a batch queue of 2 this never happens: ``schedule()`` runs with at most one batch in
      flight (``v1/engine/core.py:730``, ``:764-769``), a preemption can only hit tokens of that
      batch, and the engine pops that batch (the queue is then full) before the next
      ``schedule()``; the model asserts it;
    - after the loops (``_update_after_schedule``, ``scheduler.py:1845-1866`` and
      ``async_scheduler.py:24-46``): ``num_computed_tokens`` and ``num_in_flight_tokens`` grow by
      the scheduled tokens; a request that is no longer a prefill chunk (``num_computed_tokens >=
      num_tokens + num_output_placeholders``) samples a token in this batch and gets one more
      placeholder.
    """
    scheduled = _schedule(pool, running, waiting, s, start)
    samplers = set()
    for q, n in scheduled.items():  # _update_after_schedule
        q.computed += n
        q.in_flight += n
        if q.computed >= q.num_tokens + q.placeholders:  # not is_prefill_chunk
            q.placeholders += 1
            samplers.add(q)
    return scheduled, samplers


def _update_from_output(pool: Any, running: list[Any], waiting: deque[Any], scheduled: dict[Any, int],
                        samplers: set[Any], end: float) -> int:
    """``Scheduler.update_from_output`` for a batch that ended at ``end`` on the GPU: one token for
    each of its samplers; returns how many requests finished. ``scheduler.py:2313-2550``, per
    request in the batch's order:

    - ``num_in_flight_tokens`` drops by the batch's tokens; a preempted request's stale share too,
      and its token is still appended (``:2316-2323``, ``_update_request_with_output`` ``:2752-
      2769``; placeholders untouched when stale);
    - otherwise the token resolves a placeholder, and (status RUNNING, placeholders > 0) the full
      blocks of ``num_computed_tokens - num_in_flight_tokens`` (the tokens of processed batches)
      are cached (``:2402-2415``): a block completed by a token whose slot was scheduled before
      the token was known is cached here, or at its next allocation, whichever comes first;
    - at ``max_tokens`` (``check_stop``, ``ignore_eos``) the request finishes and its blocks are
      freed (``_free_request``, ``:2470-2476``; after the caching above); a preempted request
      finished by its stale output leaves the waiting queue without being re-admitted
      (``stopped_preempted_reqs``, ``:2491-2494``, ``:2545-2548``).
    """
    done = 0
    for q, n in scheduled.items():
        q.in_flight -= n
        stale = q.stale > 0
        if stale:
            q.stale -= n
        if q not in samplers:  # a partial prefill chunk: no token
            continue
        # (never a finished request: no batch after the one carrying its last token holds it,
        # by the running loop's skip, and a stale request is not re-admitted before its output)
        q.generated += 1
        if q.generated == 1:
            q.first = end
        if not stale:
            q.placeholders -= 1
            pool.cache(q, q.computed - q.in_flight)
        if q.generated >= q.max_tokens:
            q.finish = end
            if stale:  # preempted: its blocks were freed then
                waiting.remove(q)
            else:
                running.remove(q)
                pool.release(q)
            done += 1
    return done


def run_async(reqs: list[Any], arrival: np.ndarray, pool: Any, s: SchedulerSettings) -> tuple[float, int]:
    """``EngineCore.step_with_batch_queue`` (``v1/engine/core.py:708-797``) with a batch queue of
    2 (``VllmConfig.max_concurrent_batches``, ``config/vllm.py:588-598``), in the driver's time.

    An engine step: if the scheduler has requests (running or waiting), ``schedule()`` a batch
    and put it in the queue; unless the queue is then full, or the batch is empty and nothing is
    left to schedule, that is the step (``core.py:764-769``: the next batch is scheduled while this
    one executes). Otherwise (or with nothing to schedule and a batch in flight) the oldest batch's
    output is processed (``core.py:778-795``). Time (the driver's ``run_async``): a CPU clock, at
    which ``schedule()`` and ``update_from_output`` run instantly and arrivals up to it join the
    waiting queue, and one GPU running batches back to back: a batch starts at max(CPU clock at its
    ``schedule()``, end of the previous batch) and lasts ``step_fixed_s + T x step_per_token_s``
    (an empty batch: no time); processing a batch's output moves the CPU clock to its end. With
    nothing to schedule and no batch in flight the CPU clock jumps to the next arrival; so does it
    after an empty batch's output with nothing running and no batch in flight. ``pool`` and the
    return as :func:`run_sync`'s."""
    order = sorted(range(len(reqs)), key=lambda i: (float(arrival[i]), i))
    waiting: deque[Any] = deque()
    running: list[Any] = []
    batches: deque[tuple[dict[Any, int], set[Any], float]] = deque()  # newest first, as the engine's
    cpu = gpu = 0.0
    busy, tokens = 0.0, 0
    nxt = done = empty = 0
    limit = _livelock_limit(reqs)
    while done < len(reqs):
        if tokens > limit or empty > 10_000:
            raise _stuck(running, waiting)
        while nxt < len(order) and arrival[order[nxt]] <= cpu:
            waiting.append(reqs[order[nxt]])
            nxt += 1
        if running or waiting:
            start = max(cpu, gpu)
            scheduled, samplers = _schedule_async(pool, running, waiting, s, start)
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
        done += _update_from_output(pool, running, waiting, scheduled, samplers, end)
        if not scheduled and not batches and nxt < len(order) and not running:
            cpu = max(cpu, float(arrival[order[nxt]]))
    return busy, tokens


def simulate_scheduler(trace: RequestTrace | EnginePages, pools: Sequence[int | None], decode: bool = True,
                       settings: SchedulerSettings | None = None, arrival_s: np.ndarray | None = None,
                       page_tokens: int = 16, reference: bool = False) -> SchedulerResult:
    """vLLM's scheduler (``settings.async_scheduling``: its AsyncScheduler) at each
    ``num_gpu_blocks`` (None: a pool that never evicts), arrivals from the trace's timestamps
    (from its first request) unless ``arrival_s`` is given. A pool smaller
    than some request's whole sequence (prompt, plus its output with decode) cannot admit it: that
    row is -1 and ``failed_request`` names the request. Compiled
    (:mod:`.scheduler_kernel`); ``reference=True`` runs the pure-Python model it is tested
    against. O(steps x running + blocks) per pool."""
    s = settings or SchedulerSettings()
    if isinstance(trace, EnginePages):
        pages = trace
        if arrival_s is None:
            raise ValueError("arrival_s is needed with engine pages (the trace has the timestamps)")
    else:
        pages = engine_pages(trace, page_tokens)
        if arrival_s is None:
            arrival_s = trace.timestamps_s - (trace.timestamps_s[0] if trace.n_requests else 0.0)
    arrival = np.asarray(arrival_s, np.float64)
    B = pages.page_tokens
    written = pages.input_tokens + (np.maximum(pages.output_tokens, 1) - 1 if decode else 0)
    need = (written + B - 1) // B
    max_tokens = (np.maximum(pages.output_tokens, 1) if decode else np.ones(pages.n_requests)).astype(np.int64)
    n, k = pages.n_requests, len(pools)
    hits = np.full((k, n), -1, np.int64)
    pre = np.full((k, n), -1, np.int64)
    queue, first, finish = (np.full((k, n), np.nan) for _ in range(3))
    failed = np.full(k, -1, np.int64)
    busy = np.full(k, np.nan)
    tokens = np.full(k, -1, np.int64)
    for p, pool in enumerate(pools):
        blocks = int(need.sum()) + 2 if pool is None else int(pool)
        too_big = np.flatnonzero(need > blocks - 1)
        if too_big.size:
            failed[p] = int(too_big[0])
            continue
        if reference:
            reqs = _requests(pages, decode)
            busy[p], tokens[p] = (run_async if s.async_scheduling else run_sync)(reqs, arrival, _Pool(blocks, B), s)
            hits[p] = [q.first_hit for q in reqs]
            pre[p] = [q.preemptions for q in reqs]
            queue[p] = [q.first_sched - arrival[q.i] for q in reqs]
            first[p] = [q.first - arrival[q.i] for q in reqs]
            finish[p] = [q.finish - arrival[q.i] for q in reqs]
            continue
        err, hit, npre, sched, tok, fin, busy[p], tokens[p] = scheduler_run(
            pages.key, pages.offsets[:-1].astype(np.int64), pages.input_tokens.astype(np.int64), max_tokens, arrival,
            int(pages.n_keys), blocks, B, s.max_num_seqs, s.max_num_batched_tokens, s.step_fixed_s, s.step_per_token_s,
            s.async_scheduling)
        if err:
            raise RuntimeError(f"the scheduler kernel stopped (defect guard {err}: 1 nothing schedulable, 2 a block "
                               "table overflowed, 3 stale output at the head of the queue)")
        hits[p], pre[p] = hit, npre
        queue[p], first[p], finish[p] = sched - arrival, tok - arrival, fin - arrival
        step(f"scheduler: pool size {'inf' if pool is None else f'{pool:,}'} done ({p + 1}/{k})")  # progress, if shown
    return SchedulerResult(tuple(pools), hits, pre, queue, first, finish, failed, s, busy, tokens, decode)
