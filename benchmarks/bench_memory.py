"""Speed and peak memory of the engine at scale: 10^8 accesses over 2 x 10^7 keys (and 10^7).

The trace: seeded Zipf(0.9) over 2 x 10^7 keys (``_common.zipf_trace``, unit sizes), 10^7 and
10^8 accesses (the 10^7 trace is the 10^8 trace's first 10^7 accesses). Each measurement runs in
a fresh subprocess that loads the keys from ``.npy``, loads the compiled kernels on a small
prefix, then times ONE call (``time.perf_counter``) while measuring its peak resident memory
growth (``_common.PeakRSS``: VmHWM after a clear_refs reset, minus VmRSS before). Methods:

- ``engine.hit_curve``: ``stackdist.hit_curve(keys)``: the replay plus the histogram, every
  query ready (the distances are kept, 8 bytes per access, as ``HitCurve.distances``);
- ``engine.stack_distances``: the replay alone.

``--repeats`` subprocesses per method (default 3); the median time, the largest peak. The trace
arrays are 8 bytes per access (763 MiB at 10^8).

    python benchmarks/bench_memory.py            # ~5 min (the 10^8 trace takes ~2 min to draw)
    python benchmarks/bench_memory.py --quick    # 10^6 accesses over 2 x 10^5 keys
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

import _common as C
import numpy as np

SCRIPT = Path(__file__).resolve()
METHODS = ("engine.hit_curve", "engine.stack_distances")


def probe(method: str, keys_path: Path, n: int) -> dict[str, Any]:
    import stackdist

    keys = np.array(np.load(keys_path, mmap_mode="r")[:n])  # a real in-memory copy (file pages faulted in
    # during the call would count as the call's memory)
    stackdist.hit_curve(keys[:100_000])
    stackdist.stack_distances(keys[:100_000])
    with C.PeakRSS() as meter:
        start, cpu_start = time.perf_counter(), time.process_time()
        held = stackdist.hit_curve(keys) if method == "engine.hit_curve" else stackdist.stack_distances(keys)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    bins = int(held.histogram.values.size) if method == "engine.hit_curve" else None
    del held
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_bytes": meter.peak_bytes, "trace_bytes": keys.nbytes,
            "histogram_bins": bins}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probe", choices=METHODS)
    parser.add_argument("--keys", type=Path)
    parser.add_argument("--n", type=int)
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(args.probe, args.keys, args.n)))
        return 0
    n_keys, sizes = (200_000, (10**5, 10**6)) if args.quick else (20_000_000, (10**7, 10**8))
    report: dict[str, Any] = {"benchmark": "bench_memory", "machine": C.machine_info(), "n_keys": n_keys, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        keys_path = Path(tmp) / "keys.npy"
        C.log(f"drawing Zipf(0.9): {max(sizes):,} accesses over {n_keys:,} keys")
        trace = C.zipf_trace(max(sizes), n_keys=n_keys)
        np.save(keys_path, trace.keys)
        report["trace"] = trace.summary() | {"name": f"zipf-unit-{C.short_count(max(sizes))}-{C.short_count(n_keys)}keys"}
        del trace
        rows = []
        for n in sizes:
            for method in METHODS:
                probes = []
                for r in range(args.repeats):
                    result = C.run_probe(SCRIPT, ["--probe", method, "--keys", str(keys_path), "--n", str(n)], timeout=3600)
                    if "error" in result:
                        raise SystemExit(result["error"])
                    probes.append(result)
                    C.log(f"  {n:,} {method} run {r + 1}: {result['seconds']:.2f} s ({result['cpu_seconds']:.2f} s CPU), "
                          f"peak {result['peak_bytes'] / C.MIB:.0f} MiB")
                median_s = statistics.median(p["seconds"] for p in probes)
                cpu_s = statistics.median(p["cpu_seconds"] for p in probes)
                peak = max(p["peak_bytes"] for p in probes)
                entry = {"n": n, "method": method, "runs": probes, "median_s": median_s, "m_acc_per_s": n / median_s / 1e6,
                         "median_cpu_s": cpu_s, "m_acc_per_cpu_s": n / cpu_s / 1e6,
                         "peak_mib": peak / C.MIB, "trace_mib": probes[0]["trace_bytes"] / C.MIB,
                         "peak_over_trace_arrays": peak / probes[0]["trace_bytes"]}
                report["runs"].append(entry)
                rows.append({"n": f"{n:,}", "method": method, "s": C.fmt_seconds(median_s), "rate": f"{entry['m_acc_per_s']:.1f}",
                             "cpu": C.fmt_seconds(cpu_s), "cpu_rate": f"{entry['m_acc_per_cpu_s']:.1f}",
                             "peak": f"{entry['peak_mib']:.0f}", "ratio": f"{entry['peak_over_trace_arrays']:.2f}"})
    report["machine"]["load_average_at_end"] = list(__import__("os").getloadavg())
    print(C.format_table(rows, [("n", "accesses"), ("method", "method"), ("s", "median s"), ("rate", "M acc/s"),
                                ("cpu", "median CPU s"), ("cpu_rate", "M acc per CPU s"),
                                ("peak", "peak MiB"), ("ratio", "peak / trace arrays")]))
    out = C.RESULTS_DIR / ("bench_memory_quick.json" if args.quick else "bench_memory.json")
    C.write_json_atomic(out, report)
    C.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
