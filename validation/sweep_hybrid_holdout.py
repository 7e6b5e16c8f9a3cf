"""Held-out sweep: vLLM 0.33.0's own hybrid KV cache against ``stackdist plan`` on inputs no
committed run covers, every request at every pool.

Run with the vLLM venv (it imports ``drive_vllm_hybrid``, i.e. vLLM's Scheduler); the product runs
as a subprocess of the project's venv, with exactly the interface the planner is checked with:

    $VLLM_PY validation/sweep_hybrid_holdout.py --out-dir /tmp/sweep --product-python $VENV/bin/python \
        [--seed 0] [--cases 40] [--big] [--only NAME-SUBSTRING] [--list]

    stackdist plan TRACE --format mooncake --semantics vllm --model-config CONFIG.json \
        --gpu-blocks N1,N2,... --schedule serial --(no-)decode --max-num-batched-tokens M \
        [--engine-block-size B] --per-request OUT.csv --json OUT.json

Cases (seeded, deterministic for a seed; ``--list`` prints them): traces are slices of the two
Mooncake traces in /work/shared/traces at several offsets (``--big`` adds the first 1,000 requests
of each) and seeded synthetic Mooncake traces with heavy prefix sharing (repeats, continuations,
shared system prompts) and prompt lengths on and next to multiples of 16, 512, 576, the window,
the chunk and ``max_num_batched_tokens``; configs are gpt-oss-20b, gpt-oss-120b, Gemma-3-27B,
Llama-4-Scout, Qwen3-Next-80B-A3B, Qwen3.5-27B, and shrunk windows / chunks / Mamba states; ``--engine-block-size``
none, 16, 32 (576, 64 for Qwen3-Next); ``--max-num-batched-tokens`` 8192, 2048 and odd values;
decode on (short outputs: vLLM runs one scheduler step per token) and off. Pools: a lower bound of
the pool a request needs at admission (-1, +0, +1), eviction-heavy multiples of it, 65537 and
1000001 (vLLM's ``num_gpu_blocks`` of the whole cache).

Compared: ``hit_tokens_<N>`` of every request at every pool vLLM could run; at a pool where vLLM
cannot admit or preempts a request, the product must fail at the same request (exit 1, the
pool's ``failed_request`` in --json). Per case one line of JSON on stdout (``mismatch`` lists the
first differing requests); the vLLM CSV/summary and the product's outputs stay in --out-dir.
Exit 1 when any case differs.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

TRACES = "/work/shared/traces"
CONFIGS = os.path.join(REPO, "tests", "data", "engines", "hybrid", "configs")
BASE = {
    "gpt-oss-20b": "gpt-oss-20b.json",
    "gemma-3-27b": "gemma-3-27b-it.json",
    "qwen3-next": "Qwen3-Next-80B-A3B-Instruct.json",
    "llama-4-scout": "Llama-4-Scout-17B-16E-Instruct.json",
    "qwen3.5-27b": os.path.join(REPO, "tests", "data", "engines", "hybrid_holdout", "configs", "Qwen3.5-27B.json"),
}


def load_config(name: str) -> dict:
    """A config by sweep name: the committed ones, gpt-oss-120b (gpt-oss-20b's shapes with 36 layers,
    as openai/gpt-oss-120b's config.json), and shrunk variants ``NAME@key=value``."""
    base, _, mod = name.partition("@")
    if base == "gpt-oss-120b":
        with open(os.path.join(CONFIGS, BASE["gpt-oss-20b"])) as fh:
            cfg = json.load(fh)
        cfg.update(num_hidden_layers=36, num_local_experts=128, hidden_size=2880, num_attention_heads=64)
        cfg["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(36)]
    else:
        with open(os.path.join(CONFIGS, BASE[base])) as fh:
            cfg = json.load(fh)
    t = cfg.get("text_config", cfg)
    if base in ("gpt-oss-20b", "gpt-oss-120b", "gemma-3-27b", "qwen3-next") and "layer_types" not in t:
        n = int(t["num_hidden_layers"])
        if base.startswith("gpt-oss"):
            t["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
        elif base == "gemma-3-27b":
            p = int(t.get("sliding_window_pattern", 6))
            t["layer_types"] = ["sliding_attention" if (i + 1) % p else "full_attention" for i in range(n)]
        else:
            k = int(t.get("full_attention_interval", 4))
            t["layer_types"] = ["linear_attention" if (i + 1) % k else "full_attention" for i in range(n)]
    for kv in filter(None, mod.split(",")):
        k, _, v = kv.partition("=")
        t[k] = int(v)
    return cfg


def window_of(cfg: dict) -> int:
    t = cfg.get("text_config", cfg)
    return int(t.get("sliding_window") or t.get("attention_chunk_size") or 0)


def synthetic_trace(seed: int, n: int, special: list[int], max_len: int, out_max: int) -> list[dict]:
    """A Mooncake-format trace (512-token hash blocks, prefix-chained ids) with heavy sharing:
    exact repeats, continuations of earlier prompts, a few shared system prompts; lengths drawn
    from ``special`` (+-1) or uniform."""
    rng = random.Random(seed)
    next_id = [0]
    reqs: list[dict] = []

    def fresh(k: int) -> list[int]:
        out = list(range(next_id[0], next_id[0] + k))
        next_id[0] += k
        return out

    systems = [fresh(rng.randint(1, 6)) for _ in range(3)]
    for _ in range(n):
        if special and rng.random() < 0.6:
            length = rng.choice(special) + rng.choice((-1, 0, 0, 1))
        else:
            length = rng.randint(1, max_len)
        length = max(1, min(length, max_len))
        blocks = -(-length // 512)
        u = rng.random()
        if reqs and u < 0.15:  # exact repeat
            r = dict(rng.choice(reqs))
            r = {"input_length": r["input_length"], "hash_ids": list(r["hash_ids"])}
        else:
            prefix: list[int] = []
            if reqs and u < 0.65:  # continuation / branch of an earlier prompt's full blocks
                p = rng.choice(reqs)
                full = p["input_length"] // 512
                prefix = p["hash_ids"][:rng.choice((full, full, rng.randint(0, full)))]
            elif u < 0.85:
                prefix = list(rng.choice(systems))
            prefix = prefix[:length // 512]  # a partial tail is never shared (Mooncake ids)
            r = {"input_length": length, "hash_ids": prefix + fresh(blocks - len(prefix))}
        r["timestamp"] = 0
        r["output_length"] = rng.randint(1, out_max)
        reqs.append(r)
    for i, r in enumerate(reqs):
        r["timestamp"] = i * 100
    return [{"timestamp": r["timestamp"], "input_length": r["input_length"], "output_length": r["output_length"],
             "hash_ids": r["hash_ids"]} for r in reqs]


def edge_trace(lengths: list[int], out_max: int) -> list[dict]:
    """Per length L: a fresh prompt, its exact repeat, and a continuation (its full 512-token
    blocks + 700 new tokens), in that order; outputs of 1..out_max tokens."""
    rows: list[dict] = []
    nid = 0
    for i, length in enumerate(lengths):
        ids = list(range(nid, nid + -(-length // 512)))
        nid += len(ids)
        cont_len = length // 512 * 512 + 700
        cont = ids[:length // 512] + list(range(nid, nid + -(-cont_len // 512) - length // 512))
        nid += len(cont) - length // 512
        for k, (n, h) in enumerate(((length, ids), (length, ids), (cont_len, cont))):
            rows.append({"timestamp": len(rows) * 100, "input_length": n, "output_length": 1 + (i + k) % out_max,
                         "hash_ids": h})
    return rows


def slice_trace(name: str, start: int, n: int, out_max: int | None) -> list[dict]:
    with open(os.path.join(TRACES, name)) as fh:
        rows = [json.loads(x) for i, x in enumerate(fh) if start <= i < start + n]
    if out_max is not None:
        for r in rows:
            r["output_length"] = min(r["output_length"], out_max)
    return rows


def admission_bound(trace: list[dict], cfg: dict, block: int, decode: bool, mnbt: int) -> int:
    """The blocks the largest request needs at admission with no hit: per group min(cdiv(P, b),
    cap) (SWA cap cdiv(W - 1 + M, b) + 1, chunked cdiv(C + M, b), Mamba 2) + the null block."""
    import drive_vllm_hybrid as dvh

    kinds, params = dvh.layer_kinds(cfg)
    counts = [kinds.count(k) for k in dict.fromkeys(kinds)]
    size = max(counts) if max(counts) < 1.5 * min(counts) else min(counts)
    groups = {k: -(-kinds.count(k) // size) for k in dict.fromkeys(kinds)}
    best = 0
    for r in trace:
        p = r["input_length"]
        need = 0
        for k, g in groups.items():
            n = -(-p // block)
            if k == "sliding":
                n = min(n, -(-(params["sliding_window"] - 1 + mnbt) // block) + 1)
            elif k == "chunked":
                n = min(n, -(-(params["attention_chunk_size"] + mnbt) // block))
            elif k == "linear":
                n = min(n, 2)
            need += g * n
        best = max(best, need)
    return best + 1


def make_cases(seed: int, big: bool) -> list[dict]:
    rng = random.Random(seed)
    cases: list[dict] = []

    def add(name, trace, config, mnbt=8192, ebs=None, decode=False, pools_extra=(), fine=True):
        cases.append({"name": name, "trace": trace, "config": config, "mnbt": mnbt, "ebs": ebs, "decode": decode,
                      "pools_extra": list(pools_extra), "fine": fine})

    models = ["gpt-oss-20b", "gemma-3-27b", "qwen3-next", "llama-4-scout", "gpt-oss-120b"]
    if big:
        for tr in ("mooncake_synthetic_trace.jsonl", "mooncake_conversation_trace.jsonl"):
            for m in ("gpt-oss-20b", "qwen3-next", "gemma-3-27b"):
                ebs = [None] if m != "qwen3-next" else [None, 576]
                for e in ebs:
                    add(f"big-{tr[9:13]}-{m}-e{e}", {"kind": "slice", "file": tr, "start": 0, "n": 1000},
                        m, ebs=e, fine=False)
        return cases
    # real-trace slices at several offsets
    for i, (tr, start, n) in enumerate([("mooncake_synthetic_trace.jsonl", 0, 120), ("mooncake_synthetic_trace.jsonl", 1500, 60),
                                         ("mooncake_synthetic_trace.jsonl", 3200, 60), ("mooncake_conversation_trace.jsonl", 0, 80),
                                         ("mooncake_conversation_trace.jsonl", 5000, 60), ("mooncake_conversation_trace.jsonl", 11000, 60)]):
        m = models[i % len(models)]
        add(f"slice-{tr[9:13]}{start}-{m}", {"kind": "slice", "file": tr, "start": start, "n": n}, m)
        m2 = models[(i + 2) % len(models)]
        add(f"slice-{tr[9:13]}{start}-{m2}-mnbt2048", {"kind": "slice", "file": tr, "start": start, "n": n}, m2, mnbt=2048)
    # prompt lengths at and next to every boundary, each fresh / repeated / continued
    edges = sorted({1, 2, 15, 16, 17, 127, 128, 129, 511, 512, 513, 575, 576, 577, 1151, 1152, 1153, 1727, 1728,
                    2047, 2048, 2049, 8191, 8192, 8193, 8767, 8768, 9000, 16384, 16385})
    for m, ebs in (("gpt-oss-20b", None), ("gemma-3-27b", None), ("qwen3-next", None), ("qwen3-next", 576),
                   ("llama-4-scout@attention_chunk_size=1152", None), ("qwen3.5-27b", None)):
        for dec in (False, True):
            add(f"edge-{m}-e{ebs}-{'dec' if dec else 'nodec'}", {"kind": "edge", "lengths": edges, "out_max": 5 if dec else 1},
                m, ebs=ebs, decode=dec)
    # decode on real slices (outputs capped so vLLM's per-token steps stay affordable)
    for m in models:
        add(f"slice-dec-{m}", {"kind": "slice", "file": "mooncake_conversation_trace.jsonl", "start": 200, "n": 40,
                              "out_max": 64}, m, decode=True)
    # synthetic, near boundaries
    variants = [
        ("gpt-oss-20b", None, 8192), ("gpt-oss-20b", 32, 8192), ("gpt-oss-20b", 16, 1000),
        ("gpt-oss-20b@sliding_window=40", None, 777), ("gpt-oss-20b@sliding_window=100", 32, 2048),
        ("gpt-oss-120b", None, 8192), ("gpt-oss-120b", None, 3001),
        ("gemma-3-27b", None, 8192), ("gemma-3-27b@sliding_window=64", None, 1000),
        ("gemma-3-27b@sliding_window=200", 32, 8192),
        ("llama-4-scout", None, 8192), ("llama-4-scout@attention_chunk_size=1000", None, 2048),
        ("llama-4-scout@attention_chunk_size=64", 32, 777),
        ("qwen3-next", None, 8192), ("qwen3-next", 576, 8192), ("qwen3-next", None, 2048), ("qwen3-next", None, 1000),
        ("qwen3-next", 64, 3001), ("qwen3-next", 32, 8192), ("qwen3-next", None, 600),
        ("qwen3-next@linear_num_value_heads=16", None, 8192), ("qwen3-next@linear_num_value_heads=8", None, 1000),
        ("qwen3.5-27b", None, 8192), ("qwen3.5-27b", None, 2048),
        ("gpt-oss-20b", 576, 8192), ("llama-4-scout@attention_chunk_size=1152", 576, 8192), ("gpt-oss-120b", 64, 600),
    ]
    for j, (m, ebs, mnbt) in enumerate(variants):
        cfg = load_config(m)
        w = window_of(cfg)
        special = [16, 512, 576, 1152, 1728, 2304, 4608, 8192, 8192 + 576, mnbt, 2 * mnbt, 1024, 1536, 3 * 576]
        if w:
            special += [w, 2 * w, w + 16, 8 * w]
        for dec in (False, True):
            s = rng.randrange(1 << 30)
            add(f"syn{j}-{m}-e{ebs}-m{mnbt}-{'dec' if dec else 'nodec'}",
                {"kind": "synthetic", "seed": s, "n": 60 if not dec else 30, "special": sorted(set(special)),
                 "max_len": 20000, "out_max": 40 if dec else 1}, m, mnbt=mnbt, ebs=ebs, decode=dec)
    return cases


def build_trace(spec: dict) -> list[dict]:
    if spec["kind"] == "edge":
        return edge_trace(spec["lengths"], spec["out_max"])
    if spec["kind"] == "slice":
        return slice_trace(spec["file"], spec["start"], spec["n"], spec.get("out_max"))
    return synthetic_trace(spec["seed"], spec["n"], spec["special"], spec["max_len"], spec["out_max"])


def write_jsonl(path: str, rows: list[dict]) -> None:
    with open(path + ".tmp", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    os.replace(path + ".tmp", path)


def product_cmd(product_python: str, tpath: str, cpath: str, case: dict, pools: list[int], pcsv: str, pjson: str) -> list[str]:
    """The product's command line, exactly the checked interface (+ --json for the failing request)."""
    cmd = [product_python, "-m", "stackdist", "plan", tpath, "--format", "mooncake", "--semantics", "vllm",
           "--model-config", cpath, "--gpu-blocks", ",".join(map(str, pools)), "--schedule", "serial",
           "--decode" if case["decode"] else "--no-decode", "--max-num-batched-tokens", str(case["mnbt"])]
    if case["ebs"] is not None:
        cmd += ["--engine-block-size", str(case["ebs"])]
    return cmd + ["--per-request", pcsv, "--json", pjson]


def product_smallest(product_python: str, tpath: str, cpath: str, case: dict, hi: int, scratch: str) -> int | None:
    """The product's smallest feasible pool (ladders of pools, one run each), or None."""
    lo = max(1, hi // 8)  # hi = 4 x the admission bound: half the bound is infeasible
    pj = scratch + ".json"
    for _ in range(14):
        if hi - lo <= 1:
            return hi
        step = max(1, (hi - lo) // 4)
        ladder = sorted(set(range(lo + step, hi, step)))[:3] or [hi]
        subprocess.run(product_cmd(product_python, tpath, cpath, case, ladder, scratch + ".csv", pj), check=False,
                       capture_output=True, text=True, cwd=REPO)
        if not os.path.exists(pj):
            return None
        with open(pj) as fh:
            rows = json.load(fh)["engine_models"]["vllm"]["pools"]
        os.remove(pj)
        ok = sorted(int(r["gpu_blocks"]) for r in rows if r["feasible"])
        if not ok:
            lo = max(ladder)
            continue
        hi = ok[0]
        lo = max([int(r["gpu_blocks"]) for r in rows if not r["feasible"] and int(r["gpu_blocks"]) < hi], default=lo)
    return hi


def run_case(case: dict, out_dir: str, product_python: str) -> dict:
    import drive_vllm_hybrid as dvh

    name = case["name"]
    trace = build_trace(case["trace"])
    cfg = load_config(case["config"])
    tpath = os.path.join(out_dir, f"{name}.jsonl")
    cpath = os.path.join(out_dir, f"{name}.config.json")
    write_jsonl(tpath, trace)
    with open(cpath, "w") as fh:
        json.dump(cfg, fh)
    # the block vLLM uses (its own derivation in build_specs) for the pool bound
    _, _deriv, block = dvh.build_specs(cfg, case["ebs"], "align", dvh.GDN_CHECKPOINT_ALIGNMENT)
    lb = admission_bound(trace, cfg, block, case["decode"], case["mnbt"])
    m = product_smallest(product_python, tpath, cpath, case, 4 * lb, os.path.join(out_dir, f"{name}.ladder")) if case["fine"] else None
    if m is not None:  # just infeasible (product), just feasible, eviction-heavy, roomier
        pools = [m - 1, m, m + max(1, m // 10), m * 2]
    else:
        pools = []
    pools += [65537, 1000001] + case["pools_extra"]
    pools = sorted({p for p in pools if p >= 2})
    vcsv, vsum = os.path.join(out_dir, f"{name}.vllm.csv"), os.path.join(out_dir, f"{name}.vllm.json")
    argv = ["--trace", tpath, "--hash-block-size", "512", "--config", cpath, "--pools", ",".join(map(str, pools)),
            "--out", vcsv, "--summary", vsum, "--max-num-batched-tokens", str(case["mnbt"])]
    if not case["decode"]:
        argv.append("--no-decode")
    if case["ebs"] is not None:
        argv += ["--block-size", str(case["ebs"])]
    t0 = time.perf_counter()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            rc = dvh.main(argv)
    except Exception as e:  # noqa: BLE001 (any refusal of vLLM's is this case's result)
        return {"case": name, "status": "vllm-error", "error": f"{type(e).__name__}: {e}"}
    if rc != 0:
        return {"case": name, "status": "vllm-error", "error": err.getvalue()[-500:]}
    t_vllm = time.perf_counter() - t0
    with open(vsum) as fh:
        summary = json.load(fh)
    pcsv, pjson = os.path.join(out_dir, f"{name}.product.csv"), os.path.join(out_dir, f"{name}.product.json")
    cmd = product_cmd(product_python, tpath, cpath, case, pools, pcsv, pjson)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=REPO)
    t_prod = time.perf_counter() - t0
    infeasible = {str(r["pool"]): r["failure"]["request"] for r in summary["runs"] if not r["feasible"]}
    res = {"case": name, "requests": len(trace), "pools": pools, "product_smallest": m, "vllm_block": summary["layout"]["scheduler_block_size"],
           "infeasible_vllm": infeasible, "vllm_s": round(t_vllm, 1), "product_s": round(t_prod, 1)}
    if proc.returncode not in (0, 1) or not os.path.exists(pjson):
        res.update(status="product-error", error=(proc.stderr or proc.stdout)[-800:])
        return res
    with open(pjson) as fh:
        plan = json.load(fh)["engine_models"]["vllm"]
    ours_failed = {str(r["gpu_blocks"]): r["failed_request"] for r in plan["pools"] if not r["feasible"]}
    mism: list = []
    if ours_failed != infeasible:
        mism.append({"infeasible_product": ours_failed})
    if proc.returncode != (1 if infeasible else 0):
        mism.append({"exit": proc.returncode})
    hyb = plan.get("hybrid") or {}
    if hyb.get("block_size_tokens") != summary["layout"]["groups"][0]["block_size"]:
        mism.append({"block_product": hyb.get("block_size_tokens"), "block_vllm": summary["layout"]["groups"][0]["block_size"]})
    with open(pcsv) as fh:
        ours = list(csv.DictReader(fh))
    with open(vcsv) as fh:
        theirs = list(csv.DictReader(fh))
    feasible = [str(p) for p in pools if str(p) not in infeasible]
    compared = 0
    for a, b in zip(ours, theirs):
        for p in feasible:
            compared += 1
            if a.get(f"hit_tokens_{p}") != b[f"hit_tokens_{p}"] and len(mism) < 12:
                mism.append({"request": b["request"], "pool": p, "P": b["input_tokens"], "product": a.get(f"hit_tokens_{p}"),
                             "vllm": b[f"hit_tokens_{p}"], "vllm_full": b[f"full_group_hit_tokens_{p}"]})
    if len(ours) != len(theirs):
        mism.append({"rows_product": len(ours), "rows_vllm": len(theirs)})
    res.update(status="match" if not mism else "MISMATCH", compared_cells=compared, feasible_pools=len(feasible),
               mismatch=mism)
    return res


def import_case(name: str, out_dir: str, seed: int, big: bool) -> None:
    """Copy a case's trace, config and vLLM run (CSV + summary) from ``out_dir`` into
    tests/data/engines/hybrid_holdout/ and add it to the manifest (checked by
    tests/serving/test_hybrid_holdout.py)."""
    import shutil

    case = next(c for c in make_cases(seed, big) if c["name"] == name)
    dest = os.path.join(REPO, "tests", "data", "engines", "hybrid_holdout")
    safe = name.replace("@", "_").replace("=", "")
    files = {"trace": f"{safe}.jsonl", "config": f"configs/{safe}.config.json", "csv": f"{safe}.vllm.csv",
             "summary": f"{safe}.vllm.json"}
    for src, key in ((f"{name}.jsonl", "trace"), (f"{name}.config.json", "config"), (f"{name}.vllm.csv", "csv")):
        shutil.copyfile(os.path.join(out_dir, src), os.path.join(dest, files[key]))
    with open(os.path.join(out_dir, f"{name}.vllm.json")) as fh:
        summary = json.load(fh)
    summary["trace"] = f"tests/data/engines/hybrid_holdout/{files['trace']}"
    summary["config"] = f"tests/data/engines/hybrid_holdout/{files['config']}"
    with open(os.path.join(dest, files["summary"]), "w") as fh:
        json.dump(summary, fh, indent=1)
        fh.write("\n")
    path = os.path.join(dest, "manifest.json")
    with open(path) as fh:
        manifest = json.load(fh)
    manifest["runs"] = [r for r in manifest["runs"] if r["name"] != safe] + [{
        "name": safe, "trace": f"data/engines/hybrid_holdout/{files['trace']}", "hash_block_size": 512,
        "config": f"data/engines/hybrid_holdout/{files['config']}", "csv": files["csv"], "summary": files["summary"],
        "engine_block_size": case["ebs"],
        "why": f"validation/sweep_hybrid_holdout.py --seed {seed} case {name}: config {case['config']}, "
               f"--max-num-batched-tokens {case['mnbt']}, decode {case['decode']}, trace {json.dumps(case['trace'])}"}]
    with open(path + ".tmp", "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    os.replace(path + ".tmp", path)


def summarize(paths: list[str]) -> dict:
    """Totals over sweep logs (the JSON lines this script prints)."""
    runs: dict[tuple, dict] = {}  # a case run twice (same seed, requests and pools) counts once
    for path in paths:
        with open(path) as fh:
            for x in fh:
                if x.startswith("{"):
                    r = json.loads(x)
                    runs[(r.get("seed", 0), r["case"], r.get("requests"), tuple(r.get("pools", ())))] = r
    rows = list(runs.values())
    return {"cases": len(rows), "requests": sum(r.get("requests", 0) for r in rows),
            "hit_cells_compared": sum(r.get("compared_cells", 0) for r in rows),
            "feasible_pools": sum(r.get("feasible_pools", 0) for r in rows),
            "infeasible_pools_compared": sum(len(r.get("infeasible_vllm", {})) for r in rows),
            "not_matching": [r["case"] for r in rows if r["status"] != "match"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--product-python", default=sys.executable)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=0, help="run at most this many cases (0: all)")
    ap.add_argument("--big", action="store_true", help="the first 1,000 requests of each Mooncake trace")
    ap.add_argument("--only", default="", help="run the cases whose name starts with this")
    ap.add_argument("--start", type=int, default=0, help="skip the first cases (resume)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--summarize", nargs="+", metavar="LOG", help="totals over sweep logs (stdout of earlier runs)")
    ap.add_argument("--import-case", metavar="NAME", help="copy case NAME's run from --out-dir into the test data")
    args = ap.parse_args(argv)
    cases = [c for c in make_cases(args.seed, args.big) if c["name"].startswith(args.only)]
    cases = cases[args.start:]
    if args.cases:
        cases = cases[:args.cases]
    if args.summarize:
        print(json.dumps(summarize(args.summarize)))
        return 0
    if args.import_case:
        import_case(args.import_case, args.out_dir, args.seed, args.big)
        return 0
    if args.list:
        for c in cases:
            print(json.dumps(c))
        return 0
    os.makedirs(args.out_dir, exist_ok=True)
    bad = 0
    for c in cases:
        res = run_case(c, args.out_dir, args.product_python)
        bad += res["status"] != "match"
        print(json.dumps(res), flush=True)
    print(f"sweep: {len(cases)} cases, {bad} not matching", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
