"""The plan: every answer for one request trace, computed once, as one typed result.

Built from one replay per semantics (:mod:`stackdist.serving.semantics`); all capacities are
exact. The renderers (:mod:`stackdist.render`) only read the :class:`~.schema.Plan` this returns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from stackdist.engine.histogram import exact_count
from stackdist.engine.keys import unique_sorted
from stackdist.serving.results import ServingResult
from stackdist.serving.semantics import PrefixReplay, replay_requests
from stackdist.traces import RequestTrace
from stackdist.version import __version__

from .budgets import BudgetOptions, budget_report, pricing
from .deployment import DeploymentSpec, deployment_report, replayable
from .engine_plan import EngineOptions, engine_section, run_engine_models
from .engine_working_set import engine_working_set
from .geometry import DEFAULT_MODEL, ModelGeometry
from .offload_plan import OffloadRun, offload_section, run_offload
from .optimal import optimal_bound, optimal_working_set
from .prefix_curve import PrefixCurve
from .prices import PRICES_USD_PER_GB
from .routing import RoutingOptions, routing_section, run_routing
from .sampled_curve import SampledPrefixCurve
from .schema import (
    SCHEMA_VERSION,
    Budgets,
    Capacity,
    Comparison,
    Coverage,
    CurveTable,
    DeploymentNotAnswered,
    DeploymentPlan,
    EngineModelPlan,
    OffloadPlan,
    Plan,
    PlanCurveSummary,
    SemanticsPlan,
    TierPlan,
    TraceInfo,
    WindowRow,
    WorkingSetRow,
    unreachable_reason,
)
from .tier_plan import tier_plan

__all__ = ["PlanOptions", "PlanResult", "build_plan", "parse_duration", "plan_of_curves", "plan_of_replays", "warmup_mask"]

COVERAGE_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)


@dataclass
class PlanOptions:
    """What to compute; every field has the CLI's default."""

    semantics: Sequence[str] = ("engine", "per-access")
    geometry: ModelGeometry = DEFAULT_MODEL
    targets: Sequence[float] = (0.9, 0.95, 0.99)
    coverage_target: float = 1.0
    warmup_requests: int = 0
    warmup_seconds: float = 0.0
    window_seconds: float | None = None  # --every: also answer per time window of this width
    count_range: tuple[int, int] | None = None  # --window: the requests [start, stop) counted (warm-up from start)
    tier_targets: Sequence[float] = (0.5, 0.9, 0.99)
    prices_per_gb: dict[str, float] | None = None
    curve_points: int = 120
    extra: dict[str, Any] = field(default_factory=dict)
    engine: EngineOptions = field(default_factory=EngineOptions)
    budgets: BudgetOptions | None = None
    optimal: bool = False
    routing: RoutingOptions | None = None
    deployment: DeploymentSpec | None = None  # --gpu: the deployment answer (planning/deployment.py)


Curve = PrefixCurve | SampledPrefixCurve
"""An exact curve, or one seed's estimate of it: the plan reads either the same way."""


@dataclass(frozen=True)
class PlanResult:
    """A plan and what was computed on the way that a caller may want afterwards: each
    semantics' exact curve (the plot draws every step; empty for an estimate) and the engine
    models' runs (``--per-request``)."""

    plan: Plan
    curves: dict[str, PrefixCurve] = field(default_factory=dict)
    engine_results: dict[str, ServingResult] = field(default_factory=dict)
    offload_runs: list[OffloadRun] = field(default_factory=list)


def parse_duration(text: str, name: str) -> float:
    """Seconds from ``"90"``, ``"90s"``, ``"10m"`` or ``"1.5h"``.

    >>> parse_duration("10m", "--window"), parse_duration("90", "--window")
    (600.0, 90.0)
    """
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    body, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1.0)
    try:
        value = float(body) * unit
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a duration like 90, 90s, 10m or 1.5h; got {text!r}.")
    return value


def warmup_mask(trace: RequestTrace, requests: int = 0, seconds: float = 0.0,
                window: tuple[int, int] | None = None) -> np.ndarray:
    """The requests that count: those of ``window`` (request indices [start, stop), default all)
    not among its first ``requests`` and not before its first request's time + ``seconds``. O(n).

    >>> from stackdist.traces import RequestTrace
    >>> t = RequestTrace(np.arange(4), np.arange(5), np.ones(4, np.int64), np.arange(4.0), np.ones(4, np.int64),
    ...                  np.zeros(4, np.int64), block_size=1)
    >>> warmup_mask(t, 1, window=(1, 3)).tolist(), warmup_mask(t, seconds=2).tolist()
    ([False, False, True, False], [False, False, True, True])
    """
    n = trace.n_requests
    start, stop = window if window is not None else (0, n)
    mask = np.zeros(n, bool)
    mask[start:stop] = True
    mask[start: start + max(0, requests)] = False
    if seconds > 0 and stop > start:
        mask &= trace.timestamps_s >= trace.timestamps_s[start:stop].min() + seconds
    return mask


class _Units:
    """Capacity conversions: blocks -> tokens -> bytes -> GiB."""

    def __init__(self, block_size: int, geometry: ModelGeometry) -> None:
        self.block_size = block_size
        self.bytes_per_block = block_size * geometry.kv_bytes_per_token

    def describe(self, blocks: int | None) -> Capacity | None:
        return None if blocks is None else self.capacity(blocks)

    def capacity(self, blocks: int) -> Capacity:
        return {"blocks": int(blocks), "tokens": int(blocks) * self.block_size, "gib": int(blocks) * self.bytes_per_block / 2**30}


def _curve_points(curve: Curve, points: int, marks: Sequence[int]) -> np.ndarray:
    top = max(curve.saturation_blocks, 1)
    grid = unique_sorted(np.round(np.geomspace(1, top, max(points - 1, 1))).astype(np.int64))
    return unique_sorted(np.concatenate([[0], grid, np.asarray([m for m in marks if m is not None], np.int64)]))


def _working_sets(curve: Curve, units: _Units, targets: Sequence[float]) -> list[WorkingSetRow]:
    rows: list[WorkingSetRow] = []
    for t in targets:
        absolute = units.describe(curve.min_capacity_for(token_hit_rate=t))
        relative = units.describe(curve.min_capacity_for(fraction_of_ceiling=t))
        rows.append({"target": t, "token_hit_rate": absolute, "fraction_of_ceiling": relative,
                     "unreachable": {kind: {"reason": unreachable_reason(curve, kind, t)}
                                     for kind, got in (("token_hit_rate", absolute), ("fraction_of_ceiling", relative))
                                     if got is None}})
    return rows


def _coverage(curve: Curve, units: _Units, target: float) -> Coverage:
    needs = curve.coverage_needs(target)
    quantiles = {label: {q: units.capacity(blocks) for q, blocks in
                         curve.coverage_capacity(target, COVERAGE_QUANTILES, reusable_only=reusable_only).items()}
                 for label, reusable_only in (("all_requests", False), ("requests_with_reuse", True))}
    return {"target": target, "n_requests": int(needs.size),
            "n_requests_with_reuse": int((needs > 0).sum()),
            "all_requests": quantiles["all_requests"], "requests_with_reuse": quantiles["requests_with_reuse"]}


def _curve_table(curve: Curve, units: _Units, caps: np.ndarray) -> CurveTable:
    return {
        "capacity_blocks": caps.tolist(),
        "capacity_gib": (caps * units.bytes_per_block / 2**30).tolist(),
        "block_hit_rate": np.asarray(curve.block_hit_rate_at(caps)).tolist(),
        "reuse_hit_rate": np.asarray(curve.reuse_hit_rate_at(caps)).tolist(),
        "prefix_token_hit_rate": np.asarray(curve.prefix_token_hit_rate_at(caps)).tolist(),
    }


def _time_windows(replay: PrefixReplay, counted: np.ndarray, width: float, units: _Units, targets: Sequence[float]) -> list[dict[str, Any]]:
    ts = replay.trace.timestamps_s
    if not counted.any():
        return []
    start = float(ts[counted].min())
    index = np.floor((ts - start) / width).astype(np.int64)
    rows: list[dict[str, Any]] = []
    for w in range(int(index[counted].max()) + 1):
        in_window = counted & (index == w)
        cumulative = counted & (index <= w)
        row: dict[str, Any] = {"start_s": start + w * width, "end_s": start + (w + 1) * width, "requests": int(in_window.sum())}
        for label, mask in (("window", in_window), ("cumulative", cumulative)):
            curve = PrefixCurve(replay, mask)
            sets = {f"{t:g}": units.describe(curve.min_capacity_for(fraction_of_ceiling=t)) for t in targets}
            row[label] = {
                "ceiling_token_hit_rate": curve.ceiling_token_hit_rate,
                "working_set_fraction_of_ceiling": sets,
                "unreachable": {k: {"reason": unreachable_reason(curve, "fraction_of_ceiling", float(k))}
                                for k, v in sets.items() if v is None},
            }
        rows.append(row)
    return rows


def _semantics_report(curve: Curve, options: PlanOptions, units: _Units) -> SemanticsPlan:
    working = _working_sets(curve, units, options.targets)
    marks = [cap["blocks"] for w in working for k in ("token_hit_rate", "fraction_of_ceiling") if (cap := w[k])]
    return {
        "summary": cast(PlanCurveSummary, curve.summary()),
        "working_set": working,
        "coverage": _coverage(curve, units, options.coverage_target),
        "tier_plan": cast(TierPlan, tier_plan(curve, options.geometry, options.tier_targets, options.prices_per_gb)),
        "tier_plan_by_coverage": cast(TierPlan, tier_plan(curve, options.geometry, options.tier_targets,
                                                          options.prices_per_gb, basis="coverage",
                                                          coverage_target=options.coverage_target)),
        "curve": _curve_table(curve, units, _curve_points(curve, options.curve_points, marks)),
    }


def _comparison(curves: dict[str, Curve], units: _Units, targets: Sequence[float]) -> Comparison:
    """How far apart per-access and engine semantics are on the same trace."""
    engine, per_access = curves["engine"], curves["per-access"]
    rows: list[dict[str, Any]] = []
    for t in targets:
        e = engine.min_capacity_for(fraction_of_ceiling=t)
        p = per_access.min_capacity_for(fraction_of_ceiling=t)
        rows.append({
            "fraction_of_ceiling": t,
            "engine": units.describe(e),
            "per_access": units.describe(p),
            "per_access_over_engine": (p / e) if e and p is not None else None,
        })
    caps = _curve_points(engine, 40, [])
    gap = np.asarray(engine.prefix_token_hit_rate_at(caps)) - np.asarray(per_access.prefix_token_hit_rate_at(caps))
    worst = int(np.argmax(np.abs(gap))) if gap.size else 0
    return {
        "working_sets": rows,
        "max_prefix_token_hit_rate_gap": {"engine_minus_per_access": float(gap[worst]) if gap.size else 0.0,
                                          "at": units.describe(int(caps[worst]) if gap.size else 0)},
        "per_access_block_hit_rate_at_engine_ws": [
            {"fraction_of_ceiling": r["fraction_of_ceiling"],
             "per_access_block_hit_rate": float(per_access.block_hit_rate_at(r["engine"]["blocks"])) if r["engine"] else None,
             "per_access_prefix_token_hit_rate": float(per_access.prefix_token_hit_rate_at(r["engine"]["blocks"])) if r["engine"] else None,
             "engine_prefix_token_hit_rate": float(engine.prefix_token_hit_rate_at(r["engine"]["blocks"])) if r["engine"] else None}
            for r in rows
        ],
    }


def build_plan(trace: RequestTrace, options: PlanOptions, progress_factory: Callable[[str], Any] | None = None) -> Plan:
    """The whole plan for ``trace``: per curve semantics, the ceilings, working sets, coverage,
    tier plan, curve and (optionally) time windows, plus how the two differ; per engine model
    (``options.engine.models``), the hits at each pool size. One replay per semantics.
    O(blocks log distinct) per semantics."""
    return plan_of_replays(trace, options, None, progress_factory).plan


def plan_of_replays(trace: RequestTrace, options: PlanOptions, replays: Mapping[str, PrefixReplay] | None = None,
                    progress_factory: Callable[[str], Any] | None = None,
                    stage: Callable[[str], None] | None = None) -> PlanResult:
    """:func:`build_plan` from the semantics' replays where given (``replays``: made elsewhere,
    e.g. on a cluster, equal to the local ones), replaying the others here; with the exact
    curves and the engine models' runs beside the plan. ``stage(label)`` hears each engine
    model's run start."""
    units = _Units(trace.block_size, options.geometry)
    counted = warmup_mask(trace, options.warmup_requests, options.warmup_seconds, options.count_range)
    report = _header(trace, options, units, counted, int(unique_sorted(trace.block_ids).size))
    curves: dict[str, PrefixCurve] = {}
    made: dict[str, PrefixReplay] = {}
    sections: dict[str, SemanticsPlan] = {}
    for semantics in options.semantics:
        given = (replays or {}).get(semantics)
        progress = progress_factory(f"replay ({semantics})") if progress_factory and given is None else None
        try:
            replay = given if given is not None else replay_requests(trace, semantics, progress)
        finally:
            if progress is not None:
                progress.close()
        curves[semantics], made[semantics] = PrefixCurve(replay, counted), replay  # every metric reads it
        sections[semantics] = _semantics_report(curves[semantics], options, units)
        if options.window_seconds:
            sections[semantics]["time_windows"] = cast(list[WindowRow], _time_windows(
                replay, counted, options.window_seconds, units, options.targets))
    report["semantics"] = sections
    if len(curves) == 2:
        report["comparison"] = _comparison(dict(curves), units, options.targets)
    if options.optimal and curves:
        report["optimal_bound"] = _optimal(trace, counted, curves, units, options.targets)
    results: dict[str, ServingResult] = {}
    if options.engine.models:
        results = run_engine_models(trace, options.engine, stage)
        report["engine_models"] = {
            model: cast(EngineModelPlan, engine_section(results[model], trace, options.engine,
                                                        options.geometry.kv_bytes_per_token, counted))
            for model in options.engine.models
        }
        for model in options.engine.models:  # the smallest pool per target: planning/engine_working_set.py
            if stage is not None:
                stage(f"{model} model: working sets for {', '.join(f'{t:g}' for t in options.targets)} of its ceiling")
            report["engine_models"][model]["working_set"] = engine_working_set(
                results[model], trace, options.engine, counted, options.geometry.kv_bytes_per_token, options.targets)
    offload: list[OffloadRun] = []
    if options.engine.offload:  # offload tiers behind the models: planning/offload_plan.py
        offload = run_offload(trace, options.engine, results, options.engine.offload, options.geometry.kv_bytes_per_token,
                              counted, options.targets, stage=stage)
        report["offload"] = [cast(OffloadPlan, offload_section(run, trace, counted, options.geometry.kv_bytes_per_token,
                                                               options.engine.engine_block_size)) for run in offload]
    if options.routing is not None:  # the engine semantics on K workers, shared tier: planning/routing.py
        report["cluster"] = routing_section(run_routing(trace, options.routing), trace, options.routing, counted,
                                            units.bytes_per_block)
    if options.budgets is not None:  # the sizes the user named (--capacity, --gpu): planning/budgets.py
        report["budgets"] = cast(Budgets, budget_report(trace, made, counted, options.geometry, options.budgets, results,
                                                        options.targets))
        cost = report["budgets"].get("cost")
        if options.deployment is not None and options.budgets.prices is not None and cost is not None:
            why = replayable(trace, options.engine.engine_block_size)
            report["deployment"] = DeploymentNotAnswered(not_answered=why) if why else cast(DeploymentPlan, deployment_report(
                trace, options.engine, options.deployment, counted, options.geometry.kv_bytes_per_token,
                pricing(trace, counted, options.budgets.prices)[0], options.targets, stage))
    return PlanResult(report, curves, results, offload)


def plan_of_curves(trace: RequestTrace, options: PlanOptions, curves: Mapping[str, Curve], counted: np.ndarray,
                   distinct_blocks: int) -> Plan:
    """The curve sections of a plan (per semantics and their comparison, no time windows,
    engine models, cluster, budgets or bound) read from given curves: the sampled plan's
    estimates (:mod:`.sampled_curve`). O(curve points x log n)."""
    units = _Units(trace.block_size, options.geometry)
    report = _header(trace, options, units, counted, distinct_blocks)
    report["semantics"] = {name: _semantics_report(curve, options, units) for name, curve in curves.items()}
    if len(curves) == 2:
        report["comparison"] = _comparison(dict(curves), units, options.targets)
    return report


def _optimal(trace: RequestTrace, counted: np.ndarray, curves: dict[str, PrefixCurve], units: _Units,
             targets: Sequence[float]) -> dict[str, Any]:
    """Belady's bound at every working-set capacity of every semantics, beside each LRU, and
    Belady's own working set for each target (what a perfect policy would need)."""
    caps = {c.min_capacity_for(fraction_of_ceiling=t) for c in curves.values() for t in targets}
    rows = optimal_bound(trace, counted, [c for c in caps if c], units.bytes_per_block)
    for row in rows:
        row["lru_prefix_token_hit_rate"] = {name: float(c.prefix_token_hit_rate_at(row["capacity_blocks"]))
                                            for name, c in curves.items()}
    any_curve = next(iter(curves.values()))
    upper = max(any_curve.saturation_blocks, 1)
    sets = []
    for t in targets:
        need = exact_count(t, any_curve.ceiling_token_hits, "target")
        blocks = optimal_working_set(trace, counted, need, upper)
        sets.append({"fraction_of_ceiling": t, "belady": units.describe(blocks),
                     "lru": {name: units.describe(c.min_capacity_for(fraction_of_ceiling=t)) for name, c in curves.items()}})
    return {"at_lru_working_sets": rows, "working_sets": sets}


def _header(trace: RequestTrace, options: PlanOptions, units: _Units, counted: np.ndarray, distinct_blocks: int) -> Plan:
    """The plan's trace, model, counting and price sections (the rest is filled per semantics)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "stackdist", "version": __version__},
        "trace": cast(TraceInfo, {
            "source": trace.source,
            "requests": trace.n_requests,
            "blocks": trace.n_blocks,
            "distinct_blocks": distinct_blocks,
            "block_size_tokens": trace.block_size,
            "input_tokens": int(trace.input_length.sum()),
            "span_s": float(np.ptp(trace.timestamps_s)) if trace.n_requests else 0.0,
            "skipped_lines": trace.skipped,
            **options.extra,  # the format and the re-blocking the CLI read the trace with
        }),
        "model": {
            "name": options.geometry.name,
            "kv_bytes_per_token": options.geometry.kv_bytes_per_token,
            "bytes_per_block": units.bytes_per_block,
            "sliding_window_tokens": options.geometry.sliding_window,  # KV bytes above: full-attention layers only
            "sliding_bytes_per_token": options.geometry.sliding_bytes_per_token,
            "all_layers_bytes_per_token": options.geometry.all_layers_bytes_per_token,
        },
        "counted": {"requests": int(counted.sum()), "warmup_requests": options.warmup_requests, "warmup_seconds": options.warmup_seconds,
                    "window_requests": list(options.count_range) if options.count_range is not None else None},
        "prices_per_gb_usd": dict(PRICES_USD_PER_GB, **(options.prices_per_gb or {})),
        "semantics": {},
    }
