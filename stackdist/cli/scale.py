"""Scale flags shared by ``curve``, ``tiers`` and ``plan``: SHARDS sampling and exact replay on
Dask, turned into a method value (:mod:`stackdist.methods.method`). No maths here: the methods
layer (:mod:`stackdist.methods`) does the work.

A sampled answer is reported with its error bar: the same answer under ``--sample-seeds``
independent hash seeds (``--seed``, ``--seed + 1``, ...), as min, max and standard deviation; the
JSON says ``"sampled": true`` with the rate.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stackdist.errors import UsageError

from .args import (
    bounded_int,
    finite_float,
)

__all__ = [
    "FLAG_LABELS",
    "SCALED_KEYS",
    "SCALE_COMMANDS",
    "add_scale_arguments",
    "is_sampled",
    "method_from",
    "read_request_trace",
    "require_sample",
    "rescale_report",
    "sampled_plan",
    "seeds_of",
    "trace_input",
]

SCALE_COMMANDS = ("curve", "tiers", "plan")


def add_scale_arguments(p: argparse.ArgumentParser) -> None:
    """The sampling and distributed-replay flags on one subcommand. O(1).

    >>> p = argparse.ArgumentParser(); add_scale_arguments(p); p.parse_args(["--sample-rate", "0.1"]).sample_seeds
    3
    """
    g = p.add_argument_group("scale: sampling (approximate, with error bars) and distributed replay (exact)")
    g.add_argument("--sample-rate", type=finite_float("--sample-rate", 0, 1, lo_open=True), metavar="R",
                   help="SHARDS: keep the keys whose hash falls under R (0 < R <= 1), scale distances by 1/R")
    g.add_argument("--sample-size", type=bounded_int("--sample-size", 1), metavar="S",
                   help="SHARDS fixed size: keep at most S keys (lowering the threshold as needed); bounded memory")
    g.add_argument("--sample-seeds", type=bounded_int("--sample-seeds", 1, 64), default=3, metavar="K",
                   help="hash seeds for the error bars (default 3; the first seed gives the answer)")
    g.add_argument("--seed", type=bounded_int("--seed", 0), default=0, help="the first hash seed (default 0)")
    g.add_argument("--dask", metavar="local[:N]|tcp://HOST:PORT",
                   help="exact replay of time chunks on a Dask cluster (needs the 'dask' extra)")


def is_sampled(args: argparse.Namespace) -> bool:
    """True when ``--sample-rate`` or ``--sample-size`` is given. O(1).

    >>> is_sampled(argparse.Namespace(sample_rate=None, sample_size=5)), is_sampled(argparse.Namespace())
    (True, False)
    """
    return getattr(args, "sample_rate", None) is not None or getattr(args, "sample_size", None) is not None


def seeds_of(args: argparse.Namespace) -> list[int]:
    """The hash seeds of a sampled run: ``--seed`` and the next ``--sample-seeds - 1``. O(K).

    >>> seeds_of(argparse.Namespace(seed=4, sample_seeds=3))
    [4, 5, 6]
    """
    return [args.seed + i for i in range(args.sample_seeds)]


def method_from(args: argparse.Namespace) -> Any:
    """The method value (:mod:`stackdist.methods.method`) the scale flags name. O(1).

    >>> method_from(argparse.Namespace(sample_rate=0.5, sample_size=None, sample_seeds=2, seed=1, dask=None))
    Sampled(rate=0.5, size=None, seeds=2, seed=1, cluster=None)
    """
    from stackdist.methods.method import method_of

    return method_of(getattr(args, "sample_rate", None), getattr(args, "sample_size", None),
                     getattr(args, "sample_seeds", 3), getattr(args, "seed", 0), getattr(args, "dask", None))


def trace_input(args: argparse.Namespace) -> Any:
    """The :class:`~stackdist.methods.curve.TraceInput` of ``curve``/``tiers``: the trace, its
    format, window and warm-up, errors naming the flags. O(1)."""
    from stackdist.methods.curve import TraceInput

    return TraceInput(args.trace, args.format, args.window, getattr(args, "warmup", None), FLAG_LABELS,
                      f"stackdist {args.command}")


FLAG_LABELS = ("--window", "--warmup", "--sample-rate", "--sample-size", "--dask")
"""What the library's errors call the window, the warm-up, the sample rate, the sample size and the cluster."""


def require_sample(kept: Sequence[int], total: int, args: argparse.Namespace, unit: str = "accesses") -> None:
    """Exit 1 when a seed's sample kept nothing (:func:`stackdist.methods.curve.require_sample`). O(seeds)."""
    from stackdist.methods.curve import require_sample as require

    require(kept, total, method_from(args), args.trace, unit, labels=FLAG_LABELS[2:4])


SCALED_KEYS = {"blocks", "tokens", "gib", "cumulative_blocks", "cost_usd", "total_cost_usd", "capacity_blocks",
               "capacity_gib", "saturation_blocks", "cold_blocks", "input_tokens"}
"""Report keys holding capacities, costs or block/token counts: divided by the rate."""
_INTEGRAL = {"blocks", "tokens", "cumulative_blocks", "capacity_blocks", "saturation_blocks", "cold_blocks", "input_tokens"}
_UNSCALED_SECTIONS = {"trace", "model", "counted", "prices_per_gb_usd", "tool", "schema_version", "sampling"}


def rescale_report(report: Any, rate: float, section: str = "") -> Any:
    """A plan of the sub-trace with capacities, costs and block/token counts divided by ``rate``
    (the sections describing the run are left alone). O(report size).

    >>> rescale_report({"semantics": {"working_set": [{"blocks": 3, "gib": 1.5}]}}, 0.5)
    {'semantics': {'working_set': [{'blocks': 6, 'gib': 3.0}]}}
    """
    if isinstance(report, dict):
        out = {}
        for key, value in report.items():
            if not section and key in _UNSCALED_SECTIONS:
                out[key] = value
            elif key in SCALED_KEYS:
                out[key] = _scaled(value, rate, key in _INTEGRAL)
            else:
                out[key] = rescale_report(value, rate, section or key)
        return out
    if isinstance(report, list):
        return [rescale_report(v, rate, section) for v in report]
    return report


def _scaled(value: Any, rate: float, integral: bool) -> Any:
    if isinstance(value, list):
        return [_scaled(v, rate, integral) for v in value]
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return value
    got = float(value) / rate
    return round(got) if integral else got


def read_request_trace(args: argparse.Namespace) -> Any:
    """``plan``'s request trace, one plain file or streamed
    (:func:`~stackdist.traces.stream_input.read_request_input`). O(trace)."""
    from stackdist.traces.stream_input import read_request_input

    return read_request_input(args.trace, args.format, args.block_size, args.skip_bad, args.partial_last_block)


def sampled_plan(args: argparse.Namespace, trace: Any, build: Callable[..., Any]) -> Any:
    """``plan``'s report: ``build(trace)``, or with ``--sample-*`` the plan of each seed's block
    sample (:func:`stackdist.traces.sampled.sample_request_trace`) scaled back by 1/R, the first
    seed's as the answer and the spread of the working sets over the seeds beside it."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from stackdist.engine.keys import unique_sorted
    from stackdist.engine.scale.estimate import spread
    from stackdist.traces.sampled import is_chained, sample_request_trace

    from .scale_plan import shards_adjusted

    if getattr(args, "dask", None):
        if is_sampled(args):
            raise UsageError("plan: --dask is exact; it takes no --sample-rate/--sample-size.")
        from .scale_plan import dask_plan

        return dask_plan(args, trace, build)
    if not is_sampled(args):
        return build(trace)
    from stackdist.serving.semantics import SEMANTICS  # the idealized ones: no engine model thins

    semantics = tuple(getattr(args, "semantics", SEMANTICS))  # parsed once, by --semantics' type
    if any(s not in SEMANTICS for s in semantics):
        raise UsageError(f"--sample-rate/--sample-size apply to --semantics engine, per-access or both; got {','.join(semantics)!r} "
                         "(an engine's own pool model does not thin with the keys).")
    reports, rates = [], []
    with ThreadPoolExecutor(2) as pool:  # hashing and thinning release the GIL: two seeds' samples at once
        samples = list(pool.map(lambda seed: sample_request_trace(trace, args.sample_rate, args.sample_size, seed),
                                seeds_of(args)))
    require_sample([sub.n_blocks for sub, _ in samples], trace.n_blocks, args, "prompt blocks")
    for sub, rate in samples:
        reports.append(shards_adjusted(rescale_report(build(sub), rate), trace, sub, rate))
        rates.append(rate)
    main = reports[0]
    main["trace"] = dict(main["trace"], blocks=trace.n_blocks, input_tokens=int(trace.input_length.sum()),
                         distinct_blocks=int(unique_sorted(trace.block_ids).size))
    bars: dict[str, Any] = {}
    for name, section in main.get("semantics", {}).items():
        rows = []
        for i, row in enumerate(section.get("working_set", [])):
            entry: dict[str, Any] = {"target": row.get("target")}
            for key in ("token_hit_rate", "fraction_of_ceiling"):
                values = [(r["semantics"][name]["working_set"][i].get(key) or {}).get("gib") for r in reports]
                entry[f"{key}_gib"] = spread(values)
            rows.append(entry)
        ceilings = [r["semantics"][name]["summary"].get("ceiling_token_hit_rate") for r in reports]
        bars[name] = {"working_set": rows, "ceiling_token_hit_rate": spread(ceilings)}
    main["sampled"] = True
    main["sampling"] = {"sampled": True, "sample_rate": rates[0], "sample_rates": rates, "sample_size": args.sample_size,
                        "seeds": seeds_of(args), "chained": is_chained(trace), "spread": bars,
                        "correction": "SHARDS_adj on the prefix token hits: ceilings, working sets, the curve's "
                                      "prefix_token_hit_rate, the token-basis tier plan, the token hit rates of both tier "
                                      "plans and the engine vs per-access comparison; coverage (and the coverage-basis "
                                      "tier sizes) and the time windows are the sub-trace's ratio estimates",
                        "note": "capacities, costs and block counts are estimates scaled by 1/R; coverage is biased low"}
    print(f"stackdist plan: sampled at rate {rates[0]:.6g} ({len(rates)} seeds): capacities are estimates; "
          "the JSON's 'sampling' section has the error bars", file=sys.stderr)
    if not main["sampling"]["chained"]:
        print("stackdist plan: warning: the block ids are not prefix-chained (a block id with two parents), so the "
              "block sample's prefix metrics carry an error beyond SHARDS' (see stackdist/traces/sampled.py)",
              file=sys.stderr)
    return main
