"""Regenerate tests/data/engines/hybrid/: vLLM 0.33.0's hybrid KV-cache manager on small traces.

    python3 validation/run_hybrid.py --vllm-py /work/engines/venv-vllm/bin/python [--check] [--only MODEL]

Writes (atomically) into ``tests/data/engines/hybrid/``:

- ``hyb_edges_b64.jsonl``: a seeded trace (make_traces.py style, B_h = 64) with every edge the
  hybrid rules care about: prompts shorter than one block (16) and than one Qwen3-Next block
  (576), around the gpt-oss window (128) and the Gemma 3 window (1024), block-aligned prompts,
  identical prompts, a shared system prompt with tails, a multi-turn chain, prefixes of earlier
  prompts (a hit inside a cached sequence, where sliding-window blocks were freed), and long
  prompts (> 8192 tokens, so the scheduler prefills in chunks; > 2 x 8192 for Llama 4's chunks);
- ``conversation_sel37.jsonl``: 37 lines of the shared conversation trace (B_h 512) chosen so that
  later requests share prefixes with earlier ones (the first lines share only one block);
- ``results/<trace>.<model>.serial.<decode|nodecode>.csv``: drive_vllm_hybrid.py's per-request
  CSV (``hit_tokens_<N>`` per pool, plus per-group-kind diagnostics and prefill chunks);
- ``manifest.json``: per model the layout (groups, block size and its derivation, bytes per
  block), per run the pools (feasible / infeasible with the failing request), the smallest
  feasible pool found by bisection, and the sha256 of every file.

Pools per (trace, model): the smallest feasible pool m of the decode run (bisection with the
engine, ``--max-num-batched-tokens 8192``), then m + c/8, m + c/4, m + c/2 and m + c, where c is
the number of blocks holding a hash at the end of the decode run at ``inf`` (so eviction matters
below m + c), and ``inf`` (no eviction). ``--check`` reruns every driver into a scratch folder and
compares the CSVs byte for byte with the committed ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_traces

REPO = os.path.dirname(HERE)
OUT = os.path.join(REPO, "tests", "data", "engines", "hybrid")
CONFIGS = {
    "gpt-oss-20b": "gpt-oss-20b.json",
    "gemma-3-27b-it": "gemma-3-27b-it.json",
    "llama-4-scout": "Llama-4-Scout-17B-16E-Instruct.json",
    "qwen3-next": "Qwen3-Next-80B-A3B-Instruct.json",
    "qwen3-next-triton-gdn": "Qwen3-Next-80B-A3B-Instruct.json",
}
# Extra driver flags per model: the Triton/FLA GDN prefill exports no mid-prefill state, so the
# attention block is 544 and the scheduler splits the last chunk at the checkpoint instead.
EXTRA = {"qwen3-next-triton-gdn": ["--gdn-checkpoint-alignment", "0"]}
TRACES = {"hyb_edges_b64": 64, "conversation_sel37": 512}
# Lines (0-based) of ../shared/traces/mooncake_conversation_trace.jsonl: among its first 3000
# requests, the first 18 (earlier request, later request) pairs where the later one shares at least
# 2 hash blocks with the earlier one and both are under 20,000 tokens, in file order.
CONV_LINES = [1, 15, 21, 24, 30, 40, 41, 44, 62, 64, 65, 66, 71, 91, 113, 133, 137, 140, 153, 166, 170, 177,
              180, 191, 201, 218, 220, 228, 240, 247, 260, 261, 280, 289, 294, 298, 303]
SEED = 20261206


def gen_hybrid_edges(seed: int) -> list[dict]:
    g = make_traces.Builder(64, seed)
    r = g.rng
    t = 0

    def add(prompt, o=None):
        nonlocal t
        g.add(t, prompt, o if o is not None else r.choice([1, 2, 3, 17, 40]))
        t += 50

    # small prompts around the block (16), the gpt-oss window (128), the Qwen3-Next block (576)
    # and the Gemma 3 window (1024)
    for p in [1, 15, 16, 17, 100, 127, 128, 129, 575, 576, 577, 1023, 1024, 1025, 1152, 1153]:
        add(g.prompt(p))
    # the same prompts again (identical prompts: capped at P - 1, block-aligned ones lose a block)
    for p in [128, 576, 1024, 1153]:
        add(g.prompt(p))
        prev = g.reqs[-1]
        add((prev["input_length"], list(prev["hash_ids"])))
    # a shared system prompt and tails of many lengths
    sys_p = g.prompt(640)
    add(sys_p)
    for p in [650, 700, 1200, 1300, 2500, 4000, 5000]:
        add(g.prompt(p, sys_p))
    # a multi-turn chain
    chain = g.prompt(1000)
    add(chain)
    for p in [1800, 3000, 4600, 7000]:
        chain = g.prompt(p, chain)
        add(chain)
    # prefixes of an earlier prompt (a hit in the middle of a cached sequence)
    doc = g.prompt(6000)
    add(doc)
    for p in [200, 1100, 2000, 3456, 5999]:
        add(g.head(doc, p))
    # long prompts: chunked prefill (> 8192), two Llama 4 chunks (> 16384)
    big = g.prompt(9000)
    add(big, 5)
    add(g.prompt(12000, big), 5)
    add(g.head(big, 8192), 3)
    add(g.head(big, 8193), 3)
    huge = g.prompt(17500)
    add(huge, 2)
    add(g.prompt(18000, huge), 2)
    add(g.head(huge, 700), 2)
    add(g.head(huge, 16400), 2)
    add((huge[0], list(huge[1])), 2)
    return g.sorted_reqs()


def write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def make_traces_files() -> dict:
    os.makedirs(OUT, exist_ok=True)
    reqs = gen_hybrid_edges(SEED)
    write_atomic(os.path.join(OUT, "hyb_edges_b64.jsonl"), "".join(json.dumps(x) + "\n" for x in reqs))
    with open(os.path.join(make_traces.SHARED_TRACES, "mooncake_conversation_trace.jsonl")) as fh:
        lines = [ln for i, ln in enumerate(fh) if i in set(CONV_LINES)]
    write_atomic(os.path.join(OUT, "conversation_sel37.jsonl"), "".join(lines))
    return {
        "hyb_edges_b64": {"hash_block_size": 64, "requests": len(reqs),
                          "how": f"run_hybrid.gen_hybrid_edges(seed={SEED})"},
        "conversation_sel37": {"hash_block_size": 512, "requests": len(lines),
                               "how": "lines CONV_LINES (run_hybrid.py) of ../shared/traces/mooncake_conversation_trace.jsonl, "
                                      "copied byte for byte in file order: 18 earlier/later pairs sharing >= 2 blocks"},
    }


def drive(py: str, trace: str, model: str, pools: str, decode: bool, out: str, summary: str) -> dict:
    cmd = [py, os.path.join(HERE, "drive_vllm_hybrid.py"), "--trace", os.path.join(OUT, trace + ".jsonl"),
           "--hash-block-size", str(TRACES[trace]), "--config", os.path.join(OUT, "configs", CONFIGS[model]),
           "--pools", pools, "--out", out, "--summary", summary, *EXTRA.get(model, [])]
    if not decode:
        cmd.append("--no-decode")
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{res.stderr[-3000:]}")
    with open(summary) as fh:
        return json.load(fh)


def bisect(py: str, trace: str, model: str) -> dict:
    """The smallest feasible pool of the decode run, found by the driver (--bisect)."""
    cmd = [py, os.path.join(HERE, "drive_vllm_hybrid.py"), "--trace", os.path.join(OUT, trace + ".jsonl"),
           "--hash-block-size", str(TRACES[trace]), "--config", os.path.join(OUT, "configs", CONFIGS[model]),
           "--pools", "inf", "--bisect", *EXTRA.get(model, [])]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def sha(path: str) -> str:
    return hashlib.sha256(read_bytes(path)).hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-py", default="/work/engines/venv-vllm/bin/python")
    ap.add_argument("--check", action="store_true", help="rerun with the manifest's pools, compare byte for byte")
    ap.add_argument("--only", choices=sorted(CONFIGS), action="append")
    args = ap.parse_args(argv)
    models = args.only or list(CONFIGS)
    res_dir = os.path.join(OUT, "results")
    os.makedirs(res_dir, exist_ok=True)
    man_path = os.path.join(OUT, "manifest.json")
    if args.check:
        with open(man_path) as fh:
            man = json.load(fh)
        bad = 0
        with tempfile.TemporaryDirectory() as work:
            for run in man["runs"]:
                if run["model"] not in models:
                    continue
                out = os.path.join(work, os.path.basename(run["file"]))
                drive(args.vllm_py, run["trace"], run["model"], ",".join(run["pools"]), run["decode"], out,
                      os.path.join(work, "s.json"))
                same = read_bytes(out) == read_bytes(os.path.join(OUT, run["file"]))
                bad += not same
                print(f"{run['file']}: {'identical' if same else 'DIFFERS'}", file=sys.stderr, flush=True)
        return 1 if bad else 0
    traces = make_traces_files()
    man = {"schema": "stackdist.engines.hybrid.v1", "engine": {"name": "vllm", "version": None},
           "traces": traces, "models": {}, "runs": [], "files": {}}
    if os.path.exists(man_path):
        with open(man_path) as fh:
            old = json.load(fh)
        man["models"] = {k: v for k, v in old.get("models", {}).items() if k not in models}
        man["runs"] = [r for r in old.get("runs", []) if r["model"] not in models]
    with tempfile.TemporaryDirectory() as work:
        for model in models:
            for trace in TRACES:
                b = bisect(args.vllm_py, trace, model)
                m = b["smallest_feasible"]
                c = b["cached_blocks_at_end_inf"]
                pools = sorted({m, m + c // 8, m + c // 4, m + c // 2, m + c})
                pool_s = ",".join(str(x) for x in pools) + ",inf"
                for decode in (False, True):
                    name = f"{trace}.{model}.serial.{'decode' if decode else 'nodecode'}.csv"
                    s = drive(args.vllm_py, trace, model, pool_s, decode, os.path.join(res_dir, name),
                              os.path.join(work, "s.json"))
                    man["engine"]["version"] = s["engine"]["version"]
                    man["models"][model] = {"config": "configs/" + CONFIGS[model], "layout": s["layout"],
                                            "driver_flags": EXTRA.get(model, []),
                                            "model_config_stub_defaulted": s["model_config_stub_attributes_defaulted_to_None"]}
                    man["runs"].append({
                        "file": "results/" + name, "trace": trace, "model": model, "decode": decode,
                        "schedule": "serial", "max_num_batched_tokens": s["max_num_batched_tokens"],
                        "pools": pool_s.split(","), "inf_pool_size": s["inf_pool_size"], "bisection": b,
                        "feasible_pools": [r["pool"] for r in s["runs"] if r["feasible"]],
                        "infeasible": [{"pool": r["pool"], "failure": r["failure"]} for r in s["runs"] if not r["feasible"]],
                        "stats": {r["pool"]: r.get("stats") for r in s["runs"] if r["feasible"]},
                    })
                    print(f"{name}: pools {pool_s}", file=sys.stderr, flush=True)
    for root, _dirs, files in os.walk(OUT):
        for f in sorted(files):
            if f == "manifest.json" or f.endswith(".tmp"):
                continue
            p = os.path.join(root, f)
            man["files"][os.path.relpath(p, OUT)] = sha(p)
    man["runs"].sort(key=lambda r: r["file"])
    write_atomic(man_path, json.dumps(man, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
