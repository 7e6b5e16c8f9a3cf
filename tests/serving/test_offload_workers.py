"""Offload tiers on K workers behind a static router (issue 24): each worker its own GPU pool and
its own tiers, serving only its requests, so every request's tier hits equal the model run on
its worker's requests alone; counts (written, evicted, refused stores) add up; the kv-aware
router (joint) is refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from naive import run_stackdist
from traces_random import random_trace

from stackdist.planning.engine_plan import EngineOptions, assign_workers, run_engine_models
from stackdist.planning.offload_plan import run_offload
from stackdist.serving.offload import offload_model, parse_offload
from stackdist.serving.offload.spec import resolve_offload
from stackdist.serving.pages import engine_pages
from stackdist.serving.schedule import Schedule


@pytest.mark.parametrize(("seed", "router", "spec"), [
    (0, "round-robin", "vllm-native:cpu=6blocks/40blocks"),
    (1, "session", "vllm-native:cpu=10blocks,policy=arc"),
    (2, "random", "lmcache:cpu=2chunks/6chunks,disk=8chunks,chunk=64"),
    (3, "round-robin", "lmcache:cpu=12chunks,chunk=64"),
])
def test_each_worker_alone(seed: int, router: str, spec: str) -> None:
    trace = random_trace(seed, n_requests=60, pages_per_block=2)
    options = EngineOptions(models=("vllm",), pools=(40, None), schedule="serial", decode=True, workers=3, router=router)
    runs = run_offload(trace, options, run_engine_models(trace, options), (parse_offload(spec),), 1024, threads=1)
    got = runs[0].result
    model = offload_model(spec.partition(":")[0])
    configs = resolve_offload(parse_offload(spec), 1024, 16)
    workers = assign_workers(trace, options, Schedule.serial(trace.n_requests))
    assert len(np.unique(workers)) > 1
    written = {t: 0 for t in got.written}
    for w in np.unique(workers):
        index = np.flatnonzero(workers == w)
        sub = trace.select(index)
        alone = dataclasses.replace(options, workers="one")
        gpu = run_engine_models(sub, alone)["vllm"]
        want = model.simulate(engine_pages(sub, 16), gpu.pools, gpu.hit_tokens, configs, True)
        assert np.array_equal(got.gpu_hit_tokens[:, index], want.gpu_hit_tokens)
        assert np.array_equal(got.offload_hit_tokens[..., index], want.offload_hit_tokens)
        for t in got.tier_hit_tokens:
            assert np.array_equal(got.tier_hit_tokens[t][..., index], want.tier_hit_tokens[t])
        written = {t: written[t] + want.written[t] for t in written}
    assert all(np.array_equal(got.written[t], written[t]) for t in written)
    assert got.offload_hit_tokens.sum() > 0


def test_plan_says_per_worker_and_refuses_kv_aware(capsys, tmp_path) -> None:
    from pathlib import Path

    trace = Path(__file__).resolve().parents[1] / "data" / "mooncake_small.jsonl"
    code, text, err = run_stackdist(capsys, "plan", trace, "--semantics", "vllm", "--workers", 2, "--offload",
                                    "vllm-native:cpu=64blocks")
    assert code == 0, err
    assert "2 workers, each with its own tiers of these sizes" in text
    code, _, err = run_stackdist(capsys, "plan", trace, "--semantics", "vllm", "--workers", 2, "--router", "kv-aware",
                                 "--offload", "vllm-native:cpu=64blocks")
    assert code == 2 and "--router kv-aware" in err and "Traceback" not in err


def test_each_worker_alone_on_the_real_trace(tmp_path) -> None:
    """The first 300 requests of the bundled conversation trace, 2 workers behind session routing,
    LMCache with a CPU and a disk tier per worker: every request equal to its worker alone."""
    from pathlib import Path

    from stackdist.traces.stream_input import read_as_requests

    root = Path(__file__).resolve().parents[2]
    head = tmp_path / "head.jsonl"
    head.write_text("\n".join((root / "data" / "traces" / "mooncake_conversation_trace.jsonl").read_text()
                              .splitlines()[:300]) + "\n")
    trace = read_as_requests([str(head)], "mooncake", 512, False, True)
    spec = "lmcache:cpu=2000chunks,disk=4000chunks"
    options = EngineOptions(models=("vllm",), pools=(9000,), schedule="serial", decode=True, workers=2, router="session")
    got = run_offload(trace, options, run_engine_models(trace, options), (parse_offload(spec),), 131072, threads=1)[0].result
    model, configs = offload_model("lmcache"), resolve_offload(parse_offload(spec), 131072, 16)
    workers = assign_workers(trace, options, Schedule.serial(trace.n_requests))
    for w in np.unique(workers):
        index = np.flatnonzero(workers == w)
        sub = trace.select(index)
        gpu = run_engine_models(sub, dataclasses.replace(options, workers="one"))["vllm"]
        want = model.simulate(engine_pages(sub, 16), gpu.pools, gpu.hit_tokens, configs, True)
        for t in got.tier_hit_tokens:
            assert np.array_equal(got.tier_hit_tokens[t][..., index], want.tier_hit_tokens[t])
    assert got.tier_hit_tokens["cpu"].sum() > 0 and got.tier_hit_tokens["disk"].sum() > 0 and len(np.unique(workers)) == 2
