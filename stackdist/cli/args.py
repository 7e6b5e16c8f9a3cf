"""Command-line argument parsing shared by the ``stackdist`` subcommands.

Every integer argument is bounded to int64 (or tighter) and every error names the flag (exit 2).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stackdist.errors import INT64_MAX, UsageError
from stackdist.traces.counting import (
    access_window,
    parse_int,
    resolve_window,
    warmup_accesses,
    warmup_count,
    window_spec,
)

__all__ = ["SIZE_HELP", "WARMUP_HELP", "WINDOW_HELP", "InputPath", "InputPaths", "OutputPath", "Size", "access_window",
           "add_format_argument", "bounded_int", "declared_paths", "duration", "finite_float", "fraction",
           "fraction_arg", "fraction_list", "int_list", "one_trace", "parse_int", "resolve_sizes", "resolve_window",
           "size_list", "warmup_accesses", "warmup_count", "window_spec"]


class InputPath(str):
    """A path a command reads: ``type=InputPath`` on an argument declares it an input, so the
    output guard (:func:`declared_paths`) refuses an output that is this file.

    >>> isinstance(InputPath("t.csv"), str)
    True
    """

    __slots__ = ()


class InputPaths(InputPath):
    """Several input files given to one argument (the shell's expansion of ``part-*.csv``, say),
    read as one trace in their order: a str of the names joined by spaces (for messages and
    reports) that keeps them in :attr:`files`, which the readers
    (:func:`~stackdist.traces.stream_input.expand_inputs`) expand.

    >>> p = InputPaths.of(["a.csv", "b.csv"]); str(p), p.files
    ('a.csv b.csv', ('a.csv', 'b.csv'))
    """

    files: tuple[str, ...] = ()

    @classmethod
    def of(cls, files: Sequence[str]) -> InputPaths:
        """The files as one argument. O(files)."""
        joined = cls(" ".join(files))
        joined.files = tuple(str(f) for f in files)
        return joined


def one_trace(paths: Sequence[InputPath]) -> InputPath:
    """The ``trace`` argument of a command that takes one or more files: the one path, or the
    files as one :class:`InputPaths`. O(files).

    >>> one_trace([InputPath("t.csv")]), one_trace([InputPath("a.csv"), InputPath("b.csv")]).files
    ('t.csv', ('a.csv', 'b.csv'))
    """
    return paths[0] if len(paths) == 1 else InputPaths.of(paths)


def add_format_argument(p: argparse.ArgumentParser, help: str, kind: str | None = None, line_records: bool | None = None,
                        default: str | None = None) -> None:
    """A command's ``--format``: the registered formats (:mod:`stackdist.traces.formats`) of
    ``kind`` / ``line_records`` as its choices and help; another name is a usage error (exit 2)
    naming the flag, the allowed names and the closest one. O(formats).

    >>> p = argparse.ArgumentParser(); add_format_argument(p, "the format", kind="requests")
    >>> p.parse_args(["--format", "qwen"]).format
    'qwen'
    """
    from stackdist.traces.formats import format_help, format_names, get

    def trace_format(text: str) -> str:
        try:
            return get(text.strip().lower() or text, kind, line_records).name  # any case: MOONCAKE is mooncake
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    p.add_argument("--format", type=trace_format, choices=format_names(kind, line_records), default=default,
                   metavar="{" + ",".join(format_names(kind, line_records)) + "}",
                   help=f"{help}: {format_help(kind, line_records)}".replace("%", "%%"))


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
            elif isinstance(item, InputPaths):
                inputs += item.files
            elif isinstance(item, InputPath):
                inputs.append(str(item))
    return outputs, inputs


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


def fraction(text: str, name: str, lo_open: bool = True) -> float:
    """A fraction in (0, 1] (``[0, 1]`` without ``lo_open``) written ``0.9`` or ``90%``; a
    :class:`UsageError` naming ``name`` otherwise. O(1).

    >>> fraction("90%", "--coverage"), fraction("0.25", "--coverage"), fraction("0%", "--x", lo_open=False)
    (0.9, 0.25, 0.0)
    """
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not (0 < value <= 1 if lo_open else 0 <= value <= 1):
        span = "(0, 1]" if lo_open else "[0, 1]"
        raise UsageError(f"{name} must be a fraction in {span} or a percentage (0.9 or 90%); got {text!r}.")
    return value


def fraction_arg(name: str, lo_open: bool = True) -> Callable[[str], float]:
    """An argparse ``type=`` for :func:`fraction` (argparse names the flag, exit 2)."""

    def convert(text: str) -> float:
        try:
            return fraction(text, name, lo_open)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc).replace(f"{name} must", "must")) from None

    convert.__name__ = "fraction"
    return convert


def fraction_list(text: str, name: str) -> list[float]:
    """Fractions in (0, 1] from ``"0.9,0.99"`` or ``"90%,99%"``; a :class:`UsageError` naming
    ``name`` otherwise. O(items).

    >>> fraction_list("0.5,1", "--targets"), fraction_list("90%, 0.99", "--targets")
    ([0.5, 1.0], [0.9, 0.99])
    """
    parts = [v for v in text.split(",") if v.strip()]
    try:
        values = [fraction(v, name) for v in parts]
    except UsageError:
        values = []
    if not values:
        raise UsageError(f"{name} must be a comma-separated list of fractions in (0, 1] or percentages "
                         f"(0.9,0.99 or 90%,99%); got {text!r}.")
    return values


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str, name: str, example: str = "10m") -> float:
    """Seconds from a duration with its unit (``90s``, ``10m``, ``1.5h``, ``250ms``, ``1d``); a bare
    number is a :class:`UsageError` naming ``name`` with an example (it would be ambiguous). O(1).

    >>> duration("10m", "--every"), duration("1.5h", "--every"), duration("250ms", "--every")
    (600.0, 5400.0, 0.25)
    >>> duration("10", "--every")
    Traceback (most recent call last):
    ...
    stackdist.errors.UsageError: --every needs a unit: write --every 10s (or 10m, 10h); got '10'.
    """
    raw = text.strip().lower()
    match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)", raw)
    if match and not match.group(2):
        number = match.group(1)
        raise UsageError(f"{name} needs a unit: write {name} {number}s (or {number}m, {number}h); got {text!r}.")
    value = math.nan
    if match and match.group(2) in _DURATION_UNITS:
        value = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{name} must be a duration with its unit (s, m, h; e.g. {name} {example}); got {text!r}.")
    return value


SIZE_HELP = ("a bare integer is {unit}; or give a unit: GiB, TiB, GB, TB, MiB... (bytes of KV cache: needs "
             "--model), tokens, blocks (of the trace), pages (16-token engine pages); K, M, G multiply counts "
             "(2Mtokens)")

_BYTE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}
_COUNT_UNITS = {"token": "tokens", "tokens": "tokens", "block": "blocks", "blocks": "blocks", "page": "pages",
                "pages": "pages"}
_MULTIPLIERS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


@dataclass(frozen=True)
class Size:
    """One capacity as written: ``unit`` is ``""`` (a bare integer: the command's own unit),
    ``bytes``, ``tokens``, ``blocks`` or ``pages``; ``amount`` in that unit."""

    text: str
    unit: str
    amount: int


def size_list(text: str, name: str) -> list[Size]:
    """Comma-separated capacities, each a bare non-negative integer or a number with a unit
    (:data:`SIZE_HELP`); a :class:`UsageError` naming ``name`` otherwise. O(items).

    >>> [(s.unit, s.amount) for s in size_list("4096, 2GiB, 1.5Mtokens, 300blocks, 8pages", "--capacities")]
    [('', 4096), ('bytes', 2147483648), ('tokens', 1500000), ('blocks', 300), ('pages', 8)]
    """
    parts = [v.strip() for v in text.split(",") if v.strip()]
    if not parts:
        raise UsageError(f"{name} must be a comma-separated list of sizes; got {text!r}.")
    out = []
    for part in parts:
        match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)", part)
        size = None
        if match and not match.group(2):
            size = Size(part, "", parse_int(part, name))
        elif match:
            value, unit = float(match.group(1)), match.group(2).lower()
            if not value <= INT64_MAX:  # inf (1e400GiB) or beyond any size
                unit = "too large"
            if unit in _BYTE_UNITS:
                size = Size(part, "bytes", math.floor(value * _BYTE_UNITS[unit]))
            for word, kind in _COUNT_UNITS.items():
                if unit.endswith(word) and unit[: -len(word)] in _MULTIPLIERS:
                    amount = value * _MULTIPLIERS[unit[: -len(word)]]
                    size = Size(part, kind, int(amount)) if amount == int(amount) else None
        if size is None or not 0 <= size.amount <= INT64_MAX:
            units = SIZE_HELP.format(unit="the command's own unit")
            raise UsageError(f"{name} must be a comma-separated list of sizes ({units}); got {part!r}.")
        out.append(size)
    return out


def resolve_sizes(sizes: Sequence[Size], name: str, block_tokens: int | None, kv_bytes_per_token: int | None,
                  page_tokens: int = 16, own_unit: str = "blocks") -> list[int]:
    """``sizes`` in the command's own unit: blocks of ``block_tokens`` tokens (None: an access
    trace, whose unit is its own and takes bare integers only). Tokens, pages and bytes are
    rounded down to whole blocks (a cache of that size holds that many); bytes need
    ``kv_bytes_per_token`` (the model). A :class:`UsageError` naming ``name`` otherwise. O(items).

    >>> resolve_sizes(size_list("10, 1024tokens, 64pages, 1MiB", "--gpu"), "--gpu", 512, 1024)
    [10, 2, 2, 2]
    """
    out = []
    for size in sizes:
        if size.unit in ("", "blocks" if block_tokens is not None else ""):
            out.append(size.amount)
            continue
        if block_tokens is None:
            raise UsageError(f"{name} {size.text}: the capacities of an access (key[,size]) trace are in its own size "
                             "unit; give bare integers (units need a request trace: --format mooncake, ...).")
        if size.unit == "bytes" and kv_bytes_per_token is None:
            raise UsageError(f"{name} {size.text}: a size in bytes needs the model's KV bytes per token; add --model "
                             "NAME (or give tokens, blocks or pages).")
        tokens = {"tokens": size.amount, "pages": size.amount * page_tokens,
                  "bytes": size.amount // (kv_bytes_per_token or 1)}[size.unit]
        out.append(tokens // block_tokens)
    return out


WINDOW_HELP = ("the part of the trace that is counted, START:STOP (either may be empty); each end is an index "
               "(Python slice rules: negative counts from the end, write a negative start as --window=-2:), a "
               "duration from the first record (10m, 90s, 1.5h; request traces; negative from the last) or a "
               "percentage of the records (25%%); records are accesses of a key trace, requests of a request trace")
WARMUP_HELP = ("exclude the first N records of the window (accesses of a key trace, requests of a request trace), the "
               "first DURATION (e.g. 10m; request traces) or P%% of them from the counts; they still fill the cache "
               "(default 0)")
