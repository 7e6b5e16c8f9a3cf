"""The JSON (and CSV) reports of ``curve`` and ``tiers``, read from the methods' results.

Whatever the method, one result type comes in (:class:`~stackdist.methods.curve.CurveResult`,
:class:`~stackdist.methods.tiers.TiersResult`); the report says how it was computed (``sampled``,
the rate, the seeds and every estimate's spread over them; the cluster's account).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stackdist.engine.histogram import exact_count
from stackdist.methods.curve import CurveResult
from stackdist.methods.method import Sampled
from stackdist.methods.tiers import TiersResult
from stackdist.output import tool_header

__all__ = ["curve_csv", "curve_report", "report_capacities", "tiers_report"]


def report_capacities(curve: Any, listed: Sequence[int] | None, points: int) -> np.ndarray:
    """The capacities a report samples: ``listed``, or ``points`` spread over the curve. O(points).

    >>> from stackdist.engine import HitCurve
    >>> report_capacities(HitCurve.from_trace([1, 2, 1]), [4, 8], 50).tolist()
    [4, 8]
    """
    return np.array(listed, np.int64) if listed is not None else curve.default_capacities(points)


def _unreachable(curve: Any, target: float) -> str:
    """Why no capacity reaches a hit-rate target: the cold misses cap every cache."""
    return (f"no capacity reaches {target:g}: {curve.cold_misses:,} of {curve.n_accesses:,} counted accesses are "
            f"first accesses (cold misses), so even an infinite cache hits {curve.ceiling_hit_rate:.4%}")


def curve_report(result: CurveResult, trace: Any, targets: Sequence[float], capacities: np.ndarray,
                 window: str | None = None, warmup: str | None = None, targets_label: str = "targets") -> dict[str, Any]:
    """The JSON report of a curve: header, summary, the smallest capacity for each target (hit
    rate, fraction of the ceiling; with reasons when none), the curve at ``capacities``; when
    sampled, every answer's spread over the seeds. O(capacities + targets x seeds)."""
    if result.sampled:
        return _sampled_report(result, trace, targets, capacities)
    curve = result.curve
    by_rate = {f"{t:g}": curve.min_capacity_for(hit_rate=t) for t in targets}
    report = {
        **tool_header("curve"),
        "trace": trace,
        "sampled": False,
        "window": window, "warmup": warmup,
        "summary": curve.summary(),
        "min_capacity_for_hit_rate": by_rate,
        "unreachable": {k: {"reason": _unreachable(curve, float(k))} for k, v in by_rate.items() if v is None},
        **({"no_reuse": "no key is accessed twice in the counted accesses: every access is a cold miss, at every "
            "capacity"} if not curve.ceiling_hits else {}),
        "min_capacity_for_fraction_of_ceiling": {  # no reuse at all: the ceiling is 0 and no target means anything
            f"{t:g}": curve.min_capacity_for(hits=exact_count(t, curve.ceiling_hits, targets_label))
            if curve.ceiling_hits else None for t in targets
        },
        "curve": curve.sample(capacities),
    }
    if result.distributed is not None:
        report["dask"] = result.distributed
    return report


def _sampled_report(result: CurveResult, trace: Any, targets: Sequence[float], capacities: np.ndarray) -> dict[str, Any]:
    from stackdist.engine.scale.estimate import spread

    curves, main, method = result.seeds, result.curve, result.method
    assert isinstance(method, Sampled)
    sample = main.sample(capacities)
    rates = np.array([c.hit_rate_at(capacities) for c in curves])
    sample.update({"hit_rate_min": rates.min(0).tolist(), "hit_rate_max": rates.max(0).tolist(),
                   "hit_rate_std": rates.std(0).tolist()})

    def answers(fn: Callable[[Any, float], Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        got = {f"{t:g}": [fn(c, t) for c in curves] for t in targets}
        return {k: v[0] for k, v in got.items()}, {k: spread(v) for k, v in got.items()}

    by_rate, by_rate_spread = answers(lambda c, t: c.min_capacity_for(hit_rate=t))
    by_ceiling, by_ceiling_spread = answers(lambda c, t: c.min_capacity_for(hits=t * c.ceiling_hits))
    return {**tool_header("curve"), "trace": trace, "sampled": True, "sample_rate": main.rate,
            "sample_size": method.size, "seeds": method.seed_list(), "summary": main.summary(),
            "min_capacity_for_hit_rate": by_rate, "min_capacity_for_hit_rate_spread": by_rate_spread,
            "min_capacity_for_fraction_of_ceiling": by_ceiling,
            "min_capacity_for_fraction_of_ceiling_spread": by_ceiling_spread,
            "ceiling_hit_rate_spread": spread([c.ceiling_hit_rate for c in curves]), "curve": sample}


def curve_csv(result: CurveResult, capacities: np.ndarray) -> str:
    """The curve at ``capacities`` as CSV (a header row, then one row per capacity). O(capacities).

    >>> from stackdist.engine import HitCurve
    >>> from stackdist.methods import Exact
    >>> curve_csv(CurveResult(HitCurve.from_trace([1, 1]), Exact()), np.array([1])).splitlines()[0].split(",")[:2]
    ['capacity', 'hits']
    """
    sample = result.curve.sample(capacities)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(sample))
    writer.writerows(zip(*sample.values()))
    return buf.getvalue()


def tiers_report(result: TiersResult, trace: Any, window: str | None = None, warmup: str | None = None) -> dict[str, Any]:
    """The JSON report of the tier grids (sampled: the rate, seeds and each cell's hit-rate
    range over the seeds). O(grid)."""
    if isinstance(result.method, Sampled):
        method = result.method
        out: dict[str, Any] = {**tool_header("tiers"), "trace": trace, "sampled": True, "sample_rate": result.rate,
                               "sample_size": method.size, "seeds": method.seed_list(), "accesses": result.accesses,
                               "inclusive": result.inclusive}
    else:
        out = {**tool_header("tiers"), "trace": trace, "sampled": False, "window": window, "warmup": warmup,
               "summary": result.summary, "inclusive": result.inclusive}
    if result.distributed is not None:
        out["dask"] = result.distributed
    if result.exclusive is not None:
        out["exclusive"] = result.exclusive
    return out
