"""Deployments that cannot run are refused (planning/hardware.py, cli/budget_args.py, planning/budgets.py):
a tensor-parallel size vLLM refuses (exit 2), weights that leave no room for the KV cache and a pool that
cannot hold the longest prompt (exit 1), each before any replay and with nothing written; and no plan ever
prints the word "None"."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from naive import run_stackdist

from stackdist.errors import DeploymentError
from stackdist.planning.geometry import model_spec
from stackdist.planning.hardware import (
    HardwareOptions,
    require_fits,
    require_holds,
    tensor_parallel_problem,
    tensor_parallel_sizes,
)

SMALL = os.path.join(os.path.dirname(__file__), "data", "mooncake_small.jsonl")  # longest prompt: 1,100 tokens


@pytest.mark.parametrize(("model", "allowed"), [
    ("llama-3.1-8b", [1, 2, 4, 8, 16, 32]),       # 32 heads, 8 KV heads
    ("qwen2.5-1.5b", [1, 2, 4, 6, 12]),           # 12 heads, 2 KV heads: 3 splits the heads, not the KV heads
    ("gemma-3-1b", [1, 2, 4]),                    # 4 heads, 1 KV head (replicated)
    ("deepseek-v3", [1, 2, 4, 8, 16, 32, 64, 128]),  # MLA: only the 128 heads must split
])
def test_tensor_parallel_sizes_follow_vllm(model, allowed):
    spec = model_spec(model)
    assert tensor_parallel_sizes(spec, 256) == allowed
    for tp in range(1, 257):  # vLLM's own rule, written out (config/model.py, layers/linear.py)
        heads, kv = spec.num_attention_heads, spec.geometry.num_kv_heads
        ok = heads % tp == 0 and (spec.geometry.is_mla or (tp % kv == 0 if tp >= kv else kv % tp == 0))
        assert (tensor_parallel_problem(spec, tp) is None) == ok, tp


def test_a_config_without_attention_heads_checks_the_kv_heads_only():
    spec = dataclasses.replace(model_spec("qwen2.5-1.5b"), num_attention_heads=None)
    assert tensor_parallel_problem(spec, 3) is not None and tensor_parallel_problem(spec, 4) is None


def test_require_fits_names_the_model_the_gpus_and_what_would_fit():
    with pytest.raises(DeploymentError) as exc:
        require_fits(model_spec("llama-3.1-405b"), HardwareOptions("h100", 4))
    message = str(exc.value)
    assert "llama-3.1-405b" in message and "4 x h100" in message and "189.0 GiB of weights" in message
    assert "16 GPUs per replica" in message and "no room for the KV cache" in message
    assert require_fits(model_spec("llama-3.1-405b"), HardwareOptions("h100", 16))["fits"]


def test_require_holds_refuses_a_pool_below_the_prompt():
    spec, options = model_spec("qwen2.5-1.5b"), HardwareOptions("h100", gpu_memory_utilization=0.0738)
    assert require_holds(spec, options, 300, "a prompt")["kv_tokens"] == 336
    with pytest.raises(DeploymentError, match="336 tokens .* fewer than the 400 tokens of a prompt"):
        require_holds(spec, options, 400, "a prompt")


def _no_traceback(err):
    assert "Traceback" not in err and err.count("\n") <= 1


@pytest.mark.parametrize(("argv", "code", "words"), [
    (["--model", "llama-3.1-405b", "--gpu", "h100", "--gpus-per-replica", "4"], 1,
     ["llama-3.1-405b", "4 x h100", "189.0 GiB of weights", "16 GPUs per replica"]),
    (["--model", "deepseek-v3", "--gpu", "h100", "--gpus-per-replica", "8", "--capacity", "1GiB"], 1,
     ["deepseek-v3", "8 x h100", "no room for the KV cache", "h200"]),
    (["--model", "llama-3.1-8b", "--gpu", "h100", "--gpus-per-replica", "3"], 2,
     ["--gpus-per-replica 3", "32 attention heads", "allowed for this model: 1, 2, 4, 8, 16, 32"]),
    (["--model", "qwen2.5-1.5b", "--gpu", "h100", "--gpus-per-replica", "3"], 2,
     ["--gpus-per-replica 3", "2 KV heads", "allowed for this model: 1, 2, 4, 6, 12"]),
    (["--model", "deepseek-v3", "--gpu", "h200", "--gpus-per-replica", "6"], 2,
     ["--gpus-per-replica 6", "128 attention heads", "1, 2, 4, 8, 16, 32, 64, 128"]),
])
def test_refused_up_front_before_reading_the_trace(capsys, tmp_path, argv, code, words):
    out_json = tmp_path / "plan.json"
    missing = tmp_path / "not-there.jsonl"  # refused at option time: the trace is never opened
    got, out, err = run_stackdist(capsys, "plan", missing, *argv, "--json", out_json)
    assert got == code, err
    assert out == "" and not out_json.exists() and "not-there" not in err
    assert all(w in err for w in words), err
    _no_traceback(err)


def test_a_replica_that_cannot_hold_the_longest_prompt_is_refused(capsys, tmp_path):
    out_json = tmp_path / "plan.json"
    code, out, err = run_stackdist(capsys, "plan", SMALL, "--gpu", "h100", "--gpu-memory-utilization", "0.0738",
                                   "--semantics", "engine,vllm", "--json", out_json,
                                   "--model", "qwen2.5-1.5b")  # named: no default-model note beside the error
    assert code == 1 and out == "" and not out_json.exists()
    assert "336 tokens" in err and "1,100 tokens of the trace's longest prompt (request 2)" in err
    assert "2 GPUs per replica" in err
    _no_traceback(err)


def test_a_capacity_below_the_longest_prompt_gives_no_numbers(capsys):
    code, out, err = run_stackdist(capsys, "plan", SMALL, "--capacity", "100tokens,1000tokens,20000tokens",
                                   "--semantics", "engine,vllm,sglang", "--json", "-")
    assert code == 0, err
    rows = json.loads(out)["budgets"]["rows"]
    for row in rows[:2]:
        assert set(row["semantics"]["engine"]) == {"capacity_blocks", "not_given"}
        assert "cannot hold the trace's longest prompt (1,100 tokens)" in row["semantics"]["engine"]["not_given"]
        assert all(not e["feasible"] for e in row["engine_models"].values())
    assert rows[2]["semantics"]["engine"]["prefix_token_hit_rate"] > 0
    assert all(e["feasible"] for e in rows[2]["engine_models"].values())
    code, out, err = run_stackdist(capsys, "plan", SMALL, "--capacity", "100tokens", "--semantics", "engine,vllm")
    assert code == 0 and "engine      no answer: a pool of 100 tokens cannot hold" in out
    assert "vllm        pool 7: infeasible" in out


PLANS = [
    [],
    ["--semantics", "engine,vllm,sglang"],
    ["--semantics", "vllm", "--gpu-blocks", "100,inf"],
    ["--semantics", "vllm", "--gpu-blocks", "3"],
    ["--semantics", "engine,vllm", "--workers", "2", "--shared-blocks", "0,100", "--gpu-blocks", "100"],
    ["--model", "llama-3.1-8b", "--gpu", "h100", "--semantics", "engine,vllm"],
    ["--model", "gemma-3-27b", "--gpu", "h100", "--gpus", "2", "--capacity", "1GiB", "--semantics", "engine,vllm"],
    ["--model", "deepseek-v3", "--gpu", "b200", "--gpus-per-replica", "8", "--capacity", "100tokens,2GiB"],
    ["--capacity", "100tokens,20000tokens", "--semantics", "engine,per-access,vllm,sglang"],
    ["--capacity", "1GiB", "--ttft-calibration", os.path.join(os.path.dirname(__file__), "..", "data", "ttft.jsonl")],
    ["--semantics", "vllm", "--offload", "lmcache:cpu=1GiB,disk=2GiB", "--gpu-blocks", "80"],
    ["--semantics", "vllm", "--schedule", "scheduler", "--gpu-blocks", "100,inf"],
    ["--model", "gpt-oss-120b", "--gpu", "h100", "--semantics", "engine,vllm", "--capacity", "1GiB", "--every", "1s"],
    ["--model", "llama-3.1-405b", "--gpu", "h100", "--gpus-per-replica", "4"],
    ["--model", "llama-3.1-8b", "--gpu", "h100", "--gpus-per-replica", "3"],
    ["--gpu", "h100", "--gpu-memory-utilization", "0.0738"],
]


@pytest.mark.parametrize("argv", PLANS, ids=lambda a: " ".join(a)[:60] or "default")
def test_no_plan_prints_none(capsys, argv):
    code, out, err = run_stackdist(capsys, "plan", SMALL, *argv)
    assert code in (0, 1, 2)
    assert "None" not in out and "None" not in err, (out + err)
    assert "Traceback" not in err
