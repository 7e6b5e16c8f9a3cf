"""planning/hardware.py: the KV pool per replica against vLLM 0.33.0's own formula, by hand.

The steps, each written out here independently of the module (file:line in the vllm-0.33.0 wheel):
requested = ceil(total x utilization) (vllm/v1/worker/utils.py:724); available = requested - weights
- activation peak - non-torch - CUDA graphs (vllm/v1/worker/gpu_worker.py:753-757,
vllm/utils/mem_utils.py:312-321); page = 16 x heads x (head + head_v) x bytes
(vllm/v1/kv_cache_interface.py:584-594; MLA one head, head_v = 0; others max(1, kv // TP) heads,
vllm/config/model.py:1673-1683); a block = the largest group's pages (vllm/v1/core/kv_cache_planning.py:
574-605, groups :481-557); num_gpu_blocks = available // block (kv_cache_planning.py:681); block 0 is the
null block (vllm/v1/core/block_pool.py:191).
"""

from __future__ import annotations

import json
import math

import pytest
from naive import run_stackdist

from stackdist.errors import UsageError
from stackdist.planning.geometry import model_spec
from stackdist.planning.hardware import (
    HardwareOptions,
    gpu_for,
    gpu_table,
    replica_pool,
    vllm_groups,
)

GIB = 2**30


def vllm_blocks(hbm_mib, util, weights_per_gpu, page_per_layer, layers_per_block, overhead_gib=3.0):
    requested = math.ceil(hbm_mib * 2**20 * util)
    available = int(requested - weights_per_gpu - overhead_gib * GIB)
    return max(0, available) // (page_per_layer * layers_per_block)


def test_qwen3_8b_on_one_h200():
    pool = replica_pool(model_spec("qwen3-8b"), HardwareOptions("h200"))
    blocks = vllm_blocks(143771, 0.9, 8.2e9 * 2, 16 * 8 * (128 + 128) * 2, 36)
    assert pool["num_gpu_blocks"] == blocks == 49191
    assert pool["kv_tokens"] == (blocks - 1) * 16 and pool["kv_gib"] == (blocks - 1) * 16 * 147456 / GIB
    assert pool["fits"] and pool["replicas"] == 1


def test_fp8_kv_doubles_the_blocks_and_utilization_and_weights_are_settable():
    pool = replica_pool(model_spec("qwen3-8b", "fp8"), HardwareOptions("h200", gpu_memory_utilization=0.92, weights_gib=10))
    assert pool["num_gpu_blocks"] == vllm_blocks(143771, 0.92, 10 * GIB, 16 * 8 * 256 * 1, 36)
    assert pool["weights_source"] == "--weights"


def test_tensor_parallel_shards_kv_heads_and_replicates_below_one_head():
    pool = replica_pool(model_spec("llama-3.1-70b"), HardwareOptions("h100", gpus_per_replica=8, gpus=16))
    assert pool["num_gpu_blocks"] == vllm_blocks(81559, 0.9, 70.6e9 * 2 / 8, 16 * 1 * 256 * 2, 80)
    assert pool["replicas"] == 2 and pool["kv_tokens_all_replicas"] == 2 * pool["kv_tokens"]
    moe = replica_pool(model_spec("qwen3-30b-a3b"), HardwareOptions("h100", gpus_per_replica=8))
    assert moe["bytes_per_block_per_gpu"] == 48 * 16 * 1 * 256 * 2  # max(1, 4 // 8) = 1 head per GPU


def test_mla_is_one_head_on_every_gpu():
    pool = replica_pool(model_spec("deepseek-v3"), HardwareOptions("h200", gpus_per_replica=8))
    assert pool["bytes_per_block_per_gpu"] == 61 * 16 * 576 * 2
    assert pool["num_gpu_blocks"] == vllm_blocks(143771, 0.9, 671e9 / 8, 16 * 576 * 2, 61)
    assert pool["kv_gib"] == (pool["num_gpu_blocks"] - 1) * 16 * 70272 / GIB  # replicated, not sharded


def test_hybrid_groups_as_vllm_groups_them():
    assert vllm_groups(model_spec("gemma-3-27b").geometry) == (10, 1, 6)  # 10 full, 52 sliding -> 6 groups of 10
    assert vllm_groups(model_spec("gpt-oss-20b").geometry) == (12, 1, 1)
    assert vllm_groups(model_spec("gemma-3-1b").geometry) == (4, 1, 6)  # 4 full, 22 sliding
    assert vllm_groups(model_spec("qwen3-8b").geometry) == (36, 1, 0)
    pool = replica_pool(model_spec("gemma-3-27b"), HardwareOptions("h200", gpus_per_replica=2))
    blocks = vllm_blocks(143771, 0.9, 27.4e9 * 2 / 2, 16 * 8 * 256 * 2, 10)
    reserve = 6 * (math.ceil(1023 / 16) + 1)  # one request's window in each sliding group
    assert (pool["num_gpu_blocks"], pool["sliding_reserve_blocks"]) == (blocks, reserve)
    assert pool["kv_tokens"] == (blocks - 1 - reserve) * 16


def test_a_mamba_hybrid_block_is_raised_per_gpu(tmp_path, capsys):
    """Qwen3-Next on 4 GPUs: the GDN state (1,097,728 B) splits 4 ways, the 2 KV heads give one per
    GPU (2 x 256 x 2 B = 1,024 B per token and layer), so the attention block is raised to
    64 x cdiv(274,432, 64 x 1,024) = 320 tokens (576 on one GPU); a block holds one group's 12 layers."""
    spec = model_spec("qwen3-next-80b-a3b")
    one = replica_pool(spec, HardwareOptions("h200", gpus_per_replica=2))
    four = replica_pool(spec, HardwareOptions("h200", gpus_per_replica=4))
    assert (one["block_size_tokens"], four["block_size_tokens"]) == (64 * math.ceil(548864 / (64 * 1024)), 320) == (576, 320)
    assert four["bytes_per_block_per_gpu"] == 12 * 320 * 1024
    assert four["num_gpu_blocks"] == vllm_blocks(143771, 0.9, 80e9 * 2 / 4, 320 * 1024, 12)
    assert four["kv_cache_groups"] == {"mamba": 3, "full": 1}
    assert four["kv_tokens"] == (four["num_gpu_blocks"] - 1 - 3 * 2) * 320  # one running request's state blocks kept back
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 1500, "output_length": 1, "hash_ids": [0, 1, 2]})
                             + "\n" for i in range(4)))
    out = tmp_path / "plan.json"
    code, _, err = run_stackdist(capsys, "plan", trace, "--format", "mooncake", "--model", "qwen3-next-80b-a3b", "--gpu",
                                 "h200", "--gpus-per-replica", "4", "--semantics", "vllm", "--schedule", "serial",
                                 "--no-decode", "--json", out)
    assert code == 0, err
    plan = json.loads(out.read_text())
    section = plan["engine_models"]["vllm"]
    assert section["hybrid"]["block_size_tokens"] == 320 and section["pools"][0]["gpu_blocks"] == four["num_gpu_blocks"]
    assert plan["budgets"]["rows"][0]["engine_models"]["vllm"]["pool"] == four["num_gpu_blocks"]


def test_weights_that_do_not_fit():
    pool = replica_pool(model_spec("llama-3.1-405b"), HardwareOptions("a100-40g"))
    assert not pool["fits"] and pool["num_gpu_blocks"] == 0 and pool["kv_tokens"] == 0
    assert pool["available_kv_gib_per_gpu"] < 0


def test_gpu_table_cites_every_number():
    for gpu in gpu_table().values():
        assert set(gpu.source) == {"hbm_mib", "hbm_gbps", "bf16_tflops", "fp8_tflops", "host_link_gbps", "usd_per_gpu_hour"}
        assert gpu.hbm_mib > 0 and gpu.hbm_gbps > 0 and gpu.bf16_tflops > 0 and gpu.usd_per_gpu_hour > 0
        assert gpu.source["usd_per_gpu_hour"].startswith("assumption: ")
    assert gpu_for("H200").hbm_mib == 143771  # data/fixtures/README.md
    with pytest.raises(UsageError, match="--gpu must be one of h200, h100, b200"):
        gpu_for("tpu")


def test_a_config_without_parameters_needs_weights():
    spec = model_spec("qwen3-8b")
    from dataclasses import replace

    with pytest.raises(UsageError, match="--weights"):
        replica_pool(replace(spec, weights_bytes=None), HardwareOptions("h200"))
