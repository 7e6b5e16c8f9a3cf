"""What every ``stackdist`` subcommand shares: the parser class, the trace arguments, and running a
command under the exit-code convention of :mod:`stackdist.errors`.

The parser (:class:`Parser`) keeps one vocabulary of usage errors across the subcommands: an
unknown flag, choice or subcommand is reported by the subcommand it was given to
(``stackdist plan: error: unrecognized arguments: --gpu-block (did you mean --gpu-blocks?)``), with
the closest name (:func:`closest`); a value that starts with ``-`` given apart from its flag gets
the hint to attach it (``write --window=-2:``).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

from stackdist.errors import EXIT_USAGE
from stackdist.guard import run_guarded
from stackdist.version import __version__

from .args import WARMUP_HELP, WINDOW_HELP, InputPath, OutputPath, add_format_argument

__all__ = ["Parser", "add_progress_argument", "add_trace_arguments", "add_version", "closest", "did_you_mean", "run_command"]


def closest(word: str, names: Iterable[str]) -> str | None:
    """The name of ``names`` closest to ``word`` (difflib, case-insensitive), or None. O(names).

    >>> closest("--gpu-block", ["--gpu", "--gpu-blocks", "--gpus"]), closest("zzz", ["plan"])
    ('--gpu-blocks', None)
    """
    names = [str(n) for n in names]
    lowered = {n.lower(): n for n in names}
    found = difflib.get_close_matches(str(word).lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[found[0]] if found else None


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest of ``names``, or ``""``. O(names).

    >>> did_you_mean("H20O", ["h200", "h100"]), did_you_mean("xyz", ["h200"])
    (" (did you mean 'h200'?)", '')
    """
    near = closest(word, names)
    return f" (did you mean {near!r}?)" if near is not None else ""


class Parser(argparse.ArgumentParser):
    """argparse with one clear line and exit 2 on a usage error, no traceback; unknown flags,
    choices and subcommands named by the subcommand that got them, with "did you mean"."""

    _argv: Sequence[str] = ()

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._argv = list(sys.argv[1:] if args is None else args)  # for the hints of error()
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            target = self._subcommand_parser(parsed) or self
            target.error(target.unrecognized(extras))
        return parsed

    def _subcommand_parser(self, parsed: argparse.Namespace) -> Parser | None:
        for action in self._actions:
            if isinstance(action.choices, dict):  # the subcommands' action: choices map names to parsers
                chosen = action.choices.get(getattr(parsed, action.dest or "", None) or "")
                return chosen if isinstance(chosen, Parser) else None
        return None

    def unrecognized(self, extras: Sequence[str]) -> str:
        """``unrecognized arguments: ...`` with the closest flag of this parser for each unknown one."""
        flags = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
        parts = []
        for extra in extras:
            hint = ""
            if extra.startswith("-"):
                near = closest(extra.split("=", 1)[0], flags)
                hint = f" (did you mean {near}?)" if near else ""
            parts.append(f"{extra}{hint}")
        return f"unrecognized arguments: {' '.join(parts)}"

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            names = list(choices)
            what = "unknown command" if isinstance(choices, dict) else "invalid choice"
            raise argparse.ArgumentError(None if isinstance(choices, dict) else action,
                                         f"{what}: {value!r}{did_you_mean(value, names)} (choose from {', '.join(map(str, names))})")

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{self._attach_hint(message)}\n")

    def _attach_hint(self, message: str) -> str:
        """``; write --window=-2:`` when a flag's value starts with ``-`` and was given apart."""
        match = re.fullmatch(r"argument (\S+): expected one argument", message)
        if not match:
            return ""
        names = match.group(1).split("/")
        argv = list(self._argv)
        for i, token in enumerate(argv[:-1]):
            if token in names and argv[i + 1].startswith("-"):
                return f" (a value starting with '-' must be attached to its flag: write {token}={argv[i + 1]})"
        return ""


def add_version(p: argparse.ArgumentParser) -> None:
    """``--version`` on a (sub)command; nothing when it already has one."""
    try:
        p.add_argument("--version", action="version", version=f"stackdist {__version__}")
    except argparse.ArgumentError:  # the (sub)command's own module added it
        pass


def add_progress_argument(p: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress``: stage lines, bars and the first run's compile notice on
    stderr; default on a terminal only (:func:`stackdist.output.set_progress`)."""
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress on stderr (stages, bars, the first run's kernel compile); default: on a terminal only")


def add_trace_arguments(p: argparse.ArgumentParser) -> None:
    """The trace and output arguments of ``curve`` and ``tiers``."""
    add_version(p)
    p.add_argument("trace", type=InputPath, nargs="+", metavar="TRACE",
                   help="key[,size] trace (.csv/.tsv/.txt, .jsonl, .npy; .gz/.zst; - for standard input) or a request "
                   "trace (see --format); several files or a glob are one trace, in order")
    add_format_argument(p, help="override the format guessed from the extension; a request trace replays its block "
                        "stream (head first, one unit per block)")
    p.add_argument("--window", metavar="START:STOP", help=WINDOW_HELP)
    p.add_argument("--warmup", metavar="N|DURATION|P%", help=WARMUP_HELP)
    p.add_argument("--output", "-o", type=OutputPath, metavar="FILE", default="-", help="write the JSON here (atomically) instead of stdout")
    p.add_argument("--plot", type=OutputPath, metavar="PNG", help="also draw the curve(s) to this PNG (needs matplotlib)")


def run_command(name: str, run: Callable[[], int], outputs: list[tuple[str, Any]], inputs: Iterable[Any] = ()) -> int:
    """``stackdist NAME``: :func:`run_guarded` with the ``stackdist`` prefix."""
    return run_guarded(f"stackdist {name}", run, outputs, inputs)
