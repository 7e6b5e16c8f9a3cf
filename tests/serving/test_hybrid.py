"""vLLM 0.33.0's hybrid KV cache (stackdist/serving/hybrid.py): the full-attention reduction to
the vllm model, the model against a direct restatement of the rules (hybrid_reference.py) on
seeded random traces, vLLM's grouping and block size, and the rules' consequences on hand-made
traces (derived from docs/hybrid.md, not from the model)."""

from __future__ import annotations

import numpy as np
import pytest
from hybrid_reference import reference_hits
from traces_random import random_trace

from stackdist.serving.hybrid import (
    GroupSpec,
    groups_from_layers,
    kv_cache_groups,
    mamba_attention_block_size,
    simulate_hybrid,
)
from stackdist.serving.pages import engine_pages
from stackdist.serving.schedule import Schedule
from stackdist.serving.vllm import simulate_vllm
from stackdist.traces import RequestTrace


@pytest.mark.parametrize("seed", range(4))
def test_full_attention_alone_is_the_vllm_model(seed):
    t = random_trace(seed, 25)
    rng = np.random.default_rng(seed)
    pools = [5, 12, None]
    for decode in (False, True):
        for schedule in (Schedule.serial(t.n_requests), Schedule.from_service_model(t)):
            want = simulate_vllm(t, pools, schedule, decode, method="per-size")
            got = simulate_hybrid(t, [GroupSpec("full", 16)], pools, schedule, decode,
                                  chunk_tokens=int(rng.integers(1, 80)))
            assert np.array_equal(got.hit_tokens, want.hit_tokens)
            assert np.array_equal(got.failed_request, want.failed_request)


def _requests(t: RequestTrace) -> list:
    p = engine_pages(t)
    return [(p.key[p.offsets[r]:p.offsets[r + 1]].tolist(), int(p.input_tokens[r]), int(p.output_tokens[r]))
            for r in range(p.n_requests)]


@pytest.mark.parametrize("seed", range(40))
def test_the_model_follows_the_rules(seed):
    rng = np.random.default_rng(1000 + seed)
    t = random_trace(seed, 20, aligned=float(rng.random()))
    kind = ["sliding", "sliding", "chunked"][seed % 3]
    w = int(rng.choice([2, 16, 17, 33, 48, 100]))
    c = int(rng.choice([16, 32, 64]))
    n_other = int(rng.integers(1, 3))
    layers = [GroupSpec(kind, 16, window=w if kind == "sliding" else 0, chunk=c if kind == "chunked" else 0)] * n_other
    layers += [GroupSpec("full", 16)]
    if seed % 4 == 3:  # full attention first in layer order too
        layers = layers[::-1]
    groups = kv_cache_groups(layers)
    chunk = int(rng.choice([16, 24, 40, 8192]))
    decode = bool(seed % 2)
    requests = _requests(t)
    peak = max(-(-(P + (O - 1 if decode else 0)) // 16) for _, P, O in requests)
    pools = [peak + 2, peak * 2 + 3, len(groups) * peak + 5, None]
    got = simulate_hybrid(t, groups, pools, "serial", decode, chunk_tokens=chunk)
    for i, pool in enumerate(pools):
        n = pool if pool is not None else len(groups) * sum(-(-(P + O) // 16) for _, P, O in requests) + 2
        specs = [(g.kind, g.block_size, g.window, g.chunk) for g in groups]
        want, failed = reference_hits(requests, specs, n, chunk, decode)
        assert got.failed_request[i] == failed, (pool, specs)
        if failed < 0:
            assert got.hit_tokens[i].tolist() == want, (pool, specs)


def _mooncake(rows, block=512):
    ids, offsets, tokens, inputs = [], [0], [], []
    for hash_ids, P in rows:
        ids += hash_ids
        offsets.append(len(ids))
        tokens += [block] * (len(hash_ids) - 1) + [P - block * (len(hash_ids) - 1)]
        inputs.append(P)
    n = len(rows)
    return RequestTrace(np.array(ids), np.array(offsets), np.array(tokens), np.zeros(n), np.array(inputs),
                        np.ones(n, np.int64), block_size=block)


GPT_OSS_20B = kv_cache_groups([GroupSpec("sliding", 16, window=128), GroupSpec("full", 16)] * 12)


def test_a_newly_shared_prefix_misses_twice():
    # r1 shares r0's first 512 tokens: full attention finds them, the window before 512 was never
    # hashed (r0 kept only the 8 blocks before its replay boundary 688), so r1 hits 0 and pins the
    # junction at 512; r2 then hits the 512; r3 repeats r2 and hits its replay boundary 896.
    t = _mooncake([([1, 2], 700), ([1, 3], 900), ([1, 4], 900), ([1, 4], 900)])
    got = simulate_hybrid(t, GPT_OSS_20B, [None])
    assert got.hit_tokens[0].tolist() == [0, 0, 512, 896]
    full_only = simulate_vllm(t, [None])
    assert full_only.hit_tokens[0].tolist() == [0, 512, 512, 896]


def test_the_window_is_freed_between_chunks():
    # a 2,000-token prompt in 512-token chunks: the sliding group holds at most the window's 9
    # blocks plus one chunk's 32 beside the 125 full-attention blocks (and the admission gate caps it
    # at cdiv(127 + 512, 16) + 1 = 41): 166 usable blocks do; in one 2,000-token chunk both groups
    # need all 125 blocks at once
    t = _mooncake([([1, 2, 3, 4], 2000)])
    assert simulate_hybrid(t, GPT_OSS_20B, [167], chunk_tokens=512).failed_request.tolist() == [-1]
    assert simulate_hybrid(t, GPT_OSS_20B, [166], chunk_tokens=512).failed_request.tolist() == [0]
    assert simulate_hybrid(t, GPT_OSS_20B, [250], chunk_tokens=8192).failed_request.tolist() == [0]
    assert simulate_hybrid(t, GPT_OSS_20B, [251], chunk_tokens=8192).failed_request.tolist() == [-1]


def test_vllm_grouping_and_block_size():
    kinds = ["sliding" if (i + 1) % 6 else "full" for i in range(62)]  # Gemma 3 27B: 52 + 10
    groups = groups_from_layers(kinds, 16, window=1024)
    assert [g.kind for g in groups].count("sliding") == 6 and [g.kind for g in groups][-1] == "full"
    assert len(groups_from_layers(["sliding"] * 12 + ["full"] * 13, 16, window=128)) == 2  # max below 1.5 x min
    assert len(groups_from_layers(["mamba", "mamba", "mamba", "full"] * 12, 576)) == 4
    assert groups_from_layers(["mamba", "full"], 576)[0].checkpoint_alignment == 576
    # Qwen3-Next: conv (3 x 8192) + state (32 x 128 x 128) in bf16 = 1,097,728 B; 2 x 2 x 256 x 2 B per token
    assert mamba_attention_block_size(3 * 8192 * 2 + 32 * 128 * 128 * 2, 2 * 2 * 256 * 2) == 576
    assert mamba_attention_block_size(1000, 2048, block_size=16, checkpoint_alignment=0) == 16
    # the Triton/FLA GDN prefill exports no checkpoints: a = 16, 16 x cdiv(1,097,728, 16 x 2,048) = 544
    assert mamba_attention_block_size(1097728, 2048, checkpoint_alignment=0) == 544
    assert groups_from_layers(["mamba", "full"], 544, mamba_checkpoints=0)[0].checkpoint_alignment == 0


def test_bad_group_specs_are_refused():
    with pytest.raises(ValueError, match="group kind"):
        GroupSpec("linear", 16)
    with pytest.raises(ValueError, match="multiple of 16"):
        GroupSpec("full", 24)
    with pytest.raises(ValueError, match="window"):
        GroupSpec("sliding", 16)
