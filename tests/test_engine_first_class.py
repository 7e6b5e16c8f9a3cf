"""The engine models as first-class answers of the plan (issue 24): the engine and version they
follow in the table and JSON, their working sets (checked against direct simulation), and their
plot (``plan --semantics vllm --plot``, once refused)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist

sys.path.insert(0, str(Path(__file__).resolve().parent / "serving"))
from traces_random import random_trace

from stackdist.planning.engine_plan import EngineOptions, run_engine_models
from stackdist.planning.engine_working_set import engine_working_set
from stackdist.serving import ENGINE_MODELS, engine_model
from stackdist.serving.pages import engine_pages
from stackdist.serving.sglang import simulate_sglang
from stackdist.serving.vllm import _no_duplicates, simulate_vllm, vllm_hit_pools

PLOT = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory):
    """A Mooncake file of 120 seeded requests, odd prompt lengths (so vLLM's one replay holds)."""
    rng = np.random.default_rng(11)
    path = tmp_path_factory.mktemp("first_class") / "t.jsonl"
    lines = []
    for r in range(120):
        ids = [0, 1, 2][: int(rng.integers(0, 4))] + [50 + int(rng.integers(0, 8))] * int(rng.integers(0, 2))
        ids += [1000 + 10 * r + i for i in range(int(rng.integers(1, 3)))]
        tokens = 512 * (len(ids) - 1) + 2 * int(rng.integers(0, 255)) + 1
        lines.append(json.dumps({"timestamp": 200 * r, "input_length": tokens, "output_length": int(rng.integers(1, 40)),
                                 "hash_ids": ids}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_model_names_its_engine_and_version() -> None:
    assert (engine_model("vllm").engine, engine_model("vllm").version) == ("vLLM", "0.33.0")
    assert (engine_model("sglang").engine, engine_model("sglang").version) == ("SGLang", "0.5.23")
    for model in ENGINE_MODELS.values():
        assert model.follows.startswith(f"{model.engine} {model.version}")


def test_table_and_json_name_the_engine_and_version(capsys, mooncake, tmp_path) -> None:
    out_json = tmp_path / "p.json"
    code, out, err = run_stackdist(capsys, "plan", mooncake, "--semantics", "vllm,sglang", "--schedule", "serial",
                                   "--json", out_json)
    assert code == 0, err
    plan = json.loads(out_json.read_text())
    assert plan["engine_models"]["vllm"]["engine"] == {"name": "vLLM", "version": "0.33.0"}
    assert plan["engine_models"]["sglang"]["engine"] == {"name": "SGLang", "version": "0.5.23"}
    assert "vLLM 0.33.0" in out and "SGLang 0.5.23" in out
    assert out.count("working set, as a fraction of this model's own ceiling") == 2
    ws = plan["engine_models"]["vllm"]["working_set"]
    assert ws["method"] == "one-replay" and ws["exact"] and [r["fraction_of_ceiling"] for r in ws["rows"]] == [0.9, 0.95, 0.99]
    assert plan["engine_models"]["sglang"]["working_set"]["method"] == "bisection"


@pytest.mark.parametrize("seed", range(6))
def test_the_one_replay_pools_are_the_simulated_curve(seed: int) -> None:
    """Every page's smallest hitting pool gives, at every pool, what the per-size simulation gives."""
    trace = random_trace(seed, n_requests=25, aligned=0.0)
    pages = engine_pages(trace)
    assert _no_duplicates(pages, 16)
    for decode in (False, True):
        req, need = vllm_hit_pools(pages, decode)
        low = engine_model("vllm").hit_pools(pages, decode)[2]
        pools = list(range(low, low + 40))
        sim = simulate_vllm(trace, pools, "serial", decode, method="per-size")
        for i, pool in enumerate(pools):
            assert np.array_equal(16 * np.bincount(req[need <= pool], minlength=trace.n_requests), sim.hit_tokens[i])
        assert (simulate_vllm(trace, [low - 1], "serial", decode, method="per-size").failed_request >= 0).all()


@pytest.mark.parametrize("seed", range(8))
def test_the_exact_working_set_is_the_smallest_pool_by_direct_simulation(seed: int) -> None:
    """Serial vLLM: the pool found reaches the target, and no smaller pool does (every one simulated)."""
    trace = random_trace(seed, n_requests=30, aligned=0.0)
    counted = np.arange(trace.n_requests) >= 3  # a warm-up of 3 requests
    options = EngineOptions(models=("vllm",), pools=(None,), schedule="serial", decode=bool(seed % 2))
    result = run_engine_models(trace, options)["vllm"]
    ws = engine_working_set(result, trace, options, counted, 1024, [0.5, 0.9, 0.95, 1.0])
    assert ws["method"] == "one-replay" and ws["exact"]
    top = max(row["gpu_blocks"] for row in ws["rows"])
    pools = list(range(engine_model("vllm").min_pool, top + 1))
    sim = simulate_vllm(trace, pools, "serial", options.decode, method="per-size")
    hits = {p: int(sim.hit_tokens[i][counted].sum()) if sim.failed_request[i] < 0 else -1 for i, p in enumerate(pools)}
    assert ws["ceiling_hit_tokens"] == int(result.hit_tokens[0][counted].sum())
    for row in ws["rows"]:
        n, need = row["gpu_blocks"], row["hit_tokens_needed"]
        assert hits[n] == row["hit_tokens"] >= need
        assert all(hits[p] < need for p in pools if p < n), "a smaller pool reaches the target"
        if row["one_smaller"] is not None:
            assert row["one_smaller"]["hit_tokens"] == (hits[n - 1] if hits[n - 1] >= 0 else None)
    for point in ws["points"]:  # the exact curve's points
        if point["gpu_blocks"] in hits:
            assert hits[point["gpu_blocks"]] == point["hit_tokens"]


@pytest.mark.parametrize("seed", range(4))
def test_the_bisection_answer_reaches_and_one_smaller_does_not(seed: int) -> None:
    """SGLang (and vLLM on a timed schedule): the smallest probed pool; checked by direct simulation."""
    trace = random_trace(seed + 20, n_requests=30)
    counted = np.ones(trace.n_requests, bool)
    for model, schedule in (("sglang", "serial"), ("vllm", "model")):
        options = EngineOptions(models=(model,), pools=(None,), schedule=schedule, decode=True)
        result = run_engine_models(trace, options)[model]
        ws = engine_working_set(result, trace, options, counted, 1024, [0.5, 0.9, 1.0])
        assert ws["method"] == "bisection" and not ws["exact"] and "bisection over pool sizes" in ws["search"]
        for row in ws["rows"]:
            n, need = row["gpu_blocks"], row["hit_tokens_needed"]
            again = engine_model(model).simulate(trace, [n, n - 1], schedule, True) if n > 1 else None
            if model == "sglang" and again is not None:
                assert np.array_equal(again.hit_tokens, simulate_sglang(trace, [n, n - 1], schedule, True).hit_tokens)
            if again is None:
                continue
            assert again.failed_request[0] < 0 and int(again.hit_tokens[0].sum()) == row["hit_tokens"] >= need
            assert again.failed_request[1] >= 0 or int(again.hit_tokens[1].sum()) < need


def test_no_search_under_the_scheduler(capsys, mooncake, tmp_path) -> None:
    out_json = tmp_path / "p.json"
    code, out, err = run_stackdist(capsys, "plan", mooncake, "--semantics", "vllm", "--schedule", "scheduler",
                                   "--gpu-blocks", "200,inf", "--json", out_json)
    assert code == 0, err
    ws = json.loads(out_json.read_text())["engine_models"]["vllm"]["working_set"]
    assert "scheduler" in ws["skipped"] and "working set: not searched under the engine's scheduler" in out


@pytest.mark.skipif(not PLOT, reason="matplotlib not installed")
def test_plot_of_an_engine_model_alone(capsys, mooncake, tmp_path) -> None:
    import matplotlib.image

    png = tmp_path / "p.png"
    code, _, err = run_stackdist(capsys, "plan", mooncake, "--semantics", "vllm", "--schedule", "serial",
                                 "--capacity", "40MiB", "--plot", png)
    assert code == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 20_000
    pixels = matplotlib.image.imread(png)[..., :3]
    blue = np.all(np.abs(pixels - np.array([31, 119, 180]) / 255) < 0.05, axis=-1)  # the vllm curve (C0)
    assert blue.sum() > 200 and (pixels < 0.9).any(axis=-1).mean() > 0.01


@pytest.mark.skipif(not PLOT, reason="matplotlib not installed")
def test_plot_with_curve_semantics_too_writes_both(capsys, mooncake, tmp_path) -> None:
    png = tmp_path / "p.png"
    code, _, err = run_stackdist(capsys, "plan", mooncake, "--semantics", "engine,sglang", "--schedule", "serial",
                                 "--plot", png)
    assert code == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG" and (tmp_path / "p.engines.png").read_bytes()[:4] == b"\x89PNG"
    assert "p.engines.png" in err


@pytest.mark.parametrize("seed", range(4))
def test_where_hits_are_monotone_the_bisection_finds_the_exact_answer(seed: int, monkeypatch) -> None:
    """Serial vLLM without its one replay (hit_pools withheld): the search's smallest probed pool
    is the exact smallest pool, since there hits never fall as the pool grows."""
    trace = random_trace(seed + 40, n_requests=30, aligned=0.0)
    counted = np.ones(trace.n_requests, bool)
    options = EngineOptions(models=("vllm",), pools=(None,), schedule="serial", decode=True)
    result = run_engine_models(trace, options)["vllm"]
    exact = engine_working_set(result, trace, options, counted, 1024, [0.3, 0.9, 1.0])
    monkeypatch.setattr(type(engine_model("vllm")), "hit_pools", lambda self, pages, decode: None)
    probed = engine_working_set(result, trace, options, counted, 1024, [0.3, 0.9, 1.0])
    assert (exact["method"], probed["method"]) == ("one-replay", "bisection")
    assert [r["gpu_blocks"] for r in probed["rows"]] == [r["gpu_blocks"] for r in exact["rows"]]
    assert [r["hit_tokens"] for r in probed["rows"]] == [r["hit_tokens"] for r in exact["rows"]]
