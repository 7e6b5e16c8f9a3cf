"""SGLang 0.5.23's Mamba hybrid (full attention + Mamba, Qwen3-Next) prefix cache: the model
(``stackdist.serving.sglang_mamba``) against SGLang's own objects driven on CPU
(``validation/drive_sglang_mamba.py``, committed in ``tests/data/engines/sglang_mamba/``), against
the full-attention SGLang model, and through the command line."""

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
from stackdist.serving.sglang_hybrid import NotModelled
from stackdist.serving.sglang_mamba import sglang_mamba_hits, simulate_mamba_groups
from stackdist.traces import RequestTrace, read_mooncake

ROOT = Path(__file__).resolve().parents[1] / "data" / "engines"
DATA = ROOT / "sglang_mamba"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
CONFIG = ROOT / "hybrid" / "configs" / "Qwen3-Next-80B-A3B-Instruct.json"
_PAGES: dict[str, object] = {}


def _pages(name: str):
    if name not in _PAGES:
        t = MANIFEST["traces"][name]
        _PAGES[name] = engine_pages(read_mooncake(DATA / t["path"], block_size=t["hash_block_size"]))
    return _PAGES[name]


def _rows(run):
    with open(DATA / run["file"]) as fh:
        return list(csv.DictReader(fh))


def test_manifest_names_the_engine_and_hashes_every_file():
    assert MANIFEST["engine"]["name"] == "sglang" and MANIFEST["engine"]["version"] == "0.5.23"
    s = MANIFEST["settings"]
    assert (s["page_size_tokens"], s["mamba_checkpoint_grid_tokens"], s["mamba_track_grid_tokens"]) == (16, 64, 256)
    for rel, digest in {**MANIFEST["files"], **MANIFEST["inputs"]}.items():
        assert hashlib.sha256((DATA / rel).read_bytes()).hexdigest() == digest, rel
    assert len(MANIFEST["runs"]) == 24 and {r["file"] for r in MANIFEST["runs"]} == set(MANIFEST["files"])


AMPLE = [r for r in MANIFEST["runs"] if r["mamba_slots"] == "inf"]


@pytest.mark.parametrize("run", AMPLE, ids=lambda r: Path(r["file"]).stem)
def test_the_model_equals_sglang_on_every_request_of_every_pool_it_answers(run):
    pages = _pages(run["trace"])
    rows = _rows(run)
    answered = 0
    for pool in run["pools"]:
        n = None if pool == "inf" else int(pool)
        try:
            got = sglang_mamba_hits(pages, n, run["decode"])
        except NotModelled:
            continue
        assert pool in run["feasible_pools"], f"the model answers pool {pool}, where SGLang failed"
        want = [int(r[f"hit_tokens_{pool}"]) for r in rows]
        bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
        assert not bad, f"pool {pool}: (request, model, SGLang) {bad[:5]}"
        answered += 1
    assert answered >= 4  # A, A + 1, 2 A and inf


def test_a_pool_sglang_cannot_run_is_refused_not_answered():
    bad = [(r, b) for r in AMPLE for b in r["infeasible"]]
    assert bad
    for run, b in bad:
        with pytest.raises(NotModelled, match="SGLang may evict"):
            sglang_mamba_hits(_pages(run["trace"]), int(b["pool"]), run["decode"])


def test_a_short_mamba_pool_loses_hits_the_model_does_not_claim():
    # SGLang driven with 4, 8, 16 Mamba slots evicts states: hits fall below the ample pool's
    for small in (r for r in MANIFEST["runs"] if r["mamba_slots"] != "inf"):
        ample = next(r for r in AMPLE if r["trace"] == small["trace"] and r["decode"] == small["decode"])
        assert small["stats"]["inf"]["total_hit_tokens"] <= ample["stats"]["inf"]["total_hit_tokens"]
    assert any(r["stats"]["inf"]["total_hit_tokens"] < next(a for a in AMPLE if a["trace"] == r["trace"] and
               a["decode"] == r["decode"])["stats"]["inf"]["total_hit_tokens"] for r in MANIFEST["runs"] if r["mamba_slots"] == "4")


@pytest.mark.parametrize("seed", range(10))
def test_hits_are_checkpoint_aligned_and_never_above_full_attention(seed):
    trace = random_trace(seed, n_requests=40)
    pages = engine_pages(trace)
    decode = bool(seed % 2)
    full = simulate_sglang(pages, [None], "serial", decode=decode).hit_tokens[0]
    got = np.array(sglang_mamba_hits(pages, None, decode))
    assert (got <= full).all() and (got % 64 == 0).all() and (got <= trace.input_length - 1).all()


def test_group_kinds_and_schedules_it_is_not_modelled_for_are_refused():
    pages = _pages("swa_shared_b64")
    groups = (GroupSpec("mamba", 576), GroupSpec("full", 576))
    assert simulate_mamba_groups(pages, groups, [None]).hit_tokens[0].tolist() == sglang_mamba_hits(pages, None, False)
    with pytest.raises(ValueError, match="Mamba layers only"):
        simulate_mamba_groups(pages, (GroupSpec("sliding", 16, window=40), GroupSpec("full", 16)), [None])
    with pytest.raises(ValueError, match="serial schedule only"):
        simulate_mamba_groups(pages, groups, [None], schedule="model")


def test_the_planner_gives_sglangs_hits_per_request(capsys, tmp_path):
    run = next(r for r in AMPLE if r["trace"] == "hyb_edges_b64" and not r["decode"])
    a = min(int(p) for p in run["pools"] if p != "inf" and _answers(run, p))
    out = tmp_path / "pr.csv"
    code, _out, err = run_stackdist(capsys, "plan", DATA / MANIFEST["traces"]["hyb_edges_b64"]["path"], "--format", "mooncake",
                                    "--block-size", "64", "--semantics", "sglang", "--model-config", CONFIG,
                                    "--gpu-blocks", f"{a},inf", "--schedule", "serial", "--no-decode", "--per-request", out)
    assert code == 0, err
    with open(out) as fh:
        got = list(csv.DictReader(fh))
    rows = _rows(run)
    for pool in (str(a), "inf"):
        col = next(c for c in got[0] if c.startswith("hit_tokens") and c.endswith(f"_{pool}"))
        assert [int(g[col]) for g in got] == [int(r[f"hit_tokens_{pool}"]) for r in rows]


def _answers(run, pool) -> bool:
    try:
        sglang_mamba_hits(_pages(run["trace"]), int(pool), run["decode"])
    except NotModelled:
        return False
    return True


@pytest.mark.parametrize(("extra", "code_want", "message"), [
    (["--schedule", "model"], 2, "serial schedule only"),
    (["--schedule", "serial", "--swa-full-tokens-ratio", "0.8"], 2, "--swa-full-tokens-ratio"),
    (["--schedule", "serial", "--gpu-blocks", "100"], 1, "SGLang may evict"),
    (["--schedule", "serial", "--gdn-checkpoint-alignment", "128"], 2, "--gdn-checkpoint-alignment"),
])
def test_the_planner_refuses_what_the_sglang_mamba_model_does_not_run(capsys, extra, code_want, message):
    code, _out, err = run_stackdist(capsys, "plan", DATA / MANIFEST["traces"]["swa_shared_b64"]["path"], "--format", "mooncake",
                                    "--block-size", "64", "--semantics", "sglang", "--model-config", CONFIG,
                                    "--gpu-blocks", "100000", "--no-decode", *extra)
    last = err.strip().splitlines()[-1]
    assert code == code_want and message in last and "Traceback" not in err, err


def _lcp(k: list[int], seq: list[int], cap: int) -> int:
    n = 0
    while n < min(len(k), cap) and k[n] == seq[n]:
        n += 1
    return n


def _naive_hits(pages, decode: bool, chunk: int) -> list[int]:
    """Brute force restatement of the module docstring's rules: every inserted key kept as a token
    list (page ids; generated pages unique), every state as (key, depth); the hit is the deepest
    state depth <= floor16(P - 1) whose key prefix equals the prompt's."""
    keys: list[list[int]] = []
    states: list[tuple[int, int]] = []  # (index into keys, depth in tokens)
    out = []
    for r in range(pages.n_requests):
        P = int(pages.input_tokens[r])
        O = max(int(pages.output_tokens[r]), 1) if decode else 1
        prompt = [int(x) for x in pages.key[pages.offsets[r]:pages.offsets[r + 1]]][:P // 16]
        seq = prompt + [-(r + 1) * 10**6 - j for j in range((P + O) // 16 + 1)]  # generated: unique
        cap = (P - 1) // 16
        full = max([_lcp(k, seq, cap) for k in keys] + [0])
        hit = max([d for i, d in states if d // 16 <= cap and _lcp(keys[i], seq, cap) >= d // 16] + [0])
        out.append(hit)
        b = full * 16 // 64 * 64
        b = b if b > hit else None
        tracked = []
        s = hit
        first = True
        while ((-(-(P - s) // 16) * 16) if first else P - s) > chunk:
            tracked.append((s, s + chunk))
            s += chunk
            first = False
        tracked.append((s, P))
        for s, e in tracked:
            if e - s >= 64:
                t = b if b is not None and s < b < e and (b - s) % 64 == 0 else s + (e - s) // 64 * 64
                keys.append(seq[:t // 16])
                states.append((len(keys) - 1, t))
        last = (P + O - 1) // 256 * 256
        if last > P:
            keys.append(seq[:last // 16])
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_model_equals_a_brute_force_restatement(seed):
    trace = random_trace(300 + seed, n_requests=30)
    k = 4 + seed  # lengths x k so prompts cross the 64-token grid and outputs the 256-token one
    scaled = RequestTrace(trace.block_ids, trace.offsets, trace.block_tokens * k, trace.timestamps_s,
                          trace.input_length * k, trace.output_length * k, block_size=trace.block_size * k)
    pages = engine_pages(scaled)
    for decode in (False, True):
        for chunk in (8192, 128, 64):
            assert sglang_mamba_hits(pages, None, decode, chunk) == _naive_hits(pages, decode, chunk), (decode, chunk)
