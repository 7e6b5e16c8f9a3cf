"""Regenerate tests/data/engines/hybrid_scheduler/: vLLM 0.33.0's own Scheduler with a hybrid KV
cache (sliding window, chunked local, Mamba beside full attention) under load, in simulated time.

    python3 validation/run_hybrid_scheduler.py [/work/engines/venv-vllm/bin/python] [--check] [NAME...]

Runs validation/drive_vllm_hybrid_scheduler.py (under the given vLLM interpreter) for each run of
RUNS (a model config, a trace of tests/data/engines/hybrid_model/, decode or not, the token budget,
pools from where the largest request barely fits, with queueing and preemption, up to `inf`), and
writes one CSV and one summary JSON per run plus manifest.json (versions, configs, settings, the
exact command line, sha256 of every input and output). The traces' requests arrive 1 ms apart, so
they queue and run in batches. With --check each run is made twice and must be byte-identical.
NAME...: only those runs (the manifest keeps the others' entries). Standard library only.
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
OUT = os.path.join(ROOT, "tests", "data", "engines", "hybrid_scheduler")
TRACES = "tests/data/engines/hybrid_model"
SMALL = "tests/data/engines/hybrid_model/configs"  # published configs with a shrunk window / chunk
FULL = "tests/data/engines/hybrid/configs"  # the published configs

# name, config, trace, hash block, pools, decode, extra driver flags
RUNS = [
    ("gpt-oss-20b-window40__b32__decode_budget64", f"{SMALL}/gpt-oss-20b-window40.json", "hybrid_b32", 32,
     "20,30,60,inf", True, ["--max-num-batched-tokens", "64"]),
    ("gpt-oss-20b-window40__b32__nodecode_budget64", f"{SMALL}/gpt-oss-20b-window40.json", "hybrid_b32", 32,
     "20,30,60,inf", False, ["--max-num-batched-tokens", "64"]),
    ("gpt-oss-20b-window40__b32__decode_seqs4", f"{SMALL}/gpt-oss-20b-window40.json", "hybrid_b32", 32,
     "30,inf", True, ["--max-num-batched-tokens", "256", "--max-num-seqs", "4"]),
    ("gpt-oss-20b__b512__decode_budget1000", f"{FULL}/gpt-oss-20b.json", "hybrid_b512", 512,
     "420,600,1200,inf", True, ["--max-num-batched-tokens", "1000"]),
    ("gemma-3-27b-it-window64__b32__decode_budget64", f"{SMALL}/gemma-3-27b-it-window64.json", "hybrid_b32", 32,
     "62,80,150,inf", True, ["--max-num-batched-tokens", "64"]),
    ("gemma-3-27b-it-window64__b32__nodecode_budget64", f"{SMALL}/gemma-3-27b-it-window64.json", "hybrid_b32", 32,
     "62,80,150,inf", False, ["--max-num-batched-tokens", "64"]),
    ("gemma-3-27b-it__b512__nodecode", f"{FULL}/gemma-3-27b-it.json", "hybrid_b512", 512,
     "1450,2000,4000,inf", False, []),
    ("Llama-4-Scout-chunk64__b32__decode_budget64", f"{SMALL}/Llama-4-Scout-chunk64.json", "hybrid_b32", 32,
     "32,45,80,inf", True, ["--max-num-batched-tokens", "64"]),
    ("Llama-4-Scout-chunk64__b32__nodecode_budget64", f"{SMALL}/Llama-4-Scout-chunk64.json", "hybrid_b32", 32,
     "32,45,80,inf", False, ["--max-num-batched-tokens", "64"]),
    ("Llama-4-Scout__b512__nodecode", f"{FULL}/Llama-4-Scout-17B-16E-Instruct.json", "hybrid_b512", 512,
     "830,1200,2500,inf", False, []),
    ("Qwen3-Next__b512__decode_budget1000", f"{FULL}/Qwen3-Next-80B-A3B-Instruct.json", "hybrid_b512", 512,
     "14,20,40,inf", True, ["--max-num-batched-tokens", "1000"]),
    ("Qwen3-Next__b512__nodecode", f"{FULL}/Qwen3-Next-80B-A3B-Instruct.json", "hybrid_b512", 512,
     "14,20,40,inf", False, []),
    ("gemma-3-27b-it__b512__decode_budget512", f"{FULL}/gemma-3-27b-it.json", "hybrid_b512", 512,
     "1450,2000,inf", True, ["--max-num-batched-tokens", "512"]),
    ("Llama-4-Scout__b512__decode_budget512", f"{FULL}/Llama-4-Scout-17B-16E-Instruct.json", "hybrid_b512", 512,
     "830,1200,inf", True, ["--max-num-batched-tokens", "512"]),
    # vLLM's AsyncScheduler, stepped as EngineCore.step_with_batch_queue (batch queue 2)
    ("gpt-oss-20b-window40__b32__decode_budget64_async", f"{SMALL}/gpt-oss-20b-window40.json", "hybrid_b32", 32,
     "20,30,60,inf", True, ["--max-num-batched-tokens", "64", "--async-scheduling"]),
    ("gemma-3-27b-it-window64__b32__decode_budget64_async", f"{SMALL}/gemma-3-27b-it-window64.json", "hybrid_b32", 32,
     "80,150,inf", True, ["--max-num-batched-tokens", "64", "--async-scheduling"]),
    ("Llama-4-Scout-chunk64__b32__decode_budget64_async", f"{SMALL}/Llama-4-Scout-chunk64.json", "hybrid_b32", 32,
     "45,80,inf", True, ["--max-num-batched-tokens", "64", "--async-scheduling"]),
    ("Qwen3-Next__b512__decode_budget1000_async", f"{FULL}/Qwen3-Next-80B-A3B-Instruct.json", "hybrid_b512", 512,
     "14,20,40,inf", True, ["--max-num-batched-tokens", "1000", "--async-scheduling"]),
    ("gpt-oss-20b__b512__nodecode_async", f"{FULL}/gpt-oss-20b.json", "hybrid_b512", 512,
     "420,600,inf", False, ["--async-scheduling"]),
]


def sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("--")]
    py = args[0] if args and os.path.sep in args[0] else os.environ.get("VLLM_PY", "/work/engines/venv-vllm/bin/python")
    only = {a for a in args if os.path.sep not in a}
    check = "--check" in argv
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "manifest.json")
    old = {}
    if os.path.exists(path):
        with open(path) as fh:
            old = {r["name"]: r for r in json.load(fh)["runs"]}
    manifest = {
        "what": "vLLM 0.33.0 Scheduler (sync; AsyncScheduler in *_async runs) with a hybrid KVCacheConfig (vLLM's own get_kv_cache_groups / "
                "get_kv_cache_config_from_groups), driven in simulated time by validation/drive_vllm_hybrid_scheduler.py; "
                "see validation/HYBRID_NOTES.md section 4",
        "columns": "request,id,arrival_s,worker,input_tokens,output_tokens, then per pool N: hit_tokens_N, "
                   "preemptions_N, queue_s_N, first_token_s_N, finish_s_N (groups in that order); times in seconds "
                   "from the request's arrival, hits in tokens",
        "step_time": "fixed + T * per_token seconds for a step scheduling T > 0 tokens",
        "runs": [],
    }
    for name, config, trace, bh, pools, decode, extra in RUNS:
        if only and name not in only:
            if name in old:
                manifest["runs"].append(old[name])
            continue
        rel_trace = f"{TRACES}/{trace}.jsonl"
        rel_csv = f"tests/data/engines/hybrid_scheduler/{name}.csv"
        rel_json = f"tests/data/engines/hybrid_scheduler/{name}.json"
        cmd = [py, "validation/drive_vllm_hybrid_scheduler.py", "--trace", rel_trace, "--hash-block-size", str(bh),
               "--config", config, "--pools", pools, "--out", rel_csv, "--summary", rel_json, *extra]
        cmd += [] if decode else ["--no-decode"]
        print(" ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
        with open(os.path.join(ROOT, rel_json)) as fh:
            s = json.load(fh)
        entry = {
            "name": name, "csv": f"{name}.csv", "summary": f"{name}.json", "config": config,
            "trace": rel_trace, "hash_block_size": bh, "decode": decode, "pools": pools.split(","),
            "engine": s["engine"], "command": "$VLLM_PY " + " ".join(cmd[1:]),
            "settings": {**{k: s[k] for k in ("max_num_seqs", "max_num_batched_tokens", "step_fixed_s", "step_per_token_s",
                                               "gdn_checkpoint_alignment")},
                         "async_scheduling": "--async-scheduling" in extra},
            "sha256": {p: sha256(os.path.join(ROOT, p)) for p in (config, rel_trace, rel_csv, rel_json,
                                                                   "validation/drive_vllm_hybrid_scheduler.py")},
        }
        if check:
            with tempfile.TemporaryDirectory() as td:
                c2 = list(cmd)
                c2[c2.index("--out") + 1] = os.path.join(td, "again.csv")
                c2[c2.index("--summary") + 1] = os.path.join(td, "again.json")
                subprocess.run(c2, cwd=ROOT, check=True, stderr=subprocess.DEVNULL)
                entry["rerun_byte_identical"] = sha256(os.path.join(td, "again.csv")) == entry["sha256"][rel_csv]
        manifest["runs"].append(entry)
    with open(path + ".tmp", "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
