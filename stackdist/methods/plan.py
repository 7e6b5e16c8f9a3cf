"""The plan of a request trace *by a method*: one call, one typed :class:`~stackdist.planning.plan.PlanResult`.

- :class:`~.method.Exact`: :func:`~stackdist.planning.plan.plan_of_replays`, one replay per
  semantics in this process.
- :class:`~.method.Distributed`: the same plan, each curve semantics (engine, per-access)
  replayed in time chunks on a Dask cluster and merged
  (:func:`~stackdist.engine.scale.distributed.distributed_request_depths`, equal to one
  process's replay); the engine models (vllm, sglang: one pool whose evictions depend on every
  earlier request), routing and Belady's bound run in this process, and the plan's ``dask``
  section says which ran where. A client passed in is the caller's and is never closed; an
  address is opened for the call and closed after it.
- :class:`~.method.Sampled`: one plan built from each seed's estimate
  (:mod:`stackdist.planning.sampled_curve`, where the estimator is proved): the first seed's
  plan is the answer, and ``sampling.spread`` holds the error bar (min, max and standard
  deviation over the seeds) of every number of its ``semantics`` and ``comparison`` sections,
  in the same shape. The counts and the ceilings are exact (one pass over the whole trace); what
  cannot be estimated from a block sample is left out, with the reason in ``sampling.omitted``:
  the time windows; the engine models, routing, budgets and Belady's bound are refused
  (:class:`~stackdist.errors.UsageError`) since their pools do not thin with the blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from stackdist.errors import UsageError, require_data
from stackdist.planning.plan import (
    PlanOptions,
    PlanResult,
    plan_of_curves,
    plan_of_replays,
    warmup_mask,
)
from stackdist.planning.sampled_curve import sampled_curves
from stackdist.planning.schema import Plan, SamplingInfo
from stackdist.traces import RequestTrace

from .method import EXACT, Distributed, Method, Sampled

__all__ = ["ESTIMATOR", "plan"]

ESTIMATOR = ("SHARDS block sample: each block's depth is its known prefix (exact) plus the sampled other blocks "
             "since its last use over R; a request's coverage is the depth of its k-th reused block, whose last use "
             "is found exactly; SHARDS_adj to the exact ceiling (proof: stackdist/planning/sampled_curve.py)")
"""One line naming the sampled plan's estimator (the JSON's ``sampling.estimator``)."""

EXACT_PARTS = ("trace", "model", "counted", "requests", "blocks", "cold_blocks", "input_tokens", "ceiling_block_hit_rate",
               "ceiling_reuse_hit_rate", "ceiling_token_hit_rate", "n_requests", "n_requests_with_reuse")
"""What a sampled plan reports exactly (the whole trace is read and passed over once)."""


def plan(trace: RequestTrace, options: PlanOptions, method: Method = EXACT,
         progress: Callable[[str], Any] | None = None, stage: Callable[[str], None] | None = None) -> PlanResult:
    """The plan of ``trace`` by ``method``; ``progress(label)`` makes a progress bar for a
    long replay (or None), ``stage(label)`` hears each engine model's run start. O(blocks log distinct) exact; O(blocks + S log S) sampled.

    >>> t = RequestTrace.from_blocks([[1, 2, 3], [1, 2, 4], [1, 2, 3]], block_size=4)
    >>> exact = plan(t, PlanOptions()).plan
    >>> sampled = plan(t, PlanOptions(), Sampled(rate=1.0, seeds=2)).plan
    >>> sampled["semantics"]["engine"]["working_set"] == exact["semantics"]["engine"]["working_set"]
    True
    """
    if isinstance(method, Distributed):
        return _distributed(trace, options, method, progress, stage)
    if isinstance(method, Sampled):
        return PlanResult(_sampled(trace, options, method))
    return plan_of_replays(trace, options, None, progress, stage)


def _distributed(trace: RequestTrace, options: PlanOptions, method: Distributed,
                 progress: Callable[[str], Any] | None, stage: Callable[[str], None] | None) -> PlanResult:
    """The exact plan with the curve semantics replayed on the cluster; equal to one process's."""
    from stackdist.engine import kernels
    from stackdist.engine.scale.distributed import (
        close,
        connect,
        dask_map,
        distributed_request_depths,
    )
    from stackdist.serving.semantics import PrefixReplay

    own = isinstance(method.client, str)
    client = connect(method.client) if own else method.client
    try:
        workers = max(1, len(client.nthreads()))
        replays = {}
        for semantics in options.semantics:
            depths = distributed_request_depths(trace.block_ids, trace.offsets, semantics, dask_map(client), max(2, workers))
            replays[semantics] = PrefixReplay(trace, semantics, depths, kernels.segment_running_max(depths, trace.offsets))
    finally:
        if own:
            close(client)
    result = plan_of_replays(trace, options, replays, progress, stage)
    local = list(options.engine.models)
    result.plan["dask"] = {"scheduler": method.client if own else repr(method.client), "workers": workers,
                           "chunks": max(2, workers), "semantics": list(options.semantics), "local": local,
                           "local_reason": ("each engine model is one pool whose evictions depend on every earlier "
                                            "request: one sequential simulation, run in this process") if local else None}
    return result


def _sampled(trace: RequestTrace, options: PlanOptions, method: Sampled) -> Plan:
    """The sampled plan: one plan per seed from its estimate, the first with the others' spread."""
    refused = [(bool(options.engine.models), "the engines' own models (vllm, sglang)"),
               (options.routing is not None, "workers and a shared tier"),
               (options.budgets is not None, "capacity budgets"),
               (options.optimal, "Belady's bound")]
    for asked, what in refused:
        if asked:
            raise UsageError(f"a sampled plan cannot estimate {what}: their pools and schedules do not thin with the "
                             "sampled blocks; drop sampling for them")
    counted = warmup_mask(trace, options.warmup_requests, options.warmup_seconds, options.count_range)
    per_seed, rates, counts = sampled_curves(trace, counted, method.rate, method.seed_list(), options.coverage_target,
                                             method.size)
    how = f"a sample rate of {method.rate:g}" if method.size is None else f"a sample size of {method.size}"
    total = int(np.diff(trace.offsets)[counted].sum())
    for seed, kept, curves in zip(method.seed_list(), counts.sampled_blocks, per_seed, strict=True):
        require_data(kept, trace.source, f"{how} (seed {seed}) kept none of the {total:,} prompt blocks: raise the "
                     "rate or the size, or drop sampling for the exact answer")
        first = next(iter(curves.values()))
        require_data(int(first.saturation_blocks > 0 or not first.ceiling_token_hits), trace.source,
                     f"{how} (seed {seed}) kept none of the reused prompt blocks: raise the rate or the size, or drop "
                     "sampling for the exact answer")
    plans = [plan_of_curves(trace, options, {name: curves[name] for name in options.semantics}, counted,
                            counts.distinct_blocks) for curves in per_seed]
    main = plans[0]
    omitted = {}
    if options.window_seconds:
        omitted["time_windows"] = ("a time window's working set is a quantile of the window's own depths: the "
                                   "per-window samples are too thin to estimate it with a known error; drop sampling "
                                   "for the time windows")
    sampling: SamplingInfo = {
        "method": "sampled", "sample_rate": rates[0], "sample_rates": rates, "sample_size": method.size,
        "seeds": method.seed_list(), "chained": True, "sampled_keys": counts.sampled_keys,
        "sampled_blocks": counts.sampled_blocks, "estimator": ESTIMATOR, "exact": list(EXACT_PARTS),
        "resolution_blocks": int(np.ceil(1 / rates[0])),
        "spread": {"semantics": _spread([p["semantics"] for p in plans]),
                   **({"comparison": _spread([p["comparison"] for p in plans])} if "comparison" in main else {})},
        "omitted": omitted,
    }
    main["sampled"] = True
    main["sampling"] = sampling
    return main


def _spread(values: Sequence[Any]) -> Any:
    """The same tree as each of ``values`` (one per seed), every number replaced by its spread
    over the seeds (min, max, std; ``unreachable_seeds`` where some seed has None); strings
    and booleans are dropped. O(size of a tree x seeds).

    >>> _spread([{"a": [1, None], "b": "x"}, {"a": [3, 2], "b": "x"}])
    {'a': [{'min': 1.0, 'max': 3.0, 'std': 1.0}, {'min': 2.0, 'max': 2.0, 'std': 0.0, 'unreachable_seeds': 1}]}
    """
    first = next((v for v in values if v is not None), None)
    if isinstance(first, Mapping):
        out = {}
        for key in first:
            got = _spread([v.get(key) if isinstance(v, Mapping) else None for v in values])
            if got is not None:
                out[key] = got
        return out or None
    if isinstance(first, list):
        length = max(len(v) for v in values if isinstance(v, list))
        return [_spread([v[i] if isinstance(v, list) and i < len(v) else None for v in values]) for i in range(length)]
    if isinstance(first, bool) or not isinstance(first, (int, float, np.integer, np.floating)):
        return None
    numbers = [float(v) for v in values if v is not None]
    out = {"min": min(numbers), "max": max(numbers), "std": round(float(np.std(numbers)), 12)}
    if len(numbers) < len(values):
        out["unreachable_seeds"] = len(values) - len(numbers)
    return out
