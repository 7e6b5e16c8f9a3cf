"""A flag that does not apply is a usage error naming it, never silently ignored (issue 26): engine
model flags without an engine model, hardware flags without ``--gpu``, a tensor-parallel size the
model's heads cannot divide (refused as vLLM would, with or without ``--gpu``)."""

from __future__ import annotations

import json

import pytest
from naive import run_stackdist

run = run_stackdist
SMALL = "tests/data/mooncake_small.jsonl"


def refused(capsys, *argv) -> str:
    code, out, err = run(capsys, "plan", SMALL, *argv)
    assert code == 2 and out == "", err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


def vllm_tp_sizes(heads: int, kv_heads: int, upto: int) -> list[int]:
    """vLLM's rule written out: attention heads split evenly; KV heads split (tp <= kv) or are
    replicated a whole number of times (tp > kv)."""
    return [tp for tp in range(1, upto + 1)
            if heads % tp == 0 and (kv_heads % tp == 0 if tp <= kv_heads else tp % kv_heads == 0)]


@pytest.mark.parametrize("gpu", [[], ["--gpu", "h100"]])
@pytest.mark.parametrize("tp", [3, 5, 12, 48])
def test_a_tp_size_the_heads_cannot_divide_is_refused(capsys, gpu, tp):
    line = refused(capsys, "--model", "qwen3-32b", "--gpus-per-replica", str(tp), *gpu)  # 64 heads, 8 KV heads
    allowed = vllm_tp_sizes(64, 8, 1024)
    assert f"--gpus-per-replica {tp}: vLLM cannot shard qwen3-32b over {tp} GPUs" in line
    assert line.endswith(f"allowed for this model: {', '.join(map(str, allowed))}.")


def test_a_tp_size_vllm_takes_still_needs_a_gpu(capsys):
    assert "--gpus-per-replica describes the --gpu deployment: add --gpu NAME" in refused(
        capsys, "--model", "qwen3-32b", "--gpus-per-replica", "8")


@pytest.mark.parametrize("flag, value", [("--gpus", "8"), ("--gpu-memory-utilization", "0.8"), ("--weights", "10GiB"),
                                         ("--activation-gib", "1"), ("--non-torch-gib", "1"), ("--cudagraph-gib", "1"),
                                         ("--prefill-efficiency", "0.3"), ("--load-gbps", "50"),
                                         ("--ttft-overhead-ms", "5"), ("--max-replicas", "4"), ("--ttft-target", "p99=2")])
def test_hardware_flags_need_a_gpu(capsys, flag, value):
    assert f"{flag} describes the --gpu deployment: add --gpu NAME" in refused(capsys, flag, value)


def test_gpu_price_keeps_its_own_message(capsys):
    assert "--gpu-price prices the GPUs of --gpu: give --gpu too." in refused(capsys, "--gpu-price", "3")


@pytest.mark.parametrize("semantics", ["engine", "per-access", "both"])
@pytest.mark.parametrize("argv, flag", [
    (["--gpu-blocks", "100"], "--gpu-blocks"), (["--schedule", "serial"], "--schedule"),
    (["--prefill-tokens-per-s", "5000"], "--prefill-tokens-per-s"), (["--decode-tokens-per-s", "20"], "--decode-tokens-per-s"),
    (["--no-decode"], "--decode/--no-decode"), (["--per-request", "x.csv"], "--per-request"),
])
def test_engine_model_flags_need_an_engine_model(capsys, tmp_path, semantics, argv, flag):
    argv = [str(tmp_path / a) if a.endswith(".csv") else a for a in argv]
    line = refused(capsys, "--semantics", semantics, *argv)
    assert f"{flag} applies to the engine models (--semantics vllm or sglang)" in line
    assert f"it does nothing with --semantics {'engine,per-access' if semantics == 'both' else semantics}." in line
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("semantics", ["engine", "per-access", "both"])
def test_decode_reuse_needs_an_engine_model(capsys, semantics):
    line = refused(capsys, "--semantics", semantics, "--decode-reuse")
    shown = "engine,per-access" if semantics == "both" else semantics
    assert line.endswith(f"--decode-reuse applies to the vllm engine model (--semantics vllm); it does nothing with "
                         f"--semantics {shown}.")


@pytest.mark.parametrize("semantics", ["sglang", "engine,sglang"])
def test_decode_reuse_needs_a_model_that_supports_it(capsys, semantics):
    assert "--decode-reuse is modelled for the vllm model only" in refused(capsys, "--semantics", semantics,
                                                                           "--decode-reuse")


def test_the_same_flags_run_where_they_apply(capsys):
    code, out, err = run(capsys, "plan", SMALL, "--json", "-", "--semantics", "engine", "--workers", "2",
                         "--gpu-blocks", "4")
    assert code == 0, err
    code, out, err = run(capsys, "plan", SMALL, "--json", "-", "--semantics", "vllm", "--decode-reuse",
                         "--schedule", "serial", "--gpu-blocks", "100,inf")
    assert code == 0, err
    assert json.loads(out)["engine_models"]["vllm"]["pools"]


@pytest.mark.parametrize("argv, expected", [
    (["--router", "session"], ("--router session spreads requests over --workers K workers (or the replicas of a --gpu "
                               "deployment); with one worker it does nothing.")),
    (["--router", "prefix-hash", "--semantics", "vllm", "--workers", "recorded"],
     ("--router prefix-hash spreads requests over --workers K workers (or the replicas of a --gpu deployment); with the "
      "recorded workers it does nothing.")),
    (["--workers", "2", "--router-overlap-weight", "2"],
     "--router-overlap-weight sets the kv-aware router; it does nothing with --router round-robin."),
    (["--workers", "2", "--router", "session", "--router-cache-threshold", "0.5"],
     "--router-cache-threshold sets the sglang-cache-aware router; it does nothing with --router session."),
])
def test_router_flags_need_workers_and_their_router(capsys, argv, expected):
    assert refused(capsys, *argv).endswith(expected)


@pytest.mark.parametrize("command", ["curve", "tiers", "plan"])
@pytest.mark.parametrize("flag, value", [("--seed", "7"), ("--sample-seeds", "5")])
def test_sampling_seeds_need_sampling(capsys, tmp_path, command, flag, value):
    (tmp_path / "t.csv").write_text("a\nb\na\n")
    trace = SMALL if command == "plan" else str(tmp_path / "t.csv")
    extra = ["--gpu", "1"] if command == "tiers" else []
    code, out, err = run(capsys, command, trace, *extra, flag, value)
    assert code == 2 and out == ""
    assert err == (f"stackdist {command}: error: {flag} sets SHARDS sampling's hash seeds: add --sample-rate R or "
                   "--sample-size S (without them the answer is exact and takes no seed).\n")
    code, out, err = run(capsys, command, trace, *extra, flag, value, "--sample-rate", "1", "--json" if command ==
                         "plan" else "--output", str(tmp_path / "o.json"))
    assert code == 0, err
