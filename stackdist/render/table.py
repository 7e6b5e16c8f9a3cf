"""The plan as a text table (what ``stackdist plan`` prints on stdout)."""

from __future__ import annotations

from stackdist.planning.schema import Capacity, Plan

__all__ = ["render_plan_table"]


def _fmt_cap(cap: Capacity | None) -> str:
    if cap is None:
        return "unreachable"
    return f"{cap['blocks']:>9,} blocks  {cap['tokens']:>12,} tokens  {cap['gib']:9.2f} GiB"


def render_plan_table(report: Plan) -> str:
    """The plan as a readable text table; reads only the plan, computes nothing."""
    t, m = report["trace"], report["model"]
    lines = [
        f"trace   {t['source']}: {t['requests']:,} requests, {t['blocks']:,} block accesses, "
        f"{t['distinct_blocks']:,} distinct blocks of {t['block_size_tokens']} tokens, {t['input_tokens']:,} input tokens"
        + (f" ({t['skipped_lines']} malformed lines skipped)" if t["skipped_lines"] else ""),
        f"model   {m['name']}: {m['kv_bytes_per_token']:,} KV bytes/token, {m['bytes_per_block'] / 2**20:.2f} MiB/block",
        f"counted {report['counted']['requests']:,} requests (warm-up excluded)",
    ]
    for name, sem in report["semantics"].items():
        s = sem["summary"]
        lines += ["", f"== {name} semantics ==",
                  f"ceiling (infinite cache): prefix token hit rate {s['ceiling_token_hit_rate']:.2%}, "
                  f"block hit rate {s['ceiling_block_hit_rate']:.2%}, reuse hit rate {s['ceiling_reuse_hit_rate']:.2%}",
                  "working set for a prefix token hit rate of:"]
        for w in sem["working_set"]:
            lines.append(f"  {w['target']:>6.1%} absolute          {_fmt_cap(w['token_hit_rate'])}")
            lines.append(f"  {w['target']:>6.1%} of the ceiling    {_fmt_cap(w['fraction_of_ceiling'])}")
        cov = sem["coverage"]
        lines.append(f"request coverage (first ceil(H x {cov['target']:g}) reusable blocks hit), "
                     f"{cov['n_requests_with_reuse']:,} of {cov['n_requests']:,} requests have reuse:")
        for q, cap in cov["requests_with_reuse"].items():
            lines.append(f"  {q:>6} of requests with reuse  {_fmt_cap(cap)}")
        for plan, what in ((sem["tier_plan"], "of the ceiling's prefix tokens"),
                           (sem["tier_plan_by_coverage"], "of requests with reuse covered")):
            lines.append(f"tier plan, targets as fractions {what} (exclusive bands of one LRU stack; prices "
                         + ("assumed" if plan["prices_are_assumptions"] else "given") + "):")
            for tier in plan["tiers"]:
                lines.append(f"  {tier['tier']:<4} {tier['target']:>6.1%}  "
                             f"{tier['blocks']:>9,} blocks {tier['gib']:9.2f} GiB  ${tier['cost_usd']:,.2f}")
            lines.append(f"  total ${plan['total_cost_usd']:,.2f}")
        for row in sem.get("time_windows", []):
            ws = row["window"]["working_set_fraction_of_ceiling"]
            first = next(iter(ws))
            lines.append(f"  window {row['start_s']:>8.0f}-{row['end_s']:<8.0f}s {row['requests']:>6,} req  ceiling "
                         f"{row['window']['ceiling_token_hit_rate']:.1%}  ws({first} of ceiling) {_fmt_cap(ws[first])}")
    if "comparison" in report:
        lines += ["", "== per-access vs engine =="]
        for r in report["comparison"]["working_sets"]:
            ratio = r["per_access_over_engine"]
            lines.append(f"  {r['fraction_of_ceiling']:>6.1%} of ceiling: engine {_fmt_cap(r['engine'])}")
            lines.append(f"  {'':>6}  per-access {_fmt_cap(r['per_access'])}" + (f"  (x{ratio:.2f})" if ratio else ""))
        gap = report["comparison"]["max_prefix_token_hit_rate_gap"]
        lines.append(f"  largest prefix token hit-rate gap (engine - per-access): {gap['engine_minus_per_access']:+.2%} "
                     f"at {gap['at']['gib']:.2f} GiB")
    return "\n".join(lines) + "\n"
