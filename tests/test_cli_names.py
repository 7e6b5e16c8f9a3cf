"""GPU, model and KV dtype names as people write them (issue 26): any case, Hugging Face repo ids,
vLLM's ``--kv-cache-dtype`` names and torch's; the answers equal the canonical names'."""

from __future__ import annotations

import argparse
import json

import pytest
from naive import run_stackdist

from stackdist.cli.names import KV_DTYPE_NAMES, gpu_name, kv_dtype_name, model_name

run = run_stackdist
SMALL = "tests/data/mooncake_small.jsonl"

# vLLM's --kv-cache-dtype choices (CacheDType, vllm/config/cache.py) that are plain element types, with their bytes
VLLM_KV_DTYPES = {"auto": None, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1}
OTHER_SPELLINGS = {"BF16": 2, "fp16": 2, "half": 2, "HALF": 2, "float": 4, "fp32": 4, "float32": 4,
                   "fp8_e4m3fn": 1, "fp8-e4m3": 1, "FP8-E4M3FN": 1, "torch.float8_e4m3fn": 1, "float8_e5m2": 1, "e4m3": 1}


@pytest.mark.parametrize("text, name", [("H200", "h200"), ("h100", "h100"), ("A100-80G", "a100-80g"), (" L40S ", "l40s")])
def test_gpu_names_in_any_case(text, name):
    assert gpu_name(text) == name


@pytest.mark.parametrize("text, name", [("QWEN3-32B", "qwen3-32b"), ("Qwen/Qwen3-32B", "qwen3-32b"),
                                        ("meta-llama/LLAMA-3.1-8B-instruct", "llama-3.1-8b"), ("DeepSeek-V3", "deepseek-v3")])
def test_model_names_in_any_case_and_by_repo_id(text, name):
    assert model_name(text) == name


@pytest.mark.parametrize("text, size", [*VLLM_KV_DTYPES.items(), *OTHER_SPELLINGS.items()])
def test_kv_dtype_spellings_give_the_element_size(capsys, text, size):
    from stackdist.planning.geometry import model_spec

    canonical = kv_dtype_name(text)
    spec = model_spec("qwen3-8b", canonical)
    assert spec.geometry.dtype_bytes == (2 if size is None else size)  # qwen3-8b's own dtype is bfloat16


@pytest.mark.parametrize("text, reason", [("fp8_ds_mla", "656 bytes per token per layer"), ("int8", "not modelled"),
                                          ("fp4", "unknown KV dtype 'fp4'")])
def test_kv_dtypes_not_modelled_are_refused_with_the_reason(text, reason):
    with pytest.raises(argparse.ArgumentTypeError, match=reason):
        kv_dtype_name(text)


def plan_json(capsys, *argv):
    code, out, err = run(capsys, "plan", SMALL, "--json", "-", "--semantics", "engine", *argv)
    assert code == 0, err
    report = json.loads(out)
    report.pop("tool", None)
    return report


def test_plan_answers_equal_for_any_spelling(capsys):
    canonical = plan_json(capsys, "--model", "qwen3-8b", "--gpu", "h200", "--kv-dtype", "fp8_e4m3")
    spelled = plan_json(capsys, "--model", "Qwen/QWEN3-8B", "--gpu", "H200", "--kv-dtype", "FP8-E4M3FN")
    assert canonical == spelled
    per_element = 36 * 2 * 8 * 128  # Qwen3-8B: layers x (K, V) x KV heads x head_dim (its config.json)
    assert canonical["model"]["kv_bytes_per_token"] == per_element * 1
    other = plan_json(capsys, "--model", "qwen3-8b", "--gpu", "h200", "--kv-dtype", "half")
    assert other["model"]["kv_bytes_per_token"] == per_element * 2


def test_every_name_is_one_the_planner_takes():
    from stackdist.planning.geometry import KV_DTYPES

    assert set(KV_DTYPE_NAMES) <= set(KV_DTYPES)
