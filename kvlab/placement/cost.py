"""Cost, capacity and frontier metrics on top of :func:`~kvlab.placement.simulator.simulate`.

Prices are ASSUMPTIONS (USD per GB, 1 GB = 1e9 bytes) from the project's one price table,
:data:`stackdist.planning.prices.PRICES_USD_PER_GB` (HBM $187.50, DRAM $3.50, SSD $0.08); every
function takes ``prices`` (HBM, DRAM, SSD) to override them, default
:func:`stackdist.planning.prices.price_list`.

- :func:`sessions_per_gpu`: how many sessions' KV fit in the tiers (capacity arithmetic:
  ``floor(total blocks / blocks per session)``).
- :func:`capacity_ratios`: sessions and cost per session of a tier ratio against GPU only.
  At 1:8:64 the session ratio is 73 (= 1 + 8 + 64) and the cost-per-session ratio is
  ``187.5 * 73 / (187.5 + 8 * 3.5 + 64 * 0.08) = 62.04`` whatever the policy.
- :func:`composition_sweep`: every HBM/DRAM/SSD split of a block budget on a grid, simulated;
  :func:`pareto_frontier` keeps the cost-latency frontier.
- :func:`slo_capacity`: the smallest HBM capacity meeting a TTFT p99 SLO as the SSD deepens.

>>> r = capacity_ratios((1, 8, 64))
>>> r["sessions_ratio"], round(r["cost_per_session_ratio"], 2)
(73.0, 62.04)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from stackdist.planning.prices import price_list

from .simulator import SimConfig, simulate
from .workloads import Workload

__all__ = [
    "capacity_ratios",
    "composition_sweep",
    "cost_per_session_usd",
    "max_sessions_meeting_slo",
    "pareto_frontier",
    "sessions_per_gpu",
    "slo_capacity",
    "tier_cost_usd",
]

def tier_cost_usd(capacities: Sequence[int], block_bytes: int, prices: Sequence[float] | None = None) -> float:
    """Price of the tiers' capacity: sum of blocks x block bytes / 1e9 x price per GB."""
    prices = price_list() if prices is None else prices
    if len(prices) < len(capacities):
        raise ValueError(f"prices must give one price per tier ({len(capacities)}), got {len(prices)}.")
    return sum(c * block_bytes / 1e9 * p for c, p in zip(capacities, prices))


def sessions_per_gpu(capacities: Sequence[int], blocks_per_session: float) -> int:
    """Sessions whose KV fits in the tiers: ``floor(sum(capacities) / blocks_per_session)``."""
    if not blocks_per_session > 0:
        raise ValueError(f"blocks_per_session must be positive, got {blocks_per_session!r}.")
    return math.floor(sum(capacities) / blocks_per_session)


def cost_per_session_usd(
    capacities: Sequence[int], blocks_per_session: float, block_bytes: int,
    prices: Sequence[float] | None = None,
) -> float:
    """Tier cost divided by :func:`sessions_per_gpu` (inf when no session fits)."""
    sessions = sessions_per_gpu(capacities, blocks_per_session)
    return tier_cost_usd(capacities, block_bytes, prices) / sessions if sessions else math.inf


def capacity_ratios(ratio: Sequence[float], prices: Sequence[float] | None = None) -> dict[str, float]:
    """Sessions and cost per session of tiers in ``ratio`` (HBM first) against HBM alone.

    Pure capacity arithmetic (continuous sessions): independent of policy and workload.
    """
    prices = price_list() if prices is None else prices
    if not ratio or ratio[0] <= 0:
        raise ValueError(f"ratio must start with a positive HBM share, got {list(ratio)!r}.")
    sessions_ratio = sum(ratio) / ratio[0]
    cost_ratio = sum(r * p for r, p in zip(ratio, prices)) / (ratio[0] * prices[0])
    return {"sessions_ratio": float(sessions_ratio), "cost_per_session_ratio": float(sessions_ratio / cost_ratio)}


def composition_sweep(
    workload: Workload, budget_blocks: int, steps: int, config: SimConfig,
    prices: Sequence[float] | None = None, progress: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Simulate every split ``(h, d, s)`` of ``budget_blocks`` in ``steps`` equal parts.

    ``(steps + 1) * (steps + 2) / 2`` simulations; splits with no HBM are skipped (a GPU needs
    some HBM for KV). Each point: capacities, cost, TTFT p50/mean/p99, hit rates, migration bytes.
    ``progress`` (optional) is called after each simulation.
    """
    if steps < 1 or budget_blocks < steps:
        raise ValueError(f"steps must be >= 1 and budget_blocks >= steps, got steps={steps}, budget_blocks={budget_blocks}.")
    points = []
    unit = budget_blocks / steps
    for i in range(1, steps + 1):
        for j in range(steps + 1 - i):
            hbm, upper = round(i * unit), round((i + j) * unit)  # monotone rounding: no negative tier
            caps = (hbm, upper - hbm, budget_blocks - upper)
            summary = simulate(workload, replace(config, capacities=caps)).to_dict()
            block_bytes = workload.block_tokens * summary["config"]["bytes_per_token"]
            points.append({
                "capacities": list(caps),
                "cost_usd": tier_cost_usd(caps, block_bytes, prices),
                "ttft_p50_ms": summary["ttft_ms"]["p50"],
                "ttft_mean_ms": summary["ttft_ms"]["mean"],
                "ttft_p99_ms": summary["ttft_ms"]["p99"],
                "hit_rates": summary["hit_rates"],
                "migration_bytes_total": summary["migration_bytes_total"],
            })
            if progress is not None:
                progress()
    return points


def pareto_frontier(points: list[dict[str, Any]], x: str = "cost_usd", y: str = "ttft_p99_ms") -> list[dict[str, Any]]:
    """Points not dominated in (x, y), both minimised, sorted by x.

    >>> pts = [{"cost_usd": 1, "ttft_p99_ms": 5}, {"cost_usd": 2, "ttft_p99_ms": 6}, {"cost_usd": 3, "ttft_p99_ms": 1}]
    >>> [p["cost_usd"] for p in pareto_frontier(pts)]
    [1, 3]
    """
    front: list[dict[str, Any]] = []
    best = math.inf
    for point in sorted(points, key=lambda p: (p[x], p[y])):
        if point[y] < best:
            front.append(point)
            best = point[y]
    return front


def slo_capacity(
    workload: Workload, slo_ms: float, hbm_grid: Sequence[int], ssd_multiples: Sequence[float],
    config: SimConfig, dram_multiple: float = 8.0, progress: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """For each SSD depth (a multiple of HBM), the smallest HBM in ``hbm_grid`` meeting the SLO.

    Tiers are ``(h, dram_multiple * h, ssd_multiple * h)``; the SLO is TTFT p99 <= ``slo_ms``.
    ``None`` when no grid point meets it. ``progress`` (optional) is called after each simulation.
    """
    out = []
    for multiple in ssd_multiples:
        found = None
        for h in sorted(hbm_grid):
            caps = (h, round(dram_multiple * h), round(multiple * h))
            p99 = simulate(workload, replace(config, capacities=caps)).to_dict()["ttft_ms"]["p99"]
            if progress is not None:
                progress()
            if p99 <= slo_ms:
                found = h
                break
        out.append({"ssd_multiple": multiple, "dram_multiple": dram_multiple, "min_hbm_blocks": found})
    return out


def max_sessions_meeting_slo(
    make_workload: Callable[[int], Workload], config: SimConfig, slo_ms: float, n_max: int,
    progress: Callable[[], None] | None = None,
) -> int:
    """Largest N <= ``n_max`` whose workload ``make_workload(N)`` meets TTFT p99 <= ``slo_ms``.

    Doubling then bisection (assumes the p99 grows with N); 0 if even one session misses it.
    ``progress`` (optional) is called after each simulation.
    """
    def meets(n: int) -> bool:
        p99 = simulate(make_workload(n), config).to_dict()["ttft_ms"]["p99"]
        if progress is not None:
            progress()
        return p99 <= slo_ms

    if not meets(1):
        return 0
    lo, hi = 1, 2
    while hi <= n_max and meets(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, n_max + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            lo = mid
        else:
            hi = mid
    return lo
