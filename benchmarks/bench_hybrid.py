"""Benchmark: vLLM's hybrid KV cache (``plan --model-config``) on the bundled conversation trace,
pure Python (:mod:`stackdist.serving.hybrid`) against the compiled kernel
(:mod:`stackdist.serving.hybrid_kernel`), whole processes.

``stackdist plan data/traces/mooncake_conversation_trace.jsonl --format mooncake --semantics vllm
--model-config tests/data/engines/hybrid/configs/gpt-oss-20b.json --gpu-blocks 65537,1000001
--schedule serial --no-decode --max-num-batched-tokens 8192 --json OUT`` in three arms:

- ``python``: the plan as it was before the kernel: the pure-Python model at both pools, no
  working-set search (this script's driver swaps the model back in and skips the search, in the
  child process only);
- ``kernel``: the same work with the kernel (the search skipped the same way): the ratio;
- ``kernel + search``: the plan as it runs now, with the hybrid working-set search
  (planning/hybrid_working_set.py: every probe a whole-trace run, the full-attention group alone
  searched too).

Each run is a separate process (wall time and peak resident memory from ``wait4``), ``--runs``
times, interleaved; medians reported; the arms' per-request hits at both pools must be equal.
Prints a table and writes ``results/bench_hybrid.json``.

Usage::

    python benchmarks/bench_hybrid.py              # 3 runs
    python benchmarks/bench_hybrid.py --runs 1     # a smoke test
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stackdist.output import write_json

TRACE = ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"
CONFIG = ROOT / "tests" / "data" / "engines" / "hybrid" / "configs" / "gpt-oss-20b.json"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_hybrid.json"
POOLS = "65537,1000001"
ARMS = ("python", "kernel", "kernel + search")

# The child: the CLI, with the pure-Python model swapped back in and / or the search skipped.
DRIVER = """
import sys
arm = sys.argv[1]
from stackdist.serving import vllm
from stackdist.serving.hybrid import simulate_hybrid
from stackdist.planning import engine_working_set as ws
if arm == "python":
    vllm.VllmModel.simulate_hybrid = lambda self, trace, pools, schedule, decode, groups, chunk_tokens=8192: \\
        simulate_hybrid(trace, groups, pools, schedule, decode, chunk_tokens)
if arm in ("python", "kernel"):
    ws.hybrid_search = lambda *a, **k: {"skipped": "not searched (benchmark: the plan before the kernel)"}
from stackdist.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_arm(arm: str, out: Path, per: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (KiB) of one whole process of ``arm``."""
    argv = ["plan", str(TRACE), "--format", "mooncake", "--semantics", "vllm", "--model-config", str(CONFIG),
            "--gpu-blocks", POOLS, "--schedule", "serial", "--no-decode", "--max-num-batched-tokens", "8192",
            "--json", str(out), "--per-request", str(per)]
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, arm, *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if status != 0:
        raise SystemExit(f"bench_hybrid: the {arm} arm failed ({status}): {err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, int(usage.ru_maxrss)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    if args.runs < 1:
        print("bench_hybrid: --runs must be at least 1", file=sys.stderr)
        return 2
    times: dict[str, list[float]] = {a: [] for a in ARMS}
    cpu: dict[str, list[float]] = {a: [] for a in ARMS}
    rss: dict[str, list[int]] = {a: [] for a in ARMS}
    hits: dict[str, list[dict[str, str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for arm in ARMS:
                out, per = Path(tmp) / "plan.json", Path(tmp) / f"per_{arm.replace(' ', '_')}.csv"
                wall, seconds, peak = run_arm(arm, out, per)
                print(f"bench_hybrid: run {i + 1}/{args.runs} {arm}: {wall:.1f} s ({seconds:.1f} s CPU), "
                      f"{peak / 1024:.0f} MiB", file=sys.stderr, flush=True)
                times[arm].append(wall)
                cpu[arm].append(seconds)
                rss[arm].append(peak)
                with per.open() as f:
                    hits[arm] = [{k: v for k, v in row.items() if k.startswith("hit_tokens_")} for row in csv.DictReader(f)]
    equal = all(hits[a] == hits["python"] for a in ARMS)
    median = {a: statistics.median(v) for a, v in times.items()}
    median_cpu = {a: statistics.median(v) for a, v in cpu.items()}
    result: dict[str, Any] = {
        "trace": "data/traces/mooncake_conversation_trace.jsonl (12,031 requests, 145 M prompt tokens)",
        "model": "gpt-oss-20b (tests/data/engines/hybrid/configs/gpt-oss-20b.json): 12 sliding-window (128) + 12 "
                 "full-attention layers, 2 KV cache groups, 16-token blocks",
        "settings": f"--gpu-blocks {POOLS} --schedule serial --no-decode --max-num-batched-tokens 8192",
        "runs": args.runs, "seconds": times, "median_s": median, "cpu_seconds": cpu, "median_cpu_s": median_cpu,
        "peak_rss_kib": rss,
        "median_peak_rss_mib": {a: statistics.median(v) / 1024 for a, v in rss.items()},
        "ratio_python_over_kernel": median["python"] / median["kernel"],
        "cpu_ratio_python_over_kernel": median_cpu["python"] / median_cpu["kernel"], "hits_equal": equal}
    print(f"{result['trace']}; {result['model']}; {result['settings']}; median of {args.runs} whole processes")
    print(f"{'arm':<18}{'median s':>10}{'CPU s':>10}{'peak MiB':>10}")
    for arm in ARMS:
        print(f"{arm:<18}{median[arm]:>10.2f}{median_cpu[arm]:>10.2f}{result['median_peak_rss_mib'][arm]:>10.0f}")
    print(f"pure Python / kernel: {result['ratio_python_over_kernel']:.1f}x wall, "
          f"{result['cpu_ratio_python_over_kernel']:.1f}x CPU; per-request hits equal: {equal}")
    write_json(str(RESULTS), result)
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
