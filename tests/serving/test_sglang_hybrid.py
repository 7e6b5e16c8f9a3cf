"""SGLang 0.5.23's hybrid (full + sliding-window) prefix cache: the model
(``stackdist.serving.sglang_hybrid``) against SGLang's own objects driven on CPU
(``validation/drive_sglang_hybrid.py``, committed in ``tests/data/engines/sglang_hybrid/``), against
the full-attention SGLang model where no window bites, and through the command line."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist
from traces_random import random_trace

from stackdist.serving.hybrid import GroupSpec
from stackdist.serving.pages import engine_pages
from stackdist.serving.sglang import simulate_sglang
from stackdist.serving.sglang_hybrid import (
    CHUNK_TOKENS,
    NotModelled,
    _replay,
    sglang_hybrid_hits,
    simulate_hybrid_groups,
)
from stackdist.traces import read_mooncake

ROOT = Path(__file__).resolve().parents[1] / "data" / "engines"
DATA = ROOT / "sglang_hybrid"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
TRACES = {"swa_shared_b64": (DATA / "swa_shared_b64.jsonl", 64), "hyb_edges_b64": (ROOT / "hybrid" / "hyb_edges_b64.jsonl", 64),
          "conversation_sel37": (ROOT / "hybrid" / "conversation_sel37.jsonl", 512)}
_PAGES: dict[str, object] = {}


def _pages(name: str):
    if name not in _PAGES:
        path, bh = TRACES[name]
        _PAGES[name] = engine_pages(read_mooncake(path, block_size=bh))
    return _PAGES[name]


def test_manifest_names_the_engine_and_hashes_every_file():
    assert MANIFEST["engine"]["name"] == "sglang" and MANIFEST["engine"]["version"] == "0.5.23"
    assert MANIFEST["settings"]["swa_full_tokens_ratio"] == 0.8
    for rel, digest in MANIFEST["files"].items():
        assert hashlib.sha256((DATA / rel).read_bytes()).hexdigest() == digest, rel
    assert len(MANIFEST["runs"]) == 24


@pytest.mark.parametrize("run", MANIFEST["runs"], ids=lambda r: Path(r["file"]).stem)
def test_the_model_equals_sglang_on_every_request_of_every_pool_it_answers(run):
    pages = _pages(run["trace"])
    with open(DATA / run["file"]) as fh:
        rows = list(csv.DictReader(fh))
    answered = 0
    for pool in run["pools"]:
        n = None if pool == "inf" else int(pool)
        try:
            got = sglang_hybrid_hits(pages, run["window"], n, run["decode"])
        except NotModelled:
            continue
        assert pool in run["feasible_pools"], f"the model answers pool {pool}, where SGLang failed"
        want = [int(r[f"hit_tokens_{pool}"]) for r in rows]
        bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
        assert not bad, f"pool {pool}: (request, model, SGLang) {bad[:5]}"
        answered += 1
    # the runner commits the model's smallest answered pool A, A + 1, 2 A and inf: all answered
    assert answered >= 4


@pytest.mark.parametrize("run", MANIFEST["runs"], ids=lambda r: Path(r["file"]).stem)
def test_the_pages_the_model_counts_as_held_are_sglangs_pool_usage_at_the_end(run):
    # the no-eviction room is computed from the pages the tree holds (full, and live SWA); after the
    # last request they must be what SGLang's two allocators have handed out, at every answered pool
    end: list[int] = []
    _replay(_pages(run["trace"]), run["window"], run["decode"], CHUNK_TOKENS, end)
    for pool in run["feasible_pools"]:
        if pool != "inf" and not _claims(run, pool):
            continue
        st = run["stats"][pool]
        used = [(st["full_pool_tokens"] - st["full_available_tokens_at_end"]) // 16,
                (st["swa_pool_tokens"] - st["swa_available_tokens_at_end"]) // 16]
        assert end == used, pool


@pytest.mark.parametrize("run", MANIFEST["runs"], ids=lambda r: Path(r["file"]).stem)
def test_every_committed_pool_where_eviction_changes_a_hit_is_refused(run):
    # SGLang's eviction (not modelled) shows where its hits differ from its own infinite pool's, or
    # where it cannot run: the model must refuse there, never answer the infinite pool's hits
    with open(DATA / run["file"]) as fh:
        rows = list(csv.DictReader(fh))
    inf = [int(r["hit_tokens_inf"]) for r in rows]
    changed = [p for p in run["pools"] if p != "inf" and (p not in run["feasible_pools"]
                                                           or [int(r[f"hit_tokens_{p}"]) for r in rows] != inf)]
    for pool in changed:
        with pytest.raises(NotModelled, match="SGLang may evict"):
            sglang_hybrid_hits(_pages(run["trace"]), run["window"], int(pool), run["decode"])


@pytest.mark.parametrize("run", [r for r in MANIFEST["runs"] if r["infeasible"]][:4] or [None])
def test_a_pool_sglang_cannot_run_is_refused_not_answered(run):
    if run is None:
        pytest.skip("no infeasible committed pool")
    for bad in run["infeasible"]:
        with pytest.raises(NotModelled, match="SGLang may evict"):
            sglang_hybrid_hits(_pages(run["trace"]), run["window"], int(bad["pool"]), run["decode"])


def test_the_window_cuts_hits_the_full_attention_tree_would_give():
    # on the committed runs the shrunk window (40) loses hits full attention would have
    run = next(r for r in MANIFEST["runs"] if r["trace"] == "hyb_edges_b64" and r["window"] == 40 and not r["decode"])
    pages = _pages("hyb_edges_b64")
    hybrid = np.array(sglang_hybrid_hits(pages, 40, None, False))
    full = simulate_sglang(pages, [None], "serial", decode=False).hit_tokens[0]
    assert (hybrid <= full).all() and hybrid.sum() < full.sum()
    assert run["stats"]["inf"]["total_hit_tokens"] == int(hybrid.sum())


@pytest.mark.parametrize("seed", range(12))
def test_a_window_no_prompt_reaches_equals_the_full_attention_model(seed):
    # W beyond every sequence: nothing is ever freed out of the window, every node keeps live SWA,
    # and the hybrid tree is SGLang's full-attention tree at an infinite pool (simulate_sglang,
    # itself equal to SGLang's RadixCache request by request); a small window only removes hits.
    trace = random_trace(seed, n_requests=40)
    pages = engine_pages(trace)
    decode = bool(seed % 2)
    full = simulate_sglang(pages, [None], "serial", decode=decode).hit_tokens[0]
    longest = int((trace.input_length + trace.output_length).max())
    assert sglang_hybrid_hits(pages, longest + 1, None, decode) == full.tolist()
    small = np.array(sglang_hybrid_hits(pages, 16, None, decode))
    assert (small <= full).all() and (small % 16 == 0).all()


@pytest.mark.parametrize("ratio", [0.8, 0.05, 2.0])
def test_the_refusal_names_the_smallest_pool_the_model_answers(ratio):
    pages = _pages("swa_shared_b64")
    with pytest.raises(NotModelled, match=r"pools of >= \d+ pages") as info:
        sglang_hybrid_hits(pages, 40, 1, True, ratio)
    a = int(str(info.value).rsplit(">= ", 1)[1].split()[0])
    assert sglang_hybrid_hits(pages, 40, a, True, ratio) == sglang_hybrid_hits(pages, 40, None, True, ratio)
    with pytest.raises(NotModelled):
        sglang_hybrid_hits(pages, 40, a - 1, True, ratio)


def test_group_kinds_schedules_and_pages_sglang_is_not_modelled_for_are_refused():
    pages = _pages("swa_shared_b64")
    groups = (GroupSpec("sliding", 16, window=40), GroupSpec("full", 16))
    assert simulate_hybrid_groups(pages, groups, [None]).hit_tokens[0].tolist() == sglang_hybrid_hits(pages, 40, None, False)
    with pytest.raises(ValueError, match="mamba layers"):
        simulate_hybrid_groups(pages, (GroupSpec("mamba", 16), GroupSpec("full", 16)), [None])
    with pytest.raises(ValueError, match="serial schedule only"):
        simulate_hybrid_groups(pages, groups, [None], schedule="model")
    with pytest.raises(ValueError, match="16-token pages"):
        simulate_hybrid_groups(pages, (GroupSpec("sliding", 32, window=40), GroupSpec("full", 32)), [None])
    with pytest.raises(ValueError, match="one sliding window"):
        simulate_hybrid_groups(pages, (GroupSpec("sliding", 16, window=40), GroupSpec("sliding", 16, window=64),
                                       GroupSpec("full", 16)), [None])


def test_the_planner_gives_sglangs_hits_per_request(capsys, tmp_path):
    run = next(r for r in MANIFEST["runs"] if r["trace"] == "hyb_edges_b64" and r["window"] == 128 and not r["decode"]
               and r["model"] == "gpt-oss-20b")
    answered = [p for p in run["pools"] if p != "inf" and _claims(run, p)][:1] + ["inf"]
    out = tmp_path / "pr.csv"
    code, _out, err = run_stackdist(capsys, "plan", TRACES["hyb_edges_b64"][0], "--format", "mooncake", "--block-size", "64",
                                    "--semantics", "sglang", "--model-config", ROOT / "hybrid" / "configs" / "gpt-oss-20b.json",
                                    "--gpu-blocks", ",".join(answered), "--schedule", "serial", "--no-decode",
                                    "--per-request", out)
    assert code == 0, err
    with open(out) as fh:
        got = list(csv.DictReader(fh))
    with open(DATA / run["file"]) as fh:
        want = list(csv.DictReader(fh))
    for pool in answered:
        assert [int(r[f"hit_tokens_{pool}"]) for r in got] == [int(r[f"hit_tokens_{pool}"]) for r in want]


def _claims(run, pool: str) -> bool:
    try:
        sglang_hybrid_hits(_pages(run["trace"]), run["window"], int(pool), run["decode"])
        return True
    except NotModelled:
        return False


@pytest.mark.parametrize(("config", "extra", "message"), [
    ("Llama-4-Scout-17B-16E-Instruct.json", ["--schedule", "serial"], "does not run chunked layers"),
    ("gpt-oss-20b.json", ["--schedule", "model"], "serial schedule only"),
    ("gpt-oss-20b.json", ["--schedule", "serial", "--swa-full-tokens-ratio", "0"], "--swa-full-tokens-ratio"),
])
def test_the_planner_refuses_what_the_sglang_model_does_not_run(capsys, config, extra, message):
    code, _out, err = run_stackdist(capsys, "plan", TRACES["swa_shared_b64"][0], "--format", "mooncake", "--block-size", "64",
                                    "--semantics", "sglang", "--model-config", ROOT / "hybrid" / "configs" / config,
                                    "--gpu-blocks", "100000", "--no-decode", *extra)
    last = err.strip().splitlines()[-1]  # argparse prints its usage first
    assert code == 2 and message in last and last.startswith("stackdist plan: error:"), err
    assert "Traceback" not in err


def test_the_planner_refuses_a_pool_where_sglang_would_evict(capsys):
    code, _out, err = run_stackdist(capsys, "plan", TRACES["swa_shared_b64"][0], "--format", "mooncake", "--block-size", "64",
                                    "--semantics", "sglang", "--model-config", ROOT / "hybrid" / "configs" / "gpt-oss-20b.json",
                                    "--gpu-blocks", "100", "--schedule", "serial", "--no-decode")
    assert code == 1 and "SGLang may evict" in err and "Traceback" not in err, err
