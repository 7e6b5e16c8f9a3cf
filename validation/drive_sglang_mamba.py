"""Drive SGLang 0.5.23's own Mamba hybrid (full attention + Mamba/GDN) prefix cache through a trace, serially.

Run with the SGLang venv, e.g.

    $SGLANG_PY validation/drive_sglang_mamba.py --trace T.jsonl --hash-block-size 64 \
        --config tests/data/engines/hybrid/configs/Qwen3-Next-80B-A3B-Instruct.json \
        --schedule serial --pools 40,80,inf --mamba-slots inf --out out.csv [--no-decode] \
        [--chunked-prefill-size 8192] [--mamba-track-interval 256]

Every cache decision is SGLang's. Objects, as the cache builder pairs them for a model with
linear-attention (Mamba / gated delta net) and full-attention layers (``mem_cache/registry.py:149-167``
``create_unified_radix_cache``: FULL + MAMBA tree components) and the way SGLang's own unit-test
fixture builds them (``test/kits/unified_radix_cache/fixtures.py:147-227``): ``HybridReqToTokenPool``
with its ``MambaPool`` (``mamba_size`` slots, small ``Mamba2StateShape``: the cache logic never
reads the state bytes), ``HybridLinearKVPool`` (the config's full-attention layer ids; head 1 x 1)
and ``PagedTokenToKVPoolAllocator`` (page 16, ``N`` pages), ``UnifiedRadixCache`` with
``enable_mamba_extra_buffer`` (strategy ``extra_buffer``, the only one that allows a page > 1,
``components/mamba.py:72-79``); ``mamba_cache_chunk_size = max(64, page)`` (FLA chunk 64,
``arg_groups/overrides.py:1897-1925``; Qwen3-Next's config has no ``mamba_chunk_size``), checkpoint
grid ``lcm(chunk, page)`` (``runtime_context.py:1958-1971``), decode track grid
``lcm(grid, mamba_track_interval)`` (1974-1979). Real ``Req``, ``PrefillAdder`` and ``ScheduleBatch``.

Calls, in the scheduler's order (as ``drive_sglang_hybrid.py``): ``Req.init_next_round_input(tree)``
(match with copy-on-write of the matched state into the request's slot, ``components/mamba.py:196-225``;
sets ``mamba_branching_seqlen``, 163-194), ``PrefillAdder.add_one_req``, ``ScheduleBatch.prepare_for_extend``
(which picks the state to track in this extend: the last checkpoint-grid point of the chunk, or the
branching point, ``managers/schedule_batch.py:3137-3238``), stash / ``checkpoint_kv_cache`` between
chunks, ``checkpoint_kv_cache`` at the prefill end, per decode step ``check_decode_mem`` +
``prepare_for_decode`` (track mask at ``seq_len % track_grid == 0``, 3802-3830) then the result
processor's track update, ``release_kv_cache(req, tree, checkpoint=True)`` at finish.

Followed, not driven (no model forward on CPU): the forward itself (the state bytes; the tracked
*positions* are the scheduler's); the result processor's non-lazy, non-overlap, non-spec track update
(``managers/scheduler_components/batch_result_processor.py:1389-1427, 1524-1577``) is replayed
here line for line (``_result_track_update``) because ``BatchResultProcessor`` needs a whole
scheduler; ``_mamba_can_cache_finished_req`` (1472-1494) returns True without speculative decoding.
Also not driven: retraction, the overlap scheduler, ``max_new_tokens_for_memory``.
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


def _arg(name: str, default: str) -> str:
    for i, a in enumerate(sys.argv):
        if a == name and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return default


import torch

# prepare_for_decode pins the track mask before its device copy (schedule_batch.py:3830); pinning
# needs CUDA. On CPU the copy is to the same device, so pinning is the identity here.
torch.Tensor.pin_memory = lambda self, *a, **k: self  # type: ignore[method-assign]
from sglang.srt.runtime_context import get_context
from sglang.srt.server_args import ServerArgs

E = common.ENGINE_BLOCK
CHUNK = int(_arg("--chunked-prefill-size", "8192"))
TRACK = int(_arg("--mamba-track-interval", "256"))
from sglang.kernels.ops.attention.fla.chunk_delta_h import CHUNK_SIZE as FLA_CHUNK  # 64 (overrides.py:1909-1914)
_SA = ServerArgs(model_path="dummy", device="cpu", page_size=E, chunked_prefill_size=CHUNK,
                 mamba_radix_cache_strategy="extra_buffer", mamba_track_interval=TRACK,
                 disable_overlap_schedule=True)
_SA._mamba_cache_chunk_size = max(FLA_CHUNK, E)  # as the fixture presets it (fixtures.py:137-143)
get_context().set_server_args(_SA)

import sglang
from sglang.srt.environ import envs
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import PrefillAdder
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.runtime_context import get_exec, mamba_checkpoint_grid, mamba_track_grid
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

MODEL_CONFIG = SimpleNamespace(vocab_size=1 << 62, is_encoder_decoder=False, is_multimodal=False,
                               hf_text_config=SimpleNamespace())
MAX_PREFILL_TOKENS = 16384


def layer_ids(config: dict) -> tuple[list[int], list[int]]:
    """(linear-attention layer ids, full-attention layer ids) of a Qwen3-Next-like config."""
    text = config.get("text_config", config)
    n = int(text["num_hidden_layers"])
    kinds = text.get("layer_types")
    if kinds is None:  # Qwen3-Next: every full_attention_interval-th layer is full (qwen3_next.py)
        k = int(text["full_attention_interval"])
        kinds = ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)]
    lin = [i for i, t in enumerate(kinds) if t == "linear_attention"]
    full = [i for i, t in enumerate(kinds) if t == "full_attention"]
    assert lin and full and len(lin) + len(full) == n, kinds
    return lin, full


def ample_slots(trace, decode: bool) -> int:
    """MambaPool slots that can never run out: per request its running slot and two ping-pong
    track slots (``get_mamba_tracking_slots``), plus one tree state per extend chunk (one tracked
    state each) and per decode track point, plus 8."""
    n = 8
    for r in trace:
        n += 3 + -(-r.input_length // CHUNK) + 1 + ((r.input_length + r.output_length) // TRACK if decode else 0)
    return n


def _is_oom(e: RuntimeError) -> bool:
    return str(e).startswith(("Prefill out of memory.", "Decode out of memory.", "Out of memory."))


class SglangMambaEngine:
    def __init__(self, num_pages: int, mamba_slots: int, layers, hash_block_size: int, max_context: int,
                 n_requests: int, decode: bool):
        lin, full = layers
        self.full_tokens = num_pages * E
        with envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
            shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=32, n_groups=1, num_heads=2,
                                            head_dim=16, state_size=4, conv_kernel=4)
            cparams = Mamba2CacheParams(shape=shape, layers=lin)
        self.req_pool = HybridReqToTokenPool(
            size=n_requests + 1, mamba_size=mamba_slots, mamba_spec_state_size=n_requests + 1,
            max_context_len=max_context, device="cpu", enable_memory_saver=False, cache_params=cparams,
            mamba_layer_ids=lin, enable_mamba_extra_buffer=True, enable_overlap_schedule=False)
        kv = HybridLinearKVPool(size=self.full_tokens, dtype=torch.float16, page_size=E, head_num=1, head_dim=1,
                                full_attention_layer_ids=full, device="cpu", enable_memory_saver=False,
                                mamba_pool=self.req_pool.mamba_pool)
        self.alloc = PagedTokenToKVPoolAllocator(size=self.full_tokens, page_size=E, dtype=torch.float16, device="cpu",
                                            kvcache=kv, need_sort=False)
        params = CacheInitParams(disable=False, req_to_token_pool=self.req_pool, token_to_kv_pool_allocator=self.alloc,
                                 page_size=E, chunked_prefill_size=CHUNK, enable_mamba_extra_buffer=True,
                                 tree_components=(ComponentType.FULL, ComponentType.MAMBA))
        self.tree = UnifiedRadixCache(params)
        self.mamba_slots = mamba_slots
        self.hash_block_size = hash_block_size
        self.decode_on = decode
        self.reqs: dict[int, tuple[Req, ScheduleBatch]] = {}
        self.chunks = 0
        self.tracked: list[tuple[int, str, int]] = []  # (request, where, seqlen) of every tracked state

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
        req = adder.can_run_list[0]
        if batch.mamba_prefill_track_mask_cpu and batch.mamba_prefill_track_mask_cpu[0]:
            self.tracked.append((r.index, "extend", int(req.kv.mamba_last_track_seqlen)))
        self.chunks += 1
        return batch

    def arrive(self, r: common.Request) -> int:
        o = r.output_length if self.decode_on else 1
        sampling = SamplingParams(max_new_tokens=o, ignore_eos=True)
        sampling.normalize(None)
        req = Req(str(r.index), "", array("q", common.prompt_tokens(r, self.hash_block_size)), sampling)
        try:
            req.init_next_round_input(self.tree)
        except AssertionError as e:  # "Can not alloc mamba cache" (components/mamba.py:218)
            raise common.Infeasible(r.index, "arrival", 0, f"match: {e}") from None
        hit = req.prefix_len
        adder = self._adder()
        adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        if req not in adder.can_run_list:
            raise common.Infeasible(r.index, "arrival", 0, f"not admitted (prompt {r.input_length}, hit {hit}, "
                                    f"full avail {self.alloc.available_size()})")
        chunked = adder.new_chunked_req is req
        batch = self._extend(r, adder, "first chunk")
        while chunked:
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

    def _result_track_update(self, req: Req, batch: ScheduleBatch, r: common.Request) -> None:
        """batch_result_processor.py:1389-1427 + 1524-1577, non-lazy, no overlap, no spec, batch row 0."""
        if batch.mamba_track_mask_cpu is None or req.kv.mamba_ping_pong_track_buffer is None:
            return
        lookahead = req.decode_batch_idx - batch.mamba_decode_batch_idx_cpu[0]
        assert lookahead == 0, lookahead
        if bool(batch.mamba_track_mask_cpu[0]):
            req.kv.mamba_last_track_idx = batch.mamba_track_buffer_indices[0]
            req.kv.mamba_prev_track_seqlen = req.kv.mamba_last_track_seqlen
            req.kv.mamba_last_track_seqlen = req.kv.kv_committed_len
            assert req.kv.kv_committed_len % mamba_track_grid(self.tree.page_size) == 0
            req.kv.mamba_next_track_idx = self.req_pool.get_mamba_ping_pong_other_idx(req.kv.mamba_last_track_idx)
            self.tracked.append((r.index, "decode", int(req.kv.kv_committed_len)))

    def decode(self, r: common.Request, k: int) -> None:
        req, batch = self.reqs[r.index]
        if not batch.check_decode_mem():
            raise common.Infeasible(r.index, "decode", k, f"full avail {self.alloc.available_size()}")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                batch.prepare_for_decode()
        except RuntimeError as e:
            if not _is_oom(e):
                raise
            raise common.Infeasible(r.index, "decode", k, str(e).splitlines()[0]) from None
        req.output_ids.append(common.output_token(r, k + 1))
        self._result_track_update(req, batch, r)

    def finish(self, r: common.Request) -> None:
        req, _batch = self.reqs.pop(r.index)
        req.update_finish_state()
        assert req.finished()
        release_kv_cache(req, self.tree, checkpoint=True)

    def stats(self) -> dict:
        return {"full_available_tokens_at_end": int(self.alloc.available_size()),
                "full_evictable_tokens_at_end": int(self.tree.full_evictable_size()),
                "mamba_available_slots_at_end": int(self.req_pool.mamba_allocator.available_size()),
                "mamba_slots": self.mamba_slots, "full_pool_tokens": self.full_tokens,
                "tree_core": type(self.tree.tree_core).__name__, "extend_batches": self.chunks,
                "tracked_states": len(self.tracked),
                "tracked_decode_states": sum(1 for t in self.tracked if t[1] == "decode")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(ap)
    ap.add_argument("--config", required=True, help="Hugging Face config.json with linear and full layers")
    ap.add_argument("--mamba-slots", default="inf", help="MambaPool slots (int, or inf: see ample_slots)")
    ap.add_argument("--chunked-prefill-size", type=int, default=8192, help="tokens per prefill chunk (read at import)")
    ap.add_argument("--mamba-track-interval", type=int, default=256, help="decode track interval (read at import)")
    args = ap.parse_args(argv)
    with open(args.config) as fh:
        cfg = json.load(fh)
    lin, full = layer_ids(cfg)
    assert get_exec().mamba.enable_mamba_extra_buffer

    def make_factory(trace, hash_block_size, decode):
        max_context = max(r.input_length + r.output_length for r in trace) + 2 * E
        inf = common.inf_pool_size(trace, decode)
        slots = ample_slots(trace, decode) if common.is_inf(args.mamba_slots) else int(args.mamba_slots)

        def make(pool: str) -> SglangMambaEngine:
            n = inf if common.is_inf(pool) else int(pool)
            return SglangMambaEngine(n, slots, (lin, full), hash_block_size, max_context, len(trace), decode)

        return make

    info = {"name": "sglang", "version": sglang.__version__, "tree": "UnifiedRadixCache(FULL, MAMBA)",
            "mamba_radix_cache_strategy": "extra_buffer", "chunked_prefill_size": CHUNK,
            "max_prefill_tokens": MAX_PREFILL_TOKENS, "mamba_cache_chunk_size": _SA._mamba_cache_chunk_size,
            "mamba_checkpoint_grid": mamba_checkpoint_grid(E), "mamba_track_interval": TRACK,
            "mamba_track_grid": mamba_track_grid(E), "mamba_slots": args.mamba_slots,
            "linear_layers": len(lin), "full_layers": len(full), "page_size": E}
    return common.main_common(args, make_factory, info)


if __name__ == "__main__":
    t0 = time.perf_counter()
    rc = main()
    print(f"drive_sglang_mamba: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    sys.exit(rc)
