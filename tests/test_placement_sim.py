"""kvlab.placement: calibration, latency and link model, workloads, cost metrics, Mooncake replay."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kvlab.placement import (
    LatencyModel,
    SimConfig,
    Workload,
    agent,
    capacity_ratios,
    chat,
    composition_sweep,
    cost_per_session_usd,
    derive_from_fixtures,
    docqa,
    from_mooncake,
    kv_bytes_per_token,
    max_sessions_meeting_slo,
    pareto_frontier,
    sessions_per_gpu,
    simulate,
    slo_capacity,
    tier_cost_usd,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "data" / "fixtures"
CONVERSATION = ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"
BLOCK = 16 * 28672  # bytes of one 16-token block


def make_workload(requests: list[list[int]], tokens: list[int] | None = None, arrivals: list[float] | None = None,
                  out: int = 4, block_tokens: int = 16) -> Workload:
    n = len(requests)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in requests])]).astype(np.int64)
    blocks = np.array([b for r in requests for b in r], dtype=np.int64)
    tokens = tokens or [len(r) * block_tokens for r in requests]
    arrivals = arrivals if arrivals is not None else [10.0 * i for i in range(n)]
    return Workload("hand", blocks, offsets, np.array(tokens, np.int64), np.full(n, out, np.int64),
                    np.array(arrivals, float), np.arange(n, dtype=np.int64), block_tokens)


# ------------------------------------------------------------------ calibration
def test_defaults_are_the_values_derived_from_the_fixtures() -> None:
    derived = derive_from_fixtures(FIXTURES)
    hardware, hf = LatencyModel(), LatencyModel.hf_eager()
    for name, value in derived.items():
        default = getattr(hf if name in ("host_floor_ms", "launch_overhead_ms", "cached_prefix_penalty_ms") else hardware, name)
        assert default == pytest.approx(value, rel=2e-4), name
    assert hardware.d2h_gbps == hardware.h2d_gbps  # the labelled assumption


def test_prefill_fit_reproduces_the_measured_miss_gpu_work() -> None:
    import json

    rows = json.loads((FIXTURES / "gpu_busy_h200.json").read_text())["rows"]
    model = LatencyModel()
    for r in rows:
        measured = r["miss"]["profiler_gpu_ms"]
        assert model.prefill_ms(r["doc_tokens"] + r["question_tokens"]) == pytest.approx(measured, rel=0.035)


def test_kv_bytes_per_token_agrees_with_the_planner_geometry_and_the_fixture() -> None:
    from stackdist.planning.geometry import DEFAULT_MODEL

    assert kv_bytes_per_token() == DEFAULT_MODEL.kv_bytes_per_token == 28672


def test_latency_model_hand_values_and_errors() -> None:
    m = LatencyModel(prefill_fixed_ms=1.0, prefill_ms_per_token=0.01, prefill_ms_per_token_pair=0.0,
                     h2d_gbps=1.0, h2d_latency_ms=0.5)
    assert m.prefill_ms(100) == pytest.approx(2.0)
    assert m.transfer_ms("h2d", 1e6) == pytest.approx(1.5)  # 1 MB at 1 GB/s = 1 ms, + 0.5 ms
    assert m.transfer_ms("h2d", 0) == 0.0
    hf = LatencyModel.hf_eager()
    assert hf.prefill_ms(32, 4864) == pytest.approx(21.43)  # small GPU work: on the host floor
    with pytest.raises(ValueError, match="link must be one of h2d, d2h, nvme_read, nvme_write; got 'usb'."):
        m.transfer_ms("usb", 1)
    with pytest.raises(ValueError, match="h2d_gbps must be a finite non-negative number, got -1."):
        LatencyModel(h2d_gbps=-1)
    with pytest.raises(ValueError, match="nvme_read_gbps must be positive, got 0."):
        LatencyModel(nvme_read_gbps=0)


def test_missing_fixture_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="gpu_busy_h200.json: calibration fixture not found."):
        derive_from_fixtures(tmp_path)


# ------------------------------------------------------------------ TTFT / TPOT / links, hand-derived
SIMPLE = LatencyModel(prefill_fixed_ms=1.0, prefill_ms_per_token=0.01, prefill_ms_per_token_pair=0.0,
                      h2d_gbps=1.0, h2d_latency_ms=0.0, d2h_gbps=1.0, d2h_latency_ms=0.0,
                      nvme_read_gbps=0.5, nvme_write_gbps=0.5, nvme_latency_ms=0.0,
                      decode_fixed_ms=2.0, decode_ms_per_context_token=0.0)


def test_ttft_of_miss_dram_hit_and_ssd_hit() -> None:
    # GPU holds 1 block, DRAM 1, SSD 4. Requests: [1], [2], [3], [1]: 1 ends in the SSD.
    w = make_workload([[1], [2], [3], [1], [3]], tokens=[16, 16, 16, 16, 16])
    r = simulate(w, SimConfig(capacities=(1, 1, 4), latency=SIMPLE, record_tiers=True))
    assert r.tiers.tolist() == [-1, -1, -1, 2, 1]
    miss = 1.0 + 0.01 * 16
    hit = 1.0 + 0.01 * 1  # one token is always prefilled
    assert r.ttft_ms[:3] == pytest.approx([miss] * 3)
    ssd = BLOCK / 0.5e6 + BLOCK / 1e6  # NVMe then PCIe, store and forward
    assert r.ttft_ms[3] == pytest.approx(ssd + hit)
    assert r.ttft_ms[4] == pytest.approx(BLOCK / 1e6 + hit)
    assert r.tpot_ms == pytest.approx([2.0] * 5) and r.stall_ms.sum() == 0


def test_the_gpu_is_one_fifo_server_for_prefills() -> None:
    w = make_workload([[1], [2], [3]], tokens=[16, 16, 16], arrivals=[0.0, 0.0, 0.0])
    miss = 1.0 + 0.01 * 16
    r = simulate(w, SimConfig(capacities=(4, 0, 0), latency=SIMPLE))
    assert r.ttft_ms == pytest.approx([miss, 2 * miss, 3 * miss])
    assert r.gpu_wait_ms == pytest.approx([0, miss, 2 * miss])
    r = simulate(w, SimConfig(capacities=(4, 0, 0), latency=SIMPLE, gpu_queue=False))
    assert r.ttft_ms == pytest.approx([miss] * 3) and r.gpu_wait_ms.sum() == 0


def test_prefix_break_recomputes_the_rest() -> None:
    w = make_workload([[1, 2, 3], [9, 2, 3]], tokens=[48, 48])
    r = simulate(w, SimConfig(capacities=(8, 0, 0), latency=SIMPLE)).to_dict()
    assert r["hits"]["hbm"] == 0 and r["stale_hits"] == 2 and r["misses"] == 6
    r = simulate(w, SimConfig(capacities=(8, 0, 0), latency=SIMPLE, mode="block")).to_dict()
    assert r["hits"]["hbm"] == 2 and r["misses"] == 4


def test_context_larger_than_the_gpu_stalls_decode() -> None:
    w = make_workload([[1, 2, 3]], tokens=[48])
    r = simulate(w, SimConfig(capacities=(1, 8, 0), latency=SIMPLE))
    assert r.stall_ms[0] == pytest.approx(2 * BLOCK / 1e6)
    assert r.to_dict()["stall_share"] == pytest.approx(r.stall_ms[0] / (2.0 + r.stall_ms[0]))


def test_oracle_prefetch_on_a_busy_link_delays_demand() -> None:
    # Request 0 fills DRAM with [10..13] (GPU holds 1). Request 1 (block 20) arrives 1 us later;
    # the oracle prefetches request 2's blocks first, so request 1's own fetch waits behind them.
    setup = [[10, 11, 12, 13], [20], [10, 11, 12], [20]]
    w = make_workload(setup, arrivals=[0.0, 100.0, 100.000001, 100.000002])
    cfg = SimConfig(capacities=(3, 16, 0), latency=SIMPLE, prefetch="oracle", lookahead=1)
    base = simulate(w, replace(cfg, prefetch="none"))
    pre = simulate(w, cfg)
    assert pre.to_dict()["migration_bytes"]["pcie_up_prefetch"] > 0
    assert pre.link_wait_ms.sum() > base.link_wait_ms.sum()


def test_prefetch_on_an_idle_link_hides_the_fetch() -> None:
    w = make_workload([[1, 2], [3, 4], [1, 2]], arrivals=[0.0, 10.0, 20.0])
    base = simulate(w, SimConfig(capacities=(2, 8, 0), latency=SIMPLE))
    pre = simulate(w, SimConfig(capacities=(2, 8, 0), latency=SIMPLE, prefetch="oracle", lookahead=1))
    assert base.ttft_ms[2] > pre.ttft_ms[2]
    assert pre.to_dict()["hits"]["hbm"] == 2 and base.to_dict()["hits"]["dram"] == 2


def test_causal_predictor_prefetches_the_soonest_session() -> None:
    from kvlab.placement.simulator import SessionPredictor

    p = SessionPredictor()
    p.observe(1, 0.0, [1, 2])
    p.observe(2, 1.0, [5])
    p.observe(1, 10.0, [1, 2, 3])  # session 1: gap 10 -> next at 20
    p.observe(2, 4.0, [5, 6])  # session 2: gap 3 -> next at 7
    assert p.predict(1) == [[5, 6]] and p.predict(2) == [[5, 6], [1, 2, 3]]


def test_a_policy_instance_in_the_config_starts_fresh_every_run() -> None:
    from kvlab.placement import ReuseFrequency

    w = chat(n_sessions=2, accesses_per_session=150, seed=0)
    config = SimConfig(capacities=(8, 16, 32), policy=ReuseFrequency())
    first, second = simulate(w, config).to_dict(), simulate(w, config).to_dict()
    assert first["hits"] == second["hits"] and first["migration_bytes"] == second["migration_bytes"]
    assert config.policy.count == {}  # the caller's instance is untouched


def test_config_errors_are_named() -> None:
    with pytest.raises(ValueError, match="mode must be one of prefix, block; got 'x'."):
        SimConfig(mode="x")
    with pytest.raises(ValueError, match="prefetch must be one of none, causal, oracle; got 'x'."):
        SimConfig(prefetch="x")
    with pytest.raises(ValueError, match="lookahead must be a positive int, got 0."):
        SimConfig(lookahead=0)
    with pytest.raises(ValueError, match="capacities must name 1 to 3 tiers"):
        SimConfig(capacities=(1, 2, 3, 4))


# ------------------------------------------------------------------ workloads
@pytest.mark.parametrize("make", [
    lambda s: chat(n_sessions=3, accesses_per_session=400, seed=s),
    lambda s: agent(n_agents=2, steps_per_agent=30, seed=s),
    lambda s: docqa(n_docs=5, n_questions=40, doc_tokens=700, seed=s),
])
def test_generators_are_seeded_and_prefix_chained(make) -> None:  # type: ignore[no-untyped-def]
    a, b, c = make(1), make(1), make(2)
    assert a == b and a != c
    predecessor: dict[int, int] = {}
    position: dict[int, int] = {}
    for r in range(a.n_requests):
        ids = a.request_blocks(r)
        assert len(set(ids)) == len(ids)
        assert len(ids) == math.ceil(a.input_tokens[r] / a.block_tokens)
        for i, block in enumerate(ids):
            assert position.setdefault(block, i) == i  # no id at two positions
            assert predecessor.setdefault(block, ids[i - 1] if i else -1) == (ids[i - 1] if i else -1)
    assert np.all(np.diff(a.arrival_s) >= 0)


def test_chat_respects_the_access_budget_and_shares_the_system_prompt() -> None:
    w = chat(n_sessions=4, accesses_per_session=500, system_tokens=64, seed=3)
    per_session = np.bincount(w.session, weights=np.diff(w.offsets))
    assert np.all(per_session >= 500) and len(per_session) == 4
    heads = {w.request_blocks(r)[0] for r in range(w.n_requests)}
    assert heads == {0}  # 64 tokens = 4 shared blocks, ids 0..3


def test_docqa_popularity_is_skewed() -> None:
    w = docqa(n_docs=10, n_questions=400, doc_tokens=160, zipf_s=1.5, seed=0)
    counts = np.sort(np.bincount(w.session, minlength=10))[::-1]
    assert counts[0] > 3 * counts[-1]


@pytest.mark.parametrize("call, message", [
    (lambda: chat(n_sessions=0), "n_sessions must be a positive number, got 0."),
    (lambda: agent(revisit_prob=1.5), r"revisit_prob must be a probability in \[0, 1\], got 1.5."),
    (lambda: docqa(zipf_s=-1), "zipf_s must be a positive number, got -1."),
])
def test_generator_errors_are_named(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        call()


def test_workload_validation() -> None:
    with pytest.raises(ValueError, match="arrival_s must be non-decreasing"):
        make_workload([[1], [2]], arrivals=[1.0, 0.0])


def test_mooncake_replay_through_the_planner_reader() -> None:
    from stackdist.traces import read_mooncake

    w = from_mooncake(CONVERSATION)
    trace = read_mooncake(CONVERSATION, block_size=512)
    assert w.n_requests == 12031 and w.n_accesses == 288500 and w.n_distinct_blocks == 182790
    assert np.array_equal(w.blocks, trace.block_ids) and w.block_tokens == 512
    head = w.head(300)
    r = simulate(head, SimConfig(capacities=(20, 160, 1280), check_every=50)).to_dict()
    assert r["requests"] == 300 and sum(r["hits"].values()) + r["misses"] == head.n_accesses
    fine = from_mooncake(CONVERSATION, reblock=16).head(50)
    pages = sum(math.ceil(t / 16) for t in trace.block_tokens[: trace.offsets[50]].tolist())
    assert fine.block_tokens == 16 and fine.n_accesses == pages
    assert len(set(fine.session.tolist())) == len(set(w.session[:50].tolist()))  # same sessions after re-blocking


def test_mooncake_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        from_mooncake(tmp_path / "nope.jsonl")


# ------------------------------------------------------------------ cost
def test_capacity_arithmetic_is_the_papers_73_and_62() -> None:
    r = capacity_ratios((1, 8, 64))
    assert r["sessions_ratio"] == 73.0
    assert r["cost_per_session_ratio"] == pytest.approx(187.5 * 73 / (187.5 + 8 * 3.5 + 64 * 0.08))
    assert round(r["cost_per_session_ratio"], 2) == 62.04
    # with whole sessions: 50 sessions on the GPU alone, floor(73 * 50.04) = 3652 tiered
    assert sessions_per_gpu((5004, 0, 0), 100) == 50 and sessions_per_gpu((5004, 40032, 320256), 100) == 3652


def test_tier_cost_and_cost_per_session_hand_values() -> None:
    gb = 10**9
    assert tier_cost_usd((1, 2, 3), gb) == pytest.approx(187.5 + 7.0 + 0.24)
    assert cost_per_session_usd((4, 0, 0), 2, gb) == pytest.approx(4 * 187.5 / 2)
    assert cost_per_session_usd((1, 0, 0), 2, gb) == math.inf
    with pytest.raises(ValueError, match="blocks_per_session must be positive, got 0."):
        sessions_per_gpu((1,), 0)


def test_pareto_frontier_keeps_only_undominated_points() -> None:
    pts = [{"cost_usd": c, "ttft_p99_ms": t} for c, t in [(3, 1), (1, 5), (2, 6), (2, 4), (4, 1)]]
    assert [(p["cost_usd"], p["ttft_p99_ms"]) for p in pareto_frontier(pts)] == [(1, 5), (2, 4), (3, 1)]


def test_composition_sweep_covers_every_split() -> None:
    w = chat(n_sessions=2, accesses_per_session=100, seed=0)
    points = composition_sweep(w, 12, 3, SimConfig())
    splits = sorted(tuple(p["capacities"]) for p in points)
    assert splits == sorted((4 * i, 4 * j, 12 - 4 * i - 4 * j) for i in range(1, 4) for j in range(4 - i))
    assert all(sum(s) == 12 for s in splits)
    odd = [tuple(p["capacities"]) for p in composition_sweep(w, 10, 3, SimConfig())]
    assert len(odd) == 6 and all(sum(s) == 10 and min(s) >= 0 for s in odd) and all(s[0] > 0 for s in odd)


def test_slo_capacity_and_slo_sessions() -> None:
    w = chat(n_sessions=2, accesses_per_session=150, seed=0)
    rows = slo_capacity(w, 1e9, [1, 4], [0, 8], SimConfig())
    assert [r["min_hbm_blocks"] for r in rows] == [1, 1]  # an SLO nobody misses: the smallest
    rows = slo_capacity(w, 0.0, [1, 4], [0], SimConfig())
    assert rows[0]["min_hbm_blocks"] is None
    make = lambda n: chat(n_sessions=n, accesses_per_session=100, seed=0)
    assert max_sessions_meeting_slo(make, SimConfig(), 1e9, 5) == 5
    assert max_sessions_meeting_slo(make, SimConfig(), 0.0, 5) == 0
