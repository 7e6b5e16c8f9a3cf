"""Drive SGLang 0.5.23's own radix cache, allocator and request/batch objects through a trace.

Run with the SGLang venv (../shared/engines/install.sh), e.g.

    $SGLANG_PY validation/drive_sglang.py --trace T.jsonl --hash-block-size 512 \
        --schedule serial --pools 100,200,inf --out out.csv [--tree radix|unified]

Every cache decision is SGLang's. Objects: ``PagedTokenToKVPoolAllocator`` (page 16, N pages),
``ReqToTokenPool``, the tree (classic ``RadixCache`` or the default ``UnifiedRadixCache``),
real ``Req`` and ``ScheduleBatch`` objects. Calls, in the scheduler's order (README.md cites
the code): ``Req.init_next_round_input`` (match_kv_cache, limit P - 1, page aligned),
``tree_cache.lock(last_node)`` (as PrefillAdder._commit_prefill_admission),
``ScheduleBatch.prepare_for_extend`` (alloc_for_extend: evict, alloc pages); at prefill end
``checkpoint_kv_cache`` (the insert of the computed prompt); per decode step
``ScheduleBatch.check_decode_mem`` then ``prepare_for_decode`` (alloc_for_decode); at finish
``release_kv_cache(req, tree, checkpoint=True)``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import logging
import os
import sys
import time
import warnings
from array import array
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)

import torch
from sglang.srt.runtime_context import get_context
from sglang.srt.server_args import ServerArgs

E = common.ENGINE_BLOCK
# A default ServerArgs (CPU, page size 16) so the runtime accessors the batch code reads
# (get_exec(), get_serving(), get_spec(), ...) hold their defaults. No model is loaded.
get_context().set_server_args(ServerArgs(model_path="dummy", device="cpu", page_size=E))

import sglang
import sglang.srt.mem_cache.radix_cache as radix_cache_module
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.radix_cache import RadixCache
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm


class _LogicalClock:
    """Stands in for the ``time`` module inside radix_cache.py only: ``monotonic()`` returns a
    strictly increasing counter, so the LRU order (TreeNode.last_access_time) is the order
    of the calls, reproducible and free of clock ties. Everything else is the real module."""

    def __init__(self):
        self._n = itertools.count(1)

    def monotonic(self) -> float:
        return float(next(self._n))

    def __getattr__(self, name):
        return getattr(time, name)


radix_cache_module.time = _LogicalClock()

# ScheduleBatch reads only these fields of the model config on this path.
MODEL_CONFIG = SimpleNamespace(vocab_size=1 << 62, is_encoder_decoder=False, is_multimodal=False)


def _is_oom(e: RuntimeError) -> bool:
    # allocation.py: alloc_paged_token_slots_extend / _decode raise these on a failed alloc
    msg = str(e)
    return msg.startswith(("Prefill out of memory.", "Decode out of memory.", "Out of memory."))


class SglangEngine:
    def __init__(self, num_pages: int, hash_block_size: int, max_context: int, n_requests: int,
                 decode: bool, tree: str):
        self.alloc = PagedTokenToKVPoolAllocator(
            size=num_pages * E, page_size=E, dtype=torch.float16, device="cpu", kvcache=None,
            need_sort=False,  # what kv_cache_configurator passes without PD disaggregation
        )
        assert self.alloc.num_pages == num_pages
        self.req_pool = ReqToTokenPool(size=n_requests + 1, max_context_len=max_context, device="cpu",
                                       enable_memory_saver=False)
        params = CacheInitParams(disable=False, req_to_token_pool=self.req_pool,
                                 token_to_kv_pool_allocator=self.alloc, page_size=E)
        if tree == "radix":
            self.tree = RadixCache(params)
        else:
            from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

            # registry.create_unified_radix_cache for a plain full-attention model
            params.tree_components = (ComponentType.FULL,)
            self.tree = UnifiedRadixCache(params)
        self.hash_block_size = hash_block_size
        self.decode_on = decode
        self.reqs: dict[int, tuple[Req, ScheduleBatch]] = {}

    def arrive(self, r: common.Request) -> int:
        o = r.output_length if self.decode_on else 1
        sampling = SamplingParams(max_new_tokens=o)
        sampling.normalize(None)  # as TokenizerManager does (stop strings -> [])
        req = Req(str(r.index), "", array("q", common.prompt_tokens(r, self.hash_block_size)), sampling)
        # Scheduler.get_new_batch_prefill: req.init_next_round_input(tree_cache) ->
        # match_kv_cache(max_prefix_len = P - 1) -> RadixCache.match_prefix (page aligned).
        req.init_next_round_input(self.tree)
        hit = req.prefix_len
        # PrefillAdder.add_one_req -> _commit_prefill_admission (whole prompt, not chunked)
        req.extend_end = hit + (len(req.full_untruncated_fill_ids) - hit)
        req.lock = self.tree.lock(req.last_node)
        batch = ScheduleBatch.init_new([req], self.req_pool, self.alloc, self.tree, MODEL_CONFIG,
                                       False, SpeculativeAlgorithm.NONE)
        try:
            # alloc_for_extend -> alloc_paged_token_slots_extend: evict_from_tree_cache
            # (extend + page_size tokens), alloc_extend; raises on OOM.
            with contextlib.redirect_stdout(io.StringIO()):  # the OOM path pretty-prints the tree
                batch.prepare_for_extend()
        except RuntimeError as e:
            if not _is_oom(e):
                raise
            raise common.Infeasible(r.index, "arrival", 0, f"prompt {r.input_length}, hit {hit}, "
                                    f"available {self.alloc.available_size()}, "
                                    f"evictable {self.tree.evictable_size()}") from None
        self.reqs[r.index] = (req, batch)
        return hit

    def prefill_end(self, r: common.Request) -> None:
        req, _batch = self.reqs[r.index]
        # process_batch_result_prefill: output_ids.append(next_token); not finished ->
        # checkpoint_kv_cache(req, tree) (the former cache_unfinished_req).
        req.output_ids.append(common.output_token(r, 1))
        checkpoint_kv_cache(req, self.tree)

    def decode(self, r: common.Request, k: int) -> None:
        req, batch = self.reqs[r.index]
        # update_running_batch: check_decode_mem (evict for the pages the step needs; False
        # means the real scheduler would retract), then prepare_for_decode -> alloc_for_decode.
        if not batch.check_decode_mem():
            raise common.Infeasible(r.index, "decode", k, f"available {self.alloc.available_size()}, "
                                    f"evictable {self.tree.evictable_size()}")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                batch.prepare_for_decode()
        except RuntimeError as e:
            if not _is_oom(e):
                raise
            raise common.Infeasible(r.index, "decode", k, str(e).splitlines()[0]) from None
        # process_batch_result_decode: the step's output, token k + 1.
        req.output_ids.append(common.output_token(r, k + 1))

    def finish(self, r: common.Request) -> None:
        req, _batch = self.reqs.pop(r.index)
        req.update_finish_state()  # len(output_ids) == max_new_tokens -> FINISH_LENGTH
        assert req.finished()
        release_kv_cache(req, self.tree, checkpoint=True)

    def stats(self) -> dict:
        return {"available_tokens_at_end": int(self.alloc.available_size()),
                "evictable_tokens_at_end": int(self.tree.evictable_size()),
                "num_pages": int(self.alloc.num_pages), "tree": type(self.tree).__name__}


def make_factory_for(tree: str):
    def make_factory(trace, hash_block_size, decode):
        max_context = max(r.input_length + r.output_length for r in trace) + 2 * E
        inf = common.inf_pool_size(trace, decode)

        def make(pool: str) -> SglangEngine:
            n = inf if common.is_inf(pool) else int(pool)
            return SglangEngine(n, hash_block_size, max_context, len(trace), decode, tree)

        return make

    return make_factory


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(ap)
    ap.add_argument("--tree", choices=["radix", "unified"], default="radix",
                    help="classic RadixCache (default) or the default-in-production UnifiedRadixCache")
    args = ap.parse_args(argv)
    info = {"name": "sglang", "version": sglang.__version__, "tree": args.tree}
    return common.main_common(args, make_factory_for(args.tree), info)


if __name__ == "__main__":
    sys.exit(main())
