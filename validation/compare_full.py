"""The whole conversation trace (12,031 requests, 9 M pages) against the engines' own code.

The engines' per-request results of ``data/traces/mooncake_conversation_trace.jsonl`` at a few
pool sizes are recorded by the drivers (slow: vLLM's own code takes 3 to 9 minutes per pool size
here) into ``validation/results/conversation.<engine>.<schedule>.<decode>.csv.gz``; this script
runs the planner's engine model on the same trace and settings and writes, per pool size,
requests equal and tokens off to docs/engine_validation_full.md (``-``: print instead).

    /path/to/venv-vllm/bin/python validation/drive_vllm.py --trace data/traces/mooncake_conversation_trace.jsonl \\
        --hash-block-size 512 --schedule serial --no-decode --pools 40000,131073,400000,inf --out conv.csv
    gzip -c conv.csv > validation/results/conversation.vllm.serial.nodecode.csv.gz
    python validation/compare_full.py
"""

from __future__ import annotations

import csv
import gzip
import io
import sys
import time
from pathlib import Path

import numpy as np

from stackdist.planning.engine_plan import EngineOptions, run_engine_models
from stackdist.traces import read_mooncake

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "validation" / "results"
TRACE = ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"


def _engine(path: Path) -> dict[str, np.ndarray]:
    rows = list(csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode())))
    return {c[len("hit_tokens_"):]: np.array([int(r[c]) for r in rows]) for c in rows[0] if c.startswith("hit_tokens_")}


def rows() -> list[str]:
    trace = read_mooncake(TRACE)
    out = []
    for path in sorted(RESULTS.glob("conversation.*.csv.gz")):
        engine, schedule, decode = path.name.split(".")[1:4]
        truth = _engine(path)
        pools = tuple(None if p == "inf" else int(p) for p in truth)
        start = time.perf_counter()
        opts = EngineOptions(models=(engine,), pools=pools, schedule=schedule, decode=decode == "decode")
        result = run_engine_models(trace, opts)[engine]
        seconds = time.perf_counter() - start
        for i, (pool, hits) in enumerate(truth.items()):
            mine = result.hit_tokens[i]
            equal = int(np.count_nonzero(mine == hits))
            off = int(np.abs(mine - hits).sum())
            out.append(f"| {engine} | {schedule}, {'decode' if decode == 'decode' else 'prompt only'} | {pool} | "
                       f"{equal:,} / {hits.size:,} | {off:,} of {int(hits.sum()):,} |")
        out.append(f"| | (the model: {seconds:.1f} s for all {len(pools)} sizes, this machine) | | | |")
    return out


def main() -> int:
    body = "\n".join(["| engine | run | pool (engine's count) | requests equal | tokens off |",
                      "|---|---|---:|---:|---:|", *rows()]) + "\n"
    text = ("# The whole conversation trace against the engines\n\n"
            "`data/traces/mooncake_conversation_trace.jsonl` (12,031 requests, 512-token hash ids split into "
            "16-token pages, 9,055,233 page lookups), driven through the engines' own cache code by "
            "`validation/drive_*.py` and through the planner's engine model, request by request. Regenerate with "
            "`python validation/compare_full.py` (the engines' results are committed gzipped in "
            "`validation/results/`).\n\n" + body)
    if sys.argv[1:] == ["-"]:
        sys.stdout.write(text)
    else:
        (ROOT / "docs" / "engine_validation_full.md").write_text(text)
        sys.stdout.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
