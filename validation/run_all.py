"""Regenerate tests/data/engines/: traces, schedules, both engines' per-request results, manifest.

    VLLM_PY=/work/engines/venv-vllm/bin/python SGLANG_PY=/work/engines/venv-sglang/bin/python \
        python3 validation/run_all.py [--phase all|serial|timed|unified] [--only TRACE,...]

Steps per trace and engine: bisect (with the engine itself) the smallest feasible pool of each
run (serial/timed x decode/nodecode); choose the pool sizes (one infeasible for every run, the
four minima, a geometric ladder through the eviction region up to the no-reuse footprint, and
inf); run the drivers; write the CSVs and manifest.json (with sha256 of every file). Scratch
output (driver summaries, logs) goes to --work, outside the repository.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common

REPO = os.path.dirname(HERE)
DATA = os.path.join(REPO, "tests", "data", "engines")
RUNS = [("serial", True), ("serial", False), ("timed", True), ("timed", False)]
ENGINES = ["vllm", "sglang"]
LOCK = threading.Lock()


def log(msg: str) -> None:
    with LOCK:
        print(msg, file=sys.stderr, flush=True)


def dname(decode: bool) -> str:
    return "decode" if decode else "nodecode"


def driver_cmd(engine: str, trace: str, block: int, schedule: str, decode: bool, tree: str = "radix") -> list[str]:
    py = os.environ["VLLM_PY"] if engine == "vllm" else os.environ["SGLANG_PY"]
    script = os.path.join(HERE, "drive_vllm.py" if engine == "vllm" else "drive_sglang.py")
    cmd = [py, script, "--trace", os.path.join(DATA, f"{trace}.jsonl"), "--hash-block-size", str(block),
           "--schedule", schedule]
    if schedule == "timed":
        cmd += ["--schedule-csv", os.path.join(DATA, f"{trace}.schedule.csv")]
    if not decode:
        cmd.append("--no-decode")
    if engine == "sglang":
        cmd += ["--tree", tree]
    return cmd


def run(cmd: list[str], logfile: str) -> None:
    with open(logfile, "w") as fh:
        p = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if p.returncode:
        raise RuntimeError(f"failed ({p.returncode}): {' '.join(cmd)}; see {logfile}")


def min_pool_lower_bound(trace, engine: str) -> int:
    """A pool no run can be feasible below: the longest prompt's pages (+ the null block)."""
    m = max(-(-r.input_length // common.ENGINE_BLOCK) for r in trace)
    return m + (1 if engine == "vllm" else 0)


def footprint(trace, block: int, engine: str) -> int:
    """Distinct prompt pages plus every request's generated pages: about the no-eviction size."""
    pages = set()
    gen = 0
    for r in trace:
        for j, b in enumerate(r.hash_ids):
            n = min(block, r.input_length - j * block)
            for s in range(-(-n // common.ENGINE_BLOCK)):
                pages.add((b, s))
        gen += -(-r.output_length // common.ENGINE_BLOCK) + 1
    return len(pages) + gen + (1 if engine == "vllm" else 0)


def bisect_job(work: str, trace_name: str, block: int, engine: str, schedule: str, decode: bool) -> dict:
    trace = common.read_trace(os.path.join(DATA, f"{trace_name}.jsonl"))
    lo = min_pool_lower_bound(trace, engine) - 1
    hi = common.inf_pool_size(trace, decode)
    tag = f"{trace_name}.{engine}.{schedule}.{dname(decode)}"
    summ = os.path.join(work, f"bisect.{tag}.json")
    if not os.path.exists(summ):
        log(f"bisect {tag} in ({lo}, {hi}]")
        run(driver_cmd(engine, trace_name, block, schedule, decode) + ["--bisect", str(lo), str(hi), "--summary", summ],
            os.path.join(work, f"bisect.{tag}.log"))
    with open(summ) as fh:
        res = json.load(fh)["bisect"]
    log(f"bisect {tag}: smallest feasible {res['smallest_feasible']}")
    return res


def choose_pools(minima: dict, lower: int, top: int) -> list[str]:
    """One size infeasible for every run, each run's smallest feasible pool, and a geometric
    ladder of 10 sizes from just above the smallest minimum up to about the footprint (so the
    serial runs' eviction region is covered as well as the timed runs')."""
    lo_all = min(minima.values())
    hi_min = max(minima.values())
    sizes = {max(lower, lo_all - 1)} | set(minima.values())
    top = max(top, hi_min + 8)
    n = 10
    ratio = (top / (lo_all + 1)) ** (1 / (n - 1))
    for i in range(n):
        sizes.add(int(round((lo_all + 1) * ratio**i)))
    out = sorted(s for s in sizes if s >= 1)
    return [str(s) for s in out] + ["inf"]


def run_job(work: str, trace_name: str, block: int, engine: str, schedule: str, decode: bool, pools: list[str],
            tree: str = "radix") -> dict:
    tag = f"{trace_name}.{engine}.{schedule}.{dname(decode)}" + ("" if tree == "radix" else f".{tree}")
    out_csv = os.path.join(DATA, "results", f"{tag}.csv") if tree == "radix" else os.path.join(work, f"{tag}.csv")
    summ = os.path.join(work, f"run.{tag}.json")
    log(f"run {tag} pools {','.join(pools)}")
    run(driver_cmd(engine, trace_name, block, schedule, decode, tree) + ["--pools", ",".join(pools), "--out", out_csv,
                                                                       "--summary", summ],
        os.path.join(work, f"run.{tag}.log"))
    with open(summ) as fh:
        s = json.load(fh)
    s["csv"] = out_csv
    return s


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def engine_versions() -> dict:
    out = {}
    for engine, mod in (("vllm", "vllm"), ("sglang", "sglang")):
        py = os.environ["VLLM_PY"] if engine == "vllm" else os.environ["SGLANG_PY"]
        v = subprocess.run([py, "-c", f"import importlib.metadata as m; print(m.version('{mod}'))"],
                           capture_output=True, text=True).stdout.strip()
        out[engine] = v
    return out


def compare_csv(a: str, b: str) -> dict:
    import csv

    with open(a) as fa, open(b) as fb:
        ra, rb = list(csv.DictReader(fa)), list(csv.DictReader(fb))
    cols = [c for c in ra[0] if c.startswith("hit_tokens_")] if ra else []
    colsb = [c for c in rb[0] if c.startswith("hit_tokens_")] if rb else []
    diff = 0
    first = None
    for x, y in zip(ra, rb):
        for c in cols:
            if x[c] != y.get(c):
                diff += 1
                if first is None:
                    first = {"request": int(x["request"]), "column": c, "radix": x[c], "unified": y.get(c)}
    return {"same_columns": cols == colsb, "differing_cells": diff, "first_difference": first}


def build_manifest(work: str, traces: dict) -> None:
    """manifest.json from the traces, the bisections and the run summaries found in ``work``."""
    manifest: dict = {"spec": "validation/SPEC.md", "readme": "validation/README.md",
                      "engine_block_size": common.ENGINE_BLOCK}
    vers = engine_versions()
    manifest["engines"] = {
        "vllm": {"version": vers["vllm"], "driver": "validation/drive_vllm.py",
                 "pool_unit": "num_gpu_blocks as vLLM reports it; block 0 is the null block, N - 1 usable"},
        "sglang": {"version": vers["sglang"], "driver": "validation/drive_sglang.py", "tree": "RadixCache",
                   "pool_unit": "pages of the KV pool (allocator size N * 16 tokens); all N usable, "
                                "the padding page 0 is extra"},
    }
    manifest["service_model"] = {"prefill_tokens_per_s": common.PREFILL_TOKENS_PER_S,
                                 "decode_tokens_per_s": common.DECODE_TOKENS_PER_S}
    mt: dict = {}
    runs: list = []
    for name, tmeta in traces.items():
        trace = common.read_trace(os.path.join(DATA, f"{name}.jsonl"))
        block = tmeta["hash_block_size"]
        entry = {
            "file": f"{name}.jsonl", "schedule_csv": f"{name}.schedule.csv", "hash_block_size": block,
            "requests": tmeta["requests"], "how": tmeta["how"], "pool_sizes": {},
            "inf_pool_size": {"decode": common.inf_pool_size(trace, True),
                              "nodecode": common.inf_pool_size(trace, False)},
        }
        for engine in ENGINES:
            bis = {}
            for schedule, decode in RUNS:
                tag = f"{name}.{engine}.{schedule}.{dname(decode)}"
                bpath = os.path.join(work, f"bisect.{tag}.json")
                if os.path.exists(bpath):
                    with open(bpath) as fh:
                        bis[(schedule, decode)] = json.load(fh)["bisect"]
            if len(bis) == len(RUNS):
                entry["pool_sizes"][engine] = choose_pools(
                    {k: v["smallest_feasible"] for k, v in bis.items()},
                    min_pool_lower_bound(trace, engine) - 1, footprint(trace, block, engine))
            for schedule, decode in RUNS:
                tag = f"{name}.{engine}.{schedule}.{dname(decode)}"
                spath = os.path.join(work, f"run.{tag}.json")
                csv_rel = os.path.join("results", f"{tag}.csv")
                if not (os.path.exists(spath) and os.path.exists(os.path.join(DATA, csv_rel))):
                    continue
                with open(spath) as fh:
                    s = json.load(fh)
                b = bis.get((schedule, decode), {})
                run = {
                    "trace": name, "engine": engine, "schedule": schedule, "decode": dname(decode), "file": csv_rel,
                    "pools": [x["pool"] for x in s["runs"]],
                    "feasible_pools": [x["pool"] for x in s["runs"] if x["feasible"]],
                    "infeasible": [{"pool": int(x["pool"]), **x["failure"]} for x in s["runs"] if not x["feasible"]],
                    "smallest_feasible_pool": b.get("smallest_feasible"),
                    "failure_below_smallest_feasible": b.get("failure_below"),
                }
                if engine == "sglang":
                    upath = os.path.join(work, f"run.{tag}.unified.json")
                    ucsv = os.path.join(work, f"{tag}.unified.csv")
                    if os.path.exists(upath) and os.path.exists(ucsv):
                        with open(upath) as fh:
                            u = json.load(fh)
                        run["unified_radix_cache_check"] = {
                            **compare_csv(os.path.join(DATA, csv_rel), ucsv),
                            "infeasible": [{"pool": int(x["pool"]), **x["failure"]} for x in u["runs"]
                                           if not x["feasible"]],
                        }
                runs.append(run)
        mt[name] = entry
    manifest["traces"] = mt
    manifest["runs"] = runs
    files = {}
    for root, _dirs, fnames in os.walk(DATA):
        for f in sorted(fnames):
            p = os.path.join(root, f)
            rel = os.path.relpath(p, DATA)
            if rel != "manifest.json":
                files[rel] = sha256(p)
    manifest["files"] = dict(sorted(files.items()))
    path = os.path.join(DATA, "manifest.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    os.replace(path + ".tmp", path)
    log(f"wrote {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", choices=["all", "serial", "timed", "unified", "manifest"], default="all")
    ap.add_argument("--work", default=os.environ.get("VALIDATION_WORK", "/work/engines/validation_work"))
    ap.add_argument("--only", help="comma-separated trace names")
    ap.add_argument("--regen-traces", action="store_true", help="rewrite the traces (make_traces.py) first")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs", help="restrict step 3 to these runs, e.g. serial:decode,timed:nodecode")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(os.path.join(DATA, "results"), exist_ok=True)
    if args.regen_traces or not os.path.exists(os.path.join(DATA, "traces.json")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_traces.py"), "--out", DATA], check=True)
    with open(os.path.join(DATA, "traces.json")) as fh:
        traces = json.load(fh)
    names = [n for n in traces if not args.only or n in args.only.split(",")]

    pool = cf.ThreadPoolExecutor(max_workers=args.jobs)
    # 1. bisection (cached in --work), per trace x engine x run
    bis = {}
    futs = {}
    for name in names:
        for engine in ENGINES:
            for schedule, decode in RUNS:
                futs[(name, engine, schedule, decode)] = pool.submit(
                    bisect_job, args.work, name, traces[name]["hash_block_size"], engine, schedule, decode)
    for k, f in futs.items():
        bis[k] = f.result()

    # 2. pool sizes
    pools = {}
    for name in names:
        trace = common.read_trace(os.path.join(DATA, f"{name}.jsonl"))
        block = traces[name]["hash_block_size"]
        for engine in ENGINES:
            minima = {(s, d): bis[(name, engine, s, d)]["smallest_feasible"] for s, d in RUNS}
            pools[(name, engine)] = choose_pools(minima, min_pool_lower_bound(trace, engine) - 1,
                                                 footprint(trace, block, engine))

    # 3. runs
    phases = {"serial": ["serial"], "timed": ["timed"], "all": ["serial", "timed"], "unified": [],
              "manifest": []}[args.phase]
    wanted = RUNS
    if args.runs:
        wanted = [(x.split(":")[0], x.split(":")[1] == "decode") for x in args.runs.split(",")]
    futs = {}
    for name in names:
        for engine in ENGINES:
            for schedule, decode in wanted:
                if schedule in phases:
                    futs[(name, engine, schedule, decode)] = pool.submit(
                        run_job, args.work, name, traces[name]["hash_block_size"], engine, schedule, decode,
                        pools[(name, engine)])
    if args.phase in ("all", "unified"):
        for name in names:
            for schedule, decode in wanted:
                futs[(name, "sglang-unified", schedule, decode)] = pool.submit(
                    run_job, args.work, name, traces[name]["hash_block_size"], "sglang", schedule, decode,
                    pools[(name, "sglang")], "unified")
    for f in futs.values():
        f.result()

    # 4. manifest, rebuilt from everything in --work (so separate runs/phases merge)
    build_manifest(args.work, traces)
    return 0


if __name__ == "__main__":
    sys.exit(main())
