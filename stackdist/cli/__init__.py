"""The ``stackdist`` command (argparse front ends; no maths here).

- :mod:`.main`: the top-level parser, ``--version`` and :func:`main` (the console script).
- :mod:`.curve`, :mod:`.tiers`, :mod:`.plan`: one subcommand each.
- :mod:`.common`: the parser class, shared trace arguments, the exit-code convention.
- :mod:`.args`: parsers of comma-separated argument lists.

This ``__init__`` only re-exports.
"""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
