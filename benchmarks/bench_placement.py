"""The kvlab.placement simulator: the whole ``experiments`` process, and throughput per policy.

1. ``experiments``: ``python -m kvlab.placement experiments --out DIR --mooncake <conversation
   trace>`` as a whole process (a subprocess: wall time, and CPU time of the child from
   ``resource.getrusage``, because the machine is shared), with each stage's wall and CPU time
   read from its progress lines. ``--baseline-path DIR`` also runs the same command with
   ``PYTHONPATH=DIR`` (an older checkout of ``stackdist`` and ``kvlab``) side by side, and
   checks that both wrote the same ``results.json`` (every number but ``elapsed_s``) and
   ``claims.md``.
2. ``throughput`` (skip with ``--no-throughput``): a 64-session chat (~1e6 block accesses),
   tiers 1:8:64 with HBM = one session footprint, per policy and organisation:
   ``simulate`` with the compiled cache and with the Python reference (``engine="python"``),
   whose results must be equal.

Prints tables to stdout and writes benchmarks/results/bench_placement.json (atomically).
Usage: python benchmarks/bench_placement.py [--no-experiments] [--no-throughput] [--accesses 1000000]
       [--baseline-path /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvlab.placement import POLICIES, SimConfig, chat, simulate
from kvlab.placement.experiments import capacities_for

CONVERSATION = ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"
STAGE = re.compile(r"^\[(\d+)/(\d+)\] (.+): done, (?:(\d+) simulations in )?([\d.]+) s \(CPU ([\d.]+) s\)")


def write_json_atomic(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def run_experiments(out: Path, pythonpath: str | None) -> dict[str, object]:
    """One whole ``experiments`` process: wall, child CPU (user + system), its stages."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, "-m", "kvlab.placement", "experiments", "--out", str(out), "--mooncake", str(CONVERSATION)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"experiments failed ({proc.returncode}): {proc.stderr[-2000:]}")
    stages = []
    for line in proc.stderr.splitlines():
        m = STAGE.match(line)
        if m:
            stages.append({"stage": m.group(3), "simulations": int(m.group(4) or 0),
                           "wall_s": float(m.group(5)), "cpu_s": float(m.group(6))})
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"pythonpath": pythonpath, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "stages": stages,
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}


def same_results(a: Path, b: Path) -> bool:
    """``results.json`` equal but for ``elapsed_s`` (and the tool header's version), ``claims.md`` equal."""
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (a, b))
    for r in (ra, rb):
        for key in ("elapsed_s", "tool_version", "version"):
            r.pop(key, None)
    return ra == rb and (a / "claims.md").read_bytes() == (b / "claims.md").read_bytes()


def throughput(accesses: int) -> tuple[dict[str, object], list[dict[str, object]]]:
    sessions = 64
    workload = chat(n_sessions=sessions, accesses_per_session=max(1, accesses // sessions), seed=0)
    caps = capacities_for(workload, 1.0)
    print(f"workload: chat, {sessions} sessions, {workload.n_requests} requests, {workload.n_accesses} block accesses, "
          f"{workload.n_distinct_blocks} distinct; tiers {caps} blocks", file=sys.stderr)
    simulate(workload, SimConfig(capacities=(1, 1, 1)), engine="compiled")  # load the compiled kernel
    rows = []
    for policy in POLICIES:
        for org in ("exclusive", "inclusive"):
            config = SimConfig(capacities=caps, policy=policy, organisation=org)
            timings = {}
            results = {}
            for engine in ("compiled", "python"):
                start, cpu = time.perf_counter(), time.process_time()
                results[engine] = simulate(workload, config, engine=engine).to_dict()
                timings[engine] = (time.perf_counter() - start, time.process_time() - cpu)
            if results["compiled"] != results["python"]:
                raise SystemExit(f"compiled and python results differ: {policy} {org}")
            rows.append({
                "policy": policy, "organisation": org, "accesses": workload.n_accesses,
                "compiled_wall_s": round(timings["compiled"][0], 3), "compiled_cpu_s": round(timings["compiled"][1], 3),
                "python_wall_s": round(timings["python"][0], 3), "python_cpu_s": round(timings["python"][1], 3),
                "compiled_accesses_per_cpu_s": round(workload.n_accesses / timings["compiled"][1]),
                "python_accesses_per_cpu_s": round(workload.n_accesses / timings["python"][1]),
            })
            print(f"  {policy:9s} {org:9s} compiled {timings['compiled'][1]:6.2f} s CPU   python {timings['python'][1]:6.2f} s CPU",
                  file=sys.stderr)
    return {**workload.summary(), "capacities": list(caps)}, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accesses", type=int, default=1_000_000, help="throughput workload's block accesses (default 1e6)")
    parser.add_argument("--no-experiments", action="store_true", help="skip the whole-process experiments run")
    parser.add_argument("--no-throughput", action="store_true", help="skip the per-policy throughput table")
    parser.add_argument("--baseline-path", default=None, help="PYTHONPATH of an older checkout to run side by side")
    parser.add_argument("--work-dir", default=None, help="keep the experiments' outputs here (default: a temporary folder)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bench_placement.json"))
    args = parser.parse_args()
    if args.accesses < 1000:
        parser.error("--accesses must be >= 1000.")
    report: dict[str, object] = {
        "benchmark": "kvlab.placement: experiments (whole process) and simulate throughput",
        "python": platform.python_version(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
    }
    if not args.no_experiments:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(args.work_dir or tmp)
            runs = {"current": run_experiments(work / "current", str(ROOT))}
            if args.baseline_path:
                runs["baseline"] = run_experiments(work / "baseline", args.baseline_path)
                runs["baseline"]["identical_results"] = same_results(work / "current", work / "baseline")
        report["experiments"] = runs
        print("| run | stage | simulations | wall (s) | CPU (s) |")
        print("|---|---|---:|---:|---:|")
        for name, run in runs.items():
            for st in run["stages"]:  # type: ignore[attr-defined]
                print(f"| {name} | {st['stage']} | {st['simulations']} | {st['wall_s']:.1f} | {st['cpu_s']:.1f} |")
            print(f"| {name} | whole process | | {run['wall_s']:.1f} | {run['cpu_s']:.1f} |")
    if not args.no_throughput:
        workload, rows = throughput(args.accesses)
        report["throughput"] = {"workload": workload, "rows": rows}
        print("\n| policy | organisation | compiled (M accesses / CPU s) | Python reference (M accesses / CPU s) |")
        print("|---|---|---:|---:|")
        for r in rows:
            print(f"| {r['policy']} | {r['organisation']} | {r['compiled_accesses_per_cpu_s'] / 1e6:.2f} | "
                  f"{r['python_accesses_per_cpu_s'] / 1e6:.2f} |")
    write_json_atomic(Path(args.out), report)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
