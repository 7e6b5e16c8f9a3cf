"""The engine models equal the real engines on every committed run (tests/data/engines/).

The validation drivers (validation/drive_vllm.py, drive_sglang.py) fed these traces to vLLM's
KVCacheManager and SGLang's RadixCache under validation/SPEC.md and wrote each request's hit
tokens per pool size; manifest.json lists the runs, the infeasible pools with the first failing
request, and the smallest feasible pool the drivers found by bisection. Skipped only when the
data folder does not exist; a folder without a manifest fails.
"""

from __future__ import annotations

import csv
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stackdist
from stackdist.serving.pages import engine_pages
from stackdist.serving.results import bisect_feasible
from stackdist.serving.schedule import Schedule
from stackdist.serving.sglang import sglang_pool_run, simulate_sglang
from stackdist.serving.vllm import simulate_vllm, vllm_pool_run

DATA = Path(__file__).resolve().parent.parent / "data" / "engines"
E = 16


def _manifest() -> dict[str, Any]:
    if not DATA.is_dir():
        pytest.skip("tests/data/engines/ does not exist (no committed engine runs)")
    path = DATA / "manifest.json"
    assert path.exists(), "tests/data/engines/ exists but has no manifest.json (validation/run_all.py writes it)"
    return json.loads(path.read_text())


@functools.cache
def _pages(path: Path, block_size: int) -> Any:
    """The engine pages of one committed trace, read once per process (the runs share traces)."""
    return engine_pages(stackdist.read_mooncake(path, block_size))


def _pool(text: str) -> int | None:
    return None if text == "inf" else int(text)


def compare_run(data: Path, trace_meta: dict[str, Any], run: dict[str, Any]) -> dict[str, int]:
    """Assert the model equals one engine run; returns counts (requests, pools, infeasible)."""
    pages = _pages(data / trace_meta["file"], trace_meta["hash_block_size"])
    decode = run["decode"] == "decode"
    if run["schedule"] == "serial":
        sched = Schedule.serial(pages.n_requests)
    else:
        sched = Schedule.read_csv(data / trace_meta["schedule_csv"], pages.n_requests)
    pools = [_pool(p) for p in run["pools"]]
    sim = simulate_vllm if run["engine"] == "vllm" else simulate_sglang
    res = sim(pages, pools, sched, decode=decode, threads=1)
    with open(data / run["file"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == pages.n_requests
    failures = {int(f["pool"]): int(f["request"]) for f in run["infeasible"]}
    tag = f"{run['trace']} {run['engine']} {run['schedule']} {run['decode']}"
    for i, p in enumerate(run["pools"]):
        if p in run["feasible_pools"]:
            assert res.failed_request[i] < 0, f"{tag} pool {p}: model infeasible at request {res.failed_request[i]}"
            engine = np.array([int(r[f"hit_tokens_{p}"]) for r in rows], np.int64)
            diff = np.flatnonzero(engine != res.hit_tokens[i])
            assert len(diff) == 0, (f"{tag} pool {p}: request {diff[0]} engine {engine[diff[0]]} "
                                    f"model {res.hit_tokens[i][diff[0]]} ({len(diff)} requests differ)")
        else:
            assert res.failed_request[i] == failures[int(p)], f"{tag} pool {p}: first failing request"
    return {"requests": pages.n_requests, "pools": len(pools), "infeasible": len(failures)}


def compare_smallest_feasible(data: Path, trace_meta: dict[str, Any], run: dict[str, Any]) -> None:
    """The drivers' bisection, repeated over the model in the same interval, lands on the same pool."""
    pages = _pages(data / trace_meta["file"], trace_meta["hash_block_size"])
    decode = run["decode"] == "decode"
    sched = (Schedule.serial(pages.n_requests) if run["schedule"] == "serial"
             else Schedule.read_csv(data / trace_meta["schedule_csv"], pages.n_requests))
    vllm = run["engine"] == "vllm"
    longest = int(((pages.input_tokens + E - 1) // E).max())
    lo = longest + (1 if vllm else 0) - 1
    o = pages.output_tokens if decode else np.ones_like(pages.output_tokens)
    hi = int(((pages.input_tokens + o + E - 1) // E + 1).sum()) + 2
    step = vllm_pool_run if vllm else sglang_pool_run
    n = bisect_feasible(lambda m: step(pages, sched, decode, m)[1] < 0, lo, hi)
    assert n == run["smallest_feasible_pool"], f"{run['trace']} {run['engine']} {run['schedule']} {run['decode']}"


def test_models_equal_engines_on_every_committed_run() -> None:
    manifest = _manifest()
    traces = manifest["traces"]
    totals = {"runs": 0, "requests": 0, "pools": 0, "infeasible": 0}
    for run in manifest["runs"]:
        counts = compare_run(DATA, traces[run["trace"]], run)
        totals["runs"] += 1
        for k, v in counts.items():
            totals[k] += v
    assert totals["runs"] > 0


def test_smallest_feasible_pool_equals_engines() -> None:
    manifest = _manifest()
    for run in manifest["runs"]:
        if run.get("smallest_feasible_pool") is not None:
            compare_smallest_feasible(DATA, manifest["traces"][run["trace"]], run)
