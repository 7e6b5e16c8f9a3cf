"""Regenerate tests/data/engines/scheduler/: vLLM 0.33.0's own v1 Scheduler under load, simulated time.

    python3 validation/run_scheduler.py [/work/engines/venv-vllm/bin/python] [--check]

Runs validation/drive_vllm_scheduler.py (under the given vLLM interpreter) on a few committed
traces, with and without decode, pools (num_gpu_blocks) from just above the largest request's
blocks (far below the concurrency floor: queueing and preemption) up to a pool where nothing is
evicted (`inf`), and writes one CSV per (trace, decode) plus manifest.json (trace, pools, the exact
command line, vLLM version, per-pool run stats, sha256). With --check, every run is made a second
time into a temporary file and must be byte-identical to the first (determinism); the result is
recorded in the manifest. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "tests", "data", "engines", "scheduler")

# trace, hash block size, pools (num_gpu_blocks). The smallest pool is just above the largest
# request's blocks (ceil((P + O) / 16) + 1 for the null block); `inf` = no eviction.
RUNS = [
    ("gen_burst_b32", 32, "40,70,105,140,210,inf"),  # largest request 35 blocks
    ("gen_chat_b16", 16, "48,84,126,168,252,inf"),  # largest request 42 blocks
    ("gen_mixed_b32", 32, "90,170,250,340,500,inf"),  # largest request 84 blocks
]
# The same with a small token budget, so that prefills are split into chunks (with 8192 no
# prompt of these traces is): extra arguments, file tag.
BUDGET_RUNS = [
    ("gen_burst_b32", 32, "40,70,105,140,210,inf", ["--max-num-batched-tokens", "256", "--max-num-seqs", "256"], "budget256"),
    ("gen_mixed_b32", 32, "90,170,250,340,500,inf", ["--max-num-batched-tokens", "256", "--max-num-seqs", "256"], "budget256"),
    # vLLM's AsyncScheduler, stepped as EngineCore.step_with_batch_queue (batch queue 2)
    ("gen_burst_b32", 32, "40,70,105,140,210,inf", ["--async-scheduling"], "async"),
    ("gen_chat_b16", 16, "48,84,126,168,252,inf", ["--async-scheduling"], "async"),
    ("gen_mixed_b32", 32, "90,170,250,340,500,inf", ["--async-scheduling"], "async"),
    # async with chunked prefill (budget 256): a prefill split over batches in flight
    ("gen_burst_b32", 32, "40,70,105,140,210,inf",
     ["--max-num-batched-tokens", "256", "--max-num-seqs", "256", "--async-scheduling"], "budget256.async"),
    ("gen_mixed_b32", 32, "90,170,250,340,500,inf",
     ["--max-num-batched-tokens", "256", "--max-num-seqs", "256", "--async-scheduling"], "budget256.async"),
]
DEFAULTS = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "step_fixed_s": 0.020,
            "step_per_token_s": 0.00001}


def sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("--")]
    check = "--check" in argv
    py = args[0] if args else os.environ.get("VLLM_PY", "/work/engines/venv-vllm/bin/python")
    os.makedirs(OUT, exist_ok=True)
    manifest = {
        "what": "vLLM 0.33.0 v1 Scheduler (sync; AsyncScheduler in *.async.* files) driven in simulated time; see validation/SCHEDULER_NOTES.md",
        "columns": "request,id,arrival_s,worker,input_tokens,output_tokens, then per pool N: hit_tokens_N, "
                   "preemptions_N, queue_s_N, first_token_s_N, finish_s_N (groups in that order)",
        "step_time": "fixed + T * per_token seconds for a step scheduling T > 0 tokens",
        "defaults": DEFAULTS,
        "runs": [],
    }
    # runs made outside this script (the real trace's head, see its "command"): kept as they are
    path = os.path.join(OUT, "manifest.json")
    if os.path.exists(path):
        with open(path) as fh:
            old = json.load(fh)
        if "real_trace_runs" in old:
            manifest["real_trace_runs"] = old["real_trace_runs"]
    todo = [(t, b, p, [], "", d) for t, b, p in RUNS for d in (True, False)]
    todo += [(t, b, p, x, tag, d) for t, b, p, x, tag in BUDGET_RUNS for d in (True, False)]
    for trace, bh, pools, extra, tag, decode in todo:
        if True:
            dtag = "decode" if decode else "nodecode"
            name = f"{trace}.vllm-scheduler{'.' + tag if tag else ''}.{dtag}.csv"
            rel_trace = os.path.join("tests", "data", "engines", trace + ".jsonl")
            rel_out = os.path.join("tests", "data", "engines", "scheduler", name)
            summ = os.path.join(tempfile.gettempdir(), name + ".summary.json")
            cmd = [py, "validation/drive_vllm_scheduler.py", "--trace", rel_trace, "--hash-block-size", str(bh),
                   "--pools", pools, "--out", rel_out] + extra + ([] if decode else ["--no-decode"])
            print(" ".join(cmd), file=sys.stderr, flush=True)
            subprocess.run(cmd + ["--summary", summ], cwd=ROOT, check=True)
            with open(summ) as fh:
                s = json.load(fh)
            entry = {
                "file": name,
                "trace": trace + ".jsonl",
                "hash_block_size": bh,
                "decode": decode,
                "pools": pools.split(","),
                "engine": s["engine"],
                "command": "$VLLM_PY " + " ".join(cmd[1:]),
                "settings": {k: s[k] for k in ("max_num_seqs", "max_num_batched_tokens", "step_fixed_s",
                                                "step_per_token_s")},
                "runs": [{k: r.get(k) for k in ("pool", "num_gpu_blocks", "feasible", "failure", "stats",
                                                 "effective_config")} for r in s["runs"]],
                "model_config_stub_attributes_defaulted_to_None":
                    s["model_config_stub_attributes_defaulted_to_None"],
                "sha256": sha256(os.path.join(ROOT, rel_out)),
            }
            if check:
                with tempfile.TemporaryDirectory() as td:
                    again = os.path.join(td, name)
                    c2 = list(cmd)
                    c2[c2.index("--out") + 1] = again
                    subprocess.run(c2, cwd=ROOT, check=True, stderr=subprocess.DEVNULL)
                    same = sha256(again) == entry["sha256"]
                entry["rerun_byte_identical"] = same
                if not same:
                    print(f"  NOT DETERMINISTIC: {name}", file=sys.stderr, flush=True)
            manifest["runs"].append(entry)
    with open(path, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
