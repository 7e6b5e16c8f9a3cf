"""The plan's ``cluster`` section (K workers, shared tier, routing worth) as table lines."""

from __future__ import annotations

from stackdist.planning.schema import ClusterPlan

__all__ = ["cluster_lines"]

MAX_WORKERS_SHOWN = 16
"""Beyond this many workers a pool row shows the lowest and highest worker instead of each."""


def _rate(rate: float | None) -> str:
    return "infeasible" if rate is None else f"{rate:.2%}"


def cluster_lines(section: ClusterPlan) -> list[str]:
    """One line per (GPU, shared) pool pair, per-worker rates under it, then routing worth.

    >>> row = {"gpu_blocks": 2, "shared_blocks": 0, "gpu_gib_per_worker": 0.5, "shared_gib": 0.0, "hit_tokens": 8,
    ...        "gpu_hit_tokens": 8, "shared_hit_tokens": 0, "prefix_token_hit_rate": 0.25, "gpu_token_hit_rate": 0.25,
    ...        "shared_token_hit_rate": 0.0, "requests_with_hits": 2, "per_worker": []}
    >>> s = {"workers": 2, "router": "kv-aware", "order": "serial", "pool_unit": "blocks", "shared_tier": "LRU",
    ...      "kv_aware": "longest prefix", "requests": 4, "pools": [row], "routing_worth": None}
    >>> cluster_lines(s)[3].split()
    ['2', '0', '0.50', '0.00', '25.00%', '25.00%', '0.00%', '2']
    """
    what = "engine semantics" if section.get("semantics", "engine") == "engine" else f"{section['semantics']} model"
    lines = [f"== {what} on {section['workers']} workers (router {section['router']}; {section['order']}) ==",
             f"pool unit: {section['pool_unit']}; shared tier: {section['shared_tier']}; kv-aware: {section['kv_aware']}"
             + (f"; {section['router']}: {rule}" if (rule := section.get("router_rule") or section.get("sglang_cache_aware"))
                else "")
             + (f"; llm-d: {section['llm_d']}" if section.get("llm_d") else ""),
             (f"  {'gpu/worker':>11} {'shared':>10} {'GiB/worker':>11} {'shared GiB':>11} {'prefix hit rate':>16} "
              f"{'from GPU':>9} {'from shared':>12} {'requests hit':>13}")]
    for row in section["pools"]:
        gib = "" if row["gpu_gib_per_worker"] is None else f"{row['gpu_gib_per_worker']:.2f}"
        shared = "" if row["shared_gib"] is None else f"{row['shared_gib']:.2f}"
        lines.append(f"  {row['gpu_blocks']!s:>11} {row['shared_blocks']!s:>10} {gib:>11} {shared:>11} "
                     f"{row['prefix_token_hit_rate']:>16.2%} {row['gpu_token_hit_rate']:>9.2%} "
                     f"{row['shared_token_hit_rate']:>12.2%} {row['requests_with_hits']:>13,}")
        workers = row["per_worker"]
        if len(workers) > MAX_WORKERS_SHOWN:  # the lowest and the highest rate
            workers = sorted(workers, key=lambda w: w["prefix_token_hit_rate"])[:: len(workers) - 1]
        if workers:
            lines.append("  " + " " * 11 + " per worker: " + ", ".join(
                f"{w['worker']}: {w['prefix_token_hit_rate']:.2%} of {w['requests']:,} req" for w in workers))
        if "available_hit_tokens" in row:  # engine models: what the fleet held against what the router got
            lines.append(f"  {'':>11} the fleet held {row['available_token_hit_rate']:.2%} at arrival (the best worker's "
                         f"prefix); routed {row['gpu_token_hit_rate']:.2%}: regret "
                         f"{row['routing_regret_percentage_points']:.2f} pp, {row['requests_routed_below_available']:,} "
                         "request(s) sent below the best worker")
        lines += [f"  {'':>11} WARNING: {warning}" for warning in row.get("warnings", [])]
    worth = section["routing_worth"]
    if worth:
        routers = list(worth[0]["routers"])
        lines.append(f"what routing is worth (prefix token hit rate of {section['requests']:,} requests; "
                     f"{section['workers']} workers of C blocks vs one cache of {section['workers']} x C, same shared tier):")
        lines.append(f"  {'C':>11} {'shared':>10} {'one cache':>10} " + " ".join(f"{r:>12}" for r in routers)
                     + f" {'best - one cache':>17}")
        for w in worth:
            diff = w["best_minus_one_cache_percentage_points"]
            lines.append(f"  {w['gpu_blocks']!s:>11} {w['shared_blocks']!s:>10} {_rate(w['one_cache_prefix_token_hit_rate']):>10} "
                         + " ".join(f"{_rate(w['routers'][r]):>12}" for r in routers)
                         + (f" {diff:>+14.2f} pp" if diff is not None else f" {'':>14}   "))
        for w in worth:
            regret = {r: x for r, x in w.get("routing_regret_percentage_points", {}).items() if x is not None}
            if regret:
                lines.append(f"  regret at C = {w['gpu_blocks']}, shared {w['shared_blocks']} (the best worker's prefix at "
                             "each arrival minus the routed worker's, pp): "
                             + ", ".join(f"{r} {x:.2f}" for r, x in regret.items()))
        warned = dict.fromkeys(warning for w in worth for warning in w.get("warnings", []))
        lines += [f"  WARNING: {warning} (C = {w['gpu_blocks']})" for w in worth for warning in w.get("warnings", [])
                  if warned.pop(warning, 0) is None]
        lines.append("  (infeasible: the pool cannot hold the requests running at once)" if any(
            x is None for w in worth for x in (w["one_cache_prefix_token_hit_rate"], *w["routers"].values())) else "")
        if not lines[-1]:
            lines.pop()
    lines += [f"  note: {note}" for note in section.get("notes", [])]
    return lines
