"""The tier plan: HBM / DRAM / SSD sizes as exclusive bands of one LRU stack, with their cost."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .geometry import ModelGeometry
from .prefix_curve import PrefixCurve
from .prices import TIERS, price_list
from .sampled_curve import SampledPrefixCurve

__all__ = ["tier_plan"]


def tier_plan(
    curve: PrefixCurve | SampledPrefixCurve,
    geometry: ModelGeometry,
    tier_targets: Sequence[float] = (0.5, 0.9, 0.99),
    prices_per_gb: dict[str, float] | None = None,
    basis: str = "tokens",
    coverage_target: float = 1.0,
) -> dict[str, Any]:
    """HBM / DRAM / SSD sizes as exclusive bands of one LRU stack.

    Tier k's cumulative capacity is the smallest capacity that reaches ``tier_targets[k]``:
    a fraction of the ceiling's prefix token hits (``basis="tokens"``), or a fraction of the
    requests with a reusable prefix whose coverage need (at ``coverage_target``) is met
    (``basis="coverage"``). Its
    own size is the band between that and the tier above. Costs use ``prices_per_gb`` (US$
    per 1e9 bytes; the defaults are labelled assumptions). Exact (order statistics of the curve).
    """
    if basis not in ("tokens", "coverage"):
        raise ValueError(f"basis must be 'tokens' or 'coverage'; got {basis!r}.")
    prices = dict(zip(TIERS, price_list(prices_per_gb)))
    names = TIERS[: len(tier_targets)]
    if list(tier_targets) != sorted(tier_targets):
        raise ValueError(f"tier targets must be non-decreasing (HBM, DRAM, SSD); got {list(tier_targets)}.")
    if basis == "tokens":
        cumulative_of = [curve.min_capacity_for(fraction_of_ceiling=t) or 0 for t in tier_targets]
    else:
        served = curve.coverage_capacity(coverage_target, tier_targets, reusable_only=True)
        cumulative_of = list(served.values())
    bytes_per_block = curve.block_size * geometry.kv_bytes_per_token
    tiers, previous, total_cost = [], 0, 0.0
    for name, t, cumulative in zip(names, tier_targets, cumulative_of):
        size = max(cumulative - previous, 0)
        cost = size * bytes_per_block / 1e9 * prices[name]
        total_cost += cost
        tiers.append({
            "tier": name,
            "target": t,
            "cumulative_blocks": cumulative,
            "blocks": size,
            "gib": size * bytes_per_block / 2**30,
            "cost_usd": cost,
            "token_hit_rate_at_cumulative": float(curve.prefix_token_hit_rate_at(cumulative)),
        })
        previous = max(previous, cumulative)
    return {"basis": basis, "tiers": tiers, "total_cost_usd": total_cost,
            "prices_per_gb_usd": {n: prices[n] for n in names}, "prices_are_assumptions": prices_per_gb is None}
