"""Probe (not a driver): SGLang 0.5.23's SWA prefix match, on CPU, with its own objects.

    /work/engines/venv-sglang/bin/python validation/probe_sglang_swa.py [--window 65]

Builds SGLang's hybrid SWA pools and tree exactly as the cache builder pairs them for a model with
sliding-window and full layers: ``SWAKVPool`` (one SWA layer, one full layer, tiny heads, CPU),
``SWATokenToKVPoolAllocator`` (page size 1: its ``alloc`` asserts it), ``ReqToTokenPool`` and
``UnifiedRadixCache`` with the FULL and SWA tree components and ``sliding_window_size = W``. It
inserts one 320-token sequence with live SWA KV everywhere, and one whose SWA KV of tokens
[0, 160) was freed (``component_evicted_seqlens[SWA] = 160``, what a request's decode-time SWA
eviction records, so the tree keeps a tombstone there), then asks ``match_prefix`` for prefixes of
several lengths. Prints one JSON line per query to stdout.

What it shows (HYBRID_NOTES.md section 5): without tombstones every prefix matches (SGLang keeps
the SWA KV of whole prompts); after a tombstone a prefix of length L matches only if
``L - 160 >= W`` (the validator of ``unified_cache/components/swa.py:357-377`` counts W tokens of
live SWA KV, where vLLM 0.33.0 needs ``cdiv(W - 1, block)`` blocks, i.e. W - 1 tokens rounded up
to its block).
"""

from __future__ import annotations

import argparse
import json
import sys
from array import array

import torch
from sglang.srt.runtime_context import get_context
from sglang.srt.server_args import ServerArgs

get_context().set_server_args(ServerArgs(model_path="dummy", device="cpu", page_size=1))

from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

SIZE = 4096


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=int, default=65, help="sliding_window_size W (tokens), >= 1")
    args = ap.parse_args(argv)
    if args.window < 1 or args.window > 150:
        print("probe_sglang_swa: --window must be in 1..150 (the probe's sequences are 320 tokens)",
              file=sys.stderr)
        return 2
    w = args.window
    kv = SWAKVPool(size=SIZE, size_swa=SIZE, page_size=1, dtype=torch.float16, head_num=1, head_dim=8,
                   swa_attention_layer_ids=[0], full_attention_layer_ids=[1], device="cpu")
    alloc = SWATokenToKVPoolAllocator(size=SIZE, size_swa=SIZE, page_size=1, dtype=torch.float16,
                                      device="cpu", kvcache=kv, need_sort=False)
    req_pool = ReqToTokenPool(size=8, max_context_len=SIZE, device="cpu", enable_memory_saver=False)
    params = CacheInitParams(disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=alloc,
                             page_size=1, sliding_window_size=w,
                             tree_components=(ComponentType.FULL, ComponentType.SWA))
    tree = UnifiedRadixCache(params)
    queries = sorted({16, 160, 160 + w - 1, 160 + w, 160 + w + 1, 320})
    for evicted in (0, 160):
        tokens = [1000 * (evicted + 1) + i for i in range(320)]
        tree.insert(InsertParams(key=RadixKey(array("q", tokens)), value=alloc.alloc(len(tokens)),
                                 component_evicted_seqlens={ComponentType.SWA: evicted}))
        for q in queries:
            m = tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens[:q]))))
            print(json.dumps({"window": w, "swa_evicted_below": evicted, "query_tokens": q,
                              "matched_tokens": m.device_prefix_len}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
