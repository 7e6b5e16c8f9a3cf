"""Benchmark: ``stackdist plan --sample-rate`` against the exact plan, whole processes.

The trace is the bundled conversation trace replayed ``--repeat`` times (default 4: the same
hour four times, timestamps shifted by the hour's span plus 1000 ms, ids kept), read at 16-token
pages (``--reblock 16``): about 36 M block accesses. Each run is a separate ``stackdist plan``
process (wall time and peak resident memory from ``wait4``); the exact and the sampled runs
are interleaved, ``--runs`` times each, and the medians compared. The working-set error is
the sampled plan's working set against the exact one at every target (fraction of the ceiling)
and semantics; the coverage quantiles likewise. Prints a table and writes
``results/sampled_plan.json``.

Usage::

    python benchmarks/bench_sampled_plan.py                 # 4 repeats, rate 0.01, 3 runs each
    python benchmarks/bench_sampled_plan.py --repeat 1 --runs 1   # a smoke test
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

from stackdist.output import write_json  # noqa: E402

TRACE = ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"
RESULTS = Path(__file__).resolve().parent / "results" / "sampled_plan.json"


def repeated_trace(path: Path, repeat: int) -> None:
    """The bundled trace ``repeat`` times, each copy's timestamps shifted past the previous one's."""
    rows = [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]
    stamps = [r["timestamp"] for r in rows]
    span = max(stamps) - min(stamps) + 1000
    with path.open("w") as out:
        for k in range(repeat):
            for r in rows:
                out.write(json.dumps(dict(r, timestamp=r["timestamp"] + k * span)) + "\n")


def errors(exact: dict[str, Any], sampled: dict[str, Any]) -> dict[str, Any]:
    """Relative errors of the sampled working sets and coverage quantiles, per semantics."""
    out: dict[str, Any] = {}
    for name, sem in exact["semantics"].items():
        got = sampled["semantics"][name]
        rows = {}
        for e, s in zip(sem["working_set"], got["working_set"], strict=True):
            want, have = e["fraction_of_ceiling"], s["fraction_of_ceiling"]
            rows[f"{e['target']:g}"] = None if not want or not have else (have["blocks"] - want["blocks"]) / want["blocks"]
        cover = {q: (got["coverage"]["requests_with_reuse"][q]["blocks"] - c["blocks"]) / max(c["blocks"], 1)
                 for q, c in sem["coverage"]["requests_with_reuse"].items()}
        out[name] = {"working_set_fraction_of_ceiling": rows, "coverage": cover,
                     "ceiling_equal": got["summary"]["ceiling_token_hit_rate"] == sem["summary"]["ceiling_token_hit_rate"]}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--rate", type=float, default=0.01)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / f"conversation_x{args.repeat}.jsonl"
        repeated_trace(trace, args.repeat)
        common = ["plan", str(trace), "--reblock", "16"]
        forms = {"exact": [], "sampled": ["--sample-rate", f"{args.rate:g}"]}
        run([*common, "--semantics", "engine", "--json", str(Path(tmp) / "warm.json")])  # compile caches warm
        times: dict[str, list[float]] = {k: [] for k in forms}
        rss: dict[str, list[int]] = {k: [] for k in forms}
        for _ in range(args.runs):
            for name, extra in forms.items():
                wall, peak = run([*common, *extra, "--json", str(Path(tmp) / f"{name}.json")])
                times[name].append(wall)
                rss[name].append(peak)
        reports = {name: json.loads((Path(tmp) / f"{name}.json").read_text()) for name in forms}
    median = {k: statistics.median(v) for k, v in times.items()}
    errs = errors(reports["exact"], reports["sampled"])
    result = {"trace": f"data/traces/mooncake_conversation_trace.jsonl x{args.repeat}, --reblock 16",
              "block_accesses": reports["exact"]["trace"]["blocks"], "rate": args.rate, "runs": args.runs,
              "seconds": times, "median_s": median, "peak_rss_kib": rss, "speedup": median["exact"] / median["sampled"],
              "errors": errs}
    print(f"{result['trace']}: {result['block_accesses']:,} block accesses, rate {args.rate:g}, "
          f"median of {args.runs} interleaved runs")
    print(f"{'method':<10}{'median s':>10}{'peak MiB':>10}")
    for name in forms:
        print(f"{name:<10}{median[name]:>10.2f}{max(rss[name]) / 1024:>10.0f}")
    print(f"speedup (exact / sampled): {result['speedup']:.2f}x")
    print(f"{'semantics':<12}{'target':>8}{'ws error':>10}")
    for name, e in errs.items():
        for target, err in e["working_set_fraction_of_ceiling"].items():
            print(f"{name:<12}{target:>8}{'unreachable' if err is None else f'{err:+.2%}':>10}")
        print(f"{name:<12}{'coverage':>8} " + ", ".join(f"{q} {v:+.2%}" for q, v in e["coverage"].items()))
    write_json(str(RESULTS), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
