"""What the vLLM drivers share (run with the vLLM venv): vLLM's own sha256 block hasher, set up as
EngineCore does (vllm/v1/engine/core.py: get_hash_fn_by_name, init_none_hash,
get_request_block_hasher), and a `vllm.v1.request.Request` for a trace request with the token
ids of SPEC.md."""

from __future__ import annotations

import common
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.request import Request

E = common.ENGINE_BLOCK
# CacheConfig.prefix_caching_hash_algo defaults to "sha256".
HASH_FN = get_hash_fn_by_name("sha256")
init_none_hash(HASH_FN)
BLOCK_HASHER = get_request_block_hasher(E, HASH_FN, 0)


def vllm_request(r: common.Request, hash_block_size: int, decode: bool, ignore_eos: bool = False) -> Request:
    """Request ``r`` as vLLM's Request: its prompt tokens, ``max_tokens`` its output length (1
    without decode), vLLM's block hasher; ``ignore_eos`` when a scheduler samples for it."""
    return Request(
        request_id=str(r.index),
        prompt_token_ids=common.prompt_tokens(r, hash_block_size),
        sampling_params=SamplingParams(max_tokens=r.output_length if decode else 1, ignore_eos=ignore_eos),
        pooling_params=None,
        arrival_time=float(r.index),
        block_hasher=BLOCK_HASHER,
    )
