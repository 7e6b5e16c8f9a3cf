"""vLLM 0.33.0's hybrid KV cache under its own scheduler (stackdist/serving/hybrid_scheduler.py):
``stackdist plan --model-config CONFIG --schedule scheduler`` equals vLLM's real Scheduler with the
hybrid KVCacheConfig, driven in simulated time (tests/data/engines/hybrid_scheduler/, recorded by
validation/drive_vllm_hybrid_scheduler.py), on every request of every committed run: hit at first
admission, preemptions, queue, first-token and finish times, and the infeasible pools; with one
full-attention group the hybrid path equals the scheduler model (stackdist/serving/scheduler.py) on
seeded random traces; what is not modelled is refused."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist
from traces_random import random_trace

from stackdist.serving.hybrid import GroupSpec
from stackdist.serving.hybrid_scheduler import simulate_hybrid_scheduler
from stackdist.serving.scheduler import SchedulerSettings, simulate_scheduler

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "engines" / "hybrid_scheduler"
RUNS = json.loads((DATA / "manifest.json").read_text())["runs"]


@pytest.mark.parametrize("run", RUNS, ids=[r["name"] for r in RUNS])
def test_plan_equals_the_engine_on_every_request(run: dict, tmp_path: Path, capsys) -> None:
    summary = json.loads((DATA / run["summary"]).read_text())
    s = run["settings"]
    out, js = tmp_path / "per.csv", tmp_path / "plan.json"
    pools = [str(r["pool"]) for r in summary["runs"]]
    code, _, err = run_stackdist(
        capsys, "plan", ROOT / run["trace"], "--format", "mooncake", "--block-size", run["hash_block_size"],
        "--semantics", "vllm", "--model-config", ROOT / run["config"], "--gpu-blocks", ",".join(pools),
        "--schedule", "scheduler", "--decode" if run["decode"] else "--no-decode",
        "--max-num-batched-tokens", s["max_num_batched_tokens"], "--max-num-seqs", s["max_num_seqs"],
        "--step-time", f"{s['step_fixed_s']},{s['step_per_token_s']}", "--per-request", out, "--json", js,
        *(["--async-scheduling"] if s.get("async_scheduling") else []))
    infeasible = {str(r["pool"]): r["failure"]["request"] for r in summary["runs"] if not r["feasible"]}
    assert code == (1 if infeasible else 0), err
    plan = json.loads(js.read_text())["engine_models"]["vllm"]
    failed = {str(r["gpu_blocks"]): r["failed_request"] for r in plan["pools"] if not r["feasible"]}
    assert failed.keys() == infeasible.keys()
    for pool, request in infeasible.items():  # -1: the driver saw 10,000 empty batches in a row (no request named)
        assert request == -1 or failed[pool] == request, pool
    theirs = list(csv.DictReader((DATA / run["csv"]).open()))
    for row in plan["hybrid"]["pools"]:  # the full-attention group's own hit at first admission, summed
        p = str(row["gpu_blocks"])
        assert row["full_attention_hit_tokens"] == sum(int(r[f"full_group_hit_tokens_{p}"]) for r in theirs), p
        assert row["hit_tokens"] == sum(int(r[f"hit_tokens_{p}"]) for r in theirs), p
    ours = list(csv.DictReader(out.open()))
    assert len(ours) == len(theirs) == 40
    feasible = [p for p in pools if p not in infeasible]
    assert feasible
    for mine, engine in zip(ours, theirs):
        for p in feasible:
            for name in ("hit_tokens", "preemptions"):
                assert mine[f"{name}_{p}"] == engine[f"{name}_{p}"], (engine["request"], name, p)
            for name in ("queue_s", "first_token_s", "finish_s"):
                assert abs(float(mine[f"{name}_{p}"]) - float(engine[f"{name}_{p}"])) < 1e-6, (engine["request"], name, p)


def test_the_committed_runs_cover_what_matters() -> None:
    """Every hybrid kind, preemptions, queueing, chunked prefill, hits, decode on and off, an
    infeasible pool."""
    kinds = set()
    stats = []
    for run in RUNS:
        summary = json.loads((DATA / run["summary"]).read_text())
        kinds |= {g["kind"] for g in summary["layout"]["groups"]}
        stats += [r["stats"] for r in summary["runs"] if r["feasible"]]
    assert kinds == {"FullAttentionSpec", "SlidingWindowSpec", "ChunkedLocalAttentionSpec", "MambaSpec"}
    assert sum(s["total_preemptions"] for s in stats) > 50 and sum(s["readmission_hit_tokens"] for s in stats) > 0
    assert any(s["partial_prefill_chunks"] for s in stats) and any(s["max_waiting_after_schedule"] > 5 for s in stats)
    assert {r["decode"] for r in RUNS} == {True, False}
    assert any(not r["feasible"] for run in RUNS for r in json.loads((DATA / run["summary"]).read_text())["runs"])


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("seed", range(10))
def test_one_full_attention_group_is_the_scheduler_model(seed: int, asynchronous: bool) -> None:
    """With only a full-attention group the hybrid path is :mod:`.scheduler` (its pure-Python
    reference) request by request, sync and async: bursty arrivals, pools from the largest request
    up, chunked budgets, max_num_seqs caps, decode or not."""
    rng = np.random.default_rng(seed)
    trace = random_trace(seed, n_requests=40, pages_per_block=1 + seed % 3)
    arrival = np.sort(rng.exponential(0.02 if seed % 2 else 0.2, size=trace.n_requests).cumsum())
    decode = seed % 4 != 3
    written = trace.input_length + (np.maximum(trace.output_length, 1) - 1 if decode else 0)
    peak = int(((written + 15) // 16).max()) + 1
    settings = SchedulerSettings(max_num_seqs=int(rng.choice([2, 8, 1024])),
                                 max_num_batched_tokens=int(rng.choice([16, 64, 8192])), async_scheduling=asynchronous)
    pools = [peak, peak + 3, 2 * peak, 5 * peak, None]
    got = simulate_hybrid_scheduler(trace, [GroupSpec("full", 16)], pools, decode, settings, arrival_s=arrival)
    want = simulate_scheduler(trace, pools, decode, settings, arrival_s=arrival, reference=True)
    for name in ("hit_tokens", "preemptions", "failed_request", "scheduled_tokens"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    for name in ("queue_s", "first_token_s", "finish_s", "busy_s"):
        assert np.array_equal(getattr(got, name), getattr(want, name), equal_nan=True), name
    assert want.preemptions[0].sum() > 0 or settings.max_num_seqs == 2 or not decode


def test_a_pool_too_small_for_a_request_fails_at_it() -> None:
    trace = random_trace(3, n_requests=10)
    need = (trace.input_length + 15) // 16
    big = int(np.argmax(need))
    result = simulate_hybrid_scheduler(trace, [GroupSpec("sliding", 16, window=32), GroupSpec("full", 16)],
                                       [int(need[big]), None], decode=False)
    assert result.failed_request.tolist()[1] == -1 and result.failed_request[0] >= 0
    assert (result.hit_tokens[0] == -1).all() and np.isnan(result.finish_s[0]).all()


CONFIGS = ROOT / "tests" / "data" / "engines" / "hybrid" / "configs"


@pytest.mark.parametrize("extra, message", [
    (["--shared-blocks", "100"], "vLLM instance"),
    (["--decode-reuse"], "vLLM instance"),
])
def test_what_is_not_modelled_is_refused(extra: list[str], message: str, capsys) -> None:
    code, out, err = run_stackdist(capsys, "plan", ROOT / "tests" / "data" / "mooncake_small.jsonl", "--format",
                                   "mooncake", "--model-config", CONFIGS / "gpt-oss-20b.json", "--semantics", "vllm",
                                   "--gpu-blocks", "100000", "--no-decode", "--schedule", "scheduler", *extra)
    assert code == 2 and message in err and "Traceback" not in err and out == ""


@pytest.mark.parametrize("seed", range(12))
def test_requests_one_at_a_time_are_the_serial_hybrid_model(seed: int) -> None:
    """Arrivals far apart (each request finishes before the next arrives) make the scheduler the
    serial schedule: the hits equal :func:`.hybrid.simulate_hybrid`'s serial ones (prefill chunks of
    the budget, the Mamba split) for sliding, chunked and Mamba groups, with no preemption."""
    from stackdist.serving.hybrid import groups_from_layers, simulate_hybrid

    rng = np.random.default_rng(500 + seed)
    trace = random_trace(seed, n_requests=30, pages_per_block=1 + seed % 3, aligned=float(rng.random()))
    kind = ["sliding", "chunked", "mamba"][seed % 3]
    block = 16 if kind != "mamba" else int(rng.choice([16, 32, 64]))
    groups = groups_from_layers([kind] * int(rng.integers(1, 4)) + ["full"], block, window=int(rng.choice([17, 40, 100])),
                                chunk=int(rng.choice([32, 64])), mamba_checkpoints=int(rng.choice([0, 64])))
    decode = bool(seed % 2)
    budget = int(rng.choice([16, 48, 8192])) // block * block or block
    written = trace.input_length + (np.maximum(trace.output_length, 1) - 1 if decode else 0)
    peak = int(((written + block - 1) // block).max())
    pools = [len(groups) * peak + 3, 3 * len(groups) * peak, None]
    serial = simulate_hybrid(trace, groups, pools, "serial", decode, chunk_tokens=budget)
    got = simulate_hybrid_scheduler(trace, groups, pools, decode, SchedulerSettings(max_num_batched_tokens=budget),
                                    arrival_s=np.arange(trace.n_requests) * 1e6)
    assert (serial.failed_request < 0).any() and serial.hit_tokens[-1].sum() > 0
    for i in np.flatnonzero(serial.failed_request < 0):
        assert got.hit_tokens[i].tolist() == serial.hit_tokens[i].tolist(), (i, [g.kind for g in groups])
        assert got.preemptions[i].sum() == 0


def test_workers_merge_keeps_each_requests_group_hit() -> None:
    """Per-worker runs merged (``merge_loads``): every request's hit and its longest single-group
    hit land at its own index, as one run of that worker's requests alone gives them."""
    from stackdist.planning.engine_plan import merge_loads

    trace = random_trace(7, n_requests=20)
    groups = [GroupSpec("sliding", 16, window=17), GroupSpec("full", 16)]
    arrival = np.arange(trace.n_requests) * 0.01
    parts = []
    for w in (0, 1):
        index = np.arange(w, trace.n_requests, 2)
        parts.append((index, simulate_hybrid_scheduler(trace.select(index), groups, [None], False, arrival_s=arrival[index])))
    merged = merge_loads(parts, trace.n_requests, 2)
    assert merged.group_hit_tokens is not None
    for index, alone in parts:
        assert merged.hit_tokens[0, index].tolist() == alone.hit_tokens[0].tolist()
        assert merged.group_hit_tokens[0, index].tolist() == alone.group_hit_tokens[0].tolist()
    assert (merged.group_hit_tokens >= merged.hit_tokens).all() and (merged.group_hit_tokens > merged.hit_tokens).any()
