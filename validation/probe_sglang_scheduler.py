"""Probe of SGLang 0.5.23's SchedulePolicy and PrefillAdder on CPU (docs/scheduler_sglang.md).

    $SGLANG_PY validation/probe_sglang_scheduler.py

Real RadixCache (page 16), PagedTokenToKVPoolAllocator (64 pages), Req, ScheduleBatch, set up
as validation/drive_sglang.py does. Prints (1) the waiting-queue order after
SchedulePolicy.calc_priority under "lpm" (longest match first; C, which shares an uncached
64-token prefix with the earlier B, is deprioritised behind D) and "fcfs" (unchanged);
(2) PrefillAdder.add_one_req for a 200-token prompt with max_new_tokens 32 / 600 / 900 against
1024 free+evictable tokens: admitted while 200 + max_new + 16 < 1024, NO_TOKEN at 900.
A probe, not a driver: no scheduling loop, no time.
"""
import warnings, logging, contextlib, io
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from array import array
from types import SimpleNamespace
import torch
from sglang.srt.runtime_context import get_context
from sglang.srt.server_args import ServerArgs
P = 16
get_context().set_server_args(ServerArgs(model_path="dummy", device="cpu", page_size=P))
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import SchedulePolicy, PrefillAdder, AddReqResult
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.radix_cache import RadixCache
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
MC = SimpleNamespace(vocab_size=1 << 62, is_encoder_decoder=False, is_multimodal=False)

def mk(pages):
    alloc = PagedTokenToKVPoolAllocator(size=pages*P, page_size=P, dtype=torch.float16, device="cpu", kvcache=None, need_sort=False)
    pool = ReqToTokenPool(size=64, max_context_len=4096, device="cpu", enable_memory_saver=False)
    tree = RadixCache(CacheInitParams(disable=False, req_to_token_pool=pool, token_to_kv_pool_allocator=alloc, page_size=P))
    return alloc, pool, tree

def req(rid, toks, max_new):
    sp = SamplingParams(max_new_tokens=max_new); sp.normalize(None)
    return Req(rid, "", array("q", toks), sp)

def run_prompt(alloc, pool, tree, r):
    """admit + prefill + finish (as drive_sglang.py), leaving the prompt in the tree"""
    r.init_next_round_input(tree)
    r.extend_end = len(r.full_untruncated_fill_ids)
    r.lock = tree.lock(r.last_node)
    b = ScheduleBatch.init_new([r], pool, alloc, tree, MC, False, SpeculativeAlgorithm.NONE)
    b.prepare_for_extend()
    checkpoint_kv_cache(r, tree)
    return b

alloc, pool, tree = mk(64)
base = list(range(1000, 1128))                      # 128 tokens cached
a0 = req("warm", base + [1], 1); run_prompt(alloc, pool, tree, a0)
a0.output_ids.append(7); a0.finished_reason = None
from sglang.srt.managers.schedule_batch import FINISH_LENGTH
a0.to_finish = None; a0.finished_reason = FINISH_LENGTH(length=1)
release_kv_cache(a0, tree, checkpoint=True)
print("cached tokens in tree:", tree.total_size(), "evictable:", tree.evictable_size())

shared = list(range(5000, 5064))                    # 64 uncached tokens shared by B and C
W = [req("B_shared", shared + list(range(6000, 6040)), 32),
     req("C_shared", shared + list(range(7000, 7040)), 32),
     req("D_unrelated", list(range(9000, 9100)), 32),
     req("A_hit", base + list(range(8000, 8040)), 32)]
W0 = list(W)
print("queue (arrival order):", [r.rid for r in W])
pol = SchedulePolicy("lpm", tree, False, False, False)
pol.calc_priority(W)
print("lpm order:", [(r.rid, r.num_matched_prefix_tokens) for r in W])
W2 = list(W0); SchedulePolicy("fcfs", tree, False, False, False).calc_priority(W2)
print("fcfs order (unchanged):", [r.rid for r in W2])

# Admission: reservation of future output. Pool 64 pages = 1024 tokens; 128 cached (evictable).
for max_new in (32, 600, 900):
    r = req(f"E_max{max_new}", list(range(20000, 20200)), max_new)
    r.init_next_round_input(tree)
    running = ScheduleBatch(reqs=[], batch_is_full=False)
    ad = PrefillAdder(P, tree, alloc, running, 0.7, 16384, 8192)
    res = ad.add_one_req(r, has_chunked_req=False, truncation_align_size=None)
    ok = bool(ad.can_run_list)
    print(f"prompt 200, max_new {max_new}: rem_total_tokens before={alloc.available_size()+tree.evictable_size()} "
          f"admitted={ok} result={res.name}")
    if ok:
        tree.unlock(r.lock)
