"""Drive vLLM 0.33.0's own Scheduler with a *hybrid* KV cache under load, in simulated time.

Run with the vLLM venv (../shared/engines/install.sh), e.g.

    $VLLM_PY validation/drive_vllm_hybrid_scheduler.py --trace T.jsonl --hash-block-size 32 \
        --config tests/data/engines/hybrid_model/configs/gpt-oss-20b-window40.json --pools 40,80,inf \
        --out out.csv [--no-decode] [--summary s.json] [--max-num-seqs 1024] \
        [--max-num-batched-tokens 8192] [--step-fixed-s 0.02] [--step-per-token-s 0.00001] \
        [--async-scheduling] [--gdn-checkpoint-alignment 64]

The two drivers combined, nothing new in between:

- the scheduler and its KV-cache config are ``drive_vllm_hybrid.HybridEngine``'s: vLLM's own
  ``get_kv_cache_groups`` / ``get_kv_cache_config_from_groups`` (``num_gpu_blocks_override = N``) /
  ``resolve_kv_cache_block_sizes`` from the per-layer specs the model layers build
  (HYBRID_NOTES.md section 1), ``disable_hybrid_kv_cache_manager = False``; the ``Scheduler`` (or
  ``AsyncScheduler``) is then rebuilt over that ``KVCacheConfig`` with this run's
  ``max_num_seqs`` and ``async_scheduling`` (HybridEngine fixes 16 and sync);
- requests are vLLM ``Request``s with the token ids of SPEC.md and vLLM's sha256 block hasher at
  the hash block vLLM resolved (16, or 576 for Qwen3-Next), ``max_tokens = O`` (1 with
  ``--no-decode``), ``ignore_eos``;
- the simulated-time loop is ``drive_vllm_scheduler.SchedEngine.run`` (sync) / ``run_async``
  (AsyncScheduler, batch queue 2): arrivals join before each ``schedule()``, a step of T tokens
  lasts ``fixed + T x per_token``, one sampled token for every request whose computed tokens reach
  its length. Observed the same way (wrappers that call through): the hit of
  ``_get_local_prefix_cache_hit`` at first admission, ``_preempt_request``.

CSV columns as drive_vllm_scheduler.py (hit_tokens, preemptions, queue_s, first_token_s,
finish_s per pool), then full_group_hit_tokens per pool: the full-attention group's own hit
(``find_longest_cache_hit_per_group``) at the lookup that first admitted the request. ``inf`` = a
pool no run can exhaust (64 groups x every block + 2).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
import drive_vllm_scheduler
import vllm
from drive_vllm_hybrid import GDN_CHECKPOINT_ALIGNMENT, HybridEngine
from drive_vllm_offload import STUB_DEFAULTED
from drive_vllm_scheduler import SchedEngine
from vllm.sampling_params import SamplingParams
from vllm.utils.math_utils import cdiv
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager


class HybridSchedEngine(SchedEngine):
    """SchedEngine's loop over HybridEngine's hybrid KVCacheConfig."""

    def __init__(self, trace, cfg: dict, hash_block_size: int, num_gpu_blocks: int, decode: bool, args):
        max_model_len = max(r.input_length + r.output_length for r in trace) + 1024
        hargs = types.SimpleNamespace(block_size=None, mamba_cache_mode="align",
                                      gdn_checkpoint_alignment=args.gdn_checkpoint_alignment,
                                      max_num_batched_tokens=args.max_num_batched_tokens)
        h = HybridEngine(cfg, num_gpu_blocks, max_model_len, hargs)
        vc = h.vllm_config
        vc.scheduler_config.max_num_seqs = args.max_num_seqs
        vc.scheduler_config.async_scheduling = args.async_scheduling
        cls = AsyncScheduler if args.async_scheduling else Scheduler
        self.sched = cls(vllm_config=vc, kv_cache_config=h.kv_cfg, structured_output_manager=StructuredOutputManager(vc),
                         block_size=h.sched_bs, hash_block_size=h.hash_bs, log_stats=False)
        assert self.sched.connector is None
        assert self.sched.max_num_running_reqs == args.max_num_seqs
        self.layout = h.layout
        self.effective = {
            "max_num_seqs": self.sched.max_num_running_reqs,
            "max_num_scheduled_tokens": self.sched.max_num_scheduled_tokens,
            "enable_chunked_prefill": vc.scheduler_config.enable_chunked_prefill,
            "scheduler_reserve_full_isl": self.sched.scheduler_reserve_full_isl,
            "watermark_blocks": self.sched.kv_cache_manager.watermark_blocks,
            "policy": str(self.sched.policy),
            "max_model_len": max_model_len,
            "scheduler_block_size": h.sched_bs, "hash_block_size": h.hash_bs,
            "kv_cache_manager": type(self.sched.kv_cache_manager.coordinator).__name__,
        }
        self.hasher = h.hasher
        self.trace = trace
        self.hash_block_size = hash_block_size
        self.decode = decode
        self.fixed_s = args.step_fixed_s
        self.per_token_s = args.step_per_token_s
        self.num_gpu_blocks = num_gpu_blocks
        self.last_lookup: dict[str, int] = {}
        self.preempt: dict[str, int] = {}
        self._wrap()
        self._wrap_groups(h)

    def _wrap_groups(self, h: HybridEngine) -> None:
        """Record, for the lookup that admitted a request first, the full-attention group's own hit
        (``find_longest_cache_hit_per_group``, a pure lookup, at the same moment): a wrapper of
        ``_get_local_prefix_cache_hit`` notes it per step, one of ``schedule`` keeps it for each
        request that is running after the step for the first time."""
        s = self.sched
        coord = s.kv_cache_manager.coordinator
        full = [g for g, k in enumerate(h.kinds) if k == "FullAttentionSpec"]
        self.full_hit: dict[str, int] = {}
        step: dict[str, int] = {}
        inner = s._get_local_prefix_cache_hit

        def local(request, *a, **kw):
            _, per = coord.find_longest_cache_hit_per_group(request.block_hashes, request.num_tokens - 1)
            step[request.request_id] = min(per[g] for g in full) if full else -1
            return inner(request, *a, **kw)

        s._get_local_prefix_cache_hit = local
        outer = s.schedule

        def schedule(*a, **kw):
            step.clear()
            out = outer(*a, **kw)
            for rid, hit in step.items():
                if rid in out.num_scheduled_tokens and rid not in self.full_hit:
                    self.full_hit[rid] = hit
            return out

        s.schedule = schedule

    def request(self, r: common.Request, hash_block_size: int, decode: bool, ignore_eos: bool = False) -> Request:
        return Request(request_id=str(r.index), prompt_token_ids=common.prompt_tokens(r, hash_block_size),
                       sampling_params=SamplingParams(max_tokens=r.output_length if decode else 1, ignore_eos=ignore_eos),
                       pooling_params=None, arrival_time=float(r.index), block_hasher=self.hasher)

    def run_any(self, async_scheduling: bool) -> dict:
        # SchedEngine's loops build requests with the module's vllm_request (hasher at 16 tokens);
        # here with the hasher at the hash block vLLM resolved for this KV-cache config.
        saved = drive_vllm_scheduler.vllm_request
        drive_vllm_scheduler.vllm_request = self.request
        try:
            return self.run_async() if async_scheduling else self.run()
        finally:
            drive_vllm_scheduler.vllm_request = saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--hash-block-size", type=int, required=True)
    ap.add_argument("--config", required=True, help="HF config.json of the model")
    ap.add_argument("--pools", required=True, help="num_gpu_blocks, comma-separated, or inf")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--max-num-seqs", type=int, default=1024)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--step-fixed-s", type=float, default=0.020)
    ap.add_argument("--step-per-token-s", type=float, default=0.00001)
    ap.add_argument("--async-scheduling", action="store_true")
    ap.add_argument("--gdn-checkpoint-alignment", type=int, default=GDN_CHECKPOINT_ALIGNMENT)
    ap.add_argument("--out", required=True)
    ap.add_argument("--summary")
    args = ap.parse_args(argv)
    if args.gdn_checkpoint_alignment == 0:
        args.gdn_checkpoint_alignment = 0
    with open(args.config) as fh:
        cfg = json.load(fh)
    trace = common.read_trace(args.trace)
    common.check_trace(trace, args.hash_block_size)
    decode = not args.no_decode
    t0 = trace[0].timestamp
    inf_n = 64 * sum(cdiv(r.input_length + (r.output_length if decode else 1), 16) + 1 for r in trace) + 2
    cols, runs, layout = [], [], None
    for pool in common.parse_pools(args.pools):
        n = inf_n if common.is_inf(pool) else int(pool)
        t = time.perf_counter()
        eng = HybridSchedEngine(trace, cfg, args.hash_block_size, n, decode, args)
        layout = eng.layout
        try:
            res = eng.run_any(args.async_scheduling)
        except common.Infeasible as e:
            runs.append({"pool": pool, "num_gpu_blocks": n, "feasible": False,
                         "failure": {"request": e.request, "event": e.event, "detail": e.detail}})
            print(f"  pool {pool}: INFEASIBLE {e}", file=sys.stderr, flush=True)
            continue
        res["full"] = [eng.full_hit[str(r.index)] for r in trace]
        cols.append((pool, res))
        runs.append({"pool": pool, "feasible": True, "stats": res["stats"], "effective_config": eng.effective,
                     "seconds": round(time.perf_counter() - t, 3)})
        print(f"  pool {pool}: {res['stats']} ({time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        hdr = ["request", "id", "arrival_s", "worker", "input_tokens", "output_tokens"]
        for name in ("hit_tokens", "preemptions", "queue_s", "first_token_s", "finish_s", "full_group_hit_tokens"):
            hdr += [f"{name}_{p}" for p, _ in cols]
        w.writerow(hdr)
        for r in trace:
            row = [r.index, r.index, repr((r.timestamp - t0) / 1000.0), 0, r.input_length, r.output_length]
            for key in ("hit", "preemptions", "queue", "first_token", "finish", "full"):
                row += [v[key][r.index] if key in ("hit", "preemptions", "full") else repr(v[key][r.index]) for _, v in cols]
            w.writerow(row)
    os.replace(tmp, args.out)
    if args.summary:
        with open(args.summary + ".tmp", "w") as fh:
            json.dump({"engine": {"name": "vllm", "version": vllm.__version__,
                                  "scheduler": "AsyncScheduler (batch queue 2)" if args.async_scheduling else "Scheduler (sync)"},
                       "trace": args.trace, "config": args.config, "hash_block_size": args.hash_block_size, "decode": decode,
                       "max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
                       "step_fixed_s": args.step_fixed_s, "step_per_token_s": args.step_per_token_s,
                       "gdn_checkpoint_alignment": args.gdn_checkpoint_alignment, "inf_pool_size": inf_n,
                       "layout": layout, "runs": runs,
                       "model_config_stub_attributes_defaulted_to_None": sorted(STUB_DEFAULTED)}, fh, indent=1)
            fh.write("\n")
        os.replace(args.summary + ".tmp", args.summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
