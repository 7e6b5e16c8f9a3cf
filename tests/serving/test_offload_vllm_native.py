"""vLLM's native CPU offloading model: equal to the engine's own code (the committed driven runs,
``tests/data/engines/offload/``) on every request, and to the standard-library restatement
``validation/check_offload_rules.py`` (an independent, obviously sequential reference: OrderedDicts
and sorted rank lists) on seeded random traces with tiers small enough that stores are refused."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist
from traces_random import random_trace, write_mooncake

from stackdist.serving import engine_model
from stackdist.serving.offload import (
    TierConfig,
    offload_model,
    parse_offload,
    resolve_offload,
)
from stackdist.serving.pages import engine_pages
from stackdist.traces.stream_input import read_as_requests

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "engines"
OFFLOAD = DATA / "offload"
MANIFEST = json.loads((OFFLOAD / "manifest.json").read_text())
NATIVE = [run for run in MANIFEST["runs"] if run["engine"].get("offload", "").startswith("native")]
sys.path.insert(0, str(ROOT / "validation"))
import check_offload_rules as rules
import common

MODEL = offload_model("vllm-native")


def _rows(run: dict) -> list[dict]:
    with open(OFFLOAD / run["file"]) as fh:
        return list(csv.DictReader(fh))


def _pages(trace_name: str, block_size: int):
    return engine_pages(read_as_requests([str(DATA / trace_name)], "mooncake", block_size, False, True), 16)


@pytest.mark.parametrize("run", NATIVE, ids=lambda r: r["file"])
def test_equal_to_the_engine_on_every_request(run: dict) -> None:
    """The GPU hits from the vllm model, then the CPU tier, against the engine's own columns."""
    pages = _pages(run["trace"], run["hash_block_size"])
    rows = _rows(run)
    pools = run["gpu_pools"]
    gpu = engine_model("vllm").simulate(pages, pools, "serial", run["decode"])
    config = TierConfig((("cpu", run["cpu_blocks"]),), (("policy", run["policy"] or "lru"),))
    result = MODEL.simulate(pages, pools, gpu.hit_tokens, [config], run["decode"])
    for i, pool in enumerate(pools):
        assert gpu.hit_tokens[i].tolist() == [int(r[f"hit_tokens_{pool}"]) for r in rows]
        assert result.offload_hit_tokens[i, 0].tolist() == [int(r[f"offload_hit_tokens_{pool}"]) for r in rows]
        assert (result.tier_hit_tokens["cpu"][i, 0] == result.offload_hit_tokens[i, 0]).all()
    if run["cpu_blocks"]:
        stats = [r["stats"] for r in run["runs"]]
        # the driver counted refused prepare_store calls; ours counts refused stores with a changed state
        # (a retry in the same state is not replayed): zero exactly when the engine's is zero
        assert [bool(s["prepare_store_none"]) for s in stats] == [bool(x) for x in result.failed_stores[:, 0]]


def test_the_committed_runs_cover_what_matters() -> None:
    """lru and arc, refused stores, tiers that never evict, decode on and off."""
    assert {r["policy"] for r in NATIVE} == {None, "lru", "arc"} and {r["decode"] for r in NATIVE} == {True, False}
    assert any(s["stats"]["prepare_store_none"] for r in NATIVE for s in r["runs"])
    assert len(NATIVE) >= 40


@pytest.mark.parametrize("seed", range(24))
def test_equal_to_the_restatement_on_random_traces(seed: int, tmp_path: Path) -> None:
    trace = random_trace(seed, n_requests=40, pages_per_block=1 + seed % 3)
    path = tmp_path / "t.jsonl"
    write_mooncake(path, trace)
    reference_trace = common.read_trace(str(path))
    pages = engine_pages(trace, 16)
    peak = int(((trace.input_length + trace.output_length + 15) // 16).max())
    pools = [peak + 1, peak + 4, 2 * peak]
    gpu = engine_model("vllm").simulate(pages, pools, "serial", True)
    sizes = [1, 3, 8, 20, int(pages.full_pages.sum())]
    configs = [TierConfig((("cpu", c),), (("policy", p),)) for c in sizes for p in ("lru", "arc")]
    result = MODEL.simulate(pages, pools, gpu.hit_tokens, configs, True)
    for i in range(len(pools)):
        hits = gpu.hit_tokens[i].tolist()
        for j, config in enumerate(configs):
            fn = rules.model if config.option("policy") == "lru" else rules.model_arc
            want = fn(reference_trace, trace.block_size, config.size("cpu"), hits)
            assert result.offload_hit_tokens[i, j].tolist() == want, (seed, pools[i], config)


def test_never_evicting_tier_adds_up_to_the_infinite_pool() -> None:
    """With a tier that never evicts, GPU + CPU = the hits of a GPU pool that never evicts, except
    where the connector also loads the block the GPU's last-token cap kept out (a 16-aligned prompt
    whose every block is cached): then exactly 16 more."""
    for name, bs in (("gen_chat_b16.jsonl", 16), ("gen_mixed_b32.jsonl", 32), ("gen_chat_b64.jsonl", 64)):
        pages = _pages(name, bs)
        gpu = engine_model("vllm").simulate(pages, [engine_model("vllm").min_pool + 40, None], "serial", True)
        small = gpu.hit_tokens[:1] if gpu.feasible(gpu.pools[0]) else gpu.hit_tokens[1:]
        result = MODEL.simulate(pages, [None], small, [TierConfig((("cpu", None),), (("policy", "lru"),))], True)
        extra = small[0] + result.offload_hit_tokens[0, 0] - gpu.hit_tokens[1]
        assert set(extra.tolist()) <= {0, 16}
        aligned = pages.input_tokens % 16 == 0
        assert not (extra[~aligned]).any()
        assert result.evicted["cpu"][0, 0] == 0 and result.failed_stores[0, 0] == 0


def test_sizes_in_every_unit() -> None:
    spec = parse_offload("vllm-native:cpu=0/4096tokens/1MiB/inf,policy=arc")
    configs = resolve_offload(spec, 1024, 16)  # a 16-token block = 16 KiB: 1 MiB = 64 blocks
    assert [c.size("cpu") for c in configs] == [0, 256, 64, None]
    assert MODEL.units_for_bytes(10 * 4096, 100, {}, 16) == 10  # 1,600-byte blocks pad to 4 KiB pages (not 25)
    for bad, match in (("vllm-native", "give the cpu tier"), ("vllm-native:cpu=3.5blocks", "not a size"),
                       ("vllm-native:cpu=8blocks,policy=fifo", "policy must be lru|arc"),
                       ("nvme:cpu=8blocks", "must start with an offload model"),
                       ("vllm-native:disk=8blocks", "unknown key 'disk'")):
        with pytest.raises(ValueError, match=match):
            parse_offload(bad)


def test_plan_per_request_equals_the_engine(capsys, tmp_path: Path) -> None:
    """The interface the checks use: the per-request CSV's columns equal the engine's file."""
    run = next(r for r in NATIVE if r["file"] == "gen_chat_b64.vllm-native.cpu256.arc.serial.nodecode.csv")
    out = tmp_path / "pr.csv"
    code, text, err = run_stackdist(capsys, "plan", DATA / run["trace"], "--block-size", 64, "--semantics", "vllm",
                                    "--gpu-blocks", ",".join(map(str, run["gpu_pools"])),
                                    "--offload", "vllm-native:cpu=256blocks,policy=arc", "--schedule", "serial",
                                    "--no-decode", "--per-request", out, "--targets", "0.9")
    assert code == 0, err
    got = list(csv.DictReader(out.open()))
    want = _rows(run)
    columns = [c for c in want[0] if c.startswith(("hit_tokens_", "offload_hit_tokens_"))]
    assert columns and all(c in got[0] for c in columns)
    assert [[r[c] for c in columns] for r in got] == [[r[c] for c in columns] for r in want]
    assert "offload vllm-native:cpu=256blocks,policy=arc behind vllm" in text
    assert "90.0% of the ceiling needs cpu =" in text


def test_plan_ladder_json_and_errors(capsys, tmp_path: Path) -> None:
    trace = DATA / "gen_chat_b16.jsonl"
    out, js = tmp_path / "pr.csv", tmp_path / "plan.json"
    code, _, err = run_stackdist(capsys, "plan", trace, "--block-size", 16, "--gpu-blocks", "77",
                                 "--offload", "vllm-native:cpu=32/128blocks", "--per-request", out, "--json", js)
    assert code == 0, err
    assert "running the vllm engine model" in err
    header = out.read_text().splitlines()[0].split(",")
    assert {"offload_hit_tokens_77_cpu32", "offload_hit_tokens_77_cpu128"} <= set(header)
    section = json.loads(js.read_text())["offload"][0]
    assert [r["config"] for r in section["rows"]] == ["cpu32", "cpu128"]
    row = section["rows"][1]
    assert row["written"]["cpu"]["bytes"] == row["written"]["cpu"]["blocks"] * section["unit_bytes"]
    assert row["prefix_token_hit_rate"] == pytest.approx(row["gpu_token_hit_rate"] + row["tier_token_hit_rate"]["cpu"])
    answers = section["sizing"][0]["tiers"][0]["answers"]
    ceiling = section["sizing"][0]["tiers"][0]["ceiling_prefix_token_hit_rate"]
    for a in answers:
        assert a["prefix_token_hit_rate"] >= a["fraction_of_ceiling"] * ceiling - 1e-12
    assert [a["blocks"] for a in answers] == sorted(a["blocks"] for a in answers)
    for argv, match in ((["--offload", "vllm-native:cpu=8"], "not a size"),
                        (["--offload", "vllm-native:cpu=8blocks", "--schedule", "model"], "serial schedule only"),
                        (["--offload", "vllm-native:cpu=8blocks", "--workers", "2", "--router", "kv-aware"],
                         "--router kv-aware is not modelled"),
                        (["--offload", "vllm-native:cpu=9999999999blocks"], "too large"),
                        (["--offload", "lmcache:cpu=8chunks,chunk=24"], "multiple of the engine's 16-token page"),
                        (["--offload", "vllm-native:cpu=8blocks", "--semantics", "vllm", "--gpu-blocks", "inf", "--plot",
                          tmp_path / "never.png", "--per-request", tmp_path / "never.csv"], "has none")):
        code, _, err = run_stackdist(capsys, "plan", trace, "--block-size", 16, "--gpu-blocks", "77", *argv)
        assert code == 2 and match in err and "Traceback" not in err
    assert not (tmp_path / "never.png").exists() and not (tmp_path / "never.csv").exists()



@pytest.fixture(scope="module")
def real_pages():
    """The first 1,500 requests of the bundled Mooncake conversation trace at 16-token pages."""
    trace = read_as_requests([str(ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl")], "mooncake", None,
                             False, True)
    return engine_pages(trace.select(np.arange(1500)), 16)


@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_real_trace_never_evicting_tier_is_the_infinite_pool(real_pages, policy: str) -> None:
    """On the real trace: behind a GPU pool that evicts, a CPU tier that never evicts serves
    exactly what the GPU lost (the infinite pool's hit), plus the block the last-token cap kept
    out where the whole 16-aligned prompt is held; and a small tier serves less."""
    pages = real_pages
    small = int(((pages.input_tokens + pages.output_tokens + 15) // 16).max()) + 2
    gpu = engine_model("vllm").simulate(pages, [small, None], "serial", True)
    configs = [TierConfig((("cpu", c),), (("policy", policy),)) for c in (None, 20000)]
    result = MODEL.simulate(pages, [small], gpu.hit_tokens[:1], configs, True)
    extra = gpu.hit_tokens[0] + result.offload_hit_tokens[0, 0] - gpu.hit_tokens[1]
    assert set(extra.tolist()) <= {0, 16} and not extra[pages.input_tokens % 16 != 0].any()
    assert result.offload_hit_tokens[0, 0].sum() > 10**6
    assert 0 < result.offload_hit_tokens[0, 1].sum() < result.offload_hit_tokens[0, 0].sum()
