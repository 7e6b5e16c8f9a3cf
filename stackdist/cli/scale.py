"""Scale flags shared by ``curve``, ``tiers`` and ``plan``: SHARDS sampling and exact replay on
Dask, turned into a method value (:mod:`stackdist.methods.method`). No maths here: the methods
layer (:mod:`stackdist.methods`) does the work.

A sampled answer is reported with its error bar: the same answer under ``--sample-seeds``
independent hash seeds (``--seed``, ``--seed + 1``, ...), as min, max and standard deviation; the
JSON says ``"sampled": true`` with the rate.
"""

from __future__ import annotations

import argparse
from typing import Any

from .args import (
    bounded_int,
    finite_float,
)

__all__ = [
    "FLAG_LABELS",
    "SCALE_COMMANDS",
    "add_scale_arguments",
    "check_scale_flags",
    "is_sampled",
    "method_from",
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
    g.add_argument("--seed", type=bounded_int("--seed", 0), default=0,
                   help="the first hash seed (default 0); in plan also the routers' random draws (the random router, "
                   "kv-aware's and llm-d's ties, kv-aware's --router-temperature sampling)")
    g.add_argument("--dask", metavar="local[:N]|tcp://HOST:PORT",
                   help="exact replay of time chunks on a Dask cluster (needs the 'dask' extra)")


def is_sampled(args: argparse.Namespace) -> bool:
    """True when ``--sample-rate`` or ``--sample-size`` is given. O(1).

    >>> is_sampled(argparse.Namespace(sample_rate=None, sample_size=5)), is_sampled(argparse.Namespace())
    (True, False)
    """
    return getattr(args, "sample_rate", None) is not None or getattr(args, "sample_size", None) is not None


def check_scale_flags(args: argparse.Namespace) -> None:
    """``--sample-seeds`` and ``--seed`` set SHARDS sampling: given without ``--sample-rate`` or
    ``--sample-size`` they would be ignored, so they are a usage error naming the flag. O(1).

    >>> check_scale_flags(argparse.Namespace(sample_rate=None, sample_size=None, sample_seeds=3, seed=0))
    """
    from stackdist.errors import UsageError

    if is_sampled(args):
        return
    for flag, value, default in (("--sample-seeds", getattr(args, "sample_seeds", 3), 3), ("--seed", getattr(args, "seed", 0), 0)):
        if value != default:
            raise UsageError(f"{flag} sets SHARDS sampling's hash seeds: add --sample-rate R or --sample-size S (without "
                             "them the answer is exact and takes no seed).")


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
