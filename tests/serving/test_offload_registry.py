"""The offload-model registry: the contract every registered offload model passes, and a dummy
model registered in a test reaching the plan, its table, its per-request CSV and ``--help``."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist
from traces_random import random_trace

from stackdist.serving import ENGINE_MODELS, engine_model
from stackdist.serving.offload import (
    OFFLOAD_MODELS,
    OffloadModel,
    OffloadResult,
    TierConfig,
    offload_model,
    parse_offload,
    register_offload_model,
    resolve_offload,
)
from stackdist.serving.pages import EnginePages, engine_pages

MODELS = list(OFFLOAD_MODELS.values())
MANIFEST = json.loads((Path(__file__).resolve().parents[1] / "data" / "engines" / "offload" / "manifest.json").read_text())


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_every_model_describes_itself(model: OffloadModel) -> None:
    assert offload_model(model.name) is model and model.behind in ENGINE_MODELS
    assert any(ch.isdigit() for ch in model.follows), "follows names the engine's version"
    assert model.tiers and model.unit.endswith("s") and set(model.defaults) == set(model.options)
    assert all(not allowed or model.defaults[k] in allowed for k, allowed in model.options.items())
    assert "{" not in model.organisation.format(**model.defaults)
    if model.driven:  # driven: the engine's own per-request results are committed as test data
        assert any(run["engine"]["name"] in model.follows.lower() and run.get("policy", "x") is not None
                   for run in MANIFEST["runs"])


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
@pytest.mark.parametrize("seed", range(6))
def test_every_model_keeps_the_contract(model: OffloadModel, seed: int) -> None:
    """Shapes; nothing from an empty tier; tier hits never reach past the prompt nor start before
    the GPU hit ends; a never-evicting tier serves at least what a small one does in total."""
    trace = random_trace(seed, n_requests=30, pages_per_block=1 + seed % 2)
    pages = engine_pages(trace, 16)
    peak = int(((trace.input_length + trace.output_length + 15) // 16).max())
    pools = [peak + 2, 3 * peak]
    gpu = engine_model(model.behind).simulate(pages, pools, "serial", True)
    tier0 = model.tiers[0]
    configs = [TierConfig(((tier0, size),), tuple(model.defaults.items())) for size in (0, 2, 9, None)]
    result = model.simulate(pages, pools, gpu.hit_tokens, configs, True)
    assert isinstance(result, OffloadResult) and result.model == model.name
    assert result.offload_hit_tokens.shape == (len(pools), len(configs), trace.n_requests)
    for i in range(len(pools)):
        assert (result.offload_hit_tokens[i, 0] == 0).all() and result.written[tier0][i, 0] == 0
        for j in range(len(configs)):
            total = result.gpu_hits(i, j) + result.offload_hit_tokens[i, j]
            assert (result.offload_hit_tokens[i, j] >= 0).all() and (total <= trace.input_length).all()
            assert sum(result.tier_hit_tokens[t][i, j] for t in model.tiers).tolist() == result.offload_hit_tokens[i, j].tolist()
        assert result.offload_hit_tokens[i, 3].sum() >= result.offload_hit_tokens[i, 1].sum()
        assert result.evicted[tier0][i, 3] == 0


class _Dummy(OffloadModel):
    """A tier that serves every full page after the GPU hit, for the registry test only."""

    name = "dummy-tier"
    follows = "nothing 0.0"
    behind = "sglang"
    driven = False
    tiers = ("ram",)
    unit = "slabs"
    organisation = "a dummy"

    def chunk_tokens(self, options, page_tokens: int) -> int:
        return 2 * page_tokens

    def simulate(self, pages: EnginePages, gpu_pools: Sequence[int | None], gpu_hits: np.ndarray,
                 configs: Sequence[TierConfig], decode: bool) -> OffloadResult:
        full = (pages.input_tokens // 16) * 16
        hits = np.stack([np.stack([np.where(c.size("ram") == 0, 0, np.maximum(full - g, 0)) for c in configs])
                         for g in gpu_hits])
        stats = np.zeros((len(gpu_pools), len(configs)), np.int64)
        return OffloadResult(self.name, tuple(gpu_pools), tuple(configs), gpu_hits, {"ram": hits}, hits,
                             {"ram": stats}, {"ram": stats}, stats, 32)


@pytest.fixture
def dummy():
    model = register_offload_model(_Dummy())
    try:
        yield model
    finally:
        del OFFLOAD_MODELS[model.name]


def test_a_new_model_reaches_the_plan(dummy, capsys, tmp_path: Path) -> None:
    assert [c.size("ram") for c in resolve_offload(parse_offload("dummy-tier:ram=64tokens/2KiB"), 16, 16)] == [2, 4]
    trace = Path(__file__).resolve().parents[1] / "data" / "engines" / "gen_chat_b16.jsonl"
    out, js = tmp_path / "pr.csv", tmp_path / "p.json"
    code, text, err = run_stackdist(capsys, "plan", trace, "--block-size", 16, "--gpu-blocks", 90,
                                    "--offload", "dummy-tier:ram=4slabs", "--per-request", out, "--json", js)
    assert code == 0, err
    assert "running the sglang engine model" in err
    rows = list(csv.DictReader(out.open()))
    assert all(int(r["hit_tokens_90"]) + int(r["offload_hit_tokens_90"]) == int(r["input_tokens"]) // 16 * 16
               for r in rows)
    section = json.loads(js.read_text())["offload"][0]
    assert section["unit"] == "slabs" and section["unit_tokens"] == 32 and section["behind"] == "sglang"
    assert section["validation"].startswith("followed, not driven")
    code, text, _ = run_stackdist(capsys, "plan", "--help")
    flat = "".join(text.split())  # argparse wraps the help
    assert "dummy-tier:ram=Nslabs" in flat and "(behindsglang;followed,notdriven)" in flat
    with pytest.raises(ValueError, match="registered already"):
        register_offload_model(_Dummy())
