"""What every ``stackdist`` subcommand shares: the parser class, the trace arguments, loading a
curve, and running a command under the exit-code convention of :mod:`stackdist.errors`."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from stackdist.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_DATA,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    TraceFormatError,
    UsageError,
    require_data,
)
from stackdist.version import __version__

from .args import InputPath, OutputPath, access_window, warmup_accesses

__all__ = ["Parser", "add_trace_arguments", "add_version", "load_curve", "record_line", "run_command", "tool_header"]


class Parser(argparse.ArgumentParser):
    """argparse with one clear line and exit 2 on a usage error, no traceback."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def add_version(p: argparse.ArgumentParser) -> None:
    """``--version`` on a (sub)command."""
    p.add_argument("--version", action="version", version=f"stackdist {__version__}")


def tool_header(kind: str) -> dict[str, Any]:
    """The first keys of every JSON the commands write: what it is, its schema, the tool."""
    from stackdist.planning.schema import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "kind": kind, "tool": {"name": "stackdist", "version": __version__}}


def add_trace_arguments(p: argparse.ArgumentParser) -> None:
    """The trace and output arguments of ``curve`` and ``tiers``."""
    add_version(p)
    p.add_argument("trace", type=InputPath, help="key[,size] trace (.csv/.tsv/.txt, .jsonl, .npy) or a request trace (see --format)")
    p.add_argument("--format", choices=["csv", "tsv", "jsonl", "npy", "mooncake", "qwen", "tokens"],
                   help="override the format guessed from the extension; mooncake/qwen/tokens replay the request "
                   "trace's block stream (head first, one unit per block)")
    p.add_argument("--window", metavar="START:STOP",
                   help="count hits only for accesses START..STOP-1 (Python slice rules; write a negative start "
                   "as --window=-2:)")
    p.add_argument("--warmup", metavar="N|P%|DURATION",
                   help="exclude the first N accesses (or P percent of them) of the window from the counts, or with "
                   "a request trace (--format mooncake/qwen/tokens) the requests of the first DURATION (e.g. 10m); "
                   "they still fill the cache (default 0)")
    p.add_argument("--output", "-o", type=OutputPath, metavar="FILE", default="-", help="write the JSON here (atomically) instead of stdout")
    p.add_argument("--plot", type=OutputPath, metavar="PNG", help="also draw the curve(s) to this PNG (needs matplotlib)")


def record_line(path: str, fmt: str | None, position: int) -> str:
    """``file:line`` of the record at 0-based ``position`` of an access trace (text formats),
    ``file: row N`` for ``.npy``, or ``file: access N`` when the file cannot be re-read."""
    from stackdist.traces.lines import data_lines

    where = f"{path}: access {position + 1:,}"
    kind = fmt or os.path.splitext(path)[1].lower().lstrip(".")
    if kind == "npy":
        return f"{path}: row {position:,}"
    text_kind, first, index = kind not in ("jsonl", "json", "ndjson"), True, -1
    try:
        for lineno, raw in data_lines(path):
            text = raw.decode("utf-8", "replace").strip()
            if text_kind and text.startswith("#"):
                continue
            if first and text_kind:
                first = False
                if text.replace("\t", ",").split(",")[0].strip().lower() == "key":
                    continue
            index += 1
            if index == position:
                return f"{path}:{lineno}"
    except Exception:  # noqa: BLE001 - only the message is at stake
        return where
    return where


def _warmup_block(requests: Any, text: str | None) -> int | None:
    """The first counted block when ``--warmup`` is a duration (``90s``, ``10m``, ``1.5h``) on a
    request trace; None for a count or a percentage (those count accesses)."""
    import math

    import numpy as np

    raw = (text or "").strip()
    if not raw or raw.endswith("%") or raw.isdigit() or raw[-1] not in "smh":
        return None
    try:
        seconds = float(raw[:-1]) * {"s": 1.0, "m": 60.0, "h": 3600.0}[raw[-1]]
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise UsageError(f"--warmup must be N accesses, P% or (request traces) a duration like 90s, 10m or 1.5h; got {text!r}.")
    ts = requests.timestamps_s
    if not ts.size:
        return 0
    first = int(np.argmax(np.r_[ts >= ts.min() + seconds, True]))  # the first request at or after the warm-up
    return int(requests.offsets[min(first, requests.n_requests)])


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def access_range(args: argparse.Namespace, n: int) -> tuple[int, int]:
    """The counted accesses [start, stop) from ``--window`` and ``--warmup`` (names the flags)."""
    from stackdist.engine import parse_window

    window = access_window(args.window, "--window")
    start, stop = parse_window(window, n)
    start = min(stop, start + warmup_accesses(getattr(args, "warmup", None), stop - start, "--warmup"))
    return start, stop


def load_curve(args: argparse.Namespace) -> Any:
    """Read the trace named by ``args`` and replay it once into a HitCurve (progress on stderr)."""
    from stackdist.engine import HitCurve, parse_window
    from stackdist.engine.keys import first_size_change
    from stackdist.output import Progress, stage
    from stackdist.traces import REQUEST_FORMATS, read_access_trace, read_requests

    access_window(args.window, "--window")  # a bad --window is a usage error before any reading
    command = f"stackdist {getattr(args, 'command', '')}".strip()
    stage(command, f"reading {args.trace}")
    warm_from = None  # with a request trace, --warmup may be a duration (requests before it only fill the cache)
    if args.format in REQUEST_FORMATS:
        requests = read_requests(args.trace, args.format)
        keys, sizes = requests.block_ids, None
        warm_from = _warmup_block(requests, getattr(args, "warmup", None))
    else:
        trace = read_access_trace(args.trace, args.format)
        keys, sizes = trace.keys, trace.sizes
        changed = first_size_change(keys, sizes)
        if changed is not None:
            raise TraceFormatError(record_line(args.trace, args.format, changed), None,
                                   f"key {_plain(keys[changed])!r} has size {int(sizes[changed]) if sizes is not None else 1} here but another size "
                                   "earlier; a key's size must be fixed")
    n = len(keys)
    require_data(n, args.trace, "the trace has no accesses")
    if warm_from is not None:
        start, stop = parse_window(access_window(args.window, "--window"), n)
        start = min(stop, max(start, warm_from))
    else:
        start, stop = access_range(args, n)
    require_data(stop - start, args.trace, f"no accesses are counted (--window {args.window or ':'}, "
                 f"--warmup {getattr(args, 'warmup', None) or 0}, {n:,} accesses in the trace)")
    stage(command, f"replaying {n:,} accesses (counting {stop - start:,})")
    progress = Progress("replay")
    try:
        return HitCurve.from_trace(keys, sizes, (start, stop), progress=progress)
    finally:
        progress.close()


def require_matplotlib() -> None:
    """A ``--plot`` without matplotlib is a usage error before any work (exit 2, with the hint)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot needs matplotlib; install it with: pip install 'stackdist[plot]'")


def _os_message(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return exc.strerror or str(exc)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


class ClosedStdout:
    """Stands in for ``sys.stdout`` when the process started with stdout closed: every write is
    an ``OSError`` (EBADF), so the command fails with one line instead of dropping its output."""

    def write(self, _data: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed", "<stdout>")

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False


def run_command(name: str, run: Callable[[], int], outputs: list[tuple[str, Any]], inputs: Iterable[Any] = ()) -> int:
    """``stackdist NAME``: :func:`run_guarded` with the ``stackdist`` prefix."""
    return run_guarded(f"stackdist {name}", run, outputs, inputs)


def run_guarded(prog: str, run: Callable[[], int], outputs: Iterable[tuple[str, Any]] = (), inputs: Iterable[Any] = ()) -> int:
    """Check every output (writable, not an input, not a folder), run, and map errors to exit
    codes with one line on stderr (see :mod:`stackdist.errors`). Shared by ``stackdist`` and ``kvlab``."""
    from stackdist.output import check_outputs

    def fail(code: int, message: str) -> int:
        print(f"{prog}: error: {message}", file=sys.stderr)
        return code

    outputs = list(outputs)
    if sys.stdout is None:
        sys.stdout = ClosedStdout()  # type: ignore[assignment]
    try:
        check_outputs(outputs, inputs)
        if any(flag == "--plot" and value for flag, value in outputs):
            require_matplotlib()
        code = run()
        sys.stdout.flush()
        return code
    except UsageError as exc:
        return fail(EXIT_USAGE, str(exc))
    except (TraceFormatError, ValueError, OverflowError) as exc:
        return fail(EXIT_DATA, str(exc))
    except MemoryError:
        return fail(EXIT_DATA, "not enough memory for this input and these arguments (try smaller sizes or fewer points)")
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            _quiet_stdout()
            return EXIT_BROKEN_PIPE
        return fail(EXIT_DATA, _os_message(exc))
