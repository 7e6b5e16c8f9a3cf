"""LMCache's CPU and disk tiers behind vLLM: equal to LMCache's own code (the committed driven runs,
``tests/data/engines/offload/*.lmcache.*``) on every request, and to the standard-library restatement
``validation/check_lmcache_rules.py`` (OrderedDicts, one step at a time) on seeded random traces with
tiers small enough that both evict, stores are cut short and disk writes are refused."""

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
RUNS = [run for run in MANIFEST["runs"] if run["engine"]["name"] == "lmcache"]
sys.path.insert(0, str(ROOT / "validation"))
import check_lmcache_rules as rules
import common

MODEL = offload_model("lmcache")


def _config(cpu: int | None, disk: int | None, chunk: int) -> TierConfig:
    return TierConfig((("cpu", cpu), ("disk", disk)), (("chunk", str(chunk)),))


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["file"])
def test_equal_to_the_engine_on_every_request(run: dict) -> None:
    trace = read_as_requests([str(DATA / run["trace"])], "mooncake", run["hash_block_size"], False, True)
    pages = engine_pages(trace, 16)
    rows = list(csv.DictReader((OFFLOAD / run["file"]).open()))
    feasible = [p for p in run["runs"] if p["feasible"]]
    pools = [int(p["pool"]) for p in feasible]
    gpu = engine_model("vllm").simulate(pages, pools, "serial", run["decode"])
    result = MODEL.simulate(pages, pools, gpu.hit_tokens, [_config(run["cpu_chunks"], run["disk_chunks"],
                                                                    run["chunk_tokens"])], run["decode"])
    for i, (pool, stats) in enumerate(zip(pools, (p["stats"] for p in feasible), strict=True)):
        assert gpu.hit_tokens[i].tolist() == [int(r[f"hit_tokens_{pool}"]) for r in rows]
        assert result.offload_hit_tokens[i, 0].tolist() == [int(r[f"offload_hit_tokens_{pool}"]) for r in rows]
        assert (result.written["cpu"][i, 0], result.written["disk"][i, 0]) == (stats["cpu_puts"], stats["disk_puts"])
        assert (result.evicted["cpu"][i, 0], result.evicted["disk"][i, 0]) == (stats["cpu_evictions"],
                                                                               stats["disk_evictions"])
        # the split by tier: the connector's tokens within the CPU's run of the lookup, then the disk's
        cpu_run = [int(r[f"lookup_cpu_tokens_{pool}"]) for r in rows]
        g = gpu.hit_tokens[i]
        want_cpu = [max(0, min(c, int(h + e)) - int(h)) for c, h, e in zip(cpu_run, g, result.offload_hit_tokens[i, 0])]
        assert result.tier_hit_tokens["cpu"][i, 0].tolist() == want_cpu


def test_the_committed_runs_cover_what_matters() -> None:
    """Both chunk sizes, a CPU tier alone and with a disk smaller and larger than it, evictions in
    both tiers, promotions, decode on and off."""
    assert {r["chunk_tokens"] for r in RUNS} >= {64, 256} and {r["decode"] for r in RUNS} == {True, False}
    stats = [p["stats"] for r in RUNS for p in r["runs"] if p["feasible"]]
    assert any(s["cpu_evictions"] for s in stats) and any(s["disk_evictions"] for s in stats)
    assert any(s["promotions"] for s in stats)
    assert any(r["disk_chunks"] == 0 for r in RUNS) and any(0 < r["disk_chunks"] < r["cpu_chunks"] for r in RUNS)
    assert any(r["disk_chunks"] > r["cpu_chunks"] for r in RUNS)


@pytest.mark.parametrize("seed", range(16))
def test_equal_to_the_restatement_on_random_traces(seed: int, tmp_path: Path) -> None:
    trace = random_trace(seed, n_requests=40, pages_per_block=1 + seed % 4)
    path = tmp_path / "t.jsonl"
    write_mooncake(path, trace)
    reference = common.read_trace(str(path))
    pages = engine_pages(trace, 16)
    peak = int(((trace.input_length + trace.output_length + 15) // 16).max())
    pools = [peak + 1, 3 * peak]
    gpu = engine_model("vllm").simulate(pages, pools, "serial", True)
    for chunk in (16, 32, 64):
        configs = [_config(c, d, chunk) for c, d in ((1, 0), (3, 0), (3, 5), (6, 2), (10, 40), (2, 100), (50, 0))]
        result = MODEL.simulate(pages, pools, gpu.hit_tokens, configs, True)
        for i in range(len(pools)):
            for j, config in enumerate(configs):
                try:
                    rows, st = rules.simulate(reference, trace.block_size, chunk, config.size("cpu"), config.size("disk"),
                                              gpu.hit_tokens[i].tolist())
                except rules.Stuck:
                    assert (i, j) in result.infeasible
                    continue
                assert result.config_feasible(i, j)
                assert result.offload_hit_tokens[i, j].tolist() == [x["offload_hit_tokens"] for x in rows]
                assert (result.written["cpu"][i, j], result.written["disk"][i, j]) == (st["cpu_puts"], st["disk_puts"])
                assert (result.evicted["cpu"][i, j], result.evicted["disk"][i, j]) == (st["cpu_evictions"],
                                                                                       st["disk_evictions"])


def test_sizes() -> None:
    # a 256-token chunk of a 1 KiB-per-token model: 256 KiB, so 1 GiB = 4096 chunks; tokens round down to chunks
    configs = resolve_offload(parse_offload("lmcache:cpu=1GiB/1000tokens,disk=2/8chunks,chunk=256"), 1024, 16)
    assert [(c.size("cpu"), c.size("disk")) for c in configs] == [(4096, 2), (4096, 8), (3, 2), (3, 8)]
    with pytest.raises(ValueError, match="chunk must be a multiple"):
        MODEL.chunk_tokens({"chunk": "24"}, 16)


def test_plan_per_request_equals_the_engine(capsys, tmp_path: Path) -> None:
    """The interface: the per-request CSV's columns equal the engine's file, a disk tier included."""
    run = next(r for r in RUNS if r["disk_chunks"] and r["runs"][0]["stats"]["disk_evictions"])
    pools = [p["pool"] for p in run["runs"] if p["feasible"]]
    out = tmp_path / "pr.csv"
    spec = f"lmcache:cpu={run['cpu_chunks']}chunks,disk={run['disk_chunks']}chunks,chunk={run['chunk_tokens']}"
    code, text, err = run_stackdist(capsys, "plan", DATA / run["trace"], "--block-size", run["hash_block_size"],
                                    "--semantics", "vllm", "--gpu-blocks", ",".join(map(str, pools)), "--offload", spec,
                                    "--schedule", "serial", *([] if run["decode"] else ["--no-decode"]),
                                    "--per-request", out, "--targets", "0.9")
    assert code == 0, err
    got = list(csv.DictReader(out.open()))
    want = list(csv.DictReader((OFFLOAD / run["file"]).open()))
    columns = [f"{name}_{pool}" for pool in pools for name in ("hit_tokens", "offload_hit_tokens")]
    assert [[r[c] for c in columns] for r in got] == [[r[c] for c in columns] for r in want]
    assert all(int(r[f"offload_cpu_hit_tokens_{p}"]) + int(r[f"offload_disk_hit_tokens_{p}"])
               == int(r[f"offload_hit_tokens_{p}"]) for r in got for p in pools)
    assert "90.0% of the ceiling needs cpu =" in text and "90.0% of the ceiling needs disk =" in text


def test_a_cpu_too_small_to_stage_a_disk_read_is_reported(capsys, tmp_path: Path) -> None:
    code, text, err = run_stackdist(capsys, "plan", DATA / "gen_mixed_b32.jsonl", "--block-size", 32, "--gpu-blocks",
                                    107, "--offload", "lmcache:cpu=2chunks,disk=64chunks,chunk=64", "--json",
                                    tmp_path / "p.json")
    assert code == 0, err
    section = json.loads((tmp_path / "p.json").read_text())["offload"][0]
    assert not section["rows"][0]["feasible"] and "busy loop" in section["rows"][0]["infeasible"]
    assert "infeasible: request" in text and "Traceback" not in err



def test_real_trace_never_evicting_cpu_is_the_seen_chunk_prefix() -> None:
    """On the real trace (the first 1,500 requests of the bundled conversation trace, 256-token
    chunks): with a CPU tier that never evicts, LMCache's hit is the longest run of leading full
    chunks some earlier prompt had (a set of chunk ids, kept by hand here), and the connector's
    number is that minus the GPU hit (minus the last token on a whole-prompt hit)."""
    trace = read_as_requests([str(ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl")], "mooncake", None,
                             False, True)
    pages = engine_pages(trace.select(np.arange(1500)), 16)
    small = int(((pages.input_tokens + pages.output_tokens + 15) // 16).max()) + 2
    gpu = engine_model("vllm").simulate(pages, [small], "serial", True)
    result = MODEL.simulate(pages, [small], gpu.hit_tokens, [_config(None, 0, 256)], True)
    seen: set[int] = set()
    want = []
    for r in range(pages.n_requests):
        ids = [int(pages.key[pages.offsets[r] + 16 * (c + 1) - 1]) for c in range(int(pages.input_tokens[r]) // 256)]
        run = next((c for c, k in enumerate(ids) if k not in seen), len(ids))
        hit = 256 * run
        want.append(max(0, hit - int(gpu.hit_tokens[0, r]) - (hit == pages.input_tokens[r])))
        seen.update(ids)
    assert result.offload_hit_tokens[0, 0].tolist() == want and sum(want) > 10**6
