"""Speed of the exact engine models (stackdist.serving) on the 9 M-page conversation trace.

    python benchmarks/bench_serving.py [--trace PATH] [--pools 10] [--threads 2] [--quick]

Reads the Mooncake trace, re-blocks it into 16-token pages, then times each model at ten pool
sizes (a geometric ladder from the serial feasibility bound to the no-eviction footprint):
vLLM and SGLang, serial and timed (the SPEC's service model), with and without decode. Prints
a table (wall and process CPU seconds, how the hits were computed, infeasible pools) and writes
benchmarks/results/bench_serving.json. The minimum-feasible-pool search is left out of the
timings (``find_min_pool=False``). The machine's load average is recorded before and after:
on a shared machine the wall time is inflated by other work, the CPU time much less so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import stackdist
from stackdist.serving.pages import engine_pages
from stackdist.serving.schedule import Schedule
from stackdist.serving.sglang import simulate_sglang
from stackdist.serving.vllm import simulate_vllm

TRACE = REPO / "data" / "traces" / "mooncake_conversation_trace.jsonl"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_serving.json"


def pool_ladder(pages, n: int) -> list[int]:
    """``n`` pool sizes from the serial bound (largest request + null block) to the footprint."""
    P, O = pages.input_tokens, pages.output_tokens
    lo = int(((P + O + 15) // 16).max()) + 1
    hi = int(len(np.unique(pages.key)) + ((O + 15) // 16).sum()) + 1
    return sorted({round(float(x)) for x in np.geomspace(lo, max(hi, lo + n), n)})


def timed(fn):  # type: ignore[no-untyped-def]
    """(result, wall s, process CPU s) of one call."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def warm_up() -> None:
    """Compile (or load the cached) kernels on a tiny trace so timings exclude compilation."""
    t = stackdist.RequestTrace(np.array([1, 2, 1, 2]), np.array([0, 2, 4]), np.array([16, 16, 16, 16]),
                               np.array([0.0, 0.01]), np.array([32, 32]), np.array([3, 3]), block_size=16)
    for dec in (False, True):
        for sched in ("serial", "model"):
            simulate_vllm(t, [3, None], sched, dec)
            simulate_vllm(t, [3, None], sched, dec, method="per-size")
            simulate_sglang(t, [2, None], sched, dec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--pools", type=int, default=10, help="number of pool sizes (default 10)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="vLLM serial runs only")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    trace, load_s, _ = timed(lambda: stackdist.read_mooncake(args.trace))
    pages, reblock_s, _ = timed(lambda: engine_pages(trace))
    load_s += reblock_s
    pools = pool_ladder(pages, args.pools)
    warm_up()
    sched = Schedule.from_service_model(trace)
    cases = [("vllm", "serial", False, "auto"), ("vllm", "serial", False, "per-size"),
             ("vllm", "serial", True, "auto"), ("vllm", "timed", False, "per-size"),
             ("vllm", "timed", True, "per-size"), ("sglang", "serial", False, "per-size"),
             ("sglang", "serial", True, "per-size"), ("sglang", "timed", False, "per-size"),
             ("sglang", "timed", True, "per-size")]
    if args.quick:
        cases = cases[:3]
    rows = []
    for engine, schedule, decode, method in cases:
        s = "serial" if schedule == "serial" else sched
        if engine == "vllm":
            res, wall, cpu = timed(lambda s=s, d=decode, m=method: simulate_vllm(
                pages, pools, s, d, threads=args.threads, method=m, find_min_pool=False))
        else:
            res, wall, cpu = timed(lambda s=s, d=decode: simulate_sglang(
                pages, pools, s, d, threads=args.threads, find_min_pool=False))
        feasible = res.failed_request < 0
        rows.append({"engine": engine, "schedule": schedule, "decode": decode, "requested": method,
                     "method": res.method, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                     "infeasible_pools": int((~feasible).sum()),
                     "hit_tokens": [int(h.sum()) if f else None for h, f in zip(res.hit_tokens, feasible)]})
        print(f"{engine:7s} {schedule:7s} {'decode' if decode else 'nodecode':9s} {res.method:10s} "
              f"wall {wall:7.2f} s  cpu {cpu:7.2f} s  infeasible {int((~feasible).sum())}/{len(pools)}", flush=True)
    out = {"trace": os.path.relpath(args.trace, REPO) if args.trace.startswith(str(REPO)) else args.trace,
           "requests": pages.n_requests, "pages": len(pages.key), "load_and_reblock_s": round(load_s, 3),
           "pools": pools, "threads": args.threads, "cpus": os.cpu_count(), "python": platform.python_version(),
           "load_average_before": [round(x, 2) for x in load0],
           "load_average_after": [round(x, 2) for x in os.getloadavg()], "runs": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    print(f"{pages.n_requests} requests, {len(pages.key)} pages, pools {pools}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
