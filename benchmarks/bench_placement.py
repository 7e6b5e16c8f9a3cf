"""Throughput of the kvlab.placement simulator on a ~1e6-block-access workload, per policy.

Two measurements per policy and organisation, tiers 1:8:64 with HBM = one session footprint:

- ``simulate``: the full request-level simulation (prefix mode: lookup, tail-first commit,
  links, latency), no prefetch;
- ``access loop``: ``TieredCache.access`` alone over the same block stream (block mode).

Prints a table to stdout and writes benchmarks/results/bench_placement.json (atomically).
Usage: python benchmarks/bench_placement.py [--accesses 1000000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvlab.placement import POLICIES, SimConfig, TieredCache, chat, simulate  # noqa: E402
from kvlab.placement.experiments import capacities_for  # noqa: E402


def write_json_atomic(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def best_of(repeat: int, fn) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accesses", type=int, default=1_000_000, help="target block accesses (default 1e6)")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs (default 1)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bench_placement.json"))
    args = parser.parse_args()
    if args.accesses < 1000 or args.repeat < 1:
        parser.error("--accesses must be >= 1000 and --repeat >= 1.")
    sessions = 64
    workload = chat(n_sessions=sessions, accesses_per_session=max(1, args.accesses // sessions), seed=0)
    caps = capacities_for(workload, 1.0)
    stream = workload.blocks.tolist()
    print(f"workload: chat, {sessions} sessions, {workload.n_requests} requests, {workload.n_accesses} block accesses, "
          f"{workload.n_distinct_blocks} distinct; tiers {caps} blocks", file=sys.stderr)
    rows = []
    for policy in POLICIES:
        for org in ("exclusive", "inclusive"):
            sim_s = best_of(args.repeat, lambda: simulate(workload, SimConfig(capacities=caps, policy=policy, organisation=org)))

            def loop() -> None:
                access = TieredCache(list(caps), policy, org).access
                for block in stream:
                    access(block)

            loop_s = best_of(args.repeat, loop)
            rows.append({
                "policy": policy, "organisation": org, "accesses": workload.n_accesses,
                "simulate_s": round(sim_s, 3), "simulate_accesses_per_s": round(workload.n_accesses / sim_s),
                "access_loop_s": round(loop_s, 3), "access_loop_accesses_per_s": round(workload.n_accesses / loop_s),
            })
            print(f"  {policy:9s} {org:9s} simulate {sim_s:6.2f} s   access loop {loop_s:6.2f} s", file=sys.stderr)
    header = f"| policy | organisation | simulate (M accesses/s) | access loop (M accesses/s) |"
    print(header)
    print("|---|---|---:|---:|")
    for r in rows:
        print(f"| {r['policy']} | {r['organisation']} | {r['simulate_accesses_per_s'] / 1e6:.2f} | "
              f"{r['access_loop_accesses_per_s'] / 1e6:.2f} |")
    write_json_atomic(Path(args.out), {
        "benchmark": "kvlab.placement throughput",
        "workload": workload.summary(),
        "capacities": list(caps),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "repeat": args.repeat,
        "rows": rows,
    })
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
