"""Regenerate tests/data/engines/sglang_hybrid/: SGLang 0.5.23's hybrid (full + SWA) prefix cache.

    $VENV/bin/python validation/run_sglang_hybrid.py --sglang-py /work/engines/venv-sglang/bin/python [--check]

(``$VENV`` has stackdist installed: the pools come from the model's smallest no-eviction pool.)

Writes into ``tests/data/engines/sglang_hybrid/``:

- ``swa_shared_b64.jsonl``: a seeded trace (B_h = 64, seed 20261206) of prompts that share
  system prompts and chain turns, with short outputs, so that the SWA pool (0.8 x the full pool)
  runs short and tombstones SWA data of cached prefixes;
- ``results/<trace>.<model>.w<W>.serial.<decode|nodecode>.csv``: drive_sglang_hybrid.py's
  per-request CSV (``hit_tokens_<N>`` per feasible full pool of N pages);
- ``manifest.json``: engine, settings, per run the pools (feasible / infeasible with the failing
  request), the summaries, and the sha256 of every input and result.

The traces ``hyb_edges_b64`` and ``conversation_sel37`` are read from ``../hybrid/`` (the vLLM
hybrid validation's traces). Pools per run: the pages of the longest prompt (plus a page) times
0.5 (SGLang cannot run the trace), 1.25, 2 and 4 (SGLang may evict there; the model refuses those
below A), the
smallest pool at which the model (``stackdist.serving.sglang_hybrid``) claims SGLang evicts
nothing (A), A + 1, 2 A, and ``inf``. ``--check`` reruns the drivers into a scratch
folder and compares the CSVs byte for byte with the committed ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(REPO, "tests", "data", "engines", "sglang_hybrid")
HYB = os.path.join(REPO, "tests", "data", "engines", "hybrid")
SEED = 20261206
# (model name, config file, window W): the configs' own windows and shrunk ones
MODELS = [("gpt-oss-20b", "gpt-oss-20b.json", 40), ("gpt-oss-20b", "gpt-oss-20b.json", 128),
          ("gemma-3-27b-it", "gemma-3-27b-it.json", 64), ("gemma-3-27b-it", "gemma-3-27b-it.json", 1024)]
RATIO = 0.8
CHUNK = 8192
TRACES = {"swa_shared_b64": (os.path.join(OUT, "swa_shared_b64.jsonl"), 64),
          "hyb_edges_b64": (os.path.join(HYB, "hyb_edges_b64.jsonl"), 64),
          "conversation_sel37": (os.path.join(HYB, "conversation_sel37.jsonl"), 512)}


def gen_shared(seed: int) -> list[dict]:
    """Seeded requests with shared prefixes (B_h 64): 3 system prompts, tails, chained turns."""
    rng = random.Random(seed)
    nxt = [0]

    def fresh(n_blocks: int) -> list[int]:
        ids = list(range(nxt[0], nxt[0] + n_blocks))
        nxt[0] += n_blocks
        return ids

    systems = [fresh(rng.randint(2, 12)) for _ in range(3)]
    chains: list[list[int]] = []
    out = []
    for i in range(48):
        u = rng.random()
        if u < 0.35 and chains:
            base = rng.choice(chains)
        elif u < 0.8:
            base = rng.choice(systems)
        else:
            base = []
        ids = base + fresh(rng.randint(1, 10))
        last = rng.randint(1, 64)
        if rng.random() < 0.2:
            last = 64
        p = 64 * (len(ids) - 1) + last
        chains.append(ids)
        out.append({"timestamp": 100 * i, "input_length": p, "output_length": rng.choice([1, 2, 5, 17, 40, 90]),
                    "hash_ids": ids})
    return out


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def sha(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def pools_for(trace_path: str, bh: int, window: int, decode: bool) -> list[str]:
    """Pools too small for the longest prompt (0.5 x its pages: SGLang fails), pools where SGLang
    evicts (1.25, 2 and 4 x) and the model's
    smallest pool that needs no eviction (``A``), A + 1, 2 A, and inf."""
    with open(trace_path) as fh:
        reqs = [json.loads(x) for x in fh if x.strip()]
    m = max(-(-r["input_length"] // 16) for r in reqs) + 1
    sys.path.insert(0, REPO)
    from stackdist.serving.pages import engine_pages
    from stackdist.serving.sglang_hybrid import _replay, _smallest_ample
    from stackdist.traces import read_mooncake

    _hits, room = _replay(engine_pages(read_mooncake(trace_path, block_size=bh)), window, decode, CHUNK)
    a = _smallest_ample(room, RATIO)
    return [str(p) for p in sorted({max(1, int(m * f)) for f in (0.5, 1.25, 2, 4)} | {a, a + 1, 2 * a})] + ["inf"]


def run(py: str, outdir: str) -> list[dict]:
    runs = []
    for tname, (tpath, bh) in TRACES.items():
        for model, cfg, w in MODELS:
            for decode in (False, True):
                pools = pools_for(tpath, bh, w, decode)
                tag = f"{tname}.{model}.w{w}.serial.{'decode' if decode else 'nodecode'}"
                csv = os.path.join(outdir, "results", tag + ".csv")
                summ = os.path.join(outdir, "results", tag + ".summary.json")
                cmd = [py, os.path.join(HERE, "drive_sglang_hybrid.py"), "--trace", tpath, "--hash-block-size",
                       str(bh), "--config", os.path.join(HYB, "configs", cfg), "--window", str(w), "--schedule",
                       "serial", "--pools", ",".join(pools), "--out", csv, "--summary", summ,
                       "--swa-full-tokens-ratio", str(RATIO), "--chunked-prefill-size", str(CHUNK)]
                if not decode:
                    cmd.append("--no-decode")
                print(tag, file=sys.stderr, flush=True)
                subprocess.run(cmd, check=True)
                with open(summ) as fh:
                    s = json.load(fh)
                os.remove(summ)
                runs.append({"file": os.path.relpath(csv, outdir), "trace": tname, "model": model,
                             "config": "../hybrid/configs/" + cfg, "window": w, "decode": decode,
                             "schedule": "serial", "pools": pools,
                             "feasible_pools": [r["pool"] for r in s["runs"] if r["feasible"]],
                             "infeasible": [{"pool": r["pool"], "failure": r["failure"]} for r in s["runs"]
                                            if not r["feasible"]],
                             "stats": {r["pool"]: dict(r["stats"] or {}, total_hit_tokens=r["total_hit_tokens"])
                                       for r in s["runs"]}})
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sglang-py", required=True)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    os.makedirs(os.path.join(OUT, "results"), exist_ok=True)
    trace_text = "".join(json.dumps(r) + "\n" for r in gen_shared(SEED))
    tpath = TRACES["swa_shared_b64"][0]
    if not args.check:
        with open(tpath + ".tmp", "w") as fh:
            fh.write(trace_text)
        os.replace(tpath + ".tmp", tpath)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "results"))
            runs = run(args.sglang_py, tmp)
            bad = [r["file"] for r in runs if _read(os.path.join(tmp, r["file"])) != _read(os.path.join(OUT, r["file"]))]
        print(json.dumps({"checked": len(runs), "different": bad}))
        return 1 if bad else 0
    runs = run(args.sglang_py, OUT)
    version = subprocess.run([args.sglang_py, "-c", "import sglang; print(sglang.__version__)"], check=True,
                             capture_output=True, text=True).stdout.strip()
    files = {os.path.relpath(p, OUT): sha(p) for p in [tpath] + [os.path.join(OUT, r["file"]) for r in runs]}
    inputs = {os.path.relpath(p, OUT): sha(p) for p in [TRACES["hyb_edges_b64"][0], TRACES["conversation_sel37"][0]]
              + [os.path.join(HYB, "configs", c) for c in sorted({m[1] for m in MODELS})]}
    inputs[os.path.relpath(os.path.join(HERE, "drive_sglang_hybrid.py"), OUT)] = sha(os.path.join(HERE, "drive_sglang_hybrid.py"))
    manifest = {
        "schema": "stackdist.engines.sglang_hybrid.v1",
        "engine": {"name": "sglang", "version": version,
                   "tree": "UnifiedRadixCache(FULL, SWA) + SWATokenToKVPoolAllocator + PrefillAdder + ScheduleBatch"},
        "settings": {"page_size_tokens": 16, "swa_full_tokens_ratio": RATIO, "chunked_prefill_size_tokens": CHUNK,
                     "max_prefill_tokens": 16384, "schedule": "serial", "pool_unit": "full-attention pages of 16 tokens",
                     "swa_pool_tokens": "floor(N * 16 * ratio / 16) * 16",
                     "hit": "req.prefix_len after the first init_next_round_input (tokens)"},
        "traces": {"swa_shared_b64": {"hash_block_size": 64, "how": f"run_sglang_hybrid.gen_shared(seed={SEED})"},
                   "hyb_edges_b64": {"hash_block_size": 64, "how": "../hybrid/hyb_edges_b64.jsonl"},
                   "conversation_sel37": {"hash_block_size": 512, "how": "../hybrid/conversation_sel37.jsonl"}},
        "models": [{"model": m, "config": "../hybrid/configs/" + c, "window": w} for m, c, w in MODELS],
        "runs": runs,
        "files": files,
        "inputs": inputs,
    }
    mpath = os.path.join(OUT, "manifest.json")
    with open(mpath + ".tmp", "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(mpath + ".tmp", mpath)
    return 0


if __name__ == "__main__":
    sys.exit(main())
