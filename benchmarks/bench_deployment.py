"""Benchmark: a plan with the deployment answer on the bundled conversation trace (16-token pages).

``stackdist plan data/traces/mooncake_conversation_trace.jsonl --semantics vllm --model qwen3-8b
--kv-dtype fp8 --gpu h200 --gpus 4 --router session --offload lmcache:cpu=256GiB --json OUT``:
the engine model at its pools, the offload ladder and sizing, the budgets, and the deployment:
what 4 replicas deliver, the load floor from the engine's scheduler (the roofline's step time),
and the cheapest deployment per target (replicas x a CPU tier per replica, every point an exact
simulation). Each run is a separate process (wall time and peak resident memory from ``wait4``),
``--runs`` times; medians reported. The target is under 60 s. Prints a table and writes
``results/bench_deployment.json``.

Usage::

    python benchmarks/bench_deployment.py             # 3 runs
    python benchmarks/bench_deployment.py --runs 1    # a smoke test
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import run_stackdist as run

from stackdist.output import write_json

TRACE = ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_deployment.json"
ARGS = ["--semantics", "vllm", "--model", "qwen3-8b", "--kv-dtype", "fp8", "--gpu", "h200", "--gpus", "4",
        "--router", "session", "--offload", "lmcache:cpu=256GiB"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    if args.runs < 1:
        print("bench_deployment: --runs must be at least 1", file=sys.stderr)
        return 2
    times, rss = [], []
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        for _ in range(args.runs):
            wall, peak = run(["plan", str(TRACE), *ARGS, "--json", str(out)])
            times.append(wall)
            rss.append(peak)
            report = json.loads(out.read_text())["deployment"]
    d = report["delivers"]
    result: dict[str, Any] = {
        "command": "stackdist plan data/traces/mooncake_conversation_trace.jsonl " + " ".join(ARGS),
        "runs": args.runs, "seconds": times, "median_s": statistics.median(times), "peak_rss_kib": rss, "target_s": 60.0,
        "delivers": {"prefix_token_hit_rate": d["prefix_token_hit_rate"], "usd_per_hour": d["cost"]["usd_per_hour"]},
        "fewest_replicas_keeping_up": report["load"]["fewest_replicas_keeping_up"],
        "targets": [{"target": t["target"], "kind": t["kind"],
                     "cheapest": None if t["cheapest"] is None else
                     {"replicas": t["cheapest"]["replicas"], "tiers_per_replica": t["cheapest"]["tiers_per_replica"],
                      "usd_per_hour": t["cheapest"]["cost"]["usd_per_hour"]}} for t in report["targets"]],
    }
    print(f"{result['command']}\nmedian of {args.runs}: {result['median_s']:.1f} s, peak {max(rss) / 1024:.0f} MiB "
          f"(target {result['target_s']:.0f} s); delivers {d['prefix_token_hit_rate']:.2%} at US$ {d['cost']['usd_per_hour']:.2f}/h; "
          f"fewest replicas keeping up: {result['fewest_replicas_keeping_up']}")
    write_json(str(RESULTS), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
