"""The engine-model registry: the contract every registered model passes, and a third model
registered in a test getting its own pool unit everywhere (plan, budgets, table, CLI choices)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from naive import run_stackdist
from traces_random import random_trace

from stackdist.serving import ENGINE_MODELS, SEMANTICS, EngineModel, engine_model, register_engine_model
from stackdist.serving.pages import engine_pages
from stackdist.serving.results import ServingResult
from stackdist.serving.routed import JOINT_RUNS, simulate_routed
from stackdist.serving.schedule import Schedule
from stackdist.traces import RequestTrace

MODELS = list(ENGINE_MODELS.values())


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_every_model_describes_itself(model: EngineModel) -> None:
    assert engine_model(model.name) is model and model.name not in SEMANTICS
    for text in (model.name, model.follows, model.pool_unit, model.budget_key):
        assert isinstance(text, str) and text.strip()
    assert any(ch.isdigit() for ch in model.follows), "follows names the engine's version"
    assert model.supports_routing == (type(model) in JOINT_RUNS)


def test_names_and_budget_keys_are_unique() -> None:
    keys = [m.budget_key for m in MODELS]
    assert len(set(keys)) == len(keys) and list(ENGINE_MODELS) == [m.name for m in MODELS]
    with pytest.raises(ValueError, match="no engine model named 'nope'; the engine models are vllm, sglang"):
        engine_model("nope")


class _Impostor(EngineModel):
    name = "vllm"
    follows = pool_unit = budget_key = "x"
    min_pool = 1

    def pool_for_pages(self, pages: int) -> int:
        return pages

    def pages_in_pool(self, pool: int) -> int:
        return pool

    def simulate(self, trace, pools, schedule="serial", decode=False, page_tokens=16, threads=2):  # type: ignore[no-untyped-def]
        raise AssertionError("never run")


def test_a_second_model_of_a_registered_name_is_refused() -> None:
    with pytest.raises(ValueError, match="named 'vllm' is registered already"):
        register_engine_model(_Impostor())
    with pytest.raises(TypeError):
        register_engine_model("vllm")  # type: ignore[arg-type]
    assert type(engine_model("vllm")).__name__ == "VllmModel"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_pool_from_a_budget_is_monotone_and_inverts(model: EngineModel) -> None:
    pools = [model.pool_for_pages(p) for p in range(0, 2000)]
    assert all(a <= b for a, b in zip(pools, pools[1:])) and pools[-1] > pools[0]
    for pages in range(0, 2000):
        assert model.pages_in_pool(model.pool_for_pages(pages)) <= pages  # rounded down: never more than the budget
    for pool in range(model.min_pool, 2000):
        assert model.pool_for_pages(model.pages_in_pool(pool)) == pool
    assert model.pages_in_pool(model.min_pool) >= 1 > model.pages_in_pool(model.min_pool - 1)
    per_token = 4096
    for kv_bytes in (0, 1, 16 * per_token - 1, 16 * per_token, 10**9, 2**40):
        pages = kv_bytes // (16 * per_token)
        assert model.pool_for_bytes(kv_bytes, per_token, 16) == model.pool_for_pages(pages)
        assert model.pool_for_tokens(pages * 16 + 15, 16) == model.pool_for_pages(pages)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_simulate_returns_hits_of_the_right_shape(model: EngineModel, seed: int) -> None:
    trace = random_trace(seed, n_requests=25)
    pools = (model.min_pool, 4, 9, 20, 60, None)
    for schedule in ("serial", Schedule.from_service_model(trace)):
        decode = seed % 2 == 1
        result = model.simulate(trace, pools, schedule, decode)
        assert isinstance(result, ServingResult) and result.engine == model.name and result.pools == pools
        n = trace.n_requests
        assert result.hit_tokens.shape == (len(pools), n) and result.hit_tokens.dtype == np.int64
        assert result.failed_request.shape == (len(pools),)
        assert result.feasible(None), "an infinite pool never fails"
        infinite = result.hits(None)
        for i, pool in enumerate(pools):
            hits = result.hit_tokens[i]
            if not result.feasible(pool):
                assert (hits == -1).all() and 0 <= result.failed_request[i] < n
                assert result.min_feasible_pool is not None
                continue
            assert (hits % 16 == 0).all() and (hits >= 0).all()
            assert (hits <= np.maximum(trace.input_length - 1, 0)).all(), "a lookup leaves the last prompt token"
            assert (infinite >= hits).all(), f"pool {pool} hit more than the infinite pool"
        pages = model.simulate(engine_pages(trace), pools, schedule, decode)
        assert np.array_equal(pages.hit_tokens, result.hit_tokens)


@pytest.mark.parametrize("model", [m for m in MODELS if m.supports_routing], ids=lambda m: m.name)
def test_one_routed_worker_is_the_model_itself(model: EngineModel) -> None:
    for seed in (4, 5):
        trace = random_trace(seed, n_requests=25)
        pools = (6, 15, None)
        alone = model.simulate(trace, pools, "serial", decode=True)
        joint = simulate_routed(trace, model, 1, np.zeros(trace.n_requests, np.int64), pools, decode=True)
        assert joint.model == model.name
        assert np.array_equal(joint.gpu_hit_tokens, alone.hit_tokens)


# A third engine model, registered only inside the tests below: its pool unit is two pages, and it
# is SGLang's radix cache underneath (a pool of N units is SGLang's pool of 2N pages).
class PairsModel(EngineModel):
    name = "pairs"
    follows = "a test model: SGLang 0.5.23 in units of 2 pages"
    pool_unit = "pairs of pages (a test model)"
    budget_key = "pairs_of_pages"
    min_pool = 1
    supports_tiers = True

    def __init__(self) -> None:
        self.calls: list[tuple[int | None, ...]] = []

    def pool_for_pages(self, pages: int) -> int:
        return pages // 2

    def pages_in_pool(self, pool: int) -> int:
        return 2 * pool

    def simulate(self, trace, pools, schedule="serial", decode=False, page_tokens=16, threads=2):  # type: ignore[no-untyped-def]
        pools = tuple(pools)
        self.calls.append(pools)
        pages = tuple(None if p is None else 2 * p for p in pools)
        r = engine_model("sglang").simulate(trace, pages, schedule, decode, page_tokens, threads)
        low = None if r.min_feasible_pool is None else -(-r.min_feasible_pool // 2)
        return ServingResult(self.name, pools, r.hit_tokens, r.failed_request, low, r.method, False)


@pytest.fixture
def pairs():
    """PairsModel registered for one test; the registry as it was afterwards."""
    before = dict(ENGINE_MODELS)
    model = register_engine_model(PairsModel())
    yield model
    ENGINE_MODELS.clear()
    ENGINE_MODELS.update(before)


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    """A Mooncake file of 40 seeded requests (512-token blocks, 16-token pages when reblocked)."""
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("registry") / "t.jsonl"
    lines = []
    for r in range(40):
        head = [0, 1, 2][: int(rng.integers(0, 4))]
        ids = head + [100 + 10 * r + i for i in range(int(rng.integers(1, 4)))]
        tokens = 512 * (len(ids) - 1) + int(rng.integers(1, 513))
        lines.append(json.dumps({"timestamp": 1000 * r, "input_length": tokens, "output_length": int(rng.integers(1, 64)),
                                 "hash_ids": ids}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_registered_third_model_gets_its_own_pool_unit_everywhere(pairs, capsys, small_trace, tmp_path) -> None:
    out_json = tmp_path / "plan.json"
    # 1 MiB of qwen2.5-1.5b KV (28,672 B/token) is 2 pages of 16 tokens: 1 pair, 3 vLLM blocks, 2 SGLang pages
    code, out, err = run_stackdist(capsys, "plan", small_trace, "--semantics", "vllm,pairs,sglang", "--capacity", "1MiB,20MiB",
                                   "--schedule", "serial", "--json", out_json)
    assert code == 0, err
    plan = json.loads(out_json.read_text())
    section = plan["engine_models"]["pairs"]
    assert section["pool_unit"] == pairs.pool_unit and section["follows"] == pairs.follows
    assert f"== pairs (the engine's own cache rules: {pairs.follows}) ==" in out and f"pool unit: {pairs.pool_unit}" in out
    per_token = plan["model"]["kv_bytes_per_token"]
    for row, size in zip(plan["budgets"]["rows"], (2**20, 20 * 2**20)):
        pages = size // (16 * per_token)
        assert row["pairs_of_pages"] == pages // 2 == pairs.pool_for_bytes(size, per_token, 16)
        assert (row["vllm_gpu_blocks"], row["sglang_pages"]) == (pages + 1, pages)
        if pages // 2 >= 2:
            assert row["engine_models"]["pairs"]["pool"] == pages // 2
        else:  # a pool under 2 units is not run for a budget (1 MiB is 1 pair); below the longest prompt, it says why
            assert not row["engine_models"]["pairs"]["feasible"] and row["engine_models"]["sglang"]["pool"] == pages
            assert "cannot hold the trace's longest prompt" in row["engine_models"]["pairs"]["not_run"]
    # every model runs at every model's budget pools of 2 units or more (as before), the pairs' own among them
    wanted = sorted(p for p in {2 // 2, 45 // 2, 2, 3, 45, 46} if p >= 2)
    assert pairs.calls[0] == (*wanted, None)  # then the working-set search's probes (finite pools, each simulated)
    assert all(None not in call for call in pairs.calls[1:]) and section["working_set"]["method"] == "bisection"
    assert [p["gpu_blocks"] for p in section["pools"]] == [*wanted, "inf"]
    # its hits are SGLang's at twice the pages: the plan used the model's own simulation
    sglang_rows = {p["gpu_blocks"]: p for p in plan["engine_models"]["sglang"]["pools"]}
    for row in section["pools"]:
        twice = "inf" if row["gpu_blocks"] == "inf" else 2 * row["gpu_blocks"]
        if twice in sglang_rows:
            assert row["hit_tokens"] == sglang_rows[twice]["hit_tokens"]


def test_the_cli_offers_a_registered_model_and_refuses_what_it_does_not_model(pairs, capsys, small_trace) -> None:
    code, out, _ = run_stackdist(capsys, "plan", "--help")
    text = " ".join(out.split())
    assert code == 0 and "vllm, sglang, pairs (the engines' own caches)" in text and "pairs: pairs of pages (a test model)" in text
    code, _, err = run_stackdist(capsys, "plan", small_trace, "--semantics", "pairs", "--decode-reuse")
    assert code == 2 and "--decode-reuse is modelled for the vllm model only" in err and "Traceback" not in err
    code, _, err = run_stackdist(capsys, "plan", small_trace, "--semantics", "pairs", "--workers", "2",
                                 "--router", "kv-aware", "--gpu-blocks", "4,inf")
    assert code == 2 and "--router kv-aware is modelled for the vllm and sglang models only" in err
    code, out, err = run_stackdist(capsys, "plan", small_trace, "--semantics", "all", "--json", "-", "--gpu-blocks", "300,inf")
    assert code == 0, err
    assert list(json.loads(out)["engine_models"]) == ["vllm", "sglang", "pairs"]
    with pytest.raises(ValueError, match="model must be one of vllm, sglang; got 'pairs'"):
        simulate_routed(RequestTrace.from_blocks([[1]]), "pairs", 1, "kv-aware", [None])


def test_the_registry_is_restored_after_a_test_model() -> None:
    assert list(ENGINE_MODELS) == ["vllm", "sglang"]
