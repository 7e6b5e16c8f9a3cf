"""Whole-process races: ``stackdist plan`` and ``stackdist --help`` against the peers, as processes.

Every job is one fresh process (``subprocess.run``), timed from spawn to exit with
``time.perf_counter`` (the wall time a user waits) and with the child's CPU time (user + system,
from ``resource.getrusage(RUSAGE_CHILDREN)``). Rounds run every job once, in a fixed order, so
the load of a shared machine falls on all of them alike; each job's median over ``--repeats``
rounds is reported, and every ratio is against stackdist's plan of the same trace.

The jobs, on the Mooncake conversation trace (12,031 requests), at its 512-token blocks
(288,500 block accesses) and re-blocked to 16-token pages (9,055,233 page accesses):

- ``stackdist plan``: read the JSONL, re-block (16), replay both semantics, the full report
  (ceilings, working sets, coverage, tier plans, curves, comparison) written as JSON.
- ``libcachesim LRU@C``: a Python process that opens the page (or block) stream as an
  oracleGeneral binary file (written beforehand, untimed: libcachesim's native input) and runs
  libcachesim's LRU at ONE capacity C (10 % of the distinct pages), hash table sized for the
  trace. Its hits are checked against stackdist's per-access curve at C.
- ``kvcache-simulator run``: KVCache.AI's simulator, its compiled (C++) backend, LRU only, at its
  default 15 budgets (1 GiB .. 16 TiB) for llama-3.1-8b, JSON out. Its C++ core is compiled on the
  first (untimed) warm-up run. The 16-token job reads a JSONL of the re-blocked trace (written
  beforehand with ``block_size`` 16). Its LRU prefix-token hits at each budget are compared with
  stackdist's engine-semantics curve over the same counted requests (its last 50 %).
- ``llmtrafficlens profile``: its pure-Python LRU replays at its capacity list (16 Ki .. 16 Mi
  tokens, 6 capacities, plus the unbounded ceiling) and its report files.
- start-up: ``stackdist --help`` and ``python -c "import stackdist"``.

KVSET's analyzer is not on PyPI (``pip index versions kvset`` finds nothing), so it is not raced.

    python benchmarks/bench_races.py             # the full run (a few minutes)
    python benchmarks/bench_races.py --quick     # 512-token jobs and start-up only, 1 repeat
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
import numpy as np

from stackdist.engine import HitCurve
from stackdist.planning import PrefixCurve
from stackdist.serving import replay_requests
from stackdist.traces import RequestTrace, read_mooncake, reblock

BIN = Path(sys.executable).parent
ORACLE_GENERAL = np.dtype([("timestamp", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access_vtime", "<i8")])
LCS_SCRIPT = """import sys, libcachesim as lcs
reader = lcs.TraceReader(sys.argv[1], lcs.TraceType.ORACLE_GENERAL_TRACE)
print(list(lcs.LRU(cache_size=int(sys.argv[2]), hashpower=int(sys.argv[3])).process_trace(reader)))
"""
KVSIM_MODEL = "llama-3.1-8b"


def run_process(command: list[str], cwd: Path) -> tuple[float, float, str]:
    """(wall s, child CPU s, stdout) of one process; raises with its stderr when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-600:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def write_jsonl(trace: RequestTrace, path: Path) -> None:
    """The trace as Mooncake-style JSONL with an explicit block_size (kvcache-simulator's input)."""
    with open(path, "w") as out:
        for r in range(trace.n_requests):
            lo, hi = int(trace.offsets[r]), int(trace.offsets[r + 1])
            out.write(json.dumps({"timestamp": int(trace.timestamps_s[r] * 1000), "input_length": int(trace.input_length[r]),
                                  "output_length": int(trace.output_length[r]), "block_size": trace.block_size,
                                  "hash_ids": trace.block_ids[lo:hi].tolist()}) + "\n")


def write_oracle(ids: np.ndarray, path: Path) -> None:
    records = np.zeros(ids.shape[0], ORACLE_GENERAL)
    records["obj_id"] = ids
    records["obj_size"] = 1
    records["next_access_vtime"] = -1
    records.tofile(path)


class Jobs:
    """The prepared inputs and the command line of every job of one trace."""

    def __init__(self, block_tokens: int, tmp: Path, with_peers: bool):
        self.name = f"conversation-{block_tokens}tok"
        self.block_tokens = block_tokens
        base = read_mooncake(C.CONVERSATION_TRACE)
        self.trace = base if block_tokens == 512 else reblock(base, block_tokens)
        self.dir = tmp / self.name
        self.dir.mkdir()
        distinct = int(np.unique(self.trace.block_ids).size)
        self.capacity = max(1, round(distinct * 0.10))
        self.hashpower = max(4, math.ceil(math.log2(max(distinct, 2))))
        write_oracle(self.trace.block_ids, self.dir / "stream.bin")
        source = C.CONVERSATION_TRACE
        if block_tokens != 512:
            source = self.dir / "trace.jsonl"
            write_jsonl(self.trace, source)
        reblock_args = [] if block_tokens == 512 else ["--reblock", str(block_tokens)]
        self.commands: dict[str, list[str]] = {
            "stackdist plan": [str(BIN / "stackdist"), "plan", str(C.CONVERSATION_TRACE), *reblock_args,
                               "--json", str(self.dir / "plan.json")],
            f"libcachesim LRU@C (C={self.capacity:,}, hashpower={self.hashpower})":
                [sys.executable, "-c", LCS_SCRIPT, str(self.dir / "stream.bin"), str(self.capacity), str(self.hashpower)],
        }
        if with_peers:
            self.commands["kvcache-simulator run (cpp, lru, 15 budgets)"] = [
                str(BIN / "kvcache-simulator"), "run", "--trace", str(source), "--model", KVSIM_MODEL,
                "--block-size", str(block_tokens), "--policies", "lru", "--backend", "cpp", "--no-progress",
                "--format", "json", "--output", str(self.dir / "kvsim.json")]
            self.commands["llmtrafficlens profile (6 capacities + unbounded)"] = [
                str(BIN / "llmtrafficlens"), "profile", str(source), "--format", "mooncake",
                "--block-size", str(block_tokens), "-o", str(self.dir / "ltl")]
        self.distinct = distinct

    def checks(self, outputs: dict[str, str]) -> dict[str, Any]:
        """The peers' answers against stackdist's curves (computed here, untimed)."""
        out: dict[str, Any] = {}
        lcs_key = next(k for k in outputs if k.startswith("libcachesim"))
        miss_ratio = json.loads(outputs[lcs_key].strip().splitlines()[-1])[0]
        n = self.trace.n_blocks
        curve = HitCurve.from_trace(self.trace.block_ids)
        out["libcachesim_hits"] = n - round(miss_ratio * n)
        out["stackdist_hits_at_C"] = int(curve.hits_at(self.capacity))
        out["libcachesim_equal"] = out["libcachesim_hits"] == out["stackdist_hits_at_C"]
        kvsim_path = self.dir / "kvsim.json"
        if kvsim_path.exists():
            report = json.loads(kvsim_path.read_text())
            first = int(report["metadata"]["warmupRequests"])
            counted = np.arange(self.trace.n_requests) >= first
            engine = PrefixCurve(replay_requests(self.trace, "engine"), counted)
            rows = []
            for point in report["points"]:
                lru = point["results"]["lru"]
                blocks = int(lru["cacheBlocks"])
                rows.append({"gib": point["gib"], "blocks": blocks, "kvcache_simulator_hit_tokens": int(lru["hitTokens"]),
                             "stackdist_engine_hit_tokens": int(engine.prefix_token_hits_at(blocks))})
            out["kvcache_simulator_points"] = rows
            out["kvcache_simulator_equal_points"] = sum(r["kvcache_simulator_hit_tokens"] == r["stackdist_engine_hit_tokens"]
                                                       for r in rows)
        return out


def startup_commands() -> dict[str, list[str]]:
    return {"stackdist --help": [str(BIN / "stackdist"), "--help"],
            "python -c 'import stackdist'": [sys.executable, "-c", "import stackdist"],
            "python -c 'pass' (interpreter alone)": [sys.executable, "-c", "pass"]}


def race(commands: dict[str, list[str]], repeats: int, cwd: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Round-robin ``repeats`` rounds; per job the wall and CPU times, medians and last stdout."""
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
    outputs: dict[str, str] = {}
    for r in range(repeats):
        for name, command in commands.items():
            wall, cpu, stdout = run_process(command, cwd)
            times[name].append((wall, cpu))
            outputs[name] = stdout
            C.log(f"  round {r + 1}: {name}: {wall:.3f} s wall, {cpu:.3f} s CPU")
    result = {name: {"wall_s": [w for w, _ in t], "cpu_s": [c for _, c in t],
                     "median_wall_s": statistics.median(w for w, _ in t), "median_cpu_s": statistics.median(c for _, c in t)}
              for name, t in times.items()}
    return result, outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="512-token jobs and start-up only, 1 repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-peers", action="store_true", help="skip kvcache-simulator and llmtrafficlens")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    peers = not args.no_peers and all(shutil.which(t, path=str(BIN)) for t in ("kvcache-simulator", "llmtrafficlens"))
    report: dict[str, Any] = {"benchmark": "bench_races", "machine": C.machine_info(), "repeats": repeats,
                              "kvset": "not on PyPI (pip index versions kvset: no matching distribution)", "traces": {}}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        C.log("start-up")
        startup, _ = race(startup_commands(), max(repeats, 5) if not args.quick else 3, tmp)
        report["startup"] = startup
        for block_tokens in (512,) if args.quick else (512, 16):
            jobs = Jobs(block_tokens, tmp, peers)
            C.log(f"{jobs.name}: warm-up (numba cache, kvcache-simulator's C++ build), untimed")
            for name, command in jobs.commands.items():
                if not name.startswith("llmtrafficlens"):
                    run_process(command, tmp)
            times, outputs = race(jobs.commands, repeats, tmp)
            plan = times["stackdist plan"]
            for name, entry in times.items():
                entry["wall_over_plan"] = entry["median_wall_s"] / plan["median_wall_s"]
                entry["cpu_over_plan"] = entry["median_cpu_s"] / plan["median_cpu_s"]
            report["traces"][jobs.name] = {"accesses": jobs.trace.n_blocks, "distinct": jobs.distinct,
                                           "requests": jobs.trace.n_requests, "jobs": times,
                                           "commands": {k: " ".join(Path(v[0]).name if i == 0 else v_ for i, v_ in enumerate(v))
                                                        for k, v in jobs.commands.items()},
                                           "checks": jobs.checks(outputs)}
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    rows = [{"what": "start-up", "job": k, "wall": C.fmt_seconds(v["median_wall_s"]), "cpu": C.fmt_seconds(v["median_cpu_s"])}
            for k, v in report["startup"].items()]
    for trace_name, entry in report["traces"].items():
        for job, t in entry["jobs"].items():
            rows.append({"what": trace_name, "job": job, "wall": C.fmt_seconds(t["median_wall_s"]),
                         "cpu": C.fmt_seconds(t["median_cpu_s"]), "ratio": C.fmt_ratio(t["wall_over_plan"]),
                         "cpu_ratio": C.fmt_ratio(t["cpu_over_plan"])})
    print(C.format_table(rows, [("what", "trace"), ("job", "whole process"), ("wall", "median wall s"),
                                ("cpu", "median CPU s"), ("ratio", "wall / plan"), ("cpu_ratio", "CPU / plan")]))
    for trace_name, entry in report["traces"].items():
        print(f"{trace_name} checks: {json.dumps({k: v for k, v in entry['checks'].items() if k != 'kvcache_simulator_points'})}")
    out = args.out or C.RESULTS_DIR / ("bench_races_quick.json" if args.quick else "bench_races.json")
    C.write_json_atomic(out, report)
    C.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
