"""Drive vLLM 0.33.0's native CPU offloading (OffloadingConnector + CPU manager) through a trace.

Run with the vLLM venv (../shared/engines/install.sh), e.g.

    $VLLM_PY validation/drive_vllm_offload.py --trace T.jsonl --hash-block-size 32 \
        --pools 20,40 --cpu-blocks 64 --policy lru --out out.csv [--no-decode] [--summary s.json]

What runs is vLLM's own ``Scheduler`` (``vllm/v1/core/sched/scheduler.py``) built from a
``VllmConfig`` with ``CacheConfig(kv_offloading_size=..., kv_offloading_backend="native")``,
exactly the settings ``--kv-offloading-backend native --kv-offloading-size`` produce
(``VllmConfig._post_init_kv_transfer_config``: ``OffloadingConnector`` with
``cpu_bytes_to_use``), plus ``eviction_policy`` in the connector's extra config (lru | arc).
No model: ``model_config`` is a small stand-in object. The GPU side is stood in for: after each
``schedule()``, every load and store job of the step's ``OffloadingConnectorMetadata`` is reported
finished in the ``ModelRunnerOutput``'s ``KVConnectorOutput`` (``OffloadingWorkerMetadata``
``completed_jobs``; asynchronous loads also in ``finished_recving``), and every scheduled request
that reached the end of its tokens gets one sampled token.

Serial schedule only: one request at a time is added, stepped until it finishes (admission,
prefill, decode steps, finish), then the next one. Per request the driver records, from the
scheduler's own calls (instance wrappers that only observe): the GPU prefix hit (the local hit
``_get_local_prefix_cache_hit`` returns, as ``get_computed_blocks`` computes it) and the tokens
the connector reports loadable beyond it (``get_num_new_matched_tokens``), at the request's first
lookup. Output: ``request,id,arrival_s,worker,input_tokens,output_tokens,hit_tokens_<N>,
offload_hit_tokens_<N>`` per GPU pool N (num_gpu_blocks, block 0 is the null block).
CPU size C is in blocks of 16 tokens (one block per offload chunk, the default); C = 0 means
no connector at all (plain prefix caching; offload hits are 0).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
import types
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

warnings.filterwarnings("ignore")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch
import vllm
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    OffloadingConnectorMetadata,
    OffloadingWorkerMetadata,
)
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm_request import E, vllm_request
from vllm.v1.structured_output import StructuredOutputManager


# One layer, 1 KV head of 64 fp16: page_size_bytes = 2 * 16 * 1 * 64 * 2 = 4096 bytes per block,
# equal to mmap.PAGESIZE (the CPU spec's BLOCK_SIZE_ALIGNMENT), so C blocks = C * 4096 bytes.
LAYER = "model.layers.0.self_attn.attn"
SPEC = FullAttentionSpec(block_size=E, num_kv_heads=1, head_size=64, dtype=torch.float16)
BYTES_PER_BLOCK = SPEC.page_size_bytes


STUB_DEFAULTED: set[str] = set()


class _Stub(types.SimpleNamespace):
    """Attributes not set below read as None (falsy), and are recorded in the summary."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        STUB_DEFAULTED.add(name)
        return None


def model_stub(max_model_len: int):
    """Stand-in for ModelConfig (the real one inspects a model): the attributes the Scheduler,
    the connector factory and build_offloading_config read."""
    return _Stub(
        max_model_len=max_model_len,
        uses_mrope=False,
        is_encoder_decoder=False,
        runner_type="generate",
        is_diffusion=False,
        supports_multimodal_inputs=False,
        return_sampling_mask=False,
        use_mla=False,
        model="stand-in",
        dtype=torch.float16,
        get_total_num_kv_heads=lambda: 1,
        is_multimodal_model=False,
        skip_tokenizer_init=True,
        hf_config=None,
        enable_return_routed_experts=False,
    )


class OffloadEngine:
    """vLLM's Scheduler with num_gpu_blocks = N and a native CPU tier of C blocks."""

    def __init__(self, num_gpu_blocks: int, cpu_blocks: int, policy: str, hash_block_size: int,
                 max_model_len: int, decode: bool):
        sched = SchedulerConfig(
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            max_num_batched_tokens=max(max_model_len, 8192),
            max_num_seqs=16,
            enable_chunked_prefill=False,
            async_scheduling=False,
        )
        cache_kwargs = dict(block_size=E, enable_prefix_caching=True)
        kv_transfer = None
        if cpu_blocks > 0:
            # --kv-offloading-backend native --kv-offloading-size GiB
            cache_kwargs.update(kv_offloading_size=cpu_blocks * BYTES_PER_BLOCK / (1 << 30),
                                kv_offloading_backend="native")
            kv_transfer = KVTransferConfig(kv_connector_extra_config={"eviction_policy": policy})
        cache = CacheConfig(**cache_kwargs)
        cache.num_gpu_blocks = num_gpu_blocks
        vc = VllmConfig(scheduler_config=sched, cache_config=cache, device_config=DeviceConfig("cpu"),
                        kv_transfer_config=kv_transfer)
        vc.model_config = model_stub(max_model_len)
        self.vllm_config = vc
        kv_cfg = KVCacheConfig(
            num_blocks=num_gpu_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec([LAYER], SPEC)],
        )
        self.sched = Scheduler(
            vllm_config=vc,
            kv_cache_config=kv_cfg,
            structured_output_manager=StructuredOutputManager(vc),
            block_size=E,
            hash_block_size=E,
            log_stats=False,
        )
        self.connector = self.sched.connector
        if cpu_blocks > 0:
            assert self.connector is not None and type(self.connector).__name__ == "OffloadingConnector"
            mgr = self.connector.scheduler.manager
            # CPUOffloadingManager._num_chunks (v1/kv_offload/cpu/manager.py): must be C
            self.cpu_capacity = mgr._num_chunks
            assert self.cpu_capacity == cpu_blocks, (self.cpu_capacity, cpu_blocks)
            # Observe prepare_store answers of None (a store that found no room,
            # v1/kv_offload/cpu/manager.py: prepare_store), per request.
            orig_prepare_store = mgr.prepare_store

            def prepare_store(keys, req_context, *a, **kw):
                res = orig_prepare_store(keys, req_context, *a, **kw)
                if res is None:
                    self.store_failures += 1
                    self.store_failure_requests.add(int(req_context.req_id))
                return res

            mgr.prepare_store = prepare_store
        else:
            assert self.connector is None
            self.cpu_capacity = 0
        self.hash_block_size = hash_block_size
        self.decode_on = decode
        self.local_hit: dict[str, int] = {}
        self.ext_hit: dict[str, int] = {}
        self.steps = 0
        self.store_failures = 0
        self.store_failure_requests: set[int] = set()
        self._current = -1
        self.n_store_jobs = 0
        self.n_load_jobs = 0
        self._wrap()

    def _wrap(self) -> None:
        """Observe (never change) the scheduler's lookups: the first answer per request."""
        sched = self.sched
        orig_local = sched._get_local_prefix_cache_hit

        def local(request, *a, **kw):
            res = orig_local(request, *a, **kw)
            self.local_hit.setdefault(request.request_id, res[1])
            return res

        sched._get_local_prefix_cache_hit = local
        if self.connector is not None:
            conn = self.connector
            orig_ext = conn.get_num_new_matched_tokens

            def ext(request, num_computed_tokens):
                res = orig_ext(request, num_computed_tokens)
                if res[0] is not None:
                    self.ext_hit.setdefault(request.request_id, res[0])
                return res

            conn.get_num_new_matched_tokens = ext

    def _request(self, r: common.Request) -> Request:
        return vllm_request(r, self.hash_block_size, self.decode_on, ignore_eos=True)

    def _step(self, r: common.Request, next_k: list[int]) -> None:
        out = self.sched.schedule()
        self.steps += 1
        meta = out.kv_connector_metadata
        completed: dict[int, int] = {}
        recving: set[str] = set()
        if meta is not None:
            assert isinstance(meta, OffloadingConnectorMetadata)
            for jid, job in meta.load_jobs.items():
                completed[jid] = 1
                self.n_load_jobs += 1
                if not job.sync:
                    recving.add(job.req_id)
            for jid in meta.store_jobs:
                completed[jid] = 1
                self.n_store_jobs += 1
        req_ids, sampled = [], []
        for rid, n in out.num_scheduled_tokens.items():
            req = self.sched.requests[rid]
            req_ids.append(rid)
            # num_computed_tokens was advanced by schedule(); a token is sampled when the
            # scheduled tokens reach the end of the request's current tokens.
            if req.num_computed_tokens >= req.num_tokens:
                k = next_k[0]
                sampled.append([common.output_token(r, k)])
                next_k[0] = k + 1
            else:
                sampled.append([])
        kvo = None
        if self.connector is not None:
            kvo = KVConnectorOutput(
                finished_sending=set(),
                finished_recving=recving,
                kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=completed) if completed else None,
            )
        mro = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
            kv_connector_output=kvo,
        )
        self.sched.update_from_output(out, mro)

    def serve(self, r: common.Request) -> tuple[int, int]:
        req = self._request(r)
        self._current = r.index
        self.sched.add_request(req)
        next_k = [1]
        guard = 0
        while req.request_id in self.sched.requests and not req.is_finished():
            self._step(r, next_k)
            guard += 1
            if guard > 4 * (r.output_length + 8):
                raise common.Infeasible(r.index, "arrival" if req.num_computed_tokens == 0 else "decode",
                                        0, f"no progress after {guard} steps, status {req.status}, "
                                        f"free {self.sched.kv_cache_manager.block_pool.get_num_free_blocks()}")
        # Drain: steps with nothing scheduled let the connector finish its bookkeeping
        # (stores of the last step, the finished request's state), as the engine keeps
        # stepping while has_pending_push_work() is true.
        for _ in range(4):
            if self.connector is None or not self.connector.has_pending_push_work():
                break
            self._step(r, next_k)
        rid = req.request_id
        return self.local_hit.get(rid, -1), self.ext_hit.get(rid, 0)

    def stats(self) -> dict:
        pool = self.sched.kv_cache_manager.block_pool
        return {"num_gpu_blocks": pool.num_gpu_blocks, "steps": self.steps, "store_jobs": self.n_store_jobs,
                "load_jobs": self.n_load_jobs, "cpu_capacity_chunks": self.cpu_capacity,
                "prepare_store_none": self.store_failures,
                "requests_with_prepare_store_none": sorted(self.store_failure_requests)}


def run(trace, hash_block_size, decode, pool: str, cpu_blocks: int, policy: str):
    max_model_len = max(r.input_length + r.output_length for r in trace) + E
    n = common.inf_pool_size(trace, decode) if common.is_inf(pool) else int(pool)
    eng = OffloadEngine(n, cpu_blocks, policy, hash_block_size, max_model_len, decode)
    hits, ext = [], []
    for r in trace:
        h, x = eng.serve(r)
        hits.append(h)
        ext.append(x)
    return hits, ext, eng.stats()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--hash-block-size", type=int, required=True)
    ap.add_argument("--pools", required=True, help="GPU pool sizes (num_gpu_blocks), comma-separated, or inf")
    ap.add_argument("--cpu-blocks", type=int, required=True, help="CPU tier size in 16-token blocks (0: no tier)")
    ap.add_argument("--policy", choices=["lru", "arc"], default="lru")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--summary")
    args = ap.parse_args(argv)
    trace = common.read_trace(args.trace)
    common.check_trace(trace, args.hash_block_size)
    decode = not args.no_decode
    times = common.service_model(trace)
    pools = common.parse_pools(args.pools)
    cols: list[tuple[str, list[int], list[int]]] = []
    runs = []
    for pool in pools:
        t = time.perf_counter()
        try:
            hits, ext, st = run(trace, args.hash_block_size, decode, pool, args.cpu_blocks, args.policy)
            cols.append((pool, hits, ext))
            runs.append({"pool": pool, "feasible": True, "seconds": round(time.perf_counter() - t, 3), "stats": st,
                         "total_hit_tokens": sum(hits), "total_offload_hit_tokens": sum(ext)})
            print(f"  pool {pool} cpu {args.cpu_blocks} {args.policy}: hits={sum(hits)} offload={sum(ext)} {st}",
                  file=sys.stderr, flush=True)
        except common.Infeasible as e:
            runs.append({"pool": pool, "feasible": False, "failure": {"request": e.request, "event": e.event,
                                                                      "detail": e.detail}})
            print(f"  pool {pool}: INFEASIBLE {e}", file=sys.stderr, flush=True)
    with open(args.out, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["request", "id", "arrival_s", "worker", "input_tokens", "output_tokens"]
                   + [f"hit_tokens_{p}" for p, _, _ in cols] + [f"offload_hit_tokens_{p}" for p, _, _ in cols])
        for r, tm in zip(trace, times):
            w.writerow([r.index, r.index, repr(tm.arrival_s), 0, r.input_length, r.output_length]
                       + [h[r.index] for _, h, _ in cols] + [x[r.index] for _, _, x in cols])
    if args.summary:
        with open(args.summary, "w") as fh:
            json.dump({"engine": {"name": "vllm", "version": vllm.__version__, "offload": "native (OffloadingConnector)"},
                       "trace": args.trace, "hash_block_size": args.hash_block_size, "schedule": "serial",
                       "decode": decode, "cpu_blocks": args.cpu_blocks, "policy": args.policy,
                       "bytes_per_block": BYTES_PER_BLOCK,
                       "model_config_stub_attributes_defaulted_to_None": sorted(STUB_DEFAULTED), "runs": runs}, fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
