"""Benchmark: an offload plan on the bundled conversation trace at 16-token pages, whole processes.

``stackdist plan data/traces/mooncake_conversation_trace.jsonl --reblock 16 --semantics <engine>
--gpu-blocks G --offload <model>:cpu=<ladder> --model qwen3-32b --kv-dtype fp8 --json OUT``: the
GPU model's run, the offload model at every CPU size of the ladder, and the sizing searches for
90 / 95 / 99 % of the ceiling (every point an exact simulation). Each run is a separate process
(wall time and peak resident memory from ``wait4``), ``--runs`` times per offload model,
interleaved; medians reported. The target is under 30 s per plan. Also, in this process, the
time of one offload simulation per CPU size (the unit of the plan's cost). With ``--versus N``, a naive
competitor too: on the first N requests, one simulation by the compiled kernels against the
standard-library restatements in ``validation/`` (``check_offload_rules.model``,
``check_lmcache_rules.simulate``: OrderedDicts and a sort per eviction), side by side, checking
they agree. Prints a table and writes ``results/bench_offload.json``.

Usage::

    python benchmarks/bench_offload.py               # 3 runs per model
    python benchmarks/bench_offload.py --runs 1      # a smoke test
    python benchmarks/bench_offload.py --versus 150  # also against the restatements on 150 requests
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import run_stackdist as run

from stackdist.output import write_json

TRACE = ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_offload.json"
GPU_BLOCKS = 60000  # 117 GiB of Qwen3-32B fp8 KV: one H200's room after the weights, roughly
LADDER = "64/128/256/512/1024GiB"
SPECS = {  # offload model -> (GPU engine model, --offload text); only the registered ones run
    "vllm-native lru": ("vllm", f"vllm-native:cpu={LADDER}"),
    "vllm-native arc": ("vllm", f"vllm-native:cpu={LADDER},policy=arc"),
    "lmcache": ("vllm", f"lmcache:cpu={LADDER}"),
    "hicache": ("sglang", f"hicache:host={LADDER}"),
}


def per_size_seconds(engine: str, spec_text: str) -> list[dict[str, Any]]:
    """One offload simulation per ladder size, in this process (after a warm-up), seconds each."""
    from stackdist.serving import engine_model
    from stackdist.serving.offload import offload_model, parse_offload, resolve_offload
    from stackdist.serving.pages import engine_pages
    from stackdist.traces.stream_input import read_as_requests

    trace = read_as_requests([str(TRACE)], "mooncake", None, False, True)
    pages = engine_pages(trace, 16)
    gpu = engine_model(engine).simulate(pages, [GPU_BLOCKS], "serial", True)
    spec = parse_offload(spec_text)
    model = offload_model(spec.model)
    configs = resolve_offload(spec, 131072, 16)
    model.simulate(pages, [GPU_BLOCKS], gpu.hit_tokens, configs[:1], True)  # compile / load the kernels
    out = []
    for config in configs:
        start = time.perf_counter()
        model.simulate(pages, [GPU_BLOCKS], gpu.hit_tokens, [config], True)
        out.append({"config": config.label, "seconds": time.perf_counter() - start})
    return out


def versus(n: int) -> list[dict[str, Any]]:
    """The kernels against the validation restatements on the first ``n`` requests (one run each,
    after a warm-up call of the kernel), and whether they agree request by request."""
    sys.path.insert(0, str(ROOT / "validation"))
    import check_lmcache_rules
    import check_offload_rules
    import common

    from stackdist.serving import engine_model
    from stackdist.serving.offload import TierConfig, offload_model
    from stackdist.serving.pages import engine_pages
    from stackdist.traces.stream_input import read_as_requests

    sys.setrecursionlimit(100_000)  # the restatements' prefix-chained keys are nested tuples
    lines = TRACE.read_text().splitlines()[:n]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "head.jsonl"
        path.write_text("\n".join(lines) + "\n")
        reference = common.read_trace(str(path))
        pages = engine_pages(read_as_requests([str(path)], "mooncake", 512, False, True), 16)
    pool = int(((pages.input_tokens + pages.output_tokens) // 16).max()) + 2
    gpu = engine_model("vllm").simulate(pages, [pool], "serial", True).hit_tokens
    rows = []
    cpu = int(pages.full_pages.sum()) // 4
    chunks = int((pages.input_tokens // 256).sum())
    cases = [("vllm-native lru", TierConfig((("cpu", cpu),), (("policy", "lru"),)),
              lambda: check_offload_rules.model(reference, 512, cpu, gpu[0].tolist())),
             ("lmcache", TierConfig((("cpu", chunks // 8), ("disk", chunks // 4)), (("chunk", "256"),)),
              lambda: [x["offload_hit_tokens"] for x in check_lmcache_rules.simulate(
                  reference, 512, 256, chunks // 8, chunks // 4, gpu[0].tolist())[0]])]
    for name, config, naive in cases:
        model = offload_model(name.split()[0])
        model.simulate(pages, [pool], gpu, [config], True)
        start = time.perf_counter()
        got = model.simulate(pages, [pool], gpu, [config], True).offload_hit_tokens[0, 0].tolist()
        fast = time.perf_counter() - start
        start = time.perf_counter()
        want = naive()
        slow = time.perf_counter() - start
        rows.append({"model": name, "requests": n, "pages": int(pages.full_pages.sum()), "config": config.label,
                     "kernel_s": fast, "restatement_s": slow, "ratio": slow / fast, "equal": got == want,
                     "offload_hit_tokens": int(sum(want))})
    return rows


def main() -> int:
    from stackdist.serving.offload import OFFLOAD_MODELS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--versus", type=int, default=0, metavar="N", help="also time the restatements on N requests")
    args = p.parse_args()
    if args.runs < 1:
        print("bench_offload: --runs must be at least 1", file=sys.stderr)
        return 2
    specs = {name: v for name, v in SPECS.items() if v[1].partition(":")[0] in OFFLOAD_MODELS}
    times: dict[str, list[float]] = {k: [] for k in specs}
    rss: dict[str, list[int]] = {k: [] for k in specs}
    reports: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            for name, (engine, text) in specs.items():
                out = Path(tmp) / f"{name.replace(' ', '_')}.json"
                wall, peak = run(["plan", str(TRACE), "--reblock", "16", "--semantics", engine, "--gpu-blocks",
                                  str(GPU_BLOCKS), "--offload", text, "--model", "qwen3-32b", "--kv-dtype", "fp8",
                                  "--json", str(out)])
                times[name].append(wall)
                rss[name].append(peak)
                reports[name] = json.loads(out.read_text())
    median = {k: statistics.median(v) for k, v in times.items()}
    result: dict[str, Any] = {
        "trace": "data/traces/mooncake_conversation_trace.jsonl, --reblock 16 (16-token pages), model qwen3-32b fp8",
        "gpu_blocks": GPU_BLOCKS, "ladder": LADDER, "runs": args.runs, "seconds": times, "median_s": median,
        "peak_rss_kib": rss, "target_s": 30.0, "per_size": {}, "answers": {}}
    print(f"{result['trace']}; GPU pool {GPU_BLOCKS:,} blocks; CPU ladder {LADDER}; median of {args.runs} runs")
    print(f"{'offload model':<18}{'median s':>10}{'peak MiB':>10}  {'90% / 95% / 99% of the ceiling (GiB)':<40}")
    for name in specs:
        section = reports[name]["offload"][0]
        sizing = section["sizing"][0]["tiers"][0]
        answers = [round(a["gib"], 1) for a in sizing["answers"]]
        result["answers"][name] = {"ceiling_prefix_token_hit_rate": sizing["ceiling_prefix_token_hit_rate"],
                                   "without_tier": sizing["without_tier_prefix_token_hit_rate"], "gib": answers,
                                   "search_rounds": [a["search_rounds"] for a in sizing["answers"]],
                                   "points": len(section["sizing_points"]),
                                   "ladder_hit_rates": [r["prefix_token_hit_rate"] for r in section["rows"]]}
        print(f"{name:<18}{median[name]:>10.2f}{max(rss[name]) / 1024:>10.0f}  {' / '.join(f'{g:,.1f}' for g in answers)}")
    print(f"{'offload model':<18}{'CPU size':>16}{'one simulation s':>18}")
    for name, (engine, text) in specs.items():
        result["per_size"][name] = per_size_seconds(engine, text)
        for row in result["per_size"][name]:
            print(f"{name:<18}{row['config']:>16}{row['seconds']:>18.2f}")
    if args.versus:
        result["versus"] = versus(args.versus)
        print(f"{'model':<18}{'requests':>9}{'kernel s':>10}{'restatement s':>15}{'ratio':>9}  equal")
        for row in result["versus"]:
            print(f"{row['model']:<18}{row['requests']:>9}{row['kernel_s']:>10.4f}{row['restatement_s']:>15.2f}"
                  f"{row['ratio']:>9.0f}  {row['equal']}")
    write_json(str(RESULTS), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
