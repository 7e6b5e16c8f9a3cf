"""Drive SGLang 0.5.23's own hybrid (full + sliding-window) prefix cache through a trace, serially.

Run with the SGLang venv, e.g.

    $SGLANG_PY validation/drive_sglang_hybrid.py --trace T.jsonl --hash-block-size 64 \
        --config tests/data/engines/hybrid/configs/gpt-oss-20b.json --window 40 \
        --schedule serial --pools 40,80,inf --out out.csv [--no-decode] [--swa-full-tokens-ratio 0.8] \
        [--chunked-prefill-size 8192]

Every cache decision is SGLang's. Objects, as the cache builder pairs them for a model with
sliding-window and full-attention layers (``mem_cache/registry.py:149-190``
``create_unified_radix_cache``: FULL + SWA tree components): ``SWAKVPool`` (the config's layer
ids: which layers are sliding; one head of dimension 1, CPU: the buffers are never read),
``SWATokenToKVPoolAllocator`` (page 16; full pool ``N`` pages, SWA pool
``floor(N * 16 * ratio / 16) * 16`` tokens as ``model_executor/pool_configurator.py:878-879``
sizes it), ``ReqToTokenPool``, ``UnifiedRadixCache`` with ``sliding_window_size = W``; real
``Req``, ``PrefillAdder`` and ``ScheduleBatch`` objects. ``W`` is the config's window unless
``--window`` shrinks it (so the window bites on short prompts).

Calls, in the scheduler's order (``managers/scheduler.py:4140-4330`` get_new_batch_prefill):
admission ``Req.init_next_round_input(tree)`` (match_kv_cache, limit P - 1) then
``PrefillAdder.add_one_req`` (the SWA prefill budget ``mem_cache/prefill_budget.py:171-300``
decides admission and may cap the chunk; chunks of ``chunked_prefill_size`` page aligned,
``schedule_policy.py:1646-1670``); ``ScheduleBatch.prepare_for_extend`` (``alloc_for_extend``:
``maybe_evict_swa``, evict, alloc). A chunked request is stashed between chunks
(``stash_chunked_request`` = ``checkpoint_kv_cache``, scheduler.py:3772-3776, 3911-3919), then
``init_next_round_input()`` and ``PrefillAdder.add_chunked_req``. At prefill end
``checkpoint_kv_cache``; per decode step ``check_decode_mem`` then ``prepare_for_decode``
(``alloc_for_decode``: ``maybe_evict_swa`` -> ``evict_sliding_windows``, then alloc); at finish
``release_kv_cache(req, tree, checkpoint=True)``. The hit of a request is ``req.prefix_len``
after its first ``init_next_round_input``. A request the adder does not admit (or a chunk it
parks) with nothing else running, or an allocation that fails, makes the pool infeasible.

Followed, not driven: the scheduler's ``max_new_tokens_for_memory`` clip of a request's output
(scheduler.py:2720-2735; O is taken as the trace's), retraction, the overlap scheduler.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
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
CHUNK = int(os.environ.get("SGH_CHUNKED_PREFILL_SIZE", "8192"))
for _i, _a in enumerate(sys.argv):
    if _a == "--chunked-prefill-size" and _i + 1 < len(sys.argv):
        CHUNK = int(sys.argv[_i + 1])
get_context().set_server_args(ServerArgs(model_path="dummy", device="cpu", page_size=E, chunked_prefill_size=CHUNK))

import sglang
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import PrefillAdder
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

MODEL_CONFIG = SimpleNamespace(vocab_size=1 << 62, is_encoder_decoder=False, is_multimodal=False)
MAX_PREFILL_TOKENS = 16384  # ServerArgs default (arg_groups/fields/schedule.py:71-81)


def layer_ids(config: dict) -> tuple[list[int], list[int], int]:
    """(sliding layer ids, full layer ids, window) from a Hugging Face config."""
    text = config.get("text_config", config)
    n = int(text["num_hidden_layers"])
    w = int(text["sliding_window"])
    kinds = text.get("layer_types")
    if kinds is None:  # Gemma 3: every sliding_window_pattern-th layer (default 6) is global
        pat = int(text.get("sliding_window_pattern", 6))
        kinds = ["full_attention" if (i + 1) % pat == 0 else "sliding_attention" for i in range(n)]
    swa = [i for i, k in enumerate(kinds) if k == "sliding_attention"]
    full = [i for i, k in enumerate(kinds) if k == "full_attention"]
    assert swa and full and len(swa) + len(full) == n, kinds
    return swa, full, w


def _is_oom(e: RuntimeError) -> bool:
    return str(e).startswith(("Prefill out of memory.", "Decode out of memory.", "Out of memory."))


class SglangHybridEngine:
    def __init__(self, num_pages: int, swa_ratio: float, window: int, layers, hash_block_size: int,
                 max_context: int, n_requests: int, decode: bool):
        swa_layers, full_layers = layers
        full_tokens = num_pages * E
        swa_tokens = int(full_tokens * swa_ratio) // E * E  # pool_configurator.py:878-879
        self.full_tokens, self.swa_tokens = full_tokens, swa_tokens
        kv = SWAKVPool(size=full_tokens, size_swa=swa_tokens, page_size=E, dtype=torch.float16, head_num=1,
                       head_dim=1, swa_attention_layer_ids=swa_layers, full_attention_layer_ids=full_layers,
                       device="cpu")
        self.alloc = SWATokenToKVPoolAllocator(size=full_tokens, size_swa=swa_tokens, page_size=E,
                                               dtype=torch.float16, device="cpu", kvcache=kv, need_sort=False)
        self.req_pool = ReqToTokenPool(size=n_requests + 1, max_context_len=max_context, device="cpu",
                                       enable_memory_saver=False)
        params = CacheInitParams(disable=False, req_to_token_pool=self.req_pool, token_to_kv_pool_allocator=self.alloc,
                                 page_size=E, sliding_window_size=window, chunked_prefill_size=CHUNK,
                                 tree_components=(ComponentType.FULL, ComponentType.SWA))
        self.tree = UnifiedRadixCache(params)
        self.hash_block_size = hash_block_size
        self.decode_on = decode
        self.reqs: dict[int, tuple[Req, ScheduleBatch]] = {}
        self.chunks = 0

    def _adder(self) -> PrefillAdder:
        return PrefillAdder(E, self.tree, self.alloc, None, 1.0, MAX_PREFILL_TOKENS, CHUNK)

    def _extend(self, r: common.Request, adder: PrefillAdder, what: str) -> ScheduleBatch:
        batch = ScheduleBatch.init_new(adder.can_run_list, self.req_pool, self.alloc, self.tree, MODEL_CONFIG,
                                       False, SpeculativeAlgorithm.NONE)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                batch.prepare_for_extend()
        except RuntimeError as e:
            if not _is_oom(e):
                raise
            raise common.Infeasible(r.index, "arrival", 0, f"{what}: {str(e).splitlines()[0]}") from None
        self.chunks += 1
        return batch

    def arrive(self, r: common.Request) -> int:
        o = r.output_length if self.decode_on else 1
        sampling = SamplingParams(max_new_tokens=o, ignore_eos=True)
        sampling.normalize(None)
        req = Req(str(r.index), "", array("q", common.prompt_tokens(r, self.hash_block_size)), sampling)
        # get_new_batch_prefill: init_next_round_input(tree) then adder.add_one_req
        req.init_next_round_input(self.tree)
        hit = req.prefix_len
        adder = self._adder()
        adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        if req not in adder.can_run_list:
            raise common.Infeasible(r.index, "arrival", 0, f"not admitted (prompt {r.input_length}, hit {hit}, "
                                    f"full avail {self.alloc.full_available_size()}, swa avail "
                                    f"{self.alloc.swa_available_size()})")
        chunked = adder.new_chunked_req is req
        batch = self._extend(r, adder, "first chunk")
        while chunked:
            # next get_new_batch_prefill: stash (checkpoint) the chunk, continue the request
            if req.extend_end > req.prefix_len:
                checkpoint_kv_cache(req, self.tree)
            req.init_next_round_input()
            adder = self._adder()
            left = adder.add_chunked_req(req)
            if req not in adder.can_run_list:
                raise common.Infeasible(r.index, "arrival", 0, f"chunk parked at {req.prefix_len}")
            chunked = left is req
            batch = self._extend(r, adder, f"chunk at {req.prefix_len}")
        self.reqs[r.index] = (req, batch)
        return hit

    def prefill_end(self, r: common.Request) -> None:
        req, _batch = self.reqs[r.index]
        req.output_ids.append(common.output_token(r, 1))
        checkpoint_kv_cache(req, self.tree)

    def decode(self, r: common.Request, k: int) -> None:
        req, batch = self.reqs[r.index]
        if not batch.check_decode_mem():
            raise common.Infeasible(r.index, "decode", k, f"full avail {self.alloc.full_available_size()}, "
                                    f"swa avail {self.alloc.swa_available_size()}")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                batch.prepare_for_decode()
        except RuntimeError as e:
            if not _is_oom(e):
                raise
            raise common.Infeasible(r.index, "decode", k, str(e).splitlines()[0]) from None
        req.output_ids.append(common.output_token(r, k + 1))

    def finish(self, r: common.Request) -> None:
        req, _batch = self.reqs.pop(r.index)
        req.update_finish_state()
        assert req.finished()
        release_kv_cache(req, self.tree, checkpoint=True)

    def stats(self) -> dict:
        return {"full_available_tokens_at_end": int(self.alloc.full_available_size()),
                "swa_available_tokens_at_end": int(self.alloc.swa_available_size()),
                "full_evictable_tokens_at_end": int(self.tree.full_evictable_size()),
                "swa_evictable_tokens_at_end": int(self.tree.swa_evictable_size()),
                "full_pool_tokens": self.full_tokens, "swa_pool_tokens": self.swa_tokens,
                "tree_core": type(self.tree.tree_core).__name__,
                "extend_batches": self.chunks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(ap)
    ap.add_argument("--config", required=True, help="Hugging Face config.json with sliding and full layers")
    ap.add_argument("--window", type=int, help="sliding window W (tokens); default: the config's")
    ap.add_argument("--swa-full-tokens-ratio", type=float, default=0.8, help="SWA pool / full pool tokens (0.8)")
    ap.add_argument("--chunked-prefill-size", type=int, default=8192, help="tokens per prefill chunk (read at import)")
    args = ap.parse_args(argv)
    with open(args.config) as fh:
        cfg = json.load(fh)
    swa, full, w = layer_ids(cfg)
    window = args.window or w
    ratio = args.swa_full_tokens_ratio

    def make_factory(trace, hash_block_size, decode):
        max_context = max(r.input_length + r.output_length for r in trace) + 2 * E
        inf = common.inf_pool_size(trace, decode)

        def make(pool: str) -> SglangHybridEngine:
            n = inf if common.is_inf(pool) else int(pool)
            return SglangHybridEngine(n, ratio, window, (swa, full), hash_block_size, max_context, len(trace), decode)

        return make

    info = {"name": "sglang", "version": sglang.__version__, "tree": "UnifiedRadixCache(FULL, SWA)",
            "window": window, "swa_full_tokens_ratio": ratio, "chunked_prefill_size": CHUNK,
            "max_prefill_tokens": MAX_PREFILL_TOKENS, "swa_layers": len(swa), "full_layers": len(full),
            "page_size": E}
    return common.main_common(args, make_factory, info)


if __name__ == "__main__":
    t0 = time.perf_counter()
    rc = main()
    print(f"drive_sglang_hybrid: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    sys.exit(rc)
