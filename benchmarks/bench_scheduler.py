"""Benchmark: the scheduler model (``plan --schedule scheduler``) on the bundled conversation trace
at 16-token pages, whole processes.

``stackdist plan data/traces/mooncake_conversation_trace.jsonl --semantics vllm --schedule scheduler
--json OUT`` twice: with the plan's default pool sizes (eight spread up to no eviction, and inf),
and with ten pool sizes named (``--gpu-blocks``, from far below the concurrency floor to no
eviction). Each run is a separate process (wall time and peak resident memory from ``wait4``),
``--runs`` times, interleaved; medians reported. The target is under 30 s for ten pool sizes.
Also, in this process, the seconds of one pool (the unit of the plan's cost). With ``--versus``,
the naive competitor: the pure-Python model the kernel is tested against
(``simulate_scheduler(..., reference=True)``: OrderedDicts and lists), on the whole trace at one
pool, side by side, checking they agree on every request. Prints a table and writes
``results/bench_scheduler.json``.

Usage::

    python benchmarks/bench_scheduler.py              # 3 runs
    python benchmarks/bench_scheduler.py --runs 1     # a smoke test
    python benchmarks/bench_scheduler.py --versus     # also the pure-Python model at one pool
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import run_stackdist as run

from stackdist.output import write_json

TRACE = ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_scheduler.json"
TEN = "8000,12000,16000,20000,30000,40000,60000,80000,120000,inf"
CASES = {"default pools": [], "ten pools": ["--gpu-blocks", TEN]}
VERSUS_POOL = 30000


def per_pool_seconds() -> list[dict[str, Any]]:
    """One scheduler simulation per pool of the ten, in this process (after a warm-up)."""
    from stackdist.serving.scheduler import simulate_scheduler
    from stackdist.traces.stream_input import read_as_requests

    trace = read_as_requests([str(TRACE)], "mooncake", None, False, True)
    simulate_scheduler(trace, [8000], True)  # load the compiled kernel
    out = []
    for text in TEN.split(","):
        pool = None if text == "inf" else int(text)
        start = time.perf_counter()
        r = simulate_scheduler(trace, [pool], True)
        out.append({"pool": text, "seconds": time.perf_counter() - start,
                    "preemptions": int(r.preemptions[0].sum()),
                    "prefix_token_hit_rate": float(r.hit_tokens[0].sum() / trace.input_length.sum())})
    return out


def versus() -> dict[str, Any]:
    """The kernel against the pure-Python model on the whole trace at one pool."""
    import numpy as np

    from stackdist.serving.scheduler import simulate_scheduler
    from stackdist.traces.stream_input import read_as_requests

    trace = read_as_requests([str(TRACE)], "mooncake", None, False, True)
    simulate_scheduler(trace, [8000], True)
    start = time.perf_counter()
    fast = simulate_scheduler(trace, [VERSUS_POOL], True)
    kernel = time.perf_counter() - start
    start = time.perf_counter()
    slow = simulate_scheduler(trace, [VERSUS_POOL], True, reference=True)
    naive = time.perf_counter() - start
    equal = all(np.array_equal(getattr(fast, k), getattr(slow, k), equal_nan=True)
                for k in ("hit_tokens", "preemptions", "queue_s", "first_token_s", "finish_s"))
    return {"pool": VERSUS_POOL, "requests": trace.n_requests, "kernel_s": kernel, "reference_s": naive,
            "ratio": naive / kernel, "equal": equal}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--versus", action="store_true", help="also time the pure-Python model at one pool")
    args = p.parse_args()
    if args.runs < 1:
        print("bench_scheduler: --runs must be at least 1", file=sys.stderr)
        return 2
    times: dict[str, list[float]] = {k: [] for k in CASES}
    rss: dict[str, list[int]] = {k: [] for k in CASES}
    reports: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            for name, extra in CASES.items():
                out = Path(tmp) / f"{name.replace(' ', '_')}.json"
                wall, peak = run(["plan", str(TRACE), "--semantics", "vllm", "--schedule", "scheduler", *extra,
                                  "--json", str(out)])
                times[name].append(wall)
                rss[name].append(peak)
                reports[name] = json.loads(out.read_text())
    median = {k: statistics.median(v) for k, v in times.items()}
    result: dict[str, Any] = {
        "trace": "data/traces/mooncake_conversation_trace.jsonl (12,031 requests), vLLM model, 16-token pages, decode on",
        "settings": "max_num_seqs 1024, max_num_batched_tokens 8192, step 0.020 s + 10 us per token (assumed)",
        "runs": args.runs, "seconds": times, "median_s": median, "peak_rss_kib": rss, "target_s": 30.0, "pools": {}}
    print(f"{result['trace']}; {result['settings']}; median of {args.runs} runs")
    print(f"{'case':<16}{'pools':>6}{'median s':>10}{'peak MiB':>10}  hit rate / TTFT p50 per pool")
    for name in CASES:
        rows = reports[name]["engine_models"]["vllm"]["pools"]
        result["pools"][name] = [{"gpu_blocks": r["gpu_blocks"], "prefix_token_hit_rate": r["prefix_token_hit_rate"],
                                  "ttft_p50_s": r["load"]["ttft_s"]["p50"], "keeps_up": r["load"]["keeps_up"],
                                  "preemptions": r["load"]["preemptions"]} for r in rows]
        print(f"{name:<16}{len(rows):>6}{median[name]:>10.2f}{max(rss[name]) / 1024:>10.0f}  "
              + ", ".join(f"{r['gpu_blocks']}: {r['prefix_token_hit_rate']:.2%} / {r['load']['ttft_s']['p50']:.2f} s"
                          for r in rows[:4]) + ", ...")
    result["per_pool"] = per_pool_seconds()
    print(f"{'pool':>10}{'one simulation s':>18}{'preemptions':>13}{'hit rate':>10}")
    for row in result["per_pool"]:
        print(f"{row['pool']:>10}{row['seconds']:>18.2f}{row['preemptions']:>13,}{row['prefix_token_hit_rate']:>10.2%}")
    if args.versus:
        result["versus"] = v = versus()
        print(f"versus the pure-Python model at {v['pool']:,} blocks ({v['requests']:,} requests): kernel "
              f"{v['kernel_s']:.2f} s, reference {v['reference_s']:.1f} s, {v['ratio']:.0f}x; equal: {v['equal']}")
    write_json(str(RESULTS), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
