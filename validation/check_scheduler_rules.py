"""Check SCHEDULER_NOTES.md's rules for vLLM 0.33.0's scheduler (sync and async) against the engine's CSVs.

    python3 validation/check_scheduler_rules.py      # every CSV in tests/data/engines/scheduler/ (runs)

Standard library only; not engine code and not the planner: a restatement of the rules read in
vLLM 0.33.0 (SCHEDULER_NOTES.md; FCFS, chunked prefill with a token budget, ``max_num_seqs``,
admission with the whole current sequence required to fit, preemption of the newest running
request, no admission in a step that preempted, head-of-line blocking, the prefix lookup at
admission, blocks cached when allocated) on the block pool of ``drive_vllm.py``'s model (free
queue: evicted from the head, a freed request's blocks in reverse order, uncached ones to the
head, cached ones to the tail), in the driver's simulated time (a step of T tokens lasts
``fixed + T * per_token``). Compares ``hit_tokens``, ``preemptions``, ``queue_s``,
``first_token_s`` and ``finish_s`` (times to the microsecond) of every request at every pool.
Async runs (``*.async.*``: vLLM's AsyncScheduler, batch queue 2) with ``simulate_async``, in the
driver's ``run_async`` time. Exit status 1 if any request differs.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections import OrderedDict, deque

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common  # noqa: E402

E = common.ENGINE_BLOCK


class Req:
    def __init__(self, r: common.Request, bh: int, decode: bool, arrival: float):
        self.r = r
        self.arrival = arrival
        self.P = r.input_length
        self.max_tokens = max(r.output_length, 1) if decode else 1
        self.generated = 0
        self.computed = 0
        self.blocks: list[int] = []
        self.cached = 0  # blocks of this request hashed so far (num_cached_block)
        self.in_cached = False
        keys, prev = [], None
        for i in range(r.input_length // E):
            j, s = divmod(i * E, bh)
            prev = (prev, r.hash_ids[j], s // E)
            keys.append(prev)
        self.prompt_keys = keys
        self.first_hit = None
        self.preemptions = 0
        # async scheduling: num_output_placeholders, num_in_flight_tokens, num_stale_output_tokens
        self.placeholders = 0
        self.in_flight = 0
        self.stale = 0
        self.first_sched = None
        self.first_token = None
        self.finish = None

    @property
    def num_tokens(self) -> int:
        return self.P + self.generated

    def key(self, i: int):
        return self.prompt_keys[i] if i < len(self.prompt_keys) else ("gen", self.r.index, i)


class Pool:
    """vLLM's BlockPool + KVCacheManager for one full-attention group (drive_vllm.py's rules)."""

    def __init__(self, n: int):
        self.free: OrderedDict = OrderedDict((b, None) for b in range(1, n))  # block 0: the null block
        self.ref = [0] * n
        self.hash: list = [None] * n
        self.map: dict = {}  # key -> OrderedDict of blocks (insertion order)

    def lookup(self, q: Req) -> list[int]:
        out = []
        for i in range((q.num_tokens - 1) // E):
            blocks = self.map.get(q.key(i))
            if not blocks:
                break
            out.append(next(iter(blocks)))
        return out

    def _evictable(self, blocks) -> int:
        return sum(1 for b in blocks if self.ref[b] == 0)

    def _need(self, q: Req, tokens: int, comp: list[int]) -> int:
        required = -(-tokens // E)
        if q.in_cached:
            return max(required - len(q.blocks), 0)
        return max(required - (len(comp) + len(q.blocks)), 0) + self._evictable(comp)

    def allocate(self, q: Req, num_new: int, comp: list[int], full: bool) -> bool:
        local = q.computed + len(comp) * E
        if full and self._need(q, q.num_tokens, comp) > len(self.free):
            return False
        if self._need(q, local + num_new, comp) > len(self.free):
            return False
        for b in comp:  # touch
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1
        q.blocks += comp
        for _ in range(-(-(local + num_new) // E) - len(q.blocks)):
            b, _v = self.free.popitem(last=False)
            if self.hash[b] is not None:
                del self.map[self.hash[b]][b]
                if not self.map[self.hash[b]]:
                    del self.map[self.hash[b]]
                self.hash[b] = None
            self.ref[b] = 1
            q.blocks.append(b)
        self.cache_blocks(q, local + num_new)
        q.in_cached = True
        return True

    def cache_blocks(self, q: Req, num_tokens: int) -> None:
        upto = min(num_tokens, q.num_tokens) // E  # only blocks whose tokens are known have a hash
        for i in range(q.cached, upto):
            b = q.blocks[i]
            if self.hash[b] is None:
                self.hash[b] = q.key(i)
                self.map.setdefault(q.key(i), OrderedDict())[b] = None
        q.cached = max(q.cached, upto)

    def release(self, q: Req) -> None:
        first, last = [], []
        for b in reversed(q.blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (first if self.hash[b] is None else last).append(b)
        for b in reversed(first):  # prepend_n: the list's first block ends at the head
            self.free[b] = None
            self.free.move_to_end(b, last=False)
        for b in last:
            self.free[b] = None
        q.blocks = []
        q.cached = 0
        q.in_cached = False


def simulate(trace, bh: int, pool: int, decode: bool, max_seqs: int, budget0: int, fixed: float, per_token: float):
    t0 = trace[0].timestamp
    reqs = [Req(r, bh, decode, (r.timestamp - t0) / 1000) for r in trace]
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i].arrival, i))
    pool_ = Pool(pool)
    waiting: deque = deque()
    running: list = []
    clock = 0.0
    nxt = 0
    done = 0
    while done < len(reqs):
        while nxt < len(order) and reqs[order[nxt]].arrival <= clock:
            waiting.append(reqs[order[nxt]])
            nxt += 1
        if not waiting and not running:
            clock = reqs[order[nxt]].arrival
            continue
        budget = budget0
        scheduled: dict = {}
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            q = running[i]
            n = min(q.num_tokens - q.computed, budget)
            if n == 0:
                i += 1
                continue
            ok = pool_.allocate(q, n, [], False)
            while not ok:
                victim = running.pop()
                pool_.release(victim)
                victim.computed = 0
                victim.preemptions += 1
                waiting.appendleft(victim)
                preempted = True
                if victim is q:
                    break
                ok = pool_.allocate(q, n, [], False)
            if not ok:
                break
            scheduled[q] = n
            budget -= n
            i += 1
        if not preempted:
            while waiting and budget > 0 and len(running) < max_seqs:
                q = waiting[0]
                comp = pool_.lookup(q)
                hit = len(comp) * E
                n = min(q.num_tokens - hit, budget)
                if not pool_.allocate(q, n, comp, True):
                    break
                waiting.popleft()
                running.append(q)
                q.computed = hit
                if q.first_hit is None:
                    q.first_hit = hit
                    q.first_sched = clock
                scheduled[q] = n
                budget -= n
        total = sum(scheduled.values())
        assert total > 0, "a step that schedules nothing"
        end = clock + fixed + total * per_token
        for q, n in scheduled.items():
            q.computed += n
        for q, _n in scheduled.items():
            if q.computed < q.num_tokens:
                continue
            q.generated += 1
            if q.first_token is None:
                q.first_token = end
            if q.generated >= q.max_tokens:
                q.finish = end
                running.remove(q)
                pool_.release(q)
                done += 1
        clock = end
    return reqs


def simulate_async(trace, bh: int, pool: int, decode: bool, max_seqs: int, budget0: int, fixed: float,
                   per_token: float):
    """vLLM's AsyncScheduler stepped as EngineCore.step_with_batch_queue with a batch queue of 2, in
    drive_vllm_scheduler.py's ``run_async`` time (SCHEDULER_NOTES.md "Async scheduling"): a CPU
    clock (schedule() and update_from_output() are instantaneous) and one GPU running batches back
    to back, a batch starting at max(CPU clock at its schedule(), end of the previous batch).
    Restated from vLLM's code: ``schedule()`` (running loop with the max_tokens skip and the
    placeholder slot, preemption marking in-flight output stale, waiting loop skipping a request
    with stale output in flight), ``_update_after_schedule`` of AsyncScheduler (a request that is
    no longer a prefill chunk samples and gets a placeholder), ``update_from_output`` (stale
    tokens still appended, placeholders resolved, blocks of processed tokens cached, finished
    requests freed from the running or the waiting queue)."""
    t0 = trace[0].timestamp
    reqs = [Req(r, bh, decode, (r.timestamp - t0) / 1000) for r in trace]
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i].arrival, i))
    pool_ = Pool(pool)
    waiting: deque = deque()
    running: list = []

    def schedule(start: float) -> list:
        budget = budget0
        batch = []  # (request, tokens), vLLM's num_scheduled_tokens order
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            q = running[i]
            if q.placeholders > 0 and q.computed + 2 - q.placeholders >= q.P + q.max_tokens:
                i += 1  # the in-flight batch carries its last token
                continue
            n = min(q.num_tokens + q.placeholders - q.computed, budget)
            if n == 0:
                i += 1
                continue
            while not pool_.allocate(q, n, [], False):
                victim = running.pop()
                pool_.release(victim)
                victim.computed = 0
                victim.stale = victim.in_flight
                victim.placeholders = 0
                victim.preemptions += 1
                waiting.appendleft(victim)
                preempted = True
                if victim is q:
                    break
            else:
                batch.append((q, n))
                budget -= n
                i += 1
                continue
            break
        if not preempted:
            skipped = []
            while waiting and budget > 0 and len(running) < max_seqs:
                q = waiting[0]
                if q.stale:  # its in-flight output would race the resumed request: skipped this step
                    skipped.append(waiting.popleft())
                    continue
                comp = pool_.lookup(q)
                hit = len(comp) * E
                n = min(q.num_tokens - hit, budget)
                if not pool_.allocate(q, n, comp, True):
                    break
                waiting.popleft()
                running.append(q)
                q.computed = hit
                if q.first_hit is None:
                    q.first_hit = hit
                    q.first_sched = start
                batch.append((q, n))
                budget -= n
            waiting.extendleft(reversed(skipped))
        out = []
        for q, n in batch:
            q.computed += n
            q.in_flight += n
            samples = q.computed >= q.num_tokens + q.placeholders
            if samples:
                q.placeholders += 1
            out.append((q, n, samples))
        return out

    def update_from_output(batch: list, end: float) -> int:
        finished = 0
        for q, n, samples in batch:
            q.in_flight -= n
            is_stale = q.stale > 0
            if is_stale:
                q.stale -= n
            if q.finish is not None or not samples:
                continue
            q.generated += 1
            if q.first_token is None:
                q.first_token = end
            if not is_stale:
                q.placeholders -= 1
                pool_.cache_blocks(q, q.computed - q.in_flight)
            if q.generated >= q.max_tokens:
                q.finish = end
                (waiting if is_stale else running).remove(q)
                pool_.release(q)
                finished += 1
        return finished

    cpu = gpu_free = 0.0
    nxt = done = 0
    queue: deque = deque()  # EngineCore's batch_queue: appendleft, pop the oldest
    while done < len(reqs):
        while nxt < len(order) and reqs[order[nxt]].arrival <= cpu:
            waiting.append(reqs[order[nxt]])
            nxt += 1
        if running or waiting:
            start = max(cpu, gpu_free)
            batch = schedule(start)
            total = sum(n for _q, n, _s in batch)
            gpu_free = start + (fixed + total * per_token if total else 0.0)
            queue.appendleft((batch, gpu_free))
            if len(queue) < 2 and (total > 0 or running or waiting):
                continue
        elif not queue:
            cpu = max(cpu, reqs[order[nxt]].arrival)
            continue
        batch, end = queue.pop()
        cpu = max(cpu, end)
        done += update_from_output(batch, end)
        if not batch and not queue and nxt < len(order) and not running:
            cpu = max(cpu, reqs[order[nxt]].arrival)
    return reqs


def main() -> int:
    base = os.path.join(ROOT, "tests", "data", "engines")
    with open(os.path.join(base, "scheduler", "manifest.json")) as fh:
        manifest = json.load(fh)
    bad = checked = 0
    for run in manifest["runs"]:
        run_ = simulate_async if "async" in run["file"] else simulate
        trace = common.read_trace(os.path.join(base, run["trace"]))
        s = run["settings"]
        with open(os.path.join(base, "scheduler", run["file"])) as fh:
            rows = list(csv.DictReader(fh))
        for p in run["runs"]:
            if not p["feasible"]:
                continue
            pool = p["pool"]
            n = int(p["stats"]["num_gpu_blocks"])
            reqs = run_(trace, run["hash_block_size"], n, run["decode"], s["max_num_seqs"], s["max_num_batched_tokens"],
                            s["step_fixed_s"], s["step_per_token_s"])
            diff = []
            for q, row in zip(reqs, rows):
                got = (q.first_hit, q.preemptions, round(q.first_sched - q.arrival, 6), round(q.first_token - q.arrival, 6),
                       round(q.finish - q.arrival, 6))
                want = (int(row[f"hit_tokens_{pool}"]), int(row[f"preemptions_{pool}"]), round(float(row[f"queue_s_{pool}"]), 6),
                        round(float(row[f"first_token_s_{pool}"]), 6), round(float(row[f"finish_s_{pool}"]), 6))
                if got != want:
                    diff.append((q.r.index, got, want))
            checked += 1
            bad += bool(diff)
            print(f"{run['file']} N={pool}: differing requests {len(diff)} {diff[:2]}")
    print(f"{checked} pool columns checked, {bad} differing")
    return 1 if bad or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
