"""Seeded random traces: SGLang 0.5.23's Mamba hybrid cache driven on CPU against the stackdist model.

    $VENV/bin/python validation/sweep_sglang_mamba_random.py --sglang-py /work/engines/venv-sglang/bin/python \
        [--seeds 8] [--chunks 8192,128] [--scale 8] [--workdir DIR]

For each seed (``tests/serving/traces_random.py``'s ``random_trace(200 + seed, 30)`` with every
prompt and output length times ``--scale`` (hash blocks scaled alike), so prompts cross the 64-token
checkpoint grid and outputs the 256-token decode grid), chunk size and decode on/off:
``drive_sglang_mamba.py`` (Qwen3-Next's layers, an ample MambaPool) at the model's smallest answered
pool A, A + 1 and inf, then ``stackdist.serving.sglang_mamba`` at the same pools. One JSON line per
run and a summary to stdout; nonzero exit if any request differs or SGLang fails a pool the model
answers.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "serving"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sglang-py", required=True)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--chunks", default="8192,128")
    ap.add_argument("--scale", type=int, default=8)
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    from traces_random import random_trace

    from stackdist.serving.pages import engine_pages
    from stackdist.serving.sglang_mamba import _replay, sglang_mamba_hits
    from stackdist.traces import read_mooncake

    work = args.workdir or tempfile.mkdtemp(prefix="sgm_random_")
    os.makedirs(work, exist_ok=True)
    config = os.path.join(REPO, "tests", "data", "engines", "hybrid", "configs", "Qwen3-Next-80B-A3B-Instruct.json")
    pools_equal = request_pools = bad = 0
    k = args.scale
    for seed in range(args.seeds):
        tr = random_trace(200 + seed, n_requests=30)
        path = os.path.join(work, f"r{seed}.jsonl")
        off, ids = tr.offsets, tr.block_ids
        with open(path, "w") as fh:
            fh.writelines(json.dumps({"timestamp": i, "input_length": int(tr.input_length[i]) * k,
                                     "output_length": int(max(tr.output_length[i], 1)) * k,
                                     "hash_ids": [int(x) for x in ids[off[i]:off[i + 1]]]}) + "\n" for i in range(tr.n_requests))
        pages = engine_pages(read_mooncake(path, block_size=tr.block_size * k))
        for chunk in (int(x) for x in args.chunks.split(",")):
            for decode in (True, False):
                _hits, room = _replay(pages, decode, chunk)
                a = max(h + o for h, o in room)
                pools = [str(a), str(a + 1), "inf"]
                out = os.path.join(work, f"r{seed}.c{chunk}.{'decode' if decode else 'nodecode'}.csv")
                cmd = [args.sglang_py, os.path.join(HERE, "drive_sglang_mamba.py"), "--trace", path, "--hash-block-size",
                       str(tr.block_size * k), "--config", config, "--schedule", "serial", "--pools", ",".join(pools),
                       "--chunked-prefill-size", str(chunk), "--out", out] + ([] if decode else ["--no-decode"])
                subprocess.run(cmd, check=True, capture_output=True)
                with open(out) as fh:
                    rows = list(csv.DictReader(fh))
                run = {"seed": seed, "chunk": chunk, "decode": decode, "pools": pools, "different": [],
                       "hit_tokens_inf": sum(int(r["hit_tokens_inf"]) for r in rows)}
                for pool in pools:
                    col = f"hit_tokens_{pool}"
                    if col not in rows[0]:
                        run["different"].append({"pool": pool, "sglang": "infeasible"})
                        continue
                    got = sglang_mamba_hits(pages, None if pool == "inf" else int(pool), decode, chunk)
                    want = [int(r[col]) for r in rows]
                    diff = [(i, g, x) for i, (g, x) in enumerate(zip(got, want)) if g != x]
                    if diff:
                        run["different"].append({"pool": pool, "requests": diff[:10]})
                    else:
                        pools_equal += 1
                        request_pools += len(want)
                bad += bool(run["different"])
                print(json.dumps(run), flush=True)
    print(json.dumps({"pools_equal": pools_equal, "request_pools_equal": request_pools, "runs_with_differences": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
