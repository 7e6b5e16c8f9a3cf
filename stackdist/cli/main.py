"""The ``stackdist`` command, top level: exact hit curves, tier curves and capacity plans from a trace.

Exit status (:mod:`stackdist.errors`): 0 on success, 1 for bad data (a malformed trace names
its file and line) or an output that cannot be written (a closed standard output included: one
line on stderr, before any work when the command writes to stdout), 2 for bad arguments, 130 on
Ctrl-C. Data goes to stdout, messages and progress to stderr. Each subcommand lives in its own module; this package holds no maths.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from stackdist.errors import (
    EXIT_DATA,
    EXIT_INTERRUPTED,
    freeze_for_exit,
    install_interrupt_handler,
)
from stackdist.malloc import keep_freed_memory
from stackdist.version import __version__

from .args import declared_paths, one_trace
from .common import Parser, add_progress_argument, add_version, run_command

__all__ = ["build_parser", "main"]

# The subcommands and their one-line help, as the top-level --help lists them. Kept here so that
# `stackdist --help` and `--version` answer without importing the subcommand modules (and so
# numpy and numba): start-up stays under 0.2 s. tests/test_cli.py checks it equals the full parser's.
SUBCOMMANDS = {
    "curve": "the exact LRU hit curve of a key[,size] trace",
    "tiers": "two-tier (GPU + CPU) hits for every CPU capacity",
    "plan": "KV-cache capacity plan for a request trace",
    "watch": "follow a growing trace and write the current answers every interval",
}
_DESCRIPTION = "Exact LRU hit curves for KV-cache capacity planning."


def build_parser(only: str | None = None) -> Parser:
    """The ``stackdist`` parser with its subcommands, or with ``only`` that one (a run imports
    just the modules its own subcommand needs: ``curve`` does not import the planner)."""
    parser = Parser(prog="stackdist", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"stackdist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in SUBCOMMANDS if only is None else (only,):
        _add_subcommand(sub, name)
    return parser


def _add_subcommand(sub: Any, name: str) -> None:
    if name == "curve":
        from .curve import add_curve_parser as add
    elif name == "tiers":
        from .tiers import add_tiers_parser as add
    elif name == "plan":
        from .plan import add_plan_parser as add
    else:
        from .watch import add_watch_parser as add
    add(sub)
    add_version(sub.choices[name])  # --version on every subcommand (a no-op where its module added it)
    from .scale import SCALE_COMMANDS, add_scale_arguments

    if name in SCALE_COMMANDS:
        add_scale_arguments(sub.choices[name])
        add_progress_argument(sub.choices[name])


def top_level_parser() -> Parser:
    """The top level alone (``--help``, ``--version``): the subcommands by name and help line only."""
    parser = Parser(prog="stackdist", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"stackdist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, help_line in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_line)
    return parser


def _runner(command: str) -> Any:
    """The function that runs ``command`` (imported only when that command runs)."""
    if command == "curve":
        from .curve import run_curve as run
    elif command == "tiers":
        from .tiers import run_tiers as run
    elif command == "watch":
        from .watch import run_watch as run
    else:
        from .plan import run_plan as run
    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``stackdist`` with ``argv`` (default: the command line); return the exit status.

    Every output is checked (writable, not an input, not a folder) before any work.
    """
    if argv is None:  # this process's own command line: its numpy does no linear algebra worth threads
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # (OpenBLAS's idle pool spins on the replay's cores)
        keep_freed_memory()  # the simulations' arrays stay in the heap between runs (stackdist/malloc.py)
    restore = None
    try:  # the handler is installed inside the try: a Ctrl-C right after it is caught below
        restore = install_interrupt_handler("stackdist")
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # before or after the command's own guard
        print("stackdist: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if restore is not None:
            restore()
        if argv is None:  # this process's own command line: it exits next
            freeze_for_exit()


def _stdout_closed() -> bool:
    """True when this process started with its standard output closed (``>&-``)."""
    return sys.stdout is None


def _closed_stdout(prog: str, what: str) -> int:
    print(f"{prog}: error: standard output is closed ({what} goes there); open it or redirect it to a file",
          file=sys.stderr)
    return EXIT_DATA


def _main(argv: list[str]) -> int:
    if _stdout_closed() and any(a in ("-h", "--help", "--version") for a in argv):
        return _closed_stdout("stackdist", "the help or version")
    if not argv or argv[0] in ("-h", "--help", "--version"):
        top_level_parser().parse_args(argv)  # prints (or errors) and exits, as the full parser would
    try:
        args = build_parser(argv[0] if argv[0] in SUBCOMMANDS else None).parse_args(argv)
        if getattr(args, "deployment", None) is not None:  # plan --deployment FILE.toml: the file under the flags
            from .deployment_file import with_deployment

            args = with_deployment(build_parser, argv, args)
        if isinstance(getattr(args, "trace", None), list):  # one or more files: one trace
            args.trace = one_trace(args.trace)
        outputs, inputs = declared_paths(args)  # from the parsers' InputPath / OutputPath arguments
        to_stdout = getattr(args, "table_to_stdout", False) or any(path == "-" for _, path in outputs)
        if _stdout_closed() and to_stdout and not any(path and path != "-" for _, path in outputs):
            return _closed_stdout(f"stackdist {args.command}", "the answer")  # before any work: nothing else is written
        return run_command(args.command, lambda: _run(args), outputs, inputs)
    except KeyboardInterrupt:
        print("stackdist: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args: Any) -> int:
    from stackdist.errors import UsageError
    from stackdist.output import progress_enabled, set_progress, set_step_sink, stage
    from stackdist.traces.formats import is_request_format

    from .scale import SCALE_COMMANDS, check_scale_flags, is_sampled

    if args.command in SCALE_COMMANDS:
        check_scale_flags(args)
    scaled = args.command in ("curve", "tiers") and (is_sampled(args) or bool(args.dask))
    if scaled and is_request_format(getattr(args, "format", None)) and (args.window or args.warmup):
        raise UsageError("--window and --warmup count the requests of a request trace; with --sample-*, --dask or a "
                         "streamed input that is not available: drop them, or the scale flag.")
    prog = f"stackdist {args.command}"
    set_progress(getattr(args, "progress", None))
    set_step_sink(lambda label: stage(prog, label))  # the library's steps (an engine model's pool sizes) as stages
    stop = _compile_notice(prog) if progress_enabled() else None
    try:
        return _runner(args.command)(args)
    finally:
        if stop is not None:
            stop()
        set_step_sink(None)
        set_progress(None)


def _compile_notice(prog: str) -> Any:
    """Say on stderr, once, when numba is about to compile a kernel (a first run, or a changed
    install); return the function that stops listening."""
    from stackdist.engine.compile_notice import on_first_compile

    def notice() -> None:
        print(f"{prog}: compiling kernels (first run only, ~10 s)", file=sys.stderr, flush=True)

    return on_first_compile(notice)


if __name__ == "__main__":
    sys.exit(main())
