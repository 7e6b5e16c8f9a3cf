"""What every ``stackdist`` subcommand shares: the parser class, the trace arguments, and running a
command under the exit-code convention of :mod:`stackdist.errors`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from stackdist.errors import EXIT_USAGE
from stackdist.guard import run_guarded
from stackdist.version import __version__

from .args import WARMUP_HELP, WINDOW_HELP, InputPath, OutputPath, add_format_argument

__all__ = ["Parser", "add_trace_arguments", "add_version", "run_command"]


class Parser(argparse.ArgumentParser):
    """argparse with one clear line and exit 2 on a usage error, no traceback."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def add_version(p: argparse.ArgumentParser) -> None:
    """``--version`` on a (sub)command."""
    p.add_argument("--version", action="version", version=f"stackdist {__version__}")


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
