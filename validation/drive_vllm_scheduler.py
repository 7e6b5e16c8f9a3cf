"""Drive vLLM 0.33.0's own v1 Scheduler under load, in simulated time, through a trace.

Run with the vLLM venv (../shared/engines/install.sh), e.g.

    $VLLM_PY validation/drive_vllm_scheduler.py --trace T.jsonl --hash-block-size 32 \
        --pools 60,120,inf --out out.csv [--no-decode] [--summary s.json] \
        [--max-num-seqs 1024] [--max-num-batched-tokens 8192] [--step-fixed-s 0.02] \
        [--step-per-token-s 0.00001]

What runs is vLLM's own ``Scheduler`` (``vllm/v1/core/sched/scheduler.py``) built from a
``VllmConfig`` without a model (``model_config`` is the stand-in of drive_vllm_offload.py),
``DeviceConfig("cpu")``, a one-group ``KVCacheConfig(num_blocks=N)`` (block 16, one full-attention
layer), prefix caching on, chunked prefill on (``max_num_batched_tokens`` the token budget), FCFS,
no connector. Requests are vLLM ``Request``s with vLLM's sha256 block hasher (vllm_request.py),
``SamplingParams(max_tokens=O, ignore_eos=True)`` (O = 1 with ``--no-decode``).

Simulated clock (seconds, float64, starts at 0 = the first request's timestamp): before each
``schedule()`` every request whose arrival (``(timestamp_ms - timestamp_ms[0]) / 1000``) is <= the
clock is added (``add_request``, file order); if nothing is running or waiting the clock jumps to
the next arrival. One step = ``schedule()`` then ``update_from_output`` with a ``ModelRunnerOutput``
holding one sampled token for each scheduled request whose computed tokens reach its current length
(``num_computed_tokens`` after ``schedule()`` >= ``num_tokens``), none for a partial prefill chunk,
as vLLM's tests/v1/core/test_scheduler.py do. A step that schedules T > 0 tokens lasts
``fixed + T * per_token`` seconds; a step that schedules nothing takes no time (the clock jumps to
the next arrival; with no arrival left the pool is reported infeasible: nothing can ever run).

Observed (instance wrappers around the scheduler's own methods that call through and only record):
``_get_local_prefix_cache_hit`` (the local prefix hit, the answer of ``get_computed_blocks``) and
``_preempt_request``. Per request and pool N (CSV columns, one group per pool):
  hit_tokens_N       the lookup answer of the step in which the request was first admitted
                     (first scheduled; checked equal to its num_computed_tokens at admission)
  preemptions_N      times it was preempted
  queue_s_N          start time of the step that first scheduled it, minus its arrival
  first_token_s_N    end time of the step that sampled its first output token, minus arrival
  finish_s_N         end time of the step in which it finished, minus arrival
Per run (summary JSON): steps (schedule() calls that scheduled tokens), idle schedule() calls,
total simulated time, max waiting queue length (len(waiting) + len(kv_holding_waiting) just
before a schedule(), arrivals of that instant included; and just after it: requests left waiting),
total preemptions, partial prefill chunks scheduled (no token sampled), re-admissions after
preemption and their lookup hits.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

warnings.filterwarnings("ignore")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import vllm
from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.structured_output import StructuredOutputManager

from drive_vllm_offload import LAYER, SPEC, STUB_DEFAULTED, model_stub
from vllm_request import E, vllm_request


class SchedEngine:
    """vLLM's Scheduler with num_gpu_blocks = N, stepped in simulated time."""

    def __init__(self, trace, hash_block_size: int, num_gpu_blocks: int, decode: bool, max_num_seqs: int,
                 max_num_batched_tokens: int, fixed_s: float, per_token_s: float, async_scheduling: bool):
        max_model_len = max(r.input_length + r.output_length for r in trace) + E
        sched_cfg = SchedulerConfig(
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            enable_chunked_prefill=True,
            async_scheduling=async_scheduling,
        )
        cache = CacheConfig(block_size=E, enable_prefix_caching=True)
        cache.num_gpu_blocks = num_gpu_blocks
        vc = VllmConfig(scheduler_config=sched_cfg, cache_config=cache, device_config=DeviceConfig("cpu"))
        vc.model_config = model_stub(max_model_len)
        self.vllm_config = vc
        kv_cfg = KVCacheConfig(num_blocks=num_gpu_blocks, kv_cache_tensors=[],
                               kv_cache_groups=[KVCacheGroupSpec([LAYER], SPEC)])
        cls = AsyncScheduler if async_scheduling else Scheduler
        self.sched = cls(vllm_config=vc, kv_cache_config=kv_cfg, structured_output_manager=StructuredOutputManager(vc),
                         block_size=E, hash_block_size=E, log_stats=False)
        assert self.sched.connector is None
        self.effective = {
            "max_num_seqs": self.sched.max_num_running_reqs,
            "max_num_scheduled_tokens": self.sched.max_num_scheduled_tokens,
            "enable_chunked_prefill": vc.scheduler_config.enable_chunked_prefill,
            "long_prefill_token_threshold": vc.scheduler_config.long_prefill_token_threshold,
            "scheduler_reserve_full_isl": self.sched.scheduler_reserve_full_isl,
            "watermark_blocks": self.sched.kv_cache_manager.watermark_blocks,
            "policy": str(self.sched.policy),
            "max_model_len": max_model_len,
        }
        self.trace = trace
        self.hash_block_size = hash_block_size
        self.decode = decode
        self.fixed_s = fixed_s
        self.per_token_s = per_token_s
        self.num_gpu_blocks = num_gpu_blocks
        self.last_lookup: dict[str, int] = {}
        self.preempt: dict[str, int] = {}
        self._wrap()

    def _wrap(self) -> None:
        s = self.sched
        orig_local = s._get_local_prefix_cache_hit

        def local(request, *a, **kw):
            res = orig_local(request, *a, **kw)
            self.last_lookup[request.request_id] = res[1]
            return res

        s._get_local_prefix_cache_hit = local
        orig_preempt = s._preempt_request

        def preempt(request, *a, **kw):
            self.preempt[request.request_id] = self.preempt.get(request.request_id, 0) + 1
            return orig_preempt(request, *a, **kw)

        s._preempt_request = preempt

    def run(self, max_steps: int = 2_000_000) -> dict:
        s = self.sched
        trace = self.trace
        t0 = trace[0].timestamp
        arrival = [(r.timestamp - t0) / 1000.0 for r in trace]
        order = sorted(range(len(trace)), key=lambda i: (arrival[i], i))
        n = len(trace)
        hit = [None] * n
        queue = [None] * n
        first_tok = [None] * n
        finish = [None] * n
        resume_hits = 0
        readmissions = 0
        clock = 0.0
        nxt = 0
        steps = idle = 0
        max_wait = max_wait_after = 0
        partial = 0
        requests = {}
        while True:
            while nxt < n and arrival[order[nxt]] <= clock:
                i = order[nxt]
                req = vllm_request(trace[i], self.hash_block_size, self.decode, ignore_eos=True)
                requests[req.request_id] = (i, req)
                s.add_request(req)
                nxt += 1
            if not s.running and not s.waiting and not s.kv_holding_waiting:
                if nxt >= n:
                    break
                clock = arrival[order[nxt]]
                continue
            max_wait = max(max_wait, len(s.waiting) + len(s.kv_holding_waiting))
            self.last_lookup.clear()
            out = s.schedule()
            max_wait_after = max(max_wait_after, len(s.waiting) + len(s.kv_holding_waiting))
            total = out.total_num_scheduled_tokens
            if total == 0:
                idle += 1
                s.update_from_output(out, self._mro([], []))
                if nxt >= n:
                    stuck = sorted(int(r.request_id) for r in list(s.waiting) + list(s.kv_holding_waiting))
                    raise common.Infeasible(stuck[0] if stuck else -1, "arrival", 0,
                                            f"nothing schedulable, no arrivals left; waiting {stuck[:8]}, free "
                                            f"{s.kv_cache_manager.block_pool.get_num_free_blocks()}")
                clock = max(clock, arrival[order[nxt]])
                continue
            steps += 1
            if steps > max_steps:
                raise common.Infeasible(-1, "decode", 0, f"more than {max_steps} steps")
            end = clock + self.fixed_s + total * self.per_token_s
            req_ids, sampled, produced = [], [], []
            for rid, k in out.num_scheduled_tokens.items():
                i, req = requests[rid]
                if rid in self.last_lookup:  # admitted from the waiting queue this step
                    h = self.last_lookup[rid]
                    assert req.num_computed_tokens - k == h, (rid, req.num_computed_tokens, k, h)
                    if hit[i] is None:
                        hit[i] = h
                        queue[i] = clock - arrival[i]
                    else:
                        resume_hits += h
                        readmissions += 1
                req_ids.append(rid)
                if req.num_computed_tokens >= req.num_tokens:
                    sampled.append([common.output_token(trace[i], req.num_output_tokens + 1)])
                    produced.append((i, req))
                else:
                    sampled.append([])
                    partial += 1
            s.update_from_output(out, self._mro(req_ids, sampled))
            for i, req in produced:
                if first_tok[i] is None:
                    first_tok[i] = end - arrival[i]
                if req.is_finished():
                    finish[i] = end - arrival[i]
            clock = end
        assert all(x is not None for x in finish), "unfinished requests"
        pre = [self.preempt.get(str(r.index), 0) for r in trace]
        return {
            "hit": hit, "preemptions": pre, "queue": queue, "first_token": first_tok, "finish": finish,
            "stats": {"num_gpu_blocks": self.num_gpu_blocks, "steps": steps, "idle_schedule_calls": idle,
                      "total_sim_s": clock, "max_waiting": max_wait, "max_waiting_after_schedule": max_wait_after, "total_preemptions": sum(pre),
                      "partial_prefill_chunks": partial, "readmissions": readmissions, "readmission_hit_tokens": resume_hits,
                      "total_hit_tokens": sum(hit)},
        }

    def run_async(self, max_batches: int = 2_000_000) -> dict:
        """AsyncScheduler stepped as EngineCore.step_with_batch_queue (v1/engine/core.py:708) does
        with a batch queue of 2 (max_concurrent_batches under async scheduling): schedule the next
        batch while the previous one executes; process the oldest batch's output only when the
        queue is full or nothing more can be scheduled. Simulated time: the CPU clock ``c`` (when
        schedule() and update_from_output() run, both instantaneous) and one GPU, which executes
        batches back to back: a batch starts at max(c at its schedule(), end of the previous
        batch) and lasts fixed + T * per_token (T > 0) or 0 (empty batch). Popping a batch
        advances c to its end. Which requests sample a token is fixed at schedule() time: those
        whose scheduled tokens are not a partial prefill chunk (``is_prefill_chunk`` False after
        schedule(), async_scheduler.py:24-36)."""
        s = self.sched
        trace = self.trace
        t0 = trace[0].timestamp
        arrival = [(r.timestamp - t0) / 1000.0 for r in trace]
        order = sorted(range(len(trace)), key=lambda i: (arrival[i], i))
        n = len(trace)
        hit, queue, first_tok, finish = [None] * n, [None] * n, [None] * n, [None] * n
        resume_hits = readmissions = 0
        c = 0.0
        gpu_free = 0.0
        nxt = 0
        steps = idle = partial = 0
        max_wait = max_wait_after = 0
        empty_run = 0
        requests = {}
        bq: list = []  # oldest last, as EngineCore's deque with appendleft/pop
        while True:
            while nxt < n and arrival[order[nxt]] <= c:
                i = order[nxt]
                req = vllm_request(trace[i], self.hash_block_size, self.decode, ignore_eos=True)
                requests[req.request_id] = (i, req)
                s.add_request(req)
                nxt += 1
            if s.has_requests():
                max_wait = max(max_wait, len(s.waiting) + len(s.kv_holding_waiting))
                self.last_lookup.clear()
                out = s.schedule()
                max_wait_after = max(max_wait_after, len(s.waiting) + len(s.kv_holding_waiting))
                total = out.total_num_scheduled_tokens
                start = max(c, gpu_free)
                end = start + (self.fixed_s + total * self.per_token_s if total else 0.0)
                gpu_free = end
                samplers = []
                for rid, k in out.num_scheduled_tokens.items():
                    i, req = requests[rid]
                    if rid in self.last_lookup:
                        h = self.last_lookup[rid]
                        assert req.num_computed_tokens - k == h, (rid, req.num_computed_tokens, k, h)
                        if hit[i] is None:
                            hit[i] = h
                            queue[i] = start - arrival[i]
                        else:
                            resume_hits += h
                            readmissions += 1
                    if req.is_prefill_chunk:
                        partial += 1
                    else:
                        samplers.append(rid)
                if total:
                    steps += 1
                    empty_run = 0
                else:
                    idle += 1
                    empty_run += 1
                if steps > max_batches or empty_run > 10_000:
                    raise common.Infeasible(-1, "arrival", 0, f"no progress: {steps} batches, {empty_run} empty")
                bq.insert(0, (out, end, samplers))
                if len(bq) < 2 and (total > 0 or s.has_requests()):
                    continue
            elif not bq:
                if nxt >= n:
                    break
                c = max(c, arrival[order[nxt]])
                continue
            out, end, samplers = bq.pop()
            c = max(c, end)
            req_ids, sampled, produced = [], [], []
            for rid in out.num_scheduled_tokens:
                i, req = requests[rid]
                req_ids.append(rid)
                if rid in samplers:
                    sampled.append([common.output_token(trace[i], req.num_output_tokens + 1)])
                    produced.append((i, req))
                else:
                    sampled.append([])
            s.update_from_output(out, self._mro(req_ids, sampled))
            for i, req in produced:
                if first_tok[i] is None and req.num_output_tokens > 0:
                    first_tok[i] = end - arrival[i]
                if req.is_finished() and finish[i] is None:
                    finish[i] = end - arrival[i]
            if not out.total_num_scheduled_tokens and not bq and nxt < n and not any(
                    r.status.name == "RUNNING" for _, r in requests.values() if not r.is_finished()):
                c = max(c, arrival[order[nxt]])
        assert all(x is not None for x in finish), "unfinished requests"
        pre = [self.preempt.get(str(r.index), 0) for r in trace]
        return {
            "hit": hit, "preemptions": pre, "queue": queue, "first_token": first_tok, "finish": finish,
            "stats": {"num_gpu_blocks": self.num_gpu_blocks, "steps": steps, "idle_schedule_calls": idle,
                      "total_sim_s": c, "max_waiting": max_wait, "max_waiting_after_schedule": max_wait_after,
                      "total_preemptions": sum(pre), "partial_prefill_chunks": partial,
                      "readmissions": readmissions, "readmission_hit_tokens": resume_hits,
                      "total_hit_tokens": sum(hit)},
        }

    @staticmethod
    def _mro(req_ids, sampled) -> ModelRunnerOutput:
        return ModelRunnerOutput(req_ids=req_ids, req_id_to_index={rid: k for k, rid in enumerate(req_ids)},
                                 sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={}, pooler_output=[])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--hash-block-size", type=int, required=True)
    ap.add_argument("--pools", required=True, help="num_gpu_blocks, comma-separated, or inf")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--max-num-seqs", type=int, default=1024)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--step-fixed-s", type=float, default=0.020)
    ap.add_argument("--step-per-token-s", type=float, default=0.00001)
    ap.add_argument("--async-scheduling", action="store_true",
                    help="vLLM's AsyncScheduler, stepped as EngineCore.step_with_batch_queue (batch queue 2)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--summary")
    args = ap.parse_args(argv)
    trace = common.read_trace(args.trace)
    common.check_trace(trace, args.hash_block_size)
    decode = not args.no_decode
    t0 = trace[0].timestamp
    cols, runs = [], []
    for pool in common.parse_pools(args.pools):
        n = common.inf_pool_size(trace, decode) if common.is_inf(pool) else int(pool)
        t = time.perf_counter()
        eng = SchedEngine(trace, args.hash_block_size, n, decode, args.max_num_seqs, args.max_num_batched_tokens,
                          args.step_fixed_s, args.step_per_token_s, args.async_scheduling)
        try:
            res = eng.run_async() if args.async_scheduling else eng.run()
        except common.Infeasible as e:
            runs.append({"pool": pool, "num_gpu_blocks": n, "feasible": False,
                         "failure": {"request": e.request, "event": e.event, "detail": e.detail}})
            print(f"  pool {pool}: INFEASIBLE {e}", file=sys.stderr, flush=True)
            continue
        cols.append((pool, res))
        runs.append({"pool": pool, "feasible": True, "stats": res["stats"], "effective_config": eng.effective,
                     "seconds": round(time.perf_counter() - t, 3)})
        print(f"  pool {pool}: {res['stats']} ({time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
    with open(args.out, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        hdr = ["request", "id", "arrival_s", "worker", "input_tokens", "output_tokens"]
        for key, name in (("hit", "hit_tokens"), ("preemptions", "preemptions"), ("queue", "queue_s"),
                          ("first_token", "first_token_s"), ("finish", "finish_s")):
            hdr += [f"{name}_{p}" for p, _ in cols]
        w.writerow(hdr)
        for r in trace:
            row = [r.index, r.index, repr((r.timestamp - t0) / 1000.0), 0, r.input_length, r.output_length]
            for key in ("hit", "preemptions", "queue", "first_token", "finish"):
                row += [v[key][r.index] if key in ("hit", "preemptions") else repr(v[key][r.index]) for _, v in cols]
            w.writerow(row)
    if args.summary:
        with open(args.summary, "w") as fh:
            json.dump({"engine": {"name": "vllm", "version": vllm.__version__, "scheduler": "AsyncScheduler (batch queue 2)" if args.async_scheduling else "Scheduler (sync)"},
                       "trace": args.trace, "hash_block_size": args.hash_block_size, "decode": decode,
                       "max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
                       "step_fixed_s": args.step_fixed_s, "step_per_token_s": args.step_per_token_s,
                       "model_config_stub_attributes_defaulted_to_None": sorted(STUB_DEFAULTED), "runs": runs},
                      fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
