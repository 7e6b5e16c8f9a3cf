"""Routing on the engine models (stackdist.serving.routed): speed and what routing is worth.

    python benchmarks/bench_routing.py [--trace PATH] [--workers 4] [--quick]

On the conversation trace (12,031 requests, 9 M 16-token pages; the service-model schedule,
decode on) runs the vLLM (and, unless ``--quick``, SGLang) model on K workers per pool size:
kv-aware (Dynamo's cost, W = 1, and W = inf: the longest prefix), round-robin, and one pool of
K x N. Prints prefix token hit rates (GPU hits over all prompt tokens; "infeasible" where a
worker cannot allocate) and the wall and process CPU seconds of each joint run (CPU is less
inflated by other work on a shared machine; the load average is recorded). Writes
benchmarks/results/bench_routing.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from stackdist.planning.engine_plan import EngineOptions, assign_workers
from stackdist.serving.pages import engine_pages
from stackdist.serving.routed import simulate_routed
from stackdist.serving.schedule import Schedule
from stackdist.traces import read_requests

TRACE = REPO / "data" / "traces" / "mooncake_conversation_trace.jsonl"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_routing.json"


def timed(fn):  # type: ignore[no-untyped-def]
    """(result, wall s, process CPU s) of one call."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="vLLM only")
    args = ap.parse_args()
    trace = read_requests(args.trace, "mooncake")
    pages = engine_pages(trace)
    schedule = Schedule.from_service_model(trace)
    k = args.workers
    pools: list[int | None] = [50_000, 100_000, 200_000, None]
    total = int(trace.input_length.sum())
    simulate_routed(trace.select(np.arange(3)), "vllm", k, "kv-aware", [None], [0], "serial")  # compile / load
    simulate_routed(trace.select(np.arange(3)), "sglang", k, "kv-aware", [None], [0], "serial")
    rr = assign_workers(trace, EngineOptions(workers=k, router="round-robin"), schedule)
    runs = {"kv-aware W=1": (k, "kv-aware", 1.0, pools), "kv-aware W=inf": (k, "kv-aware", float("inf"), pools),
            "round-robin": (k, rr, 1.0, pools),
            f"one pool of {k} x N": (1, np.zeros(trace.n_requests, np.int64), 1.0, [None if p is None else p * k for p in pools])}
    load = os.getloadavg()
    rows = []
    for model in ("vllm",) if args.quick else ("vllm", "sglang"):
        for name, (workers, route, weight, sizes) in runs.items():
            def run(model=model, workers=workers, route=route, sizes=sizes, weight=weight):  # type: ignore[no-untyped-def]
                return simulate_routed(pages, model, workers, route, sizes, [0], schedule, True, overlap_weight=weight)

            res, wall, cpu = timed(run)
            rates = [None if f >= 0 else int(h.sum()) / total for h, f in zip(res.gpu_hit_tokens, res.failed_request)]
            spread = [np.bincount(w[w >= 0], minlength=workers).tolist() for w in res.worker]
            rows.append({"model": model, "run": name, "workers": workers, "pools_per_worker": pools,
                         "prefix_token_hit_rate": rates, "requests_per_worker": spread, "wall_s": wall, "cpu_s": cpu})
            shown = " ".join(f"{'infeasible' if r is None else f'{r:.2%}':>11}" for r in rates)
            print(f"{model:7} {name:22} {shown}   wall {wall:6.1f} s  cpu {cpu:6.1f} s")
    out = {"trace": str(args.trace), "requests": trace.n_requests, "pages": len(pages.key), "workers": k,
           "schedule": "service model (10,000 prefill, 50 decode tokens/s), decode on", "pools_per_worker": pools,
           "load_average_before": load, "load_average_after": os.getloadavg(), "rows": rows}
    RESULTS.write_text(json.dumps(out, indent=1, default=lambda x: None) + "\n")
    print(f"pools per worker (num_gpu_blocks / pages): {pools}; load average {load[0]:.1f} -> {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
