"""What every ``stackdist`` subcommand shares: the parser class, the trace arguments, loading a
curve, and running a command under the exit-code convention of :mod:`stackdist.errors`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from stackdist.errors import (
    EXIT_DATA,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    TraceFormatError,
    UsageError,
)

__all__ = ["Parser", "add_trace_arguments", "load_curve", "run_command"]


class Parser(argparse.ArgumentParser):
    """argparse with one clear line and exit 2 on a usage error, no traceback."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def add_trace_arguments(p: argparse.ArgumentParser) -> None:
    """The trace and output arguments of ``curve`` and ``tiers``."""
    p.add_argument("trace", help="key[,size] trace (.csv/.tsv/.txt, .jsonl, .npy) or a request trace (see --format)")
    p.add_argument("--format", choices=["csv", "tsv", "jsonl", "npy", "mooncake", "qwen", "tokens"],
                   help="override the format guessed from the extension; mooncake/qwen/tokens replay the request "
                   "trace's block stream (head first, one unit per block)")
    p.add_argument("--window", metavar="START:STOP", help="count hits only for accesses START..STOP-1 (Python slice rules)")
    p.add_argument("--output", "-o", metavar="FILE", default="-", help="write the JSON here (atomically) instead of stdout")
    p.add_argument("--plot", metavar="PNG", help="also draw the curve(s) to this PNG (needs matplotlib)")


def load_curve(args: argparse.Namespace) -> Any:
    """Read the trace named by ``args`` and replay it once into a HitCurve (progress on stderr)."""
    from stackdist.engine import HitCurve
    from stackdist.output import Progress
    from stackdist.traces import REQUEST_FORMATS, read_access_trace, read_requests

    if args.format in REQUEST_FORMATS:
        keys, sizes = read_requests(args.trace, args.format).block_ids, None
    else:
        trace = read_access_trace(args.trace, args.format)
        keys, sizes = trace.keys, trace.sizes
    progress = Progress("replay")
    try:
        return HitCurve.from_trace(keys, sizes, args.window, progress=progress)
    finally:
        progress.close()


def run_command(name: str, run: Callable[[], int], outputs: list[tuple[str, Any]]) -> int:
    """Check the outputs are writable, run, and map errors to exit codes with one line on stderr."""
    from stackdist.output import check_writable

    try:
        for option, value in outputs:
            check_writable(value, option)
        return run()
    except UsageError as exc:
        print(f"stackdist {name}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (TraceFormatError, ValueError) as exc:
        print(f"stackdist {name}: error: {exc}", file=sys.stderr)
        return EXIT_DATA
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print(f"stackdist {name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:
        print(f"stackdist {name}: error: {exc.strerror and f'{exc.filename}: {exc.strerror}' or exc}", file=sys.stderr)
        return EXIT_DATA
