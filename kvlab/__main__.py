"""The ``kvlab`` command: ``python -m kvlab COMMAND ...`` (console script ``kvlab``).

Commands:

- ``run-lab --out DIR [--measured FILE]``: write the lab's result files (see :mod:`kvlab.lab`).
- ``scenario ...``: the document-scan scenario (same options as ``python -m kvlab.scenario``).
- ``summarize INPUT.jsonl OUTPUT.json``: the TTFT summary (as ``python -m kvlab.summarize``).
- ``block-lab ...``: the passes at block granularity, both prefix semantics (see :mod:`kvlab.blocklab`).
"""

from __future__ import annotations

import sys

from stackdist.errors import (
    EXIT_INTERRUPTED,
    freeze_for_exit,
    install_interrupt_handler,
    started_as,
)

if started_as("kvlab", "__main__.py"):  # the command itself: Ctrl-C during the imports is one line, exit 130
    install_interrupt_handler("kvlab", guarded=False)

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from . import lab, scenario, summarize

EXAMPLES = """\
examples:
  python -m kvlab run-lab --out results/lab
  python -m kvlab run-lab --out /tmp/lab --measured my_ttft.jsonl
  python -m kvlab scenario --gpu 21520 --cpu 56000 --passes fwd,fwd,rev
  python -m kvlab summarize data/ttft.jsonl /tmp/measured.json
  python -m kvlab block-lab --json -
"""


def _block_lab_main(argv: Sequence[str], prog: str) -> int:
    """``kvlab block-lab``: imported on use, so the other commands do not load numpy."""
    from . import blocklab

    return blocklab.main(argv, prog=prog)


#: Subcommands handed whole to another module's ``main(argv, prog=...)``.
DELEGATED: dict[str, Callable[..., int]] = {
    "scenario": scenario.main, "summarize": summarize.main, "block-lab": _block_lab_main,
}


def _directory_argument(text: str) -> Path:
    """argparse ``type`` for --out: a non-empty path."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a directory path, got an empty string")
    return Path(text)


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with its subcommands."""
    parser = argparse.ArgumentParser(
        prog="kvlab",
        description="KV-cache offload lab: reference simulators, scenarios and the lab's result files.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, title="commands")
    run_lab = commands.add_parser(
        "run-lab",
        help="write the lab's 7 result files into DIR",
        description="Write cyclic.json, baseline.json, cliff.json, offload.json, cpu_cliff.json, "
        "measured.json and ttft.jsonl into DIR (created if needed; each file written atomically).",
    )
    run_lab.add_argument("--version", action="version", version=_version())
    run_lab.add_argument("--out", required=True, type=_directory_argument, metavar="DIR",
                         help="output folder (created if it does not exist)")
    run_lab.add_argument("--measured", type=Path, default=lab.DEFAULT_MEASURED, metavar="FILE",
                         help=f"measured TTFT JSONL to summarize and copy (default: {lab.DEFAULT_MEASURED})")
    commands.add_parser("scenario", add_help=False, help="run the document-scan scenario (kvlab scenario --help)")
    commands.add_parser("summarize", add_help=False, help="summarize measured TTFT JSONL (kvlab summarize --help)")
    commands.add_parser("block-lab", add_help=False, help="the passes at 16-token block granularity (kvlab block-lab --help)")
    return parser


def _version() -> str:
    from stackdist.version import __version__

    return f"kvlab (stackdist) {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a subcommand; return its exit code (0 ok, 1 data, 2 usage, 130 Ctrl-C, 141
    broken pipe: the convention of :mod:`stackdist.errors`, through one wrapper,
    :func:`stackdist.guard.run_guarded`)."""
    restore = None
    try:  # the handler is installed inside the try: a Ctrl-C right after it is caught below
        try:
            restore = install_interrupt_handler("kvlab")
            return _main(argv)
        finally:  # a Ctrl-C deferred out of numba's compiler may be taken here, while the handler is put back
            if restore is not None:
                restore()
    except KeyboardInterrupt:  # before or after the command's own guard
        print("kvlab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if argv is None:  # this process's own command line: it exits next
            freeze_for_exit()


def _main(argv: Sequence[str] | None) -> int:
    from stackdist.guard import ClosedStdout, run_guarded

    class _FalsyClosedStdout(ClosedStdout):
        """A closed stdout that argparse (Python 3.11+: ``file or sys.stderr``) passes over, so a
        subcommand's --help and --version go to stderr as the top level's do, never into nothing
        (3.10 raises on the write: one error line, exit 1)."""

        def __bool__(self) -> bool:
            return False

    if sys.stdout is None:  # started with stdout closed: every write is an error (one line, exit 1)
        sys.stdout = _FalsyClosedStdout()  # type: ignore[assignment]
    try:
        arguments = list(sys.argv[1:] if argv is None else argv)
        if arguments and arguments[0] in DELEGATED:
            name = arguments[0]  # its own parser answers --help and --version (on stderr when stdout is closed)
            return run_guarded(f"kvlab {name}", lambda: DELEGATED[name](arguments[1:], prog=f"kvlab {name}"))
        args = build_parser().parse_args(arguments)
        if args.command == "run-lab":
            return run_guarded("kvlab run-lab", lambda: lab.run_lab_command(args.out, args.measured),
                               [("--out", None)], [args.measured])
        raise AssertionError(f"unhandled command {args.command!r}")  # argparse only accepts the commands above
    except KeyboardInterrupt:
        print("kvlab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
