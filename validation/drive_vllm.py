"""Drive vLLM 0.33.0's own KV-cache manager through a trace (see SPEC.md and README.md).

Run with the vLLM venv (../shared/engines/install.sh), e.g.

    $VLLM_PY validation/drive_vllm.py --trace T.jsonl --hash-block-size 512 \
        --schedule serial --pools 100,200,inf --out out.csv

Every cache decision is vLLM's: the driver builds ``vllm.v1.request.Request`` objects with
vLLM's own block hasher (sha256, as the engine core does) and calls, in the scheduler's order,
``KVCacheManager.get_computed_blocks`` and ``allocate_slots`` (admission of the whole prompt),
``Request.append_output_token_ids`` then ``allocate_slots(request, 1)`` for each decode step,
and ``KVCacheManager.free`` when the request finishes. README.md cites the code.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

warnings.filterwarnings("ignore")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch
import vllm
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.request import Request, RequestStatus
from vllm_request import E, vllm_request



class VllmEngine:
    """One KVCacheManager with num_gpu_blocks = N (block 0 becomes the null block)."""

    def __init__(self, num_gpu_blocks: int, hash_block_size: int, max_model_len: int, decode: bool):
        cfg = KVCacheConfig(
            num_blocks=num_gpu_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(
                    ["model.layers.0.self_attn.attn"],
                    FullAttentionSpec(block_size=E, num_kv_heads=1, head_size=64, dtype=torch.float16),
                )
            ],
        )
        # Arguments as Scheduler.__init__ passes them for a plain decoder (no spec decode,
        # no connector, no DCP/PCP), prefix caching on; watermark default 0.0.
        self.mgr = KVCacheManager(
            kv_cache_config=cfg,
            max_model_len=max_model_len,
            max_in_flight_tokens=None,
            enable_caching=True,
            use_eagle=False,
            num_hash_lookahead_tokens=0,
            num_prefill_lookahead=0,
            log_stats=False,
            enable_kv_cache_events=False,
            dcp_world_size=1,
            pcp_world_size=1,
            scheduler_block_size=E,
            hash_block_size=E,
            watermark=0.0,
        )
        self.hash_block_size = hash_block_size
        self.decode_on = decode
        self.reqs: dict[int, Request] = {}
        self.running: set[int] = set()
        self.n_evicted = 0

    def _req(self, r: common.Request) -> Request:
        return vllm_request(r, self.hash_block_size, self.decode_on)

    def arrive(self, r: common.Request) -> int:
        req = self._req(r)
        # Scheduler.schedule, waiting loop: _get_local_prefix_cache_hit -> get_computed_blocks
        # (max_cache_hit_length None -> num_tokens - 1), then allocate_slots for the whole
        # prompt (no chunked prefill), full_sequence_must_fit = scheduler_reserve_full_isl (True).
        blocks, hit, _boundary = self.mgr.get_computed_blocks(req)
        new = self.mgr.allocate_slots(
            req,
            req.num_tokens - hit,
            num_new_computed_tokens=hit,
            new_computed_blocks=blocks,
            num_lookahead_tokens=0,
            num_external_computed_tokens=0,
            delay_cache_blocks=False,
            num_encoder_tokens=0,
            full_sequence_must_fit=True,
            reserved_blocks=0,
            has_scheduled_reqs=bool(self.running),
        )
        if new is None:
            raise common.Infeasible(r.index, "arrival", 0, f"prompt {r.input_length}, hit {hit}, "
                                    f"free {self.mgr.block_pool.get_num_free_blocks()}")
        # The scheduler sets num_computed_tokens = hit on admission and adds the scheduled
        # tokens in _update_after_schedule.
        req.status = RequestStatus.RUNNING
        req.num_computed_tokens = hit + (req.num_tokens - hit)
        self.reqs[r.index] = req
        self.running.add(r.index)
        return hit

    def prefill_end(self, r: common.Request) -> None:
        # update_from_output -> _update_request_with_output: the first sampled token is
        # appended (the request's new full blocks get hashed; nothing is cached here).
        self.reqs[r.index].append_output_token_ids(common.output_token(r, 1))

    def decode(self, r: common.Request, k: int) -> None:
        req = self.reqs[r.index]
        # Running-request loop of Scheduler.schedule: num_new_tokens = num_tokens -
        # num_computed_tokens = 1 (the slot of generated token k), allocate_slots(request, n).
        assert req.num_tokens - req.num_computed_tokens == 1
        new = self.mgr.allocate_slots(req, 1, num_lookahead_tokens=0)
        if new is None:
            raise common.Infeasible(r.index, "decode", k, f"free {self.mgr.block_pool.get_num_free_blocks()}")
        req.num_computed_tokens += 1
        # The step's output, token k + 1, is appended in update_from_output.
        req.append_output_token_ids(common.output_token(r, k + 1))

    def finish(self, r: common.Request) -> None:
        req = self.reqs.pop(r.index)
        req.status = RequestStatus.FINISHED_LENGTH_CAPPED
        # Scheduler._free_request -> _free_blocks -> kv_cache_manager.free(request)
        self.mgr.free(req)
        self.running.discard(r.index)

    def stats(self) -> dict:
        pool = self.mgr.block_pool
        return {"num_gpu_blocks": pool.num_gpu_blocks, "cached_hashes": len(pool.cached_block_hash_to_block),
                "free_blocks_at_end": pool.get_num_free_blocks()}


def make_factory(trace, hash_block_size, decode):
    max_model_len = max(r.input_length + r.output_length for r in trace) + E
    inf = common.inf_pool_size(trace, decode)

    def make(pool: str) -> VllmEngine:
        n = inf if common.is_inf(pool) else int(pool)
        return VllmEngine(n, hash_block_size, max_model_len, decode)

    return make


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(ap)
    args = ap.parse_args(argv)
    return common.main_common(args, make_factory, {"name": "vllm", "version": vllm.__version__})


if __name__ == "__main__":
    sys.exit(main())
