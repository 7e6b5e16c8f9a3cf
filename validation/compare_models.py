"""Each of the planner's four models against each engine, on every committed validation run.

For every run in tests/data/engines/manifest.json (a trace, an engine, a schedule, decode on or
off, pool sizes) and every feasible pool size, the engine's per-request hit tokens are compared
with what each model predicts for that request:

- ``vllm``, ``sglang``: the engine models (``stackdist plan --semantics vllm|sglang``), at the
  same pool size, schedule and decode setting;
- ``engine``, ``per-access``: the idealized LRU semantics over the same 16-token pages, at the
  capacity the pool leaves for cached blocks (vLLM: N - 1 blocks, the null block aside; SGLang:
  N pages); they know nothing of schedules or decode.

Writes a Markdown table (requests equal, tokens off) to docs/engine_validation.md, or prints
it with ``-``. Run from the repository root: ``python validation/compare_models.py``.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

from stackdist.planning.engine_plan import EngineOptions, run_engine_models
from stackdist.serving import replay_requests, request_hits
from stackdist.serving.schedule import Schedule
from stackdist.traces import read_mooncake, reblock

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "engines"
MODELS = ("vllm", "sglang", "engine", "per-access")


def _engine_hits(path: Path) -> dict[str, np.ndarray]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    cols = [c for c in rows[0] if c.startswith("hit_tokens_")] if rows else []
    return {c[len("hit_tokens_"):]: np.array([int(r[c]) for r in rows]) for c in cols}


def _predictions(run: dict, info: dict, pools: list[str]) -> dict[str, dict[str, np.ndarray]]:
    trace = read_mooncake(DATA / info["file"], block_size=int(info["hash_block_size"]))
    schedule = Schedule.serial(trace.n_requests) if run["schedule"] == "serial" else Schedule.read_csv(
        DATA / info["schedule_csv"], trace.n_requests)
    sizes = tuple(None if p == "inf" else int(p) for p in pools)
    out: dict[str, dict[str, np.ndarray]] = {}
    for model in ("vllm", "sglang"):
        opts = EngineOptions(models=(model,), pools=sizes, schedule=schedule, decode=run["decode"] == "decode")
        result = run_engine_models(trace, opts)[model]
        out[model] = {p: result.hit_tokens[i] for i, p in enumerate(pools)}
    pages = reblock(trace, 16)
    usable = {p: (None if p == "inf" else int(p) - (1 if run["engine"] == "vllm" else 0)) for p in pools}
    for semantics in ("engine", "per-access"):
        replay = replay_requests(pages, semantics)
        out[semantics] = {p: request_hits(replay, 2**62 if c is None else c, tokens=True) for p, c in usable.items()}
    return out


def compare() -> dict[tuple[str, str], list[int]]:
    """(model, engine) -> [requests equal, requests, |tokens off|, engine hit tokens]."""
    manifest = json.loads((DATA / "manifest.json").read_text())
    totals: dict[tuple[str, str], list[int]] = {(m, e): [0, 0, 0, 0] for m in MODELS for e in ("vllm", "sglang")}
    for run in manifest["runs"]:
        engine = _engine_hits(DATA / run["file"])
        predicted = _predictions(run, manifest["traces"][run["trace"]], list(engine))
        for model in MODELS:
            t = totals[(model, run["engine"])]
            for pool, truth in engine.items():
                mine = predicted[model][pool]
                t[0] += int(np.count_nonzero(mine == truth))
                t[1] += truth.size
                t[2] += int(np.abs(mine - truth).sum())
                t[3] += int(truth.sum())
    return totals


def table(totals: dict[tuple[str, str], list[int]]) -> str:
    lines = ["| model | vs vLLM 0.33.0: requests equal | tokens off | vs SGLang 0.5.23: requests equal | tokens off |",
             "|---|---:|---:|---:|---:|"]
    for model in MODELS:
        cells = []
        for engine in ("vllm", "sglang"):
            eq, n, off, hits = totals[(model, engine)]
            cells += [f"{eq:,} / {n:,} ({eq / n:.1%})" if n else "-", f"{off / hits:.2%}" if hits else "-"]
        lines.append(f"| `{model}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    manifest = json.loads((DATA / "manifest.json").read_text())
    runs = manifest["runs"]
    body = table(compare())
    text = (
        "# The planner's models against the engines' own code\n\n"
        f"Every committed validation run ({len(runs)} runs: {len(manifest['traces'])} traces x engine x schedule x "
        "decode, every feasible pool size; see `validation/README.md`) compared request by request. *Requests equal*: "
        "requests (over all pool sizes) whose predicted hit tokens equal the engine's; *tokens off*: the sum of "
        "absolute per-request differences over the engine's hit tokens. `engine` and `per-access` are idealized LRUs "
        "over the same 16-token pages at the capacity the pool leaves for cache (vLLM: N - 1 blocks; SGLang: N "
        "pages); they ignore schedules, decode and the engines' rules, which is what the differences measure.\n\n"
        + body + "\nRegenerate with `python validation/compare_models.py` (about a minute).\n"
    )
    if sys.argv[1:] == ["-"]:
        sys.stdout.write(text)
    else:
        (ROOT / "docs" / "engine_validation.md").write_text(text)
        sys.stdout.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
