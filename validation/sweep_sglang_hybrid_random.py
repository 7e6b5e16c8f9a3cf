"""Seeded random traces: SGLang 0.5.23's hybrid cache driven on CPU against the stackdist model.

    $VENV/bin/python validation/sweep_sglang_hybrid_random.py --sglang-py /work/engines/venv-sglang/bin/python \
        [--seeds 16] [--windows 16,40,100] [--workdir DIR]

For each seed (``tests/serving/traces_random.py``'s ``random_trace(100 + seed, 30)``, written as a
Mooncake trace), window W and decode on/off: ``drive_sglang_hybrid.py`` (gpt-oss-20b's layers) at
the model's smallest answered pool A, A + 1 and inf, and at A - 1 and A // 2 (pools the model
refuses), then ``stackdist.serving.sglang_hybrid`` at the same pools. Prints one JSON line per run
and a summary to stdout: pools equal and request-pools equal where the model answers; where it
refuses, how many pools SGLang could not run and how many it ran with the infinite pool's hits
(the refusal's slack) or other hits. Nonzero exit if any answered request differs, SGLang fails
a pool the model answers, or the model answers a pool it should refuse.
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
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--windows", default="16,40,100")
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    from traces_random import random_trace

    from stackdist.serving.pages import engine_pages
    from stackdist.serving.sglang_hybrid import (
        NotModelled,
        _replay,
        _smallest_ample,
        sglang_hybrid_hits,
    )
    from stackdist.traces import read_mooncake

    work = args.workdir or tempfile.mkdtemp(prefix="sgh_random_")
    os.makedirs(work, exist_ok=True)
    config = os.path.join(REPO, "tests", "data", "engines", "hybrid", "configs", "gpt-oss-20b.json")
    pools_equal = request_pools = bad = 0
    refused = {"sglang_infeasible": 0, "sglang_equal_to_inf": 0, "sglang_different": 0}
    for seed in range(args.seeds):
        tr = random_trace(100 + seed, n_requests=30)
        path = os.path.join(work, f"r{seed}.jsonl")
        off, ids = tr.offsets, tr.block_ids
        with open(path, "w") as fh:
            fh.writelines(json.dumps({"timestamp": i, "input_length": int(tr.input_length[i]),
                                     "output_length": int(max(tr.output_length[i], 1)),
                                     "hash_ids": [int(x) for x in ids[off[i]:off[i + 1]]]}) + "\n" for i in range(tr.n_requests))
        pages = engine_pages(read_mooncake(path, block_size=tr.block_size))
        for w in (int(x) for x in args.windows.split(",")):
            for decode in (True, False):
                _hits, room = _replay(pages, w, decode, 8192)
                a = _smallest_ample(room, 0.8)
                below = [str(x) for x in sorted({max(1, a // 2), a - 1}) if 0 < x < a]
                pools = below + [str(a), str(a + 1), "inf"]
                out = os.path.join(work, f"r{seed}.w{w}.{'decode' if decode else 'nodecode'}.csv")
                cmd = [args.sglang_py, os.path.join(HERE, "drive_sglang_hybrid.py"), "--trace", path, "--hash-block-size",
                       str(tr.block_size), "--config", config, "--window", str(w), "--schedule", "serial", "--pools",
                       ",".join(pools), "--out", out] + ([] if decode else ["--no-decode"])
                subprocess.run(cmd, check=True, capture_output=True)
                with open(out) as fh:
                    rows = list(csv.DictReader(fh))
                run = {"seed": seed, "window": w, "decode": decode, "pools": pools, "different": [], "refused": {}}
                inf_hits = [int(r["hit_tokens_inf"]) for r in rows]
                for pool in pools:
                    col = f"hit_tokens_{pool}"
                    try:
                        got = sglang_hybrid_hits(pages, w, None if pool == "inf" else int(pool), decode)
                    except NotModelled:
                        if pool in (str(a), str(a + 1), "inf"):
                            run["different"].append({"pool": pool, "model": "refused"})
                        kind = ("sglang_infeasible" if col not in rows[0] else "sglang_equal_to_inf"
                                if [int(r[col]) for r in rows] == inf_hits else "sglang_different")
                        refused[kind] += 1
                        run["refused"][pool] = kind
                        continue
                    if pool in below:
                        run["different"].append({"pool": pool, "model": "answered below its own threshold"})
                    if col not in rows[0]:
                        run["different"].append({"pool": pool, "sglang": "infeasible"})
                        continue
                    want = [int(r[col]) for r in rows]
                    diff = [i for i, (g, x) in enumerate(zip(got, want)) if g != x]
                    if diff:
                        run["different"].append({"pool": pool, "requests": diff[:10]})
                    else:
                        pools_equal += 1
                        request_pools += len(want)
                bad += bool(run["different"])
                print(json.dumps(run), flush=True)
    print(json.dumps({"pools_equal": pools_equal, "request_pools_equal": request_pools, "runs_with_differences": bad,
                      "refused_pools": refused}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
