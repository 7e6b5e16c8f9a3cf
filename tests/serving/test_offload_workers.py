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
