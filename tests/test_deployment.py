"""The deployment answer (issue 24): what the named deployment delivers and the cheapest one per
target, every point an exact simulation; checked against the engine model run directly, the
offload model run directly, and the scheduler's load floor on a constructed overload."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist

from stackdist.planning.deployment import DeploymentSpec, deployment_report
from stackdist.planning.engine_plan import EngineOptions, run_engine_models
from stackdist.planning.offload_plan import counted_hits
from stackdist.planning.prices import DeploymentPrices, deployment_cost
from stackdist.serving.offload import TierConfig, offload_model, parse_offload
from stackdist.serving.pages import engine_pages
from stackdist.serving.scheduler import SchedulerSettings
from stackdist.traces import RequestTrace

sys.path.insert(0, str(Path(__file__).resolve().parent / "serving"))
from traces_random import random_trace

PRICES = DeploymentPrices("h200", 4.0, "test", {"dram": 3.5, "ssd": 0.08})


def _cost(gpus: int, cpu_gib: float, disk_gib: float, hit_rate: float | None) -> dict:
    return deployment_cost(gpus, PRICES, cpu_gib, disk_gib, 1e6, "", hit_rate)


def test_cheapest_tier_reaches_the_target_and_delivers_what_the_models_give() -> None:
    trace = random_trace(5, n_requests=80, pages_per_block=2)
    options = EngineOptions(models=("vllm",), schedule="serial", decode=True)
    spec = DeploymentSpec("vllm", 2, 1, 30, "round-robin", parse_offload("vllm-native:cpu=20blocks"), max_replicas=3)
    counted = np.ones(trace.n_requests, bool)
    report = deployment_report(trace, options, spec, counted, 1024, _cost, (0.9,))
    total = trace.input_length.sum()
    # what it delivers: the engine model on 2 replicas behind round-robin, then each replica's own CPU tier
    gpu = run_engine_models(trace, EngineOptions(models=("vllm",), pools=(30,), schedule="serial", decode=True,
                                                 workers=2, router="round-robin", compare_routers=False))["vllm"]
    assert report["delivers"]["gpu_token_hit_rate"] == pytest.approx(gpu.hit_tokens[0].sum() / total)
    ceiling = run_engine_models(trace, EngineOptions(models=("vllm",), pools=(None,), schedule="serial",
                                                     decode=True))["vllm"].hit_tokens[0].sum()
    assert report["ceiling_prefix_token_hit_rate"] == pytest.approx(ceiling / total)
    answer = report["targets"][0]
    best = answer["cheapest"]
    assert best is not None and best["prefix_token_hit_rate"] >= 0.9 * ceiling / total - 1e-12
    assert best["cost"]["usd_per_hour"] == min(c["cost"]["usd_per_hour"] for c in answer["candidates"])
    # the answer: one replica with a CPU tier; its size simulated directly reaches the target
    assert best["replicas"] == 1 and best["tiers_per_replica"]["cpu"]["blocks"] > 20
    size = best["tiers_per_replica"]["cpu"]["blocks"]
    one = run_engine_models(trace, EngineOptions(models=("vllm",), pools=(30,), schedule="serial", decode=True))["vllm"]
    model, pages = offload_model("vllm-native"), engine_pages(trace, 16)
    r = model.simulate(pages, [30], one.hit_tokens, [TierConfig((("cpu", size),), (("policy", "lru"),))], True)
    hits, _ = counted_hits(model, r, pages, 0, 0, counted)
    assert hits == round(best["prefix_token_hit_rate"] * total) and hits >= 0.9 * ceiling


def test_load_sets_the_fewest_replicas() -> None:
    """One 32-token request a second, each step 1.5 s: one replica serves 2/3 of the arrival rate,
    two keep up; the search starts at two."""
    n = 60
    trace = RequestTrace.from_blocks([[i, 1000 + i] for i in range(n)], block_size=16)
    options = EngineOptions(models=("vllm",), schedule="serial", decode=False)
    load = SchedulerSettings(max_num_seqs=1, step_fixed_s=1.5, step_per_token_s=0.0, step_time_detail="test")
    spec = DeploymentSpec("vllm", 1, 1, 50, "round-robin", None, max_replicas=4, scheduler=load)
    report = deployment_report(trace, options, spec, np.ones(n, bool), 1024, _cost, (0.5,))
    assert report["load"]["fewest_replicas_keeping_up"] == 2
    assert [r["keeps_up"] for r in report["load"]["runs"]] == [False, True]
    assert not report["delivers"]["under_load"]["keeps_up"]
    assert all(c["replicas"] >= 2 for t in report["targets"] for c in t["candidates"])


def test_plan_prints_the_deployment_first(capsys, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    trace = Path(__file__).resolve().parent / "data" / "mooncake_small.jsonl"
    code, text, err = run_stackdist(capsys, "plan", trace, "--gpu", "h200", "--model", "qwen3-8b", "--gpus", 2,
                                    "--json", out)
    assert code == 0, err
    section = json.loads(out.read_text())["deployment"]
    assert section["replicas"] == 2 and section["delivers"]["gpus"] == 2
    assert section["delivers"]["cost"]["usd_per_hour"] == pytest.approx(8.0)
    first = next(i for i, line in enumerate(text.splitlines()) if line.startswith("=="))
    assert text.splitlines()[first].startswith("== deployment: 2 replica(s)")
    assert "the cheapest deployment per target" in text and "None" not in text


def test_ttft_targets_take_the_fewest_replicas_that_meet_them() -> None:
    """One request a second, 1.5 s steps: one replica does not keep up; two do, each request then
    waits for nothing but its own step (TTFT 1.5 s); p99 <= 1 s is unreachable."""
    n = 60
    trace = RequestTrace.from_blocks([[i, 1000 + i] for i in range(n)], block_size=16)
    load = SchedulerSettings(max_num_seqs=1, step_fixed_s=1.5, step_per_token_s=0.0, step_time_detail="test")
    spec = DeploymentSpec("vllm", 1, 1, 50, "round-robin", None, max_replicas=3, scheduler=load,
                          ttft_targets=(("p99", 2.0), ("p50", 1.0)))
    report = deployment_report(trace, EngineOptions(models=("vllm",), schedule="serial", decode=False), spec,
                               np.ones(n, bool), 1024, _cost, ())
    met, unmet = report["ttft_targets"]
    assert met["cheapest"]["replicas"] == 2 and met["cheapest"]["ttft_s"]["p99"] == pytest.approx(1.5)
    assert met["cheapest"]["cost"]["usd_per_hour"] == pytest.approx(8.0)
    assert unmet["cheapest"] is None and "at most 1 s" in unmet["unreachable"]


def test_ttft_target_flag_is_checked(capsys) -> None:
    trace = Path(__file__).resolve().parent / "data" / "mooncake_small.jsonl"
    code, _, err = run_stackdist(capsys, "plan", trace, "--gpu", "h200", "--ttft-target", "p95=2")
    assert code == 2 and "--ttft-target must be p50, p90 or p99" in err and "Traceback" not in err


def test_a_disk_behind_the_cpu_tier_is_searched_and_each_candidate_is_what_the_model_gives() -> None:
    """LMCache (CPU + local disk): the CPU alone, then the CPU halved with the disk that makes up
    the difference; each candidate simulated directly reaches the target, the cheapest wins, and
    SSD being cheaper than DRAM a smaller CPU with a disk is cheaper here."""
    trace = random_trace(11, n_requests=120, pages_per_block=4)
    options = EngineOptions(models=("vllm",), schedule="serial", decode=False)
    spec = DeploymentSpec("vllm", 1, 1, 40, "round-robin", parse_offload("lmcache:cpu=4chunks,chunk=16"),
                          max_replicas=1)
    counted = np.ones(trace.n_requests, bool)
    report = deployment_report(trace, options, spec, counted, 1 << 20, _cost, (0.9,))
    answer = report["targets"][0]
    assert "second tier" in report["search"]
    one = run_engine_models(trace, EngineOptions(models=("vllm",), pools=(40,), schedule="serial",
                                                 decode=False))["vllm"]
    model, pages = offload_model("lmcache"), engine_pages(trace, 16)
    ceiling = round(report["ceiling_prefix_token_hit_rate"] * trace.input_length.sum())
    with_disk = [c for c in answer["candidates"] if c["tiers_per_replica"]["disk"]["chunks"]]
    assert with_disk, answer["candidates"]
    for c in answer["candidates"]:
        sizes = tuple((t, c["tiers_per_replica"][t]["chunks"]) for t in ("cpu", "disk"))
        r = model.simulate(pages, [40], one.hit_tokens, [TierConfig(sizes, (("chunk", "16"),))], False)
        hits, _ = counted_hits(model, r, pages, 0, 0, counted)
        assert hits == round(c["prefix_token_hit_rate"] * trace.input_length.sum()) >= 0.9 * ceiling
    cpu_only = answer["candidates"][0]
    assert cpu_only["tiers_per_replica"]["disk"]["chunks"] == 0
    assert all(c["tiers_per_replica"]["cpu"]["chunks"] < cpu_only["tiers_per_replica"]["cpu"]["chunks"]
               for c in with_disk)
    assert answer["cheapest"]["cost"]["usd_per_hour"] == min(c["cost"]["usd_per_hour"] for c in answer["candidates"])


def test_a_router_that_reads_the_pools_gives_the_hits_and_each_replica_its_own_tier() -> None:
    """kv-aware: the GPU hits are the joint routed run's; each replica's CPU tier runs on the
    requests the router sent it (checked against the offload model run per replica directly)."""
    trace = random_trace(3, n_requests=90, pages_per_block=2)
    options = EngineOptions(models=("vllm",), schedule="serial", decode=True)
    spec = DeploymentSpec("vllm", 2, 1, 30, "kv-aware", parse_offload("vllm-native:cpu=12blocks"), max_replicas=2)
    counted = np.ones(trace.n_requests, bool)
    report = deployment_report(trace, options, spec, counted, 1024, _cost, ())
    routed = run_engine_models(trace, EngineOptions(models=("vllm",), pools=(30,), schedule="serial", decode=True,
                                                    workers=2, router="kv-aware", compare_routers=False))["vllm"]
    total = trace.input_length.sum()
    assert report["delivers"]["gpu_token_hit_rate"] == pytest.approx(routed.hit_tokens[0].sum() / total)
    worker = routed.cluster.worker[0]
    model = offload_model("vllm-native")
    hits = 0
    for w in np.unique(worker):
        sub = trace.select(np.flatnonzero(worker == w))
        sub_pages = engine_pages(sub, 16)
        r = model.simulate(sub_pages, [30], routed.hit_tokens[:, worker == w],
                           [TierConfig((("cpu", 12),), (("policy", "lru"),))], True)
        hits += counted_hits(model, r, sub_pages, 0, 0, np.ones(sub.n_requests, bool))[0]
    assert report["delivers"]["prefix_token_hit_rate"] == pytest.approx(hits / total)


def test_plan_keeps_a_joint_router_for_the_hits_and_says_what_the_load_runs_use(capsys, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    trace = Path(__file__).resolve().parent / "data" / "mooncake_small.jsonl"
    code, text, err = run_stackdist(capsys, "plan", trace, "--gpu", "h200", "--model", "qwen3-8b", "--gpus", 2,
                                    "--semantics", "vllm", "--router", "kv-aware", "--json", out)
    assert code == 0, err
    section = json.loads(out.read_text())["deployment"]
    assert section["router"] == "kv-aware" and "behind a kv-aware router" in text
    assert any("the load runs use session routing" in n for n in section["notes"])


def test_plan_says_to_raise_max_replicas_when_none_keeps_up(capsys, tmp_path: Path) -> None:
    """60 requests a second apart, each step 1.5 s: one replica cannot keep up."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 1000 * i, "input_length": 512, "output_length": 1,
                                         "hash_ids": [i]}) + "\n" for i in range(60)))
    code, _, err = run_stackdist(capsys, "plan", trace, "--gpu", "h200", "--model", "qwen3-8b", "--gpus", 1,
                                 "--max-replicas", 1, "--semantics", "vllm", "--schedule", "scheduler",
                                 "--step-time", "1.5,0", "--max-num-seqs", 1)
    assert code == 0, err
    assert "raise --max-replicas" in err


def test_a_router_that_collapses_onto_one_replica_is_flagged() -> None:
    """Every request shares its first page: under the serial schedule of the hit runs nothing is
    running at an arrival, so kv-aware sends everything to the replica holding the prefix."""
    trace = RequestTrace.from_blocks([[7, 100 + i] for i in range(40)], block_size=16)
    spec = DeploymentSpec("vllm", 2, 1, 200, "kv-aware", None, max_replicas=2)
    report = deployment_report(trace, EngineOptions(models=("vllm",), schedule="serial", decode=False), spec,
                               np.ones(40, bool), 1024, _cost, ())
    # which replica holds it is Dynamo's random tie at the first request (seed 0's draw 0.637 of 2: worker 1)
    assert any("sent 100.0% of the requests to worker 1" in n for n in report["notes"])
    round_robin = deployment_report(trace, EngineOptions(models=("vllm",), schedule="serial", decode=False),
                                    DeploymentSpec("vllm", 2, 1, 200, "round-robin", None, max_replicas=2),
                                    np.ones(40, bool), 1024, _cost, ())
    assert round_robin["notes"] == []


def test_a_trace_the_engine_models_cannot_replay_gets_no_deployment_and_says_why(capsys, tmp_path: Path) -> None:
    """An LMCache lookup log hashes full chunks only: its blocks do not cover the prompts."""
    log = tmp_path / "lookup.jsonl"
    log.write_text("".join(json.dumps({"timestamp": float(i), "request_id": f"r{i}", "chunk_size": 256,
                                       "seq_len": 256 * 2 + 100, "chunk_hashes": ["0x1", f"0x2{i}"]}) + "\n"
                           for i in range(5)))
    out = tmp_path / "plan.json"
    code, text, err = run_stackdist(capsys, "plan", log, "--format", "lmcache", "--gpu", "h200", "--model", "qwen3-8b",
                                    "--json", out)
    assert code == 0, err
    assert "cover the whole prompt" in json.loads(out.read_text())["deployment"]["not_answered"]


def test_a_target_the_gpus_reach_alone_is_priced_without_any_tier() -> None:
    """The specification names a disk, but the GPU pools reach the target: no tier is bought."""
    trace = random_trace(11, n_requests=120, pages_per_block=4)
    spec = DeploymentSpec("vllm", 1, 1, 400, "round-robin", parse_offload("lmcache:cpu=4chunks,disk=100chunks,chunk=16"),
                          max_replicas=1)
    report = deployment_report(trace, EngineOptions(models=("vllm",), schedule="serial", decode=False), spec,
                               np.ones(trace.n_requests, bool), 1 << 20, _cost, (0.1,))
    best = report["targets"][0]["cheapest"]
    assert all(t["chunks"] == 0 for t in best["tiers_per_replica"].values()), best
    assert best["cost"]["usd_per_hour"] == pytest.approx(_cost(1, 0.0, 0.0, None)["usd_per_hour"])
