"""Running a command under the exit-code convention of :mod:`stackdist.errors`: every output
checked first, then each error mapped to one line on stderr and its exit code (1 data, 2 usage,
130 Ctrl-C, 141 broken pipe), never a traceback for a user's mistake. Shared by ``stackdist``'s
and ``kvlab``'s commands (so kvlab needs nothing of ``stackdist.cli``)."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from stackdist.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_DATA,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    TraceFormatError,
    UsageError,
)

__all__ = ["ClosedStdout", "require_matplotlib", "run_guarded"]


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
