"""``stackdist watch``'s answers as Prometheus text-format metrics (for a node exporter's
textfile collector)."""

from __future__ import annotations

from typing import Any

__all__ = ["prometheus_text"]


def prometheus_text(record: dict[str, Any]) -> str:
    """A JSON line of ``watch`` as Prometheus text-format metrics (cumulative answers). O(targets).

    >>> print(prometheus_text({"cumulative": {"accesses": 5, "ceiling_hit_rate": 0.5, "working_set": {"0.9": 4},
    ...                                       "working_set_bytes": {"0.9": 64}}}), end="")
    # TYPE kv_accesses_total counter
    kv_accesses_total 5
    # TYPE kv_ceiling_hit_rate gauge
    kv_ceiling_hit_rate 0.5
    # TYPE kv_working_set_units gauge
    kv_working_set_units{target="0.9"} 4
    # TYPE kv_working_set_bytes gauge
    kv_working_set_bytes{target="0.9"} 64
    """
    c = record["cumulative"]
    lines = ["# TYPE kv_accesses_total counter", f"kv_accesses_total {c['accesses']}",
             "# TYPE kv_ceiling_hit_rate gauge", f"kv_ceiling_hit_rate {c['ceiling_hit_rate']:.6g}"]
    for name, key in (("kv_working_set_units", "working_set"), ("kv_working_set_bytes", "working_set_bytes")):
        if key in c:
            lines.append(f"# TYPE {name} gauge")
            lines += [f'{name}{{target="{t}"}} {v}' for t, v in c[key].items() if v is not None]
    if "hit_rate" in c:
        lines.append("# TYPE kv_hit_rate gauge")
        lines += [f'kv_hit_rate{{capacity="{k}"}} {v:.6g}' for k, v in c["hit_rate"].items()]
    return "\n".join(lines) + "\n"
