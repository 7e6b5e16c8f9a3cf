"""The plan as a text table (what ``stackdist plan`` prints on stdout)."""

from __future__ import annotations

from typing import Any

from stackdist.planning.schema import Capacity, EngineModelPlan, Plan

from .budgets import budget_lines
from .cluster import cluster_lines
from .deployment import deployment_lines
from .offload import offload_lines

__all__ = ["render_plan_table"]


def _fmt_cap(cap: Capacity | None, why: str = "", bar: Any = None) -> str:
    if cap is None:
        return "unreachable" + (f" ({why})" if why else "") + _bar(bar)
    return f"{cap['blocks']:>9,} blocks  {cap['tokens']:>12,} tokens  {cap['gib']:9.2f} GiB" + _bar(bar)


def _bar(node: Any, key: str = "blocks", percent: bool = False) -> str:
    """A sampled number's error bar over the seeds (``sampling.spread``), or nothing."""
    got = node.get(key) if isinstance(node, dict) else None
    if not isinstance(got, dict) or got.get("min") is None:
        return ""
    low, high = (f"{got['min']:.2%}", f"{got['max']:.2%}") if percent else (f"{got['min']:,.0f}", f"{got['max']:,.0f}")
    missing = f", unreachable in {got['unreachable_seeds']} seed(s)" if got.get("unreachable_seeds") else ""
    return f"  [seeds {low} to {high}{missing}]"


def _at(node: Any, *path: Any) -> Any:
    """``node[path[0]][path[1]]...`` or None where the spread has no such part."""
    for step in path:
        if isinstance(node, dict):
            node = node.get(step)
        elif isinstance(node, list) and isinstance(step, int) and step < len(node):
            node = node[step]
        else:
            return None
    return node


def render_plan_table(report: Plan) -> str:
    """The plan as a readable text table; reads only the plan, computes nothing."""
    t, m = report["trace"], report["model"]
    lines = [
        f"trace   {t['source']}: {t['requests']:,} requests, {t['blocks']:,} block accesses, "
        f"{t['distinct_blocks']:,} distinct blocks of {t['block_size_tokens']} tokens, {t['input_tokens']:,} input tokens"
        + (f" ({t['skipped_lines']} malformed lines skipped)" if t["skipped_lines"] else ""),
        f"model   {m['name']}: {m['kv_bytes_per_token']:,} KV bytes/token, {m['bytes_per_block'] / 2**20:.2f} MiB/block"
        + (f" (full-attention layers; sliding-window layers add {m['sliding_bytes_per_token']:,} B/token for at most "
           f"{m['sliding_window_tokens']:,} tokens per request)" if m.get("sliding_window_tokens") else ""),
        f"counted {report['counted']['requests']:,} requests (warm-up excluded)",
    ]
    if report.get("deployment"):  # the answer a user reads first: the deployment they run
        lines += ["", *deployment_lines(dict(report["deployment"]))]
    sampling = report.get("sampling")
    spread = sampling["spread"] if sampling else {}
    lines += _sampling_lines(sampling)
    for name, sem in report["semantics"].items():
        s = sem["summary"]
        bars = _at(spread, "semantics", name)
        lines += ["", f"== {name} semantics ==",
                  (f"ceiling (infinite cache): prefix token hit rate {s['ceiling_token_hit_rate']:.2%}, "
                   f"block hit rate {s['ceiling_block_hit_rate']:.2%}" + (" (exact)" if sampling else "")),
                  "working set for a prefix token hit rate of:"]
        for i, w in enumerate(sem["working_set"]):
            why = {kind: v["reason"] for kind, v in w.get("unreachable", {}).items()}  # the JSON's reasons
            bar = _at(bars, "working_set", i)
            absolute = _fmt_cap(w["token_hit_rate"], why.get("token_hit_rate", ""), _at(bar, "token_hit_rate"))
            lines.append(f"  {w['target']:>6.1%} absolute          {absolute}")
            if s["ceiling_token_hit_rate"] == 0:  # no reuse: "x of a zero ceiling" says nothing about capacity
                lines.append(f"  {w['target']:>6.1%} of the ceiling    meaningless: no block is ever reused (ceiling 0)")
                continue
            relative = _fmt_cap(w["fraction_of_ceiling"], why.get("fraction_of_ceiling", ""), _at(bar, "fraction_of_ceiling"))
            lines.append(f"  {w['target']:>6.1%} of the ceiling    {relative}")
        cov = sem["coverage"]
        lines.append(f"request coverage (first ceil(H x {cov['target']:g}) reusable blocks hit), "
                     f"{cov['n_requests_with_reuse']:,} of {cov['n_requests']:,} requests have reuse:")
        for q, cap in cov["requests_with_reuse"].items():
            covered = _fmt_cap(cap, "", _at(bars, "coverage", "requests_with_reuse", q))
            lines.append(f"  {q:>6} of requests with reuse  {covered}")
        lines += _tier_lines(sem["tier_plan"], "of the ceiling's prefix tokens", _at(bars, "tier_plan"))
        lines += _tier_lines(sem["tier_plan_by_coverage"], "of requests with reuse covered", _at(bars, "tier_plan_by_coverage"))
        lines += _window_lines(sem.get("time_windows", []))
    if "comparison" in report:
        lines += ["", "== per-access vs engine =="]
        bars = _at(spread, "comparison")
        for i, r in enumerate(report["comparison"]["working_sets"]):
            ratio = r["per_access_over_engine"]
            engine = _fmt_cap(r["engine"], "", _at(bars, "working_sets", i, "engine"))
            per_access = _fmt_cap(r["per_access"], "", _at(bars, "working_sets", i, "per_access"))
            lines.append(f"  {r['fraction_of_ceiling']:>6.1%} of ceiling: engine {engine}")
            lines.append(f"  {'':>6}  per-access {per_access}" + (f"  (x{ratio:.2f})" if ratio else ""))
        gap = report["comparison"]["max_prefix_token_hit_rate_gap"]
        lines.append(f"  largest prefix token hit-rate gap (engine - per-access): "
                     f"{gap['engine_minus_per_access'] * 100:+.2f} percentage points at {gap['at']['gib']:.2f} GiB"
                     + _bar(_at(bars, "max_prefix_token_hit_rate_gap"), "engine_minus_per_access", percent=True))
    if report.get("optimal_bound"):
        lines += ["", "== optimal bound (Belady: evicts the block reused furthest ahead; needs the future) =="]
        for ws in report["optimal_bound"]["working_sets"]:
            lines.append(f"  {ws['fraction_of_ceiling']:>6.1%} of the ceiling: Belady {_fmt_cap(ws['belady'])}")
            for name, cap in ws["lru"].items():
                lines.append(f"  {'':>6}  {name + ' LRU':>18} {_fmt_cap(cap)}")
        for row in report["optimal_bound"]["at_lru_working_sets"]:
            lru = ", ".join(f"{name} LRU {rate:.2%}" for name, rate in row["lru_prefix_token_hit_rate"].items())
            lines.append(f"  at {row['gib']:9.2f} GiB: Belady {row['belady_prefix_token_hit_rate']:.2%} prefix token "
                         f"hit rate; {lru}")
    for section in report.get("engine_models", {}).values():
        lines += ["", *_engine_lines(section)]
        cluster = section.get("cluster")
        if cluster:  # K workers / shared tier of the model (render/cluster.py)
            lines += ["", *cluster_lines(cluster)]
    for offload in report.get("offload", []):
        lines += ["", *offload_lines(dict(offload))]
    if "cluster" in report:
        lines += ["", *cluster_lines(report["cluster"])]
    if "budgets" in report:
        lines += ["", *budget_lines(report["budgets"])]
    return "\n".join(lines) + "\n"


def _sampling_lines(sampling: Any) -> list[str]:
    """What a sampled plan is: its rate and seeds, what is exact, what is left out and why."""
    if not sampling:
        return []
    return [(f"sampled SHARDS at rate {sampling['sample_rate']:.6g}, seeds {sampling['seeds']}: capacities are "
             "estimates (the first seed's), [the seeds' range] beside each; counts and ceilings are exact; "
             f"capacities under about {sampling['resolution_blocks']:,} blocks are at the sample's resolution"),
            *(f"omitted {what.replace('_', ' ')}: {why}" for what, why in sampling["omitted"].items())]


def _tier_lines(plan: Any, what: str, bars: Any = None) -> list[str]:
    """One tier plan: a line per tier (with the prefix token hit rate its cumulative size buys)."""
    lines = [f"tier plan, targets as fractions {what} (exclusive bands of one LRU stack; prices in US$ per GB "
             "of 1e9 bytes, " + ("assumed" if plan["prices_are_assumptions"] else "given") + "):"]
    for i, tier in enumerate(plan["tiers"]):
        rate = tier.get("token_hit_rate_at_cumulative")
        buys = "" if rate is None else f"  (prefix token hit rate {rate:.2%} up to this tier)"
        lines.append(f"  {tier['tier']:<4} {tier['target']:>6.1%}  "
                     f"{tier['blocks']:>9,} blocks {tier['gib']:9.2f} GiB  ${tier['cost_usd']:,.2f}{buys}"
                     + _bar(_at(bars, "tiers", i), "cumulative_blocks").replace("  [seeds", "  [cumulative: seeds")
                     + _bar(_at(bars, "tiers", i), "token_hit_rate_at_cumulative", percent=True).replace("  [seeds", "  [rate: seeds"))
    lines.append(f"  total ${plan['total_cost_usd']:,.2f}")
    first = plan["tiers"][0] if plan["tiers"] else None
    if plan.get("basis") == "coverage" and first is not None and first["blocks"] <= 2:
        lines.append(f"  note: {first['target']:.0%} of requests with reuse are covered by {first['blocks']} block(s), "
                     "which is typically just the shared system-prompt prefix; do not size HBM from this line alone "
                     "(the token plan above is the one that buys hit rate)")
    return lines


def _window_lines(rows: list[Any]) -> list[str]:
    """Per time window and cumulatively (every window up to its end): the ceiling and every target."""
    if not rows:
        return []
    targets = list(rows[0]["window"]["working_set_fraction_of_ceiling"])
    lines = [("time windows (working set for each target as a fraction of the ceiling; 'cumulative' = from the "
              "first counted request to the window's end):")]
    for row in rows:
        for label in ("window", "cumulative"):
            part = row[label]
            head = (f"  {row['start_s']:>8.0f}-{row['end_s']:<8.0f}s {row['requests']:>6,} req" if label == "window"
                    else f"  {'':>8} {'cumulative':<9} {'':>6}    ")
            lines.append(f"{head}  ceiling {part['ceiling_token_hit_rate']:6.2%}")
            for t in targets:
                why = "no block reused yet: ceiling 0" if t in part.get("unreachable", {}) else ""
                lines.append(f"  {'':>30}{float(t):>7.1%} of ceiling {_fmt_cap(part['working_set_fraction_of_ceiling'][t], why)}")
    return lines


def _throughput(load: Any) -> str:
    """The scheduler's GPU time, what it serves per second against what the arrivals ask, and
    (when it does not keep up) by how much."""
    busy, served = load.get("gpu_busy_fraction"), load.get("served_fraction")
    per = f" per GPU ({load['workers']} GPUs, one scheduler each)" if load.get("workers", 1) > 1 else ""
    text = (f"GPU busy {load['busy_s']:,.1f} s of {load['span_s']:,.1f} s{per}"
            + (f" ({busy:.0%})" if busy is not None else "")
            + (f"; serves {load['prompt_tokens_per_s']:,.0f} prompt tokens/s (the arrivals ask "
               f"{load['demand_prompt_tokens_per_s']:,.0f}) and {load['output_tokens_per_s']:,.0f} output tokens/s"
               if load.get("prompt_tokens_per_s") is not None and load.get("demand_prompt_tokens_per_s") is not None else "")
            + (f"; {load['recomputed_tokens']:,} tokens computed again after preemption" if load["recomputed_tokens"] else ""))
    if not load["keeps_up"] and served is not None:
        text += (f"; short by {1 - served:.1%} of the arrival rate: about {1 / served:.2f}x the throughput needed "
                 "(more replicas, a larger pool or a faster step)")
    return text


def _engine_lines(section: EngineModelPlan) -> list[str]:
    """One engine model: its settings, then one line per pool size."""
    sched = section["schedule"]
    how = sched["kind"] if sched["kind"] != "model" else (
        f"service model ({sched['prefill_tokens_per_s']:g} prefill, {sched['decode_tokens_per_s']:g} decode tokens/s)")
    if sched["kind"] == "scheduler":
        how = (f"the engine's {'async ' if sched.get('async_scheduling') else ''}scheduler under load "
               f"(max_num_seqs {sched['max_num_seqs']}, max_num_batched_tokens "
               f"{sched['max_num_batched_tokens']}; a step lasts {sched['step_fixed_s']:.4g} s + {sched['step_per_token_s']:.4g} s "
               f"per scheduled token: {sched.get('step_time_detail', 'an assumed step time')}; hits are at first admission)")
    lines = [f"== {section['model']} (the engine's own cache rules: {section['follows']}) ==",
             (f"pool unit: {section['pool_unit']}; {section['engine_block_size_tokens']}-token blocks; schedule {how}; "
              f"decode {'on' if section['decode'] else 'off'}; {section['requests']:,} requests counted"),
             f"  {'pool':>12} {'GiB':>9} {'hit tokens':>14} {'prefix token hit rate':>22} {'requests hit':>13}"]
    reuse: Any = dict(section).get("decode_reuse")
    if reuse:  # --decode-reuse: how the answers' reuse was found, and where the inference can be wrong
        lines.insert(2, f"decode reuse {reuse['method']}: {reuse['requests_continued']:,} of {reuse['requests']:,} requests "
                        f"continued by a later prompt ({reuse['answer_tokens_reusable']:,} answer tokens)"
                        + ("; can be wrong: " + "; ".join(reuse["known_failure_modes"]) if reuse["known_failure_modes"] else ""))
        if reuse.get("requests_next_prompt_shorter_than_prompt_plus_answer"):
            lines.insert(3, f"decode reuse: {reuse['requests_next_prompt_shorter_than_prompt_plus_answer']:,} next prompt(s) extend "
                            "the earlier prompt by less than its answer: answers look edited before reuse (e.g. thinking "
                            f"stripped); {reuse.get('sessions_taken_as_editing_answers') or 0:,} such session(s) get no inferred "
                            "reuse, elsewhere it may over-count (the plan without --decode-reuse is the floor)")
    for row in section["pools"]:
        gib = "" if row["gib"] is None else f"{row['gib']:.2f}"
        if not row["feasible"]:
            lines.append(f"  {row['gpu_blocks']!s:>12} {gib:>9}   infeasible: request {row['failed_request']} cannot allocate "
                         + ("(it never fits under the engine's scheduler)" if section.get("schedule", {}).get("kind")
                            == "scheduler" else "(the engine would queue or preempt)"))
            continue
        lines.append(f"  {row['gpu_blocks']!s:>12} {gib:>9} {row['hit_tokens']:>14,} {row['prefix_token_hit_rate']:>22.2%} "
                     f"{row['requests_with_hits']:>13,}")
        load: Any = dict(row).get("load")
        if load:
            lines.append(f"  {'':>12} TTFT p50 {load['ttft_s']['p50']:.3f} s, p90 {load['ttft_s']['p90']:.3f} s, p99 "
                         f"{load['ttft_s']['p99']:.3f} s; queue mean {load['queue_s']['mean']:.3f} s, p99 "
                         f"{load['queue_s']['p99']:.3f} s; {load['preemptions']:,} preemption(s) of "
                         f"{load['requests_preempted']:,} request(s)"
                         + ("" if load["keeps_up"] else f"; DOES NOT KEEP UP: the last tenth of the requests queues "
                            f"{load['queue_last_tenth_mean_s']:.1f} s on average, the first tenth "
                            f"{load['queue_first_tenth_mean_s']:.2f} s"))
            lines.append(f"  {'':>12} {_throughput(load)}")
        vs = row.get("vs_engine")
        if vs:
            lines.append(f"  {'':>12} vs the engine's own count: {vs['engine_cached_tokens']:,} tokens reported, "
                         f"{vs['predicted_cached_tokens']:,} predicted ({vs['error_tokens']:+,} tokens, {vs['error_percentage_points']:+.2f} percentage points of input), "
                         f"{vs['requests_exact']:,} of {section['requests']:,} requests exact")
    bounds: Any = dict(section).get("decode_reuse_bounds")
    if bounds:  # answers' reuse cannot be known from the trace: both bounds in one run
        lines.append(f"  decode reuse, bounds ({bounds['why']}):" if bounds["pools"] else
                     f"  decode reuse, bounds not given: {bounds.get('not_given', '')}")
        lines += [f"  {b['gpu_blocks']!s:>12} {b['without_reuse_prefix_token_hit_rate']:.2%} with no answer reused, "
                  f"{b['every_continuation_prefix_token_hit_rate']:.2%} with every inferred continuation reused"
                  for b in bounds["pools"]]
    hybrid: Any = dict(section).get("hybrid")
    if hybrid:
        groups = ", ".join(f"{g['groups']} {g['kind']}" + (f" (window {g['window_tokens']:,})" if g["window_tokens"] else "")
                           + (f" (chunk {g['chunk_tokens']:,})" if g["chunk_tokens"] else "") for g in hybrid["groups"])
        lines.append(f"  hybrid KV cache: {hybrid['kv_cache_groups']} groups ({groups}) in "
                     f"{'one pool' if hybrid['pool'].startswith('one pool') else 'a full pool and a Mamba state pool' if 'Mamba' in hybrid['pool'] else 'a full and a sliding-window pool'}; "
                     + (f"{hybrid['block_size_tokens']}-token blocks of {hybrid['bytes_per_block']:,} B (one group's layers); "
                        if hybrid["bytes_per_block"] is not None else f"{hybrid['block_size_tokens']}-token pages; ")
                     + f"prefill chunks of {hybrid['max_num_batched_tokens']:,} tokens")
        for g in hybrid["groups"]:
            full = sum(f["groups"] for f in hybrid["groups"] if f["kind"] == "full") or 1
            if g["blocks_per_checkpoint"] is None:  # a window in a pool of its own (SGLang): no blocks of the shared pool
                lines.append(f"    {g['kind']:<8} keeps {g['kept']}")
                continue
            per = (f"per kept position: {g['blocks_per_checkpoint']:,} blocks = {g['bytes_per_checkpoint'] / 2**20:,.1f} MiB, "
                   f"as much as {g['blocks_per_checkpoint'] // full * g['block_size_tokens']:,} tokens of full-attention prefix"
                   if g["kind"] in ("sliding", "mamba") else
                   f"per cached block of prefix: {g['bytes_per_checkpoint'] / 2**20:,.1f} MiB")
            lines.append(f"    {g['kind']:<8} keeps {g['kept']}; {per}")
        for p in hybrid["pools"]:
            if "full_attention_hit_tokens" in p:
                lines.append(f"  {p['gpu_blocks']!s:>12} full attention alone would hit {p['full_attention_hit_tokens']:,} "
                             f"tokens ({p['full_attention_prefix_token_hit_rate']:.2%}); the hybrid hits {p['hit_tokens']:,} "
                             f"({p['prefix_token_hit_rate']:.2%}; {p['requests_cut']:,} request(s) cut)")
        lines.append(f"  {hybrid['limited_by']}")
    minimum = section["min_feasible_pool"]
    if minimum:
        proof = "proved minimal" if minimum["proved_minimal"] else "feasible, one less is not"
        lines.append(f"  smallest feasible pool: {minimum['gpu_blocks']:,} ({minimum['gib']:.2f} GiB; {proof})")
    return lines + _working_set_lines(dict(section).get("working_set"))


def _hybrid_working_set_lines(ws: Any) -> list[str]:
    """A hybrid model's working sets (planning/hybrid_working_set.py): per target the smallest
    probed pool, or unreachable, beside the full-attention group(s) alone and what the others cost."""
    lines = [(f"  working set, as a fraction of {ws['targets_of']} ({ws['full_attention_ceiling_prefix_token_hit_rate']:.2%}; "
              f"the hybrid cache's own ceiling {ws['ceiling_prefix_token_hit_rate']:.2%}); {ws['search']}:")]
    if ws["full_attention_ceiling_hit_tokens"] == 0:
        return lines + ["    meaningless: no prefix is ever hit (ceiling 0)"]
    for row in ws["rows"]:
        fa, own = row["full_attention"], row["of_own_ceiling"]
        alone = f"full attention alone {fa['gpu_blocks']:,} ({fa['gib']:.2f} GiB)"
        mine = f"{row['fraction_of_ceiling']:.1%} of its own ceiling: {own['gpu_blocks']:,} ({own['gib']:.2f} GiB)"
        if not row["reachable"]:
            lines.append(f"  {row['fraction_of_ceiling']:>8.1%} of the ceiling  unreachable (the hybrid's ceiling is "
                         f"{ws['ceiling_prefix_token_hit_rate']:.2%}); {alone}; {mine}")
            continue
        lines.append(f"  {row['fraction_of_ceiling']:>8.1%} of the ceiling  pool {row['gpu_blocks']:>12,} "
                     f"{row['gib']:9.2f} GiB  (prefix token hit rate {row['prefix_token_hit_rate']:.2%}); {alone}: the "
                     f"other groups cost {row['other_groups_cost_blocks']:,} blocks ({row['other_groups_cost_gib']:.2f} GiB); "
                     f"{mine}")
    return lines


def _working_set_lines(ws: Any) -> list[str]:
    """An engine model's working sets: per target the smallest pool reaching that fraction of its
    own ceiling, and how it was found (exact from one replay, or the smallest probed pool)."""
    if not ws:
        return []
    if "skipped" in ws:
        return [f"  working set: {ws['skipped']}"]
    if "full_attention_ceiling_hit_tokens" in ws:
        return _hybrid_working_set_lines(ws)
    how = ("exact (one replay: every pool at once)" if ws["exact"] else
           f"smallest probed pool reaching it: bisection, {ws['probes']} exact simulations beyond the rows above; "
           "the pool one smaller (or within 1 % below) does not reach it, a smaller unprobed pool might (hits are not proved monotone)")
    lines = [(f"  working set, as a fraction of this model's own ceiling ({ws['ceiling_prefix_token_hit_rate']:.2%} "
             f"with an infinite pool); {how}:")]
    if ws["ceiling_hit_tokens"] == 0:
        return lines + ["    meaningless: no prefix is ever hit (ceiling 0)"]
    for row in ws["rows"]:
        smaller = row["one_smaller"]
        below = ("" if smaller is None else
                 f"; {smaller['gpu_blocks']:,} is infeasible" if not smaller["feasible"] else
                 f"; {smaller['gpu_blocks']:,} is {row['hit_tokens_needed'] - smaller['hit_tokens']:,} hit tokens short")
        lines.append(f"  {row['fraction_of_ceiling']:>8.1%} of the ceiling  pool {row['gpu_blocks']:>12,} "
                     f"{row['gib']:9.2f} GiB  (prefix token hit rate {row['prefix_token_hit_rate']:.2%}{below})")
    return lines
