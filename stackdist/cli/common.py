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
from stackdist.version import SCHEMA_VERSION, __version__

from .args import (
    WARMUP_HELP,
    add_format_argument,
    WINDOW_HELP,
    InputPath,
    OutputPath,
    resolve_window,
    warmup_count,
    window_spec,
)

__all__ = ["Parser", "add_trace_arguments", "add_version", "counted_range", "load_curve", "run_command", "tool_header"]


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
    return {"schema_version": SCHEMA_VERSION, "kind": kind, "tool": {"name": "stackdist", "version": __version__}}


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


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def counted_range(args: argparse.Namespace, n: int, requests: Any = None) -> tuple[int, int]:
    """The counted accesses [start, stop) of ``n`` from ``--window`` and ``--warmup`` (names the
    flags): over accesses for a key trace, over the requests of ``requests`` (a request trace,
    whose timestamps give durations) mapped to their blocks. O(n) with a duration, else O(1)."""
    spec = window_spec(args.window, "--window")
    warm = getattr(args, "warmup", None)
    if requests is None:
        start, stop = resolve_window(spec, n, None, "--window")
        return min(stop, start + warmup_count(warm, start, stop, None, "--warmup")), stop
    ts = requests.timestamps_s
    first, last = resolve_window(spec, requests.n_requests, ts, "--window")
    first = min(last, first + warmup_count(warm, first, last, ts, "--warmup"))
    return int(requests.offsets[first]), int(requests.offsets[last])


def _stream_curve(args: argparse.Namespace, command: str) -> tuple[Any, Any]:
    """A large unit-size trace (one file or streamed) replayed chunk by chunk in memory bounded by its distinct keys
    (:class:`~stackdist.engine.stream.KeyValueStream`): ``(curve, None)``; a trace with sizes
    is read whole instead (below its largest size the curve replays filtered traces):
    ``(None, (keys, sizes))``. O(accesses) time, O(distinct keys) memory when unit."""
    import itertools
    import time

    import numpy as np

    from stackdist.engine.stream import KeyValueStream
    from stackdist.output import stage
    from stackdist.traces.formats import is_request_format
    from stackdist.traces.stream_input import (
        iter_access_chunks,
        iter_block_id_chunks,
        joined_sizes,
        key_values,
    )

    chunks: Any = (((key_values(ids), None) for ids in iter_block_id_chunks(args.trace, args.format))
                   if is_request_format(args.format) else iter_access_chunks(args.trace, args.format))
    first = next((c for c in chunks if c[0].shape[0]), None)
    if first is None:
        return None, (np.zeros(0, np.uint64), None)
    if first[1] is not None:
        parts = [first, *chunks]
        return None, (np.concatenate([k for k, _ in parts]), joined_sizes(parts, args.trace))
    stream, shown = KeyValueStream(), time.monotonic()
    for keys, sizes in itertools.chain([first], chunks):
        joined_sizes([first, (keys, sizes)], args.trace)  # a size column in a later input is an error
        stream.feed(keys)
        if time.monotonic() - shown > 10:
            stage(command, f"replayed {stream.n_accesses:,} accesses so far (state {stream.state_nbytes / 2**20:,.0f} MiB)")
            shown = time.monotonic()
    return stream.curve(), None


BOUNDED_INPUT_BYTES = 1 << 30
"""From this much input (a compressed file counts four times its size; standard input always),
a curve (one file or streamed) is replayed in memory bounded by its distinct keys rather than holding the
trace: slower by about a third (its keys are hashed as they come), but a day's log fits."""


def _large_input(spec: Any) -> bool:
    """True when the inputs of ``spec`` hold at least :data:`BOUNDED_INPUT_BYTES` (or are read from
    standard input: their size is unknown). O(files)."""
    from stackdist.traces.stream_input import expand_inputs

    total = 0
    for path in expand_inputs(spec):
        if path == "-":
            return True
        try:
            total += os.path.getsize(path) * (4 if path.lower().endswith((".gz", ".zst")) else 1)
        except OSError:
            return False  # the reader says what is wrong with it
    return total >= BOUNDED_INPUT_BYTES


def load_curve(args: argparse.Namespace, bounded: bool = False) -> Any:
    """Read the trace named by ``args`` and replay it once into a HitCurve (progress on stderr).
    ``bounded``: the caller needs only the curve's queries, so a large unit-size trace (one file or streamed)
    (:data:`BOUNDED_INPUT_BYTES`) without ``--window``/``--warmup`` is replayed in memory bounded
    by its distinct keys (no per-access view)."""
    from stackdist.engine import HitCurve
    from stackdist.engine.keys import first_size_change
    from stackdist.output import Progress, stage
    from stackdist.traces import read_access_trace
    from stackdist.traces.access import record_line
    from stackdist.traces.formats import is_request_format
    from stackdist.traces.stream_input import is_streamed, read_keys, read_request_input

    window_spec(args.window, "--window")  # a bad --window is a usage error before any reading
    command = f"stackdist {getattr(args, 'command', '')}".strip()
    stage(command, f"reading {args.trace}")
    requests = None  # a request trace: --window and --warmup count requests (durations from their timestamps)
    streamed = is_streamed(args.trace)
    if bounded and not args.window and not getattr(args, "warmup", None) and _large_input(args.trace):
        curve, read = _stream_curve(args, command)
        if curve is not None:
            return curve
        keys, sizes = read
    elif is_request_format(args.format):  # one plain file, or streamed: several files, a glob, -, .gz/.zst
        requests = read_request_input(args.trace, args.format)
        keys, sizes = requests.block_ids, None
    elif streamed:
        keys, sizes = read_keys(args.trace, args.format)
    else:
        trace = read_access_trace(args.trace, args.format)
        keys, sizes = trace.keys, trace.sizes
    if sizes is not None:
        changed = first_size_change(keys, sizes)
        if changed is not None:
            where = f"{args.trace}: access {changed + 1:,}" if streamed else record_line(args.trace, args.format, changed)
            raise TraceFormatError(where, None,
                                   f"key {_plain(keys[changed])!r} has size {int(sizes[changed]) if sizes is not None else 1} here but another size "
                                   "earlier; a key's size must be fixed")
    n = len(keys)
    require_data(n, args.trace, "the trace has no accesses")
    start, stop = counted_range(args, n, requests)
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
    except Exception as exc:  # a bug: still one line and a nonzero exit, never a traceback (STACKDIST_DEBUG=1 shows it)
        if os.environ.get("STACKDIST_DEBUG"):
            raise
        return fail(EXIT_DATA, f"internal error ({type(exc).__name__}: {exc}); please report it with the command line "
                    "(set STACKDIST_DEBUG=1 for the traceback)")
