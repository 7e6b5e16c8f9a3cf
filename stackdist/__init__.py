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
:mod:`stackdist.methods` (curve, tiers, plan of an input by a method: exact, sampled,
distributed) -> :mod:`stackdist.render` / :mod:`stackdist.cli`. This ``__init__`` only re-exports, lazily
(PEP 562): ``import stackdist`` loads no numpy or numba; each name imports its subpackage
on first use, so ``stackdist --help`` starts fast while ``from stackdist import hit_curve``,
``stackdist.hit_curve`` and ``dir(stackdist)`` work as before.

The same question by another method: a file read through SHARDS' seeded hash filter (every
answer an estimate, with the seeds' spread), or replayed exactly on a Dask cluster the caller owns;
the result type is the same (``Distributed(client)`` takes a ``distributed.Client``):

>>> path = "data/traces/mooncake_conversation_trace.jsonl"
>>> exact = stackdist.curve_of(stackdist.TraceInput(path, "mooncake"))                              # doctest: +SKIP
>>> sampled = stackdist.curve_of(stackdist.TraceInput(path, "mooncake"), stackdist.Sampled(rate=0.1))  # doctest: +SKIP
>>> exact.curve.min_capacity_for(hit_rate=0.3), sampled.curve.min_capacity_for(hit_rate=0.3)        # doctest: +SKIP

Request traces with prefix-cache semantics (``engine`` or ``per-access``):

>>> trace = stackdist.read_mooncake("data/traces/mooncake_synthetic_trace.jsonl")  # doctest: +SKIP
>>> plan = stackdist.PrefixCurve(stackdist.replay_requests(trace, "engine"))       # doctest: +SKIP
>>> plan.min_capacity_for(fraction_of_ceiling=0.9)                                  # doctest: +SKIP
"""

from typing import TYPE_CHECKING, Any

from .errors import TraceFormatError, UsageError
from .version import __version__

if TYPE_CHECKING:  # the eager form, for type checkers
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
    from .methods import Distributed, Exact, Sampled, TraceInput, curve_of, tiers_of
    from .planning import (
        DEFAULT_MODEL,
        ModelGeometry,
        PrefixCurve,
        coverage_needs,
        from_hf_config,
        geometry_for,
    )
    from .planning.tier_plan import tier_plan
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


def __getattr__(name: str) -> Any:
    """PEP 562: import the subpackage that defines ``name`` on first use, then keep it here."""
    homes = {
        "engine": ("COLD", "CurveSteps", "HitCurve", "StackDistanceStream", "compare_organisations", "dense_keys",
                   "engine_depths", "exclusive_grid", "exclusive_hits", "hit_curve", "inclusive_grid",
                   "inclusive_tiers", "parse_window", "stack_distances"),
        "planning": ("DEFAULT_MODEL", "ModelGeometry", "PrefixCurve", "coverage_needs", "from_hf_config",
                     "geometry_for", "tier_plan"),
        "methods": ("Distributed", "Exact", "Sampled", "TraceInput", "curve_of", "tiers_of"),
        "serving": ("PrefixReplay", "replay_requests", "request_hits"),
        "traces": ("AccessTrace", "RequestTrace", "chain_hashes", "read_access_trace", "read_mooncake", "read_qwen",
                   "read_requests", "read_token_ids", "reblock"),
    }
    import importlib

    if name in ("cli", "engine", "methods", "output", "planning", "render", "serving", "traces"):
        return importlib.import_module(f"{__name__}.{name}")
    for package, names in homes.items():
        if name in names:
            value = getattr(importlib.import_module(f"{__name__}.{package}"), name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names (``__all__``) and the module's own attributes."""
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "COLD",
    "DEFAULT_MODEL",
    "AccessTrace",
    "CurveSteps",
    "Distributed",
    "Exact",
    "HitCurve",
    "ModelGeometry",
    "PrefixCurve",
    "PrefixReplay",
    "RequestTrace",
    "Sampled",
    "StackDistanceStream",
    "TraceFormatError",
    "TraceInput",
    "UsageError",
    "__version__",
    "chain_hashes",
    "compare_organisations",
    "coverage_needs",
    "curve_of",
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
    "tiers_of",
]
