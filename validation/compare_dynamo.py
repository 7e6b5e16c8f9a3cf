"""Score the planner on Dynamo traces with engine-reported hits (the held-out check's command).

    /work/venv/bin/python validation/compare_dynamo.py tests/data/engines/dynamo/*.jsonl [--no-decode-reuse]

Runs ``stackdist plan TRACE --format dynamo --semantics vllm --gpu-blocks inf --workers recorded
--decode-reuse --per-request OUT.csv`` and prints, per trace, the total error in percentage
points of input tokens, the mean absolute error per request (tokens) and the requests exact.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile


def score(path: str, reuse: bool = True) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.csv")
        cmd = [sys.executable, "-m", "stackdist", "plan", path, "--format", "dynamo", "--semantics", "vllm",
               "--gpu-blocks", "inf", "--workers", "recorded", "--per-request", out, "--json", os.path.join(tmp, "p.json")]
        if reuse:
            cmd.append("--decode-reuse")
        subprocess.run(cmd, check=True, capture_output=True)
        with open(out) as fh:
            predicted = {row["id"]: int(row["hit_tokens_inf"]) for row in csv.DictReader(fh)}
        with open(os.path.join(tmp, "p.json")) as fh:
            plan = json.load(fh)
    engine, inputs = {}, 0
    with open(path) as fh:
        for line in fh:
            req = json.loads(line)["event"]["request"]
            engine[req["request_id"]] = req["cached_tokens"]
            inputs += req["input_tokens"]
    diffs = [predicted[k] - engine[k] for k in engine]
    reuse_info = plan["engine_models"]["vllm"].get("decode_reuse")
    return {"trace": os.path.basename(path), "requests": len(diffs), "engine_pct": 100 * sum(engine.values()) / inputs,
            "error_pp": 100 * sum(diffs) / inputs, "mean_abs_tokens": sum(map(abs, diffs)) / len(diffs),
            "exact": sum(d == 0 for d in diffs), "decode_reuse": reuse_info}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--no-decode-reuse", action="store_true")
    args = ap.parse_args()
    for path in args.traces:
        print(json.dumps(score(path, not args.no_decode_reuse)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
