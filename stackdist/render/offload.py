"""The plan's offload sections as text: per specification its organisation, the hits by tier and the
write traffic at each (GPU pool, tier sizes), then the tier size each target needs."""

from __future__ import annotations

from typing import Any

__all__ = ["gib", "offload_lines"]


def _bytes_rate(value: float | None) -> str:
    if value is None:
        return "n/a (one timestamp)"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B/s"


def gib(value: float) -> str:
    """GiB with the digits that matter: ``1,914`` / ``64.0`` / ``0.0898``.

    >>> gib(1913.7), gib(64), gib(0.08984)
    ('1,914', '64.0', '0.0898')
    """
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.3g}"


def _size(sizes: dict[str, Any]) -> str:
    parts = []
    for tier, s in sizes.items():
        if s["gib"] is None:
            parts.append(f"{tier} inf")
        elif s["gib"]:
            parts.append(f"{tier} {gib(s['gib'])} GiB")
    return ", ".join(parts) or "none"


def offload_lines(section: dict[str, Any]) -> list[str]:
    """One offload specification: what it models, one line per (GPU pool, tier sizes), the sizing answers.

    >>> s = {"model": "m", "spec": "m:cpu=1blocks", "follows": "x", "behind": "vllm", "validation": "driven",
    ...      "organisation": "o", "conversion": "c", "unit": "blocks", "requests": 1, "rows": [], "sizing": []}
    >>> offload_lines(s)[0]
    '== offload m:cpu=1blocks behind vllm (x) =='
    """
    unit = section["unit"]
    lines = [f"== offload {section['spec']} behind {section['behind']} ({section['follows']}) ==",
             f"organisation: {section['organisation']}",
             f"validation: {section['validation']}",
             f"units: {section['conversion']}; schedule serial; {section['requests']:,} requests counted"
             + (f"; {section['workers']} workers, each with its own tiers of these sizes (per-worker sizes throughout)"
                if section.get("workers", 1) > 1 else ""),
             (f"  {'GPU pool':>9} {'tiers (sizes in the JSON in ' + unit + ')':<34} {'hit rate':>9} {'GPU':>8} "
              f"{'by tier':<26} written (per s of trace)")]
    for row in section["rows"]:
        if not row["feasible"]:
            lines.append(f"  {row['gpu_blocks']!s:>9} {_size(row['sizes']):<34} infeasible: {row['infeasible']}")
            continue
        present = [t for t, s in row["sizes"].items() if s["gib"] != 0]  # the tiers this configuration has
        tiers = ", ".join(f"{t} {row['tier_token_hit_rate'][t]:.2%}" for t in present)
        written = ", ".join(f"{t} {gib(row['written'][t]['bytes'] / 2**30)} GiB "
                            f"({_bytes_rate(row['written'][t]['bytes_per_s'])})" for t in present)
        lines.append(f"  {row['gpu_blocks']!s:>9} {_size(row['sizes']):<34} {row['prefix_token_hit_rate']:>9.2%} "
                     f"{row['gpu_token_hit_rate']:>8.2%} {tiers or '-':<26} {written or '-'}")
        if row["refused_stores"]:
            lines.append(f"  {'':>9} {row['refused_stores']:,} store(s) found no room and stored nothing")
    for s in section["sizing"]:
        for tier in s["tiers"]:
            behind = ", ".join(f"{t} {v:,} {unit}" if v != "inf" else f"{t} inf" for t, v in tier["behind"].items())
            if "infeasible" in tier:
                lines.append(f"  at GPU pool {s['gpu_blocks']}{' behind ' + behind if behind else ''}: the {tier['tier']} "
                             f"tier cannot be sized: {tier['infeasible']}")
                continue
            lines.append(f"  at GPU pool {s['gpu_blocks']}{' behind ' + behind if behind else ''}: the {tier['tier']} tier "
                         f"lifts {tier['without_tier_prefix_token_hit_rate']:.2%} to a ceiling of "
                         f"{tier['ceiling_prefix_token_hit_rate']:.2%} (never evicting at "
                         f"{tier['never_evicting'][unit]:,} {unit}, {gib(tier['never_evicting']['gib'])} GiB)")
            for a in tier["answers"]:
                lines.append(f"    {a['fraction_of_ceiling']:>6.1%} of the ceiling needs {tier['tier']} = "
                             f"{a[unit]:,} {unit} = {gib(a['gib'])} GiB ({a['prefix_token_hit_rate']:.2%} hit rate)")
    if section["sizing"]:
        lines.append(f"  (sizes: {section.get('sizing_method', '')})")
    return lines
