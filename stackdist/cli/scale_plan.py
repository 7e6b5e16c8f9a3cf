"""The request-trace side of ``plan``'s scale flags: SHARDS_adj on a sampled plan
(:func:`shards_adjusted`) and the exact plan on Dask (:func:`dask_plan`). No maths here: the
estimate is :func:`stackdist.engine.scale.sampling.weighted_estimate`, the distributed replay
:func:`stackdist.engine.scale.distributed.distributed_request_depths`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["dask_plan", "shards_adjusted"]


def shards_adjusted(report: dict[str, Any], trace: Any, sub: Any, rate: float) -> dict[str, Any]:
    """A sampled plan (already scaled by 1/R) with SHARDS_adj on its prefix token hits, per
    semantics: the ceiling token hit rate, the working sets (token hit rate and fraction of the
    ceiling targets) and the curve's ``prefix_token_hit_rate`` are re-estimated from the
    sub-trace's effective depths with the block tokens the sample misses (or over-counts: a hot
    prefix block sampled or not) added at the smallest depth
    (:func:`~stackdist.engine.scale.sampling.weighted_estimate`), over the full trace's exact
    input tokens. The claim that makes it valid is in :mod:`stackdist.traces.sampled`.
    O(sampled blocks log) per semantics."""
    from stackdist.engine.scale.sampling import weighted_estimate
    from stackdist.planning import warmup_mask
    from stackdist.serving.semantics import replay_requests

    counted_info = report.get("counted", {})
    window = counted_info.get("window_requests")  # --window START:STOP, when the planner reports one
    counted = warmup_mask(trace, int(counted_info.get("warmup_requests") or 0), float(counted_info.get("warmup_seconds") or 0.0),
                          *([tuple(window)] if window else []))
    full_blocks: Any
    sub_blocks: Any
    if counted.all():  # the common case: no masks over the whole trace
        full_blocks, sub_blocks = slice(None), slice(None)
        n_counted, counted_tokens = trace.n_blocks, float(trace.block_tokens.sum())
    else:
        full_blocks, sub_blocks = np.repeat(counted, trace.blocks_per_request()), np.repeat(counted, sub.blocks_per_request())
        n_counted, counted_tokens = int(full_blocks.sum()), float(trace.block_tokens[full_blocks].sum())
    input_tokens = max(int(trace.input_length[counted].sum()), 1)
    bytes_per_block, block_size = float(report["model"]["bytes_per_block"]), int(trace.block_size)
    estimates = {}
    for name, section in report.get("semantics", {}).items():
        replay = replay_requests(sub, name)
        est = weighted_estimate(replay.effective[sub_blocks], sub.block_tokens[sub_blocks], rate, n_counted, counted_tokens)
        _adjust_section(section, est, input_tokens, bytes_per_block, block_size)
        for key in ("tier_plan", "tier_plan_by_coverage"):
            if key in section:
                _adjust_tier_plan(section[key], est, input_tokens, bytes_per_block)
        estimates[name] = est
    if "comparison" in report and {"engine", "per-access"} <= set(estimates):
        _adjust_comparison(report["comparison"], report["semantics"], estimates, input_tokens,
                           lambda b: {"blocks": b, "tokens": b * block_size, "gib": b * bytes_per_block / 2**30})
    return report


def _adjust_section(section: dict[str, Any], est: Any, input_tokens: int, bytes_per_block: float, block_size: int) -> None:
    """One semantics' report section re-read from the SHARDS_adj estimate ``est`` (in place)."""
    ceiling = float(est.hit_size_at(est.values[-1])) if est.values.size else 0.0

    def smallest(need: float) -> dict[str, Any] | None:
        blocks = _smallest_reaching(est, need, input_tokens)
        return None if blocks is None else {"blocks": blocks, "tokens": blocks * block_size, "gib": blocks * bytes_per_block / 2**30}

    section["summary"]["ceiling_token_hit_rate"] = ceiling / input_tokens
    if est.values.size:
        section["summary"]["ceiling_block_hit_rate"] = float(est.hits_at(est.values[-1])) / max(float(est.n_accesses), 1.0)
    section["summary"]["shards_adj_tokens"] = float(est.total_size - est.sampled_size_weight)
    for row in section.get("working_set", []):
        target = float(row["target"])
        for kind, need in (("token_hit_rate", target * input_tokens), ("fraction_of_ceiling", target * ceiling)):
            row[kind] = smallest(need)
            reasons = row.setdefault("unreachable", {})
            if row[kind] is not None:
                reasons.pop(kind, None)
            elif kind == "token_hit_rate":  # the sub-trace's reason quotes the sub-trace's ceiling: restate it
                reasons[kind] = {"reason": f"no capacity reaches a prefix token hit rate of {target:.2%}: the ceiling "
                                           f"(an infinite cache) is estimated at {ceiling / input_tokens:.2%} (SHARDS_adj "
                                           "over the sample), because the first use of every block misses"}
            elif kind not in reasons:
                reasons[kind] = {"reason": f"the sampled estimate (SHARDS_adj) does not reach {target:g}"}
    table = section.get("curve")
    if table and "capacity_blocks" in table:
        caps = np.asarray(table["capacity_blocks"], np.int64)
        table["prefix_token_hit_rate"] = (np.asarray(est.hit_size_at(caps), np.float64) / input_tokens).tolist()


def _smallest_reaching(est: Any, need: float, input_tokens: int) -> int | None:
    """The smallest capacity (blocks) whose estimated prefix token hits reach ``need``."""
    if need <= 0:
        return 0
    values = est.values
    hits = np.asarray(est.hit_size_at(values), np.float64) if values.size else np.zeros(0)
    i = int(np.searchsorted(hits, need - 1e-9 * input_tokens, side="left"))
    return int(values[i]) if i < hits.size else None


def _adjust_tier_plan(plan: dict[str, Any], est: Any, input_tokens: int, bytes_per_block: float) -> None:
    """A tier plan re-read from the estimate: on the token basis each tier's cumulative size is
    the smallest capacity reaching its fraction of the estimated ceiling (bands and costs follow);
    on the coverage basis the sizes stay (coverage is the sub-trace's) and the token hit rates
    at them are re-estimated. In place."""
    ceiling = float(est.hit_size_at(est.values[-1])) if est.values.size else 0.0
    previous, total = 0, 0.0
    for tier in plan.get("tiers", []):
        if plan.get("basis") == "tokens":
            cumulative = _smallest_reaching(est, float(tier["target"]) * ceiling, input_tokens) or 0
            price = float(plan["prices_per_gb_usd"][tier["tier"]])
            size = max(cumulative - previous, 0)
            tier.update(cumulative_blocks=cumulative, blocks=size, gib=size * bytes_per_block / 2**30,
                        cost_usd=size * bytes_per_block / 1e9 * price)
            previous = max(previous, cumulative)
        total += float(tier["cost_usd"])
        tier["token_hit_rate_at_cumulative"] = float(est.hit_size_at(int(tier["cumulative_blocks"]))) / input_tokens
    plan["total_cost_usd"] = total


def _adjust_comparison(comparison: dict[str, Any], sections: dict[str, Any], estimates: dict[str, Any], input_tokens: int,
                       describe: Callable[[int], dict[str, Any]]) -> None:
    """The engine vs per-access comparison re-read from the corrected working sets and estimates. In place."""
    engine, per_access = estimates["engine"], estimates["per-access"]
    n_blocks = max(float(engine.n_accesses), 1.0)
    for row in comparison.get("working_sets", []):
        pick: dict[str, Any] = {name: next((w.get("fraction_of_ceiling") for w in sections[name]["working_set"]
                                            if float(w["target"]) == float(row["fraction_of_ceiling"])), None)
                                for name in ("engine", "per-access")}
        row["engine"], row["per_access"] = pick["engine"], pick["per-access"]
        e = pick["engine"]["blocks"] if pick["engine"] else None
        p = pick["per-access"]["blocks"] if pick["per-access"] else None
        row["per_access_over_engine"] = (p / e) if e and p is not None else None
    for row, ws in zip(comparison.get("per_access_block_hit_rate_at_engine_ws", []), comparison.get("working_sets", [])):
        cap = ws["engine"]["blocks"] if ws["engine"] else None
        row.update(per_access_block_hit_rate=None if cap is None else float(per_access.hits_at(cap)) / n_blocks,
                   per_access_prefix_token_hit_rate=None if cap is None else float(per_access.hit_size_at(cap)) / input_tokens,
                   engine_prefix_token_hit_rate=None if cap is None else float(engine.hit_size_at(cap)) / input_tokens)
    caps = np.union1d(engine.values, per_access.values)
    if caps.size:
        gap = (np.asarray(engine.hit_size_at(caps), np.float64) - np.asarray(per_access.hit_size_at(caps), np.float64)) / input_tokens
        worst = int(np.argmax(np.abs(gap)))
        comparison["max_prefix_token_hit_rate_gap"] = {"engine_minus_per_access": float(gap[worst]),
                                                       "at": describe(int(caps[worst]))}


def dask_plan(args: argparse.Namespace, trace: Any, build: Callable[..., Any]) -> Any:
    """``plan --dask``: the engine and per-access replays of the request trace cut into time
    chunks of whole requests, each replayed on a worker and merged
    (:func:`~stackdist.engine.scale.distributed.distributed_request_depths`), handed to the
    planner as made; the plan equals the one-process plan (the engines' own models, routing and
    Belady's bound, when asked for, run here as usual)."""
    from stackdist.engine import kernels
    from stackdist.engine.scale.distributed import (
        close,
        connect,
        dask_map,
        distributed_request_depths,
    )
    from stackdist.serving.semantics import SEMANTICS, PrefixReplay

    wanted = [s for s in SEMANTICS if s in args.semantics]  # parsed once, by --semantics' type ("all" included)
    client = connect(args.dask)
    try:
        workers = max(1, len(client.nthreads()))
        replays = {}
        for semantics in wanted:
            depths = distributed_request_depths(trace.block_ids, trace.offsets, semantics, dask_map(client), max(2, workers))
            replays[semantics] = PrefixReplay(trace, semantics, depths, kernels.segment_running_max(depths, trace.offsets))
    finally:
        close(client)
    report = build(trace, replays)
    report["dask"] = {"scheduler": args.dask, "workers": workers, "chunks": max(2, workers), "semantics": wanted}
    return report
