"""The ``stackdist`` command, top level: exact hit curves, tier curves and capacity plans from a trace.

Exit status (:mod:`stackdist.errors`): 0 on success, 1 for bad data (a malformed trace names
its file and line), 2 for bad arguments, 130 on Ctrl-C. Data goes to stdout, messages and
progress to stderr. Each subcommand lives in its own module; this package holds no maths.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from stackdist.errors import EXIT_INTERRUPTED
from stackdist.version import __version__

from .common import Parser, run_command
from .curve import add_curve_parser, run_curve
from .plan import add_plan_parser, run_plan
from .tiers import add_tiers_parser, run_tiers

__all__ = ["build_parser", "main"]

_RUNNERS = {"curve": run_curve, "tiers": run_tiers, "plan": run_plan}


def build_parser() -> Parser:
    """The ``stackdist`` parser with its three subcommands."""
    parser = Parser(prog="stackdist", description="Exact LRU hit curves for KV-cache capacity planning.")
    parser.add_argument("--version", action="version", version=f"stackdist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    add_curve_parser(sub)
    add_tiers_parser(sub)
    add_plan_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``stackdist`` with ``argv`` (default: the command line); return the exit status.

    Every output is checked (writable, not an input, not a folder) before any work.
    """
    try:
        args = build_parser().parse_args(argv)
        outputs = [(f"--{name}", getattr(args, name, None)) for name in ("output", "json", "plot")]
        inputs = [getattr(args, name, None) for name in ("trace", "model_config", "schedule")]
        return run_command(args.command, lambda: _RUNNERS[args.command](args), outputs, inputs)
    except KeyboardInterrupt:
        print("stackdist: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
