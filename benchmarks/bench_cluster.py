"""Speed of the K-worker simulation (stackdist.serving.cluster) on the conversation trace.

    python benchmarks/bench_cluster.py [--trace PATH] [--workers 4,8] [--quick]

Times ``simulate_cluster`` on the 288 k-block trace (512-token blocks) and, unless ``--quick``,
re-blocked to 16-token pages (9 M pages): round-robin (static: one O(blocks) pass per pool size
after indexing the (worker, block) pairs once) and kv-aware (O(blocks x K) per size), without and
with a shared tier. The per-size cost is the difference between a 3-size and a 1-size call over
two; the rest is the set-up. Wall and process CPU seconds (CPU is less inflated by other work on
a shared machine; the load average is recorded). One engine-semantics replay (every capacity,
one worker) is timed beside it. Writes benchmarks/results/bench_cluster.json.
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

from stackdist.serving.cluster import simulate_cluster
from stackdist.serving.semantics import replay_requests
from stackdist.traces import read_requests, reblock

TRACE = REPO / "data" / "traces" / "mooncake_conversation_trace.jsonl"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_cluster.json"


def timed(fn):  # type: ignore[no-untyped-def]
    """(wall s, process CPU s) of one call, the better of two runs."""
    best = (float("inf"), float("inf"))
    for _ in range(2):
        w, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - w, time.process_time() - c))
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--workers", default="4,8")
    ap.add_argument("--quick", action="store_true", help="the 512-token trace only")
    args = ap.parse_args()
    coarse = read_requests(args.trace, "mooncake", None, False, False)
    traces = [("512-token blocks", coarse, 2000)]
    if not args.quick:
        traces.append(("16-token pages", reblock(coarse, 16), 64000))
    simulate_cluster(coarse, 2, "kv-aware", [10], [10])  # compile
    rows = []
    print(f"{'trace':<17} {'K':>2} {'router':<11} {'shared':>7} {'per size wall/CPU s':>20} {'ns/block':>9} {'set-up s':>9}")
    for name, trace, c in traces:
        wall, cpu = timed(lambda t=trace: replay_requests(t, "engine"))
        print(f"{name:<17} engine-semantics replay (every capacity, one worker): {wall:.2f} s wall, {cpu:.2f} s CPU")
        rows.append({"trace": name, "blocks": trace.n_blocks, "method": "engine replay", "wall_s": wall, "cpu_s": cpu})
        for k in (int(x) for x in args.workers.split(",")):
            for router_name, router in (("round-robin", np.arange(trace.n_requests) % k), ("kv-aware", "kv-aware")):
                for shared in (0, 4 * c):
                    one = timed(lambda t=trace, r=router, s=shared, k=k, c=c: simulate_cluster(t, k, r, [c], [s]))
                    three = timed(lambda t=trace, r=router, s=shared, k=k, c=c: simulate_cluster(t, k, r, [c, 2 * c, 4 * c], [s]))
                    per = ((three[0] - one[0]) / 2, (three[1] - one[1]) / 2)
                    rows.append({"trace": name, "blocks": trace.n_blocks, "workers": k, "router": router_name,
                                 "gpu_blocks": c, "shared_blocks": shared, "per_size_wall_s": per[0],
                                 "per_size_cpu_s": per[1], "setup_wall_s": one[0] - per[0]})
                    print(f"{name:<17} {k:>2} {router_name:<11} {shared:>7} {per[0]:>10.2f} / {per[1]:<7.2f} "
                          f"{per[1] / trace.n_blocks * 1e9:>9.0f} {one[0] - per[0]:>9.2f}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"load_average": os.getloadavg(), "cpus": os.cpu_count(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
