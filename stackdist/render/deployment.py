"""The plan's ``deployment`` section as table lines: what the deployment delivers, then the
cheapest deployment per target (the search stated), the pooled bound named as a bound."""

from __future__ import annotations

from typing import Any

__all__ = ["deployment_lines"]


def _gib(gib: float) -> str:
    return f"{gib:,.0f} GiB" if gib >= 10 else f"{gib:.2g} GiB"


def _tiers(tiers: dict[str, Any]) -> str:
    """The tiers with a size, per replica.

    >>> _tiers({"cpu": {"gib_per_replica": 0.52}, "disk": {"gib_per_replica": 1234.4}})
    'cpu 0.52 GiB + disk 1,234 GiB'
    """
    return " + ".join(f"{t} {_gib(v['gib_per_replica'])}" for t, v in tiers.items() if v["gib_per_replica"])


def _usd(cost: dict[str, Any]) -> str:
    per = cost.get("usd_per_million_input_tokens")
    return f"US$ {cost['usd_per_hour']:,.2f}/hour" + (f", US$ {per:,.4f} per million input tokens" if per is not None else "")


def deployment_lines(section: dict[str, Any]) -> list[str]:
    """Reads only the plan.

    >>> d = {"replicas": 2, "gpus_per_replica": 1, "pool_per_replica": 100, "engine": "vllm", "follows": "vLLM 0.33.0",
    ...      "router": "session", "offload": None, "ceiling_prefix_token_hit_rate": 0.4, "search": "s", "bound": "b",
    ...      "delivers": {"prefix_token_hit_rate": 0.1, "gpu_token_hit_rate": 0.1, "gpus": 2, "tiers_per_replica": {},
    ...                   "cost": {"usd_per_hour": 8.0}}, "targets": []}
    >>> deployment_lines(d)[1]
    'delivers: 10.00% prefix token hits (GPU 10.00%) at US$ 8.00/hour'
    """
    if "not_answered" in section:
        return [f"== deployment: not answered: {section['not_answered']} =="]
    d = section["delivers"]
    router = f" behind a {section['router']} router" if section.get("router") else ""
    tier = f", {section['offload']} per replica" if section.get("offload") else ""
    sized = d.get("tiers_per_replica", {})  # a tier of size 0 (LMCache without its disk) is not shown
    by_tier = "".join(f", {t} {r:.2%}" for t, r in d.get("tier_token_hit_rate", {}).items()
                      if t not in sized or sized[t].get("gib_per_replica"))
    lines = [(f"== deployment: {section['replicas']} replica(s) of {section['gpus_per_replica']} GPU(s), "
             f"{section['pool_per_replica']:,} {section['engine']} blocks each{router}{tier} ({section['follows']}) =="),
             (f"delivers: {d['prefix_token_hit_rate']:.2%} prefix token hits (GPU {d['gpu_token_hit_rate']:.2%}{by_tier}) "
             f"at {_usd(d['cost'])}")]
    lines += [f"note: {note}" for note in section.get("notes", [])]
    load = section.get("load") or {}
    if d.get("under_load"):
        u = d["under_load"]
        lines.append(f"under load (the engine's scheduler; {load.get('step_time')}): " + (
            "a replica cannot hold a request" if u.get("infeasible") else
            f"TTFT p50 {u['ttft_s']['p50']:.3f} s, p99 {u['ttft_s']['p99']:.3f} s; "
            + ("keeps up with the arrivals" if u["keeps_up"] else
               f"DOES NOT KEEP UP: serves {u['served_fraction']:.1%} of the arrival rate")))
    if load.get("runs"):
        floor = load["fewest_replicas_keeping_up"]
        lines.append(f"fewest replicas that keep up: {floor}" if floor else
                     f"no deployment of up to {load['runs'][-1]['replicas']} replicas keeps up with the arrivals")
    elif load.get("not_given"):
        lines.append(f"load: {load['not_given']}")
    lines.append(f"the cheapest deployment per target (a fraction of the ceiling {section['ceiling_prefix_token_hit_rate']:.2%}, "
                 "one pool that never evicts, or an absolute prefix token hit rate):")
    for t in section["targets"]:
        best = t["cheapest"]
        what = (f"  {t['target']:>6.1%} of the ceiling ({t['needs_prefix_token_hit_rate']:.2%}):"
                if t.get("kind", "fraction_of_ceiling") == "fraction_of_ceiling" else f"  {t['target']:>6.1%} absolute:")
        if best is None:
            lines.append(f"{what} unreachable: {t['unreachable']}")
            continue
        extra = _tiers(best["tiers_per_replica"])
        lines.append(f"{what} {best['replicas']} replica(s) ({best['gpus']} GPUs)" + (f" + {extra} per replica" if extra else "")
                     + f": {best['prefix_token_hit_rate']:.2%}, {_usd(best['cost'])}")
        if best.get("routing_warning"):
            lines.append(f"      warning: {best['routing_warning']}")
    for t in section.get("ttft_targets", []):
        best = t["cheapest"]
        what = f"  TTFT {t['percentile']} <= {t['seconds']:g} s:"
        lines.append(f"{what} unreachable: {t['unreachable']}" if best is None else
                     f"{what} {best['replicas']} replica(s) ({best['gpus']} GPUs): TTFT {t['percentile']} "
                     f"{best['ttft_s'][t['percentile']]:.3f} s, {_usd(best['cost'])}")
    lines += [f"  (search: {section['search']})", f"  (bound: {section['bound']})"]
    return lines
