"""Regenerate tests/data/engines/sglang_mamba/: SGLang 0.5.23's Mamba hybrid (FULL + MAMBA) prefix cache.

    $VENV/bin/python validation/run_sglang_mamba.py --sglang-py /work/engines/venv-sglang/bin/python [--check]

(``$VENV`` has stackdist installed: the pools come from the model's smallest no-eviction pool.)

Writes into ``tests/data/engines/sglang_mamba/``:

- ``results/<trace>.qwen3-next.slots<S>.serial.<decode|nodecode>.csv``: drive_sglang_mamba.py's
  per-request CSV (``hit_tokens_<N>`` per feasible full-attention pool of N pages of 16 tokens) with
  a MambaPool of S slots (``inf``: ``drive_sglang_mamba.ample_slots``, never runs out);
- ``manifest.json``: engine, settings (page, checkpoint grid, track interval), per run the pools
  (feasible / infeasible with the failing request), the summaries, and the sha256 of every input
  and result.

Traces: ``../hybrid/hyb_edges_b64.jsonl``, ``../hybrid/conversation_sel37.jsonl`` and
``../sglang_hybrid/swa_shared_b64.jsonl`` (shared system prompts, chained turns). Full pools per run
(slots inf): the pages of the longest prompt (plus a page) times 0.5 (cannot run), 1.25, 2 and 4,
the smallest pool at which the model claims SGLang evicts nothing (A), A + 1, 2 A and ``inf``; then, at the ``inf`` full pool, MambaPool slots 4, 8 and 16 (SGLang evicts Mamba
states). ``--check`` reruns into a scratch folder and compares the CSVs byte for byte.
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
REPO = os.path.dirname(HERE)
OUT = os.path.join(REPO, "tests", "data", "engines", "sglang_mamba")
ENG = os.path.join(REPO, "tests", "data", "engines")
CONFIG = os.path.join(ENG, "hybrid", "configs", "Qwen3-Next-80B-A3B-Instruct.json")
CHUNK = 8192
TRACK = 256
SLOTS = ["4", "8", "16"]
TRACES = {"swa_shared_b64": (os.path.join(ENG, "sglang_hybrid", "swa_shared_b64.jsonl"), 64),
          "hyb_edges_b64": (os.path.join(ENG, "hybrid", "hyb_edges_b64.jsonl"), 64),
          "conversation_sel37": (os.path.join(ENG, "hybrid", "conversation_sel37.jsonl"), 512)}


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def sha(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def full_pools(trace_path: str, bh: int, decode: bool) -> list[str]:
    """0.5, 1.25, 2 and 4 x the longest prompt's pages (plus one), the model's smallest answered
    pool A (``stackdist.serving.sglang_mamba``), A + 1, 2 A, and inf."""
    with open(trace_path) as fh:
        reqs = [json.loads(x) for x in fh if x.strip()]
    m = max(-(-r["input_length"] // 16) for r in reqs) + 1
    sys.path.insert(0, REPO)
    from stackdist.serving.pages import engine_pages
    from stackdist.serving.sglang_mamba import _replay
    from stackdist.traces import read_mooncake

    _hits, room = _replay(engine_pages(read_mooncake(trace_path, block_size=bh)), decode, CHUNK)
    a = max(h + o for h, o in room)
    return [str(p) for p in sorted({max(1, int(m * f)) for f in (0.5, 1.25, 2, 4)} | {a, a + 1, 2 * a})] + ["inf"]


def run(py: str, outdir: str) -> list[dict]:
    runs = []
    for tname, (tpath, bh) in TRACES.items():
        for decode in (False, True):
            for slots in ["inf"] + SLOTS:
                pools = full_pools(tpath, bh, decode) if slots == "inf" else ["inf"]
                tag = f"{tname}.qwen3-next.slots{slots}.serial.{'decode' if decode else 'nodecode'}"
                csv = os.path.join(outdir, "results", tag + ".csv")
                summ = os.path.join(outdir, "results", tag + ".summary.json")
                cmd = [py, os.path.join(HERE, "drive_sglang_mamba.py"), "--trace", tpath, "--hash-block-size",
                       str(bh), "--config", CONFIG, "--schedule", "serial", "--pools", ",".join(pools),
                       "--mamba-slots", slots, "--out", csv, "--summary", summ,
                       "--chunked-prefill-size", str(CHUNK), "--mamba-track-interval", str(TRACK)]
                if not decode:
                    cmd.append("--no-decode")
                print(tag, file=sys.stderr, flush=True)
                subprocess.run(cmd, check=True)
                with open(summ) as fh:
                    s = json.load(fh)
                os.remove(summ)
                runs.append({"file": os.path.relpath(csv, outdir), "trace": tname, "model": "Qwen3-Next-80B-A3B-Instruct",
                             "mamba_slots": slots, "decode": decode, "schedule": "serial", "pools": pools,
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
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "results"))
            runs = run(args.sglang_py, tmp)
            bad = [r["file"] for r in runs if _read(os.path.join(tmp, r["file"])) != _read(os.path.join(OUT, r["file"]))]
        print(json.dumps({"checked": len(runs), "different": bad}))
        return 1 if bad else 0
    os.makedirs(os.path.join(OUT, "results"), exist_ok=True)
    runs = run(args.sglang_py, OUT)
    version = subprocess.run([args.sglang_py, "-c", "import sglang; print(sglang.__version__)"], check=True,
                             capture_output=True, text=True).stdout.strip()
    files = {r["file"]: sha(os.path.join(OUT, r["file"])) for r in runs}
    drv = os.path.join(HERE, "drive_sglang_mamba.py")
    inputs = {os.path.relpath(p, OUT): sha(p) for p in [t[0] for t in TRACES.values()] + [CONFIG, drv]}
    manifest = {
        "schema": "stackdist.engines.sglang_mamba.v1",
        "engine": {"name": "sglang", "version": version,
                   "tree": "UnifiedRadixCache(FULL, MAMBA) + HybridReqToTokenPool(MambaPool) + "
                           "PagedTokenToKVPoolAllocator + PrefillAdder + ScheduleBatch"},
        "settings": {"page_size_tokens": 16, "mamba_radix_cache_strategy": "extra_buffer",
                     "mamba_cache_chunk_size_tokens": 64, "mamba_checkpoint_grid_tokens": 64,
                     "mamba_track_interval_tokens": TRACK, "mamba_track_grid_tokens": 256,
                     "chunked_prefill_size_tokens": CHUNK, "max_prefill_tokens": 16384, "schedule": "serial",
                     "pool_unit": "full-attention pages of 16 tokens; MambaPool slots per run (mamba_slots)",
                     "hit": "req.prefix_len after the first init_next_round_input (tokens)"},
        "traces": {k: {"hash_block_size": v[1], "path": os.path.relpath(v[0], OUT)} for k, v in TRACES.items()},
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
