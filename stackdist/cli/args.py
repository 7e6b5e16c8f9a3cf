"""Command-line argument parsing shared by the ``stackdist`` subcommands.

Every integer argument is bounded to int64 (or tighter) and every error names the flag (exit 2).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from stackdist.errors import INT64_MAX, UsageError

__all__ = ["InputPath", "OutputPath", "access_window", "bounded_int", "declared_paths", "finite_float", "fraction_list", "int_list", "parse_int", "warmup_accesses"]


class InputPath(str):
    """A path a command reads: ``type=InputPath`` on an argument declares it an input, so the
    output guard (:func:`declared_paths`) refuses an output that is this file.

    >>> isinstance(InputPath("t.csv"), str)
    True
    """

    __slots__ = ()


class OutputPath(str):
    """A path a command writes (``type=OutputPath``): checked before any work, never an input."""

    __slots__ = ()


def declared_paths(args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[str]]:
    """The outputs (``(flag, path)``) and inputs of parsed ``args``, read off the types their
    parsers declared (:class:`OutputPath`, :class:`InputPath`): a new flag cannot be forgotten.

    >>> declared_paths(argparse.Namespace(trace=InputPath("t.csv"), output=OutputPath("-"), points=5))
    ([('--output', '-')], ['t.csv'])
    """
    outputs: list[tuple[str, str]] = []
    inputs: list[str] = []
    for dest, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, OutputPath):
                outputs.append((f"--{dest.replace('_', '-')}", str(item)))
            elif isinstance(item, InputPath):
                inputs.append(str(item))
    return outputs, inputs


def parse_int(text: str, name: str, lo: int = 0, hi: int = INT64_MAX) -> int:
    """One integer in [lo, hi] (decimal, ``_`` separators and an exact ``1e6`` allowed); a
    :class:`UsageError` naming ``name`` otherwise.

    >>> parse_int("4096", "--gpu"), parse_int("1e6", "--gpu")
    (4096, 1000000)
    """
    raw = text.strip()
    value: int | None = None
    if len(raw) <= 40:
        try:
            value = int(raw)
        except ValueError:
            try:
                f = float(raw)
                if math.isfinite(f) and f == int(f) and "e" in raw.lower():
                    value = int(f)
            except (ValueError, OverflowError):
                value = None
    if value is None:
        raise UsageError(f"{name} must be an integer; got {text!r}.")
    if not lo <= value <= hi:
        top = "2^63-1" if hi == INT64_MAX else f"{hi:,}"
        raise UsageError(f"{name} must be an integer from {lo:,} to {top}; got {text!r}.")
    return value


def bounded_int(name: str, lo: int = 0, hi: int = INT64_MAX) -> Callable[[str], int]:
    """An argparse ``type=`` for an integer in [lo, hi] (argparse names the flag, exit 2)."""

    def convert(text: str) -> int:
        try:
            return parse_int(text, name, lo, hi)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc).replace(f"{name} must", "must")) from None

    convert.__name__ = "integer"
    return convert


def finite_float(name: str, lo: float = -math.inf, hi: float = math.inf, lo_open: bool = False) -> Callable[[str], float]:
    """An argparse ``type=`` for a finite number in [lo, hi] ((lo, hi] with ``lo_open``)."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number; got {text!r}") from None
        if not math.isfinite(value) or not (lo < value if lo_open else lo <= value) or value > hi:
            raise argparse.ArgumentTypeError(f"must be a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}]; got {text!r}")
        return value

    convert.__name__ = "number"
    return convert


def int_list(text: str, name: str) -> list[int]:
    """Non-negative int64 integers from ``"1,2,3"``; a :class:`UsageError` naming ``name`` otherwise.

    >>> int_list("0, 4096", "--capacities")
    [0, 4096]
    """
    parts = [v for v in text.split(",") if v.strip()]
    if not parts:
        raise UsageError(f"{name} must be a comma-separated list of non-negative integers; got {text!r}.")
    values = []
    for v in parts:
        try:
            values.append(parse_int(v, name))
        except UsageError:
            raise UsageError(f"{name} must be a comma-separated list of non-negative integers up to 2^63-1; "
                             f"got {text!r} ({v.strip()!r} is not one).") from None
    return values


def fraction_list(text: str, name: str) -> list[float]:
    """Fractions in (0, 1] from ``"0.9,0.99"``; a :class:`UsageError` naming ``name`` otherwise.

    >>> fraction_list("0.5,1", "--targets")
    [0.5, 1.0]
    """
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(not 0 < v <= 1 for v in values):
        raise UsageError(f"{name} must be a comma-separated list of fractions in (0, 1]; got {text!r}.")
    return values


def access_window(text: str | None, name: str = "--window") -> tuple[int | None, int | None] | None:
    """``START:STOP`` (Python slice rules, either may be empty) as a pair; a :class:`UsageError`
    naming ``name`` otherwise.

    >>> access_window("10:", "--window"), access_window("-2:", "--window")
    ((10, None), (-2, None))
    """
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) != 2:
        raise UsageError(f"{name} must look like START:STOP (either may be empty, negative counts from the end; "
                         f"write --window=-2: for a negative start); got {text!r}.")
    bound = -INT64_MAX - 1
    start, stop = (parse_int(p, name, bound) if p.strip() else None for p in parts)
    return start, stop


def warmup_accesses(text: str | None, n: int, name: str = "--warmup") -> int:
    """A warm-up as a count of accesses (``1000``) or a percentage of the trace (``10%``).

    >>> warmup_accesses("10%", 50), warmup_accesses("7", 50), warmup_accesses(None, 50)
    (5, 7, 0)
    """
    if text is None:
        return 0
    raw = text.strip()
    if raw.endswith("%"):
        try:
            pct = float(raw[:-1])
        except ValueError:
            pct = math.nan
        if not 0 <= pct <= 100:
            raise UsageError(f"{name} must be a count of accesses or a percentage from 0% to 100%; got {text!r}.")
        return min(n, math.ceil(pct * n / 100))
    try:
        return min(n, parse_int(raw, name))
    except UsageError:
        raise UsageError(f"{name} must be a count of accesses or a percentage like 10% (a duration like 10m needs a "
                         f"request trace: --format mooncake, qwen or tokens); got {text!r}.") from None
