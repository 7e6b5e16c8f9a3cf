"""Command-line argument parsing shared by the ``stackdist`` subcommands.

Every integer argument is bounded to int64 (or tighter) and every error names the flag (exit 2).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence

from stackdist.errors import INT64_MAX, UsageError
from stackdist.traces.counting import (
    access_window,
    parse_int,
    resolve_window,
    warmup_accesses,
    warmup_count,
    window_spec,
)

__all__ = ["WARMUP_HELP", "WINDOW_HELP", "InputPath", "InputPaths", "OutputPath", "access_window", "add_format_argument", "bounded_int", "declared_paths", "finite_float", "fraction_list", "int_list", "one_trace", "parse_int", "resolve_window", "warmup_accesses", "warmup_count", "window_spec"]


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
            return get(text, kind, line_records).name
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


WINDOW_HELP = ("the part of the trace that is counted, START:STOP (either may be empty); each end is an index "
               "(Python slice rules: negative counts from the end, write a negative start as --window=-2:), a "
               "duration from the first record (10m, 90s, 1.5h; request traces; negative from the last) or a "
               "percentage of the records (25%%); records are accesses of a key trace, requests of a request trace")
WARMUP_HELP = ("exclude the first N records of the window (accesses of a key trace, requests of a request trace), the "
               "first DURATION (e.g. 10m; request traces) or P%% of them from the counts; they still fill the cache "
               "(default 0)")
