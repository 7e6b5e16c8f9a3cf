"""stackdist: exact LRU hit curves for KV-cache capacity planning, from one replay.

A short tour. Stack distances (a cold access gets the sentinel ``COLD``):

>>> import stackdist
>>> stackdist.stack_distances([0, 1, 2, 0, 1, 2])[3:].tolist()
[3, 3, 3]

The exact LRU hit curve, every capacity at once (here ten 5011-token documents read twice,
hits counted in the second pass only):

>>> curve = stackdist.hit_curve(list(range(10)) * 2, [5011] * 20, window=(10, None))
>>> curve.hits_at([50109, 50110]).tolist()
[0, 10]
>>> curve.min_capacity_for(hit_rate=1.0)
50110

Two tiers (GPU + an inclusive CPU tier), every CPU capacity at once per GPU capacity:

>>> tier = stackdist.inclusive_tiers(list(range(10)) * 2, [5011] * 20, [21520], window=(10, None))[0]
>>> tier.misses_at([50109, 50110]).tolist()
[10, 0]

The package is laid out by concept (``docs/architecture.md``): :mod:`stackdist.traces`
(readers) -> :mod:`stackdist.serving` (what an engine does with requests) -> :mod:`stackdist.engine`
(replays, histograms, curves) -> :mod:`stackdist.planning` (answers in GiB and US$) ->
:mod:`stackdist.render` / :mod:`stackdist.cli`. This ``__init__`` only re-exports.

Request traces with prefix-cache semantics (``engine`` or ``per-access``):

>>> trace = stackdist.read_mooncake("data/traces/mooncake_synthetic_trace.jsonl")  # doctest: +SKIP
>>> plan = stackdist.PrefixCurve(stackdist.replay_requests(trace, "engine"))       # doctest: +SKIP
>>> plan.min_capacity_for(fraction_of_ceiling=0.9)                                  # doctest: +SKIP
"""

from .engine import (
    COLD,
    CurveSteps,
    HitCurve,
    StackDistanceStream,
    compare_organisations,
    dense_keys,
    engine_depths,
    exclusive_grid,
    exclusive_hits,
    hit_curve,
    inclusive_grid,
    inclusive_tiers,
    parse_window,
    stack_distances,
)
from .errors import TraceFormatError, UsageError
from .planning import (
    DEFAULT_MODEL,
    ModelGeometry,
    PrefixCurve,
    coverage_needs,
    from_hf_config,
    geometry_for,
    tier_plan,
)
from .serving import PrefixReplay, replay_requests, request_hits
from .traces import (
    AccessTrace,
    RequestTrace,
    chain_hashes,
    read_access_trace,
    read_mooncake,
    read_qwen,
    read_requests,
    read_token_ids,
    reblock,
)
from .version import __version__

__all__ = [
    "COLD",
    "AccessTrace",
    "CurveSteps",
    "DEFAULT_MODEL",
    "HitCurve",
    "ModelGeometry",
    "PrefixCurve",
    "PrefixReplay",
    "RequestTrace",
    "StackDistanceStream",
    "TraceFormatError",
    "UsageError",
    "__version__",
    "chain_hashes",
    "compare_organisations",
    "coverage_needs",
    "dense_keys",
    "engine_depths",
    "exclusive_grid",
    "exclusive_hits",
    "from_hf_config",
    "geometry_for",
    "hit_curve",
    "inclusive_grid",
    "inclusive_tiers",
    "parse_window",
    "read_access_trace",
    "read_mooncake",
    "read_qwen",
    "read_requests",
    "read_token_ids",
    "reblock",
    "replay_requests",
    "request_hits",
    "stack_distances",
    "tier_plan",
]
