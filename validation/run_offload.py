"""Regenerate tests/data/engines/offload/: vLLM 0.33.0 native CPU offloading, serial schedule.

    python3 validation/run_offload.py /work/engines/venv-vllm/bin/python

Runs validation/drive_vllm_offload.py (under the given vLLM interpreter) on a few committed
traces, GPU pools where eviction matters (sizes taken from the committed vLLM serial results, so
the CPU = 0 runs can be checked against drive_vllm.py's columns), CPU sizes 0 / small / large,
policies lru and arc, with and without decode; writes one CSV per (trace, cpu size, policy) and manifest.json
(trace, pools, cpu size, policy, vLLM version, the command line, per-run totals, sha256).
Standard library only.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, "tests", "data", "engines")
OUT = os.path.join(DATA, "offload")

# trace, hash block size, GPU pools (num_gpu_blocks), CPU sizes in blocks (0 = no connector)
RUNS = [
    ("gen_chat_b16", 16, [58, 77, 136], [0, 32, 128, 1024]),
    ("gen_chat_b64", 64, [222, 433], [0, 64, 256, 2048]),
    ("gen_mixed_b32", 32, [107, 210], [0, 64, 256, 2048]),
]
POLICIES = ["lru", "arc"]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read())
    return h.hexdigest()


def main(argv: list[str]) -> int:
    py = argv[1] if len(argv) > 1 else os.environ.get("VLLM_PY", "/work/engines/venv-vllm/bin/python")
    only = set(argv[2:])
    os.makedirs(OUT, exist_ok=True)
    manifest_path = os.path.join(OUT, "manifest.json")
    manifest = {"runs": []}
    if os.path.exists(manifest_path):
        with open(manifest_path) as fh:
            manifest = json.load(fh)
    done = {r["file"] for r in manifest["runs"]}
    for trace, bh, pools, cpus in RUNS:
        if only and trace not in only:
            continue
        for decode, cpu, policy in [(d, c, p) for d in (True, False) for c in cpus
                                    for p in (POLICIES if c > 0 else ["lru"])]:
            if True:
                dtag = "decode" if decode else "nodecode"
                name = f"{trace}.vllm-native.cpu{cpu}" + (f".{policy}" if cpu > 0 else "") + f".serial.{dtag}.csv"
                if name in done:
                    continue
                rel_trace = os.path.join("tests", "data", "engines", trace + ".jsonl")
                rel_out = os.path.join("tests", "data", "engines", "offload", name)
                summ = os.path.join("/tmp", name + ".summary.json")
                cmd = [py, "validation/drive_vllm_offload.py", "--trace", rel_trace, "--hash-block-size", str(bh),
                       "--pools", ",".join(map(str, pools)), "--cpu-blocks", str(cpu), "--policy", policy,
                       "--out", rel_out, "--summary", summ] + ([] if decode else ["--no-decode"])
                print(" ".join(cmd), file=sys.stderr, flush=True)
                subprocess.run(cmd, cwd=ROOT, check=True)
                with open(summ) as fh:
                    s = json.load(fh)
                entry = {
                    "file": name,
                    "trace": trace + ".jsonl",
                    "hash_block_size": bh,
                    "schedule": "serial",
                    "decode": decode,
                    "gpu_pools": pools,
                    "cpu_blocks": cpu,
                    "policy": policy if cpu > 0 else None,
                    "engine": s["engine"],
                    "bytes_per_block": s["bytes_per_block"],
                    "command": "$VLLM_PY " + " ".join(c for c in cmd[1:] if c not in ("--summary", summ)),
                    "runs": [{k: r.get(k) for k in ("pool", "feasible", "failure", "total_hit_tokens",
                                                     "total_offload_hit_tokens", "stats")} for r in s["runs"]],
                    "model_config_stub_attributes_defaulted_to_None":
                        s["model_config_stub_attributes_defaulted_to_None"],
                    "sha256": sha256(os.path.join(ROOT, rel_out)),
                }
                if cpu == 0:
                    entry["check_against_drive_vllm"] = check_cpu0(trace, rel_out, dtag)
                manifest["runs"].append(entry)
                manifest["runs"].sort(key=lambda r: r["file"])
                with open(manifest_path, "w") as fh:
                    json.dump(manifest, fh, indent=1)
                    fh.write("\n")
    return 0


def check_cpu0(trace: str, rel_out: str, dtag: str) -> dict:
    """CPU = 0 (no connector, the full Scheduler) against drive_vllm.py's committed serial decode
    (or nodecode) columns (KVCacheManager driven by hand): differing requests per pool."""
    ref_path = os.path.join(DATA, "results", f"{trace}.vllm.serial.{dtag}.csv")
    with open(ref_path) as fh:
        ref = list(csv.DictReader(fh))
    with open(os.path.join(ROOT, rel_out)) as fh:
        got = list(csv.DictReader(fh))
    out = {}
    for col in got[0]:
        if col.startswith("hit_tokens_") and col in ref[0]:
            out[col] = sum(1 for a, b in zip(ref, got) if a[col] != b[col])
    return {"reference": os.path.relpath(ref_path, ROOT), "differing_requests": out}


if __name__ == "__main__":
    sys.exit(main(sys.argv))
