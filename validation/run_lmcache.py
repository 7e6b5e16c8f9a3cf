"""Regenerate the LMCache runs in tests/data/engines/offload/: LMCache 0.5.6 behind vLLM 0.33.0, serial.

    python3 validation/run_lmcache.py [--jobs 2] [/work/engines/venv-vllm/bin/python] [TRACE ...]

Runs validation/drive_lmcache.py (under the given vLLM interpreter; LMCache's site-packages is
appended by the driver) on the committed traces: the GPU pools of the vLLM-native offload runs
(run_offload.py) plus gen_edges_b32 and conversation_first80, LMCache chunk sizes 64 and 256, a
CPU ladder (tiny / medium / the native runs' CPU bytes / never evicting, in chunks' worth of
bytes) and two CPU + disk configurations (disk smaller and larger than the CPU tier), with and
without decode. One CSV per (trace, chunk, CPU, disk, decode); entries are
appended to manifest.json (shared with the vLLM-native runs; files already listed are skipped)
with the command line, per-pool totals and LMCache's stats, and sha256.
Standard library only.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, "tests", "data", "engines")
OUT = os.path.join(DATA, "offload")

# trace, hash block size, GPU pools, {chunk: [(cpu chunks, disk chunks), ...]}
# (K = 64, C = 32 / 64 / 64: the same bytes as the vLLM-native runs' CPU tiers of 128 / 256 / 256 blocks)
# Disk runs: CPU larger than one request's chunks (a disk read stages every chunk it loads in
# the CPU tier while the request's CPU chunks stay pinned; with less room LocalCPUBackend.allocate
# would wait forever) and disk at least one request's chunks (a store never has to evict its own
# in-flight writes, whose completion time would decide the outcome).
RUNS = [
    ("gen_chat_b16", 16, [58, 77, 136], {64: [(4, 0), (16, 0), (32, 0), (256, 0), (16, 12), (16, 64)],
                                          256: [(1, 0), (4, 0), (64, 0), (4, 2), (4, 16)]}),
    ("gen_chat_b64", 64, [222, 433], {64: [(16, 0), (48, 0), (64, 0), (256, 0), (48, 36), (48, 256)],
                                       256: [(4, 0), (12, 0), (64, 0), (12, 8), (12, 64)]}),
    ("gen_mixed_b32", 32, [107, 210], {64: [(8, 0), (24, 0), (64, 0), (256, 0), (24, 21), (24, 128)],
                                        256: [(2, 0), (6, 0), (64, 0), (6, 5), (6, 32)]}),
    # small prompts, identical prompts of 64 and 128 tokens: the full-prompt hit (L == P) case
    ("gen_edges_b32", 32, [47, 104], {64: [(2, 0), (8, 0), (64, 0), (16, 12), (16, 64)]}),
    ("conversation_first80", 512, [7150, 21171], {256: [(64, 0), (512, 0), (8192, 0), (512, 384),
                                                        (512, 2048)]}),
]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read())
    return h.hexdigest()


def file_name(trace: str, chunk: int, cpu: int, disk: int, decode: bool) -> str:
    return f"{trace}.lmcache.chunk{chunk}.cpu{cpu}.disk{disk}.serial.{'decode' if decode else 'nodecode'}.csv"


def main(argv: list[str]) -> int:
    jobs = 1
    if "--jobs" in argv:
        i = argv.index("--jobs")
        jobs = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    paths = [a for a in argv[1:] if os.sep in a]
    py = paths[0] if paths else os.environ.get("VLLM_PY", "/work/engines/venv-vllm/bin/python")
    only = {a for a in argv[1:] if os.sep not in a}
    os.makedirs(OUT, exist_ok=True)
    manifest_path = os.path.join(OUT, "manifest.json")
    with open(manifest_path) as fh:
        manifest = json.load(fh)
    done = {r["file"] for r in manifest["runs"]}
    lock = threading.Lock()
    todo = []
    for trace, bh, pools, by_chunk in RUNS:
        if only and trace not in only:
            continue
        for chunk, sizes in by_chunk.items():
            for cpu, disk in sizes:
                for decode in (True, False):
                    name = file_name(trace, chunk, cpu, disk, decode)
                    if name not in done:
                        todo.append((trace, bh, pools, chunk, cpu, disk, decode, name))

    def one(job):
        trace, bh, pools, chunk, cpu, disk, decode, name = job
        rel_trace = os.path.join("tests", "data", "engines", trace + ".jsonl")
        rel_out = os.path.join("tests", "data", "engines", "offload", name)
        summ = os.path.join("/tmp", name + ".summary.json")
        cmd = [py, "validation/drive_lmcache.py", "--trace", rel_trace, "--hash-block-size", str(bh),
               "--pools", ",".join(map(str, pools)), "--chunk", str(chunk), "--cpu-chunks", str(cpu),
               "--disk-chunks", str(disk), "--out", rel_out, "--summary", summ] + ([] if decode else ["--no-decode"])
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
            "cpu_blocks": None,
            "policy": None,
            "engine": s["engine"],
            "chunk_tokens": chunk,
            "cpu_chunks": cpu,
            "disk_chunks": disk,
            "chunk_bytes": s["chunk_bytes"],
            "cache_policy": s["lmcache_config"]["cache_policy"],
            "lmcache_config": s["lmcache_config"],
            "command": "$VLLM_PY " + " ".join(c for c in cmd[1:] if c not in ("--summary", summ)),
            "runs": [{k: r.get(k) for k in r if k not in ("seconds",)} for r in s["runs"]],
            "model_config_stub_attributes_defaulted_to_None": s["model_config_stub_attributes_defaulted_to_None"],
            "sha256": sha256(os.path.join(ROOT, rel_out)),
        }
        with lock:
            with open(manifest_path) as fh:
                m = json.load(fh)
            m["runs"] = [r for r in m["runs"] if r["file"] != name] + [entry]
            m["runs"].sort(key=lambda r: r["file"])
            with open(manifest_path, "w") as fh:
                json.dump(m, fh, indent=1)
                fh.write("\n")
        return name

    with cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        for name in ex.map(one, todo):
            print("done", name, file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
