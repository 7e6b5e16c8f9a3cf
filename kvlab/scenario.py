"""The document-scan scenario: read ``docs`` equal documents in passes through a two-tier cache.

Keys are the document numbers ``0 .. docs-1`` and every document is ``tokens`` tokens.
A ``fwd`` pass reads ``0 .. docs-1`` and a ``rev`` pass reads ``docs-1 .. 0``. One
:class:`TwoTierCache` (GPU tier of ``gpu`` tokens, CPU tier of ``cpu`` tokens) carries over
all passes; with ``cpu == 0`` it is a plain GPU LRU cache. The result, printed as one JSON
object on stdout, has one entry per pass::

    {"passes": [{"order": "fwd", "gpu_hits": 0, "cpu_hits": 0, "misses": 10, "hit_docs": []}, ...]}

``hit_docs`` lists the documents that hit (in either tier) in the order they were read.

**Integers.** ``gpu`` and ``cpu`` are any integers >= 0 and ``tokens`` any integer >= 1, as
:mod:`kvsim`'s spec has them (capacities non-negative ints, sizes positive ints, no upper
bound): on the command line too, of any length (``--gpu 99999999999999999999`` works; more
than Python's 4300-digit ``int(str)`` guard as well, :func:`parse_integer`). ``--docs`` is
1 to :data:`MAX_DOCS` on the command line only: every read is simulated and listed.

Exit status of the command: 0, 1 when the answer cannot be written (stdout closed: one line
on stderr), 2 for a bad argument (the message names the flag and the allowed values).

Standard library only; runs as ``python -m kvlab.scenario``, as ``python3 kvlab/scenario.py``,
and as ``python3 scenario.py`` when copied next to ``kvsim.py`` into an empty folder. Copied
without ``kvsim.py`` it says so in one line and exits 1 (a missing file, not a bad argument).

>>> run_scenario(gpu=2, cpu=0, docs=3, tokens=1, passes=("fwd", "rev"))["passes"][1]
{'order': 'rev', 'gpu_hits': 2, 'cpu_hits': 0, 'misses': 1, 'hit_docs': [2, 1]}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TypedDict

try:  # imported as part of the kvlab package (python -m kvlab.scenario, import kvlab.scenario)
    from .kvsim import TwoTierCache
except ImportError:  # run as a script, in the repository or copied next to kvsim.py
    try:
        from kvsim import TwoTierCache  # type: ignore[no-redef, import-not-found]
    except ModuleNotFoundError as _missing:
        if _missing.name != "kvsim":
            raise
        _WHY = (f"kvsim.py is missing: scenario.py needs kvsim.py (the lab's reference caches) in its own folder "
                f"{os.path.dirname(os.path.abspath(__file__))}; copy kvsim.py next to it")
        if __name__ == "__main__":  # the command: one line and exit 1 (a missing file, not a bad argument)
            print(f"{os.path.basename(sys.argv[0] or 'scenario.py')}: error: {_WHY}", file=sys.stderr)
            sys.exit(1)
        raise ModuleNotFoundError(_WHY, name="kvsim") from None

__all__ = [
    "MAX_DOCS", "PASS_ORDERS", "PassResult", "int_argument", "main", "parse_integer", "parse_passes", "pass_keys",
    "passes_argument",
    "require_int", "run_scenario", "scenario_trace",
]

#: Allowed pass names: ``fwd`` reads 0..docs-1, ``rev`` reads docs-1..0.
PASS_ORDERS: tuple[str, ...] = ("fwd", "rev")
DEFAULT_GPU = 21520
DEFAULT_CPU = 0
DEFAULT_DOCS = 10
DEFAULT_TOKENS = 5011
DEFAULT_PASSES: tuple[str, ...] = ("fwd", "fwd", "rev")

_PASSES_HINT = f"allowed values: {', '.join(PASS_ORDERS)} (comma-separated, e.g. fwd,fwd,rev)"

EXAMPLES = """\
examples:
  python3 scenario.py                               # GPU 21520 tokens (4 docs), passes fwd,fwd,rev
  python3 scenario.py --passes fwd,fwd              # cyclic re-read: LRU misses every document
  python3 scenario.py --gpu 50110 --passes fwd,fwd  # the GPU holds all 10 docs: pass 2 all hits
  python3 scenario.py --cpu 56000                   # add a CPU tier of 56000 tokens (11 docs)
  python -m kvlab.scenario --docs 4 --tokens 100 --gpu 250 --passes fwd,rev
"""


class PassResult(TypedDict):
    """One pass of :func:`run_scenario`: its order, hits per tier, misses and the documents that hit."""

    order: str
    gpu_hits: int
    cpu_hits: int
    misses: int
    hit_docs: list[int]


def require_int(value: object, name: str, minimum: int) -> int:
    """Return ``value`` if it is an int (not bool) >= ``minimum``, else raise TypeError/ValueError."""
    kind = "a non-negative" if minimum == 0 else "a positive"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be {kind} int, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be {kind} int, got {value}.")
    return value


def parse_passes(passes: str | Sequence[str]) -> tuple[str, ...]:
    """Return the pass names as a tuple; a string is split on commas (spaces around names ignored).

    Raises ValueError for an empty list or a name outside :data:`PASS_ORDERS`.

    >>> parse_passes("fwd, fwd,rev")
    ('fwd', 'fwd', 'rev')
    """
    names = passes.split(",") if isinstance(passes, str) else list(passes)
    cleaned = tuple(name.strip() if isinstance(name, str) else name for name in names)
    if not cleaned or cleaned == ("",):
        raise ValueError(f"passes must list at least one pass; {_PASSES_HINT}.")
    for name in cleaned:
        if name == "":
            raise ValueError(f"passes must not contain an empty pass name; {_PASSES_HINT}.")
        if name not in PASS_ORDERS:
            raise ValueError(f"unknown pass name {name!r}; {_PASSES_HINT}.")
    return cleaned


def pass_keys(order: str, docs: int) -> list[int]:
    """Return the document numbers one pass reads: ascending for fwd, descending for rev."""
    return list(range(docs)) if order == "fwd" else list(range(docs - 1, -1, -1))


def scenario_trace(docs: int, passes: str | Sequence[str]) -> list[int]:
    """Return the whole key sequence of the scenario (all passes, concatenated).

    >>> scenario_trace(3, ("fwd", "rev"))
    [0, 1, 2, 2, 1, 0]
    """
    require_int(docs, "docs", 1)
    return [key for order in parse_passes(passes) for key in pass_keys(order, docs)]


def run_scenario(
    gpu: int = DEFAULT_GPU,
    cpu: int = DEFAULT_CPU,
    docs: int = DEFAULT_DOCS,
    tokens: int = DEFAULT_TOKENS,
    passes: str | Sequence[str] = DEFAULT_PASSES,
) -> dict[str, list[PassResult]]:
    """Run all passes through one :class:`TwoTierCache` and return the per-pass counts.

    Complexity: O(docs * len(passes)).
    """
    require_int(gpu, "gpu", 0)
    require_int(cpu, "cpu", 0)
    require_int(docs, "docs", 1)
    require_int(tokens, "tokens", 1)
    cache = TwoTierCache(gpu, cpu)  # one cache for all passes: it carries over
    results: list[PassResult] = []
    for order in parse_passes(passes):
        counts = {"gpu": 0, "cpu": 0, "miss": 0}
        hit_docs = []
        for doc in pass_keys(order, docs):
            tier = cache.access(doc, tokens)
            counts[tier] += 1
            if tier != "miss":
                hit_docs.append(doc)
        results.append(
            {
                "order": order,
                "gpu_hits": counts["gpu"],
                "cpu_hits": counts["cpu"],
                "misses": counts["miss"],
                "hit_docs": hit_docs,
            }
        )
    return {"passes": results}


INT64_MAX = 2**63 - 1
#: Bound of ``--docs`` on the command line: every read is simulated one by one in Python (about a
#: microsecond each) and the result lists the documents that hit, so the work and the output grow
#: with ``docs x passes``. Not a limit of the spec (:func:`run_scenario` takes any positive int).
MAX_DOCS = 10_000_000
#: Digits converted at a time by :func:`parse_integer` (below Python's 4300-digit guard).
_CHUNK_DIGITS = 4000


def parse_integer(text: str) -> int | None:
    """Return the integer written in ``text`` (ASCII digits, an optional sign, spaces around),
    of any length, or None when it is not one.

    Python's ``int(str)`` refuses more than 4300 digits; the digits are converted in chunks, so
    every integer the lab's spec allows can be given. Complexity: O(digits^2 / 4000).

    >>> parse_integer(" 42 "), parse_integer("-7"), parse_integer("1e3"), parse_integer("")
    (42, -7, None, None)
    >>> parse_integer("9" * 5000) == 10**5000 - 1
    True
    """
    stripped = text.strip()
    sign = -1 if stripped.startswith("-") else 1
    digits = stripped[1:] if stripped[:1] in ("-", "+") else stripped
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = 0
    for start in range(0, len(digits), _CHUNK_DIGITS):
        chunk = digits[start:start + _CHUNK_DIGITS]
        value = value * 10 ** len(chunk) + int(chunk)
    return sign * value


def _shown(text: str) -> str:
    """``text`` quoted for a message, shortened when long."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text):,} characters)"


def int_argument(minimum: int, maximum: int | None = INT64_MAX) -> Callable[[str], int]:
    """Return an argparse ``type`` callable accepting integers in [``minimum``, ``maximum``]
    (default at most 2^63-1, for counts and capacities that become 64-bit integers; ``None``:
    no upper bound, any length, as the lab's spec allows for the scenario's sizes). Each call is
    O(digits^2 / 4000) (:func:`parse_integer`).

    >>> int_argument(0, None)("99999999999999999999")
    99999999999999999999
    """
    kind = "a non-negative integer" if minimum == 0 else "a positive integer"
    top = "2^63-1" if maximum == INT64_MAX else f"{maximum:,}" if maximum is not None else ""

    def parse(text: str) -> int:
        value = parse_integer(text)
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"must be {kind}, got {_shown(text)}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {top}, got {_shown(text)}")
        return value

    parse.__name__ = kind.replace(" ", "_")
    return parse


def passes_argument(text: str) -> tuple[str, ...]:
    """argparse ``type`` for --passes."""
    try:
        return parse_passes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).rstrip(".")) from None


def _version() -> str:
    """``--version``: the installed stackdist's version (read with the standard library only), or
    a note that this is a standalone copy."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"%(prog)s (stackdist) {version('stackdist')}"
    except PackageNotFoundError:
        return "%(prog)s (a standalone copy of the kvlab lab file; stackdist is not installed)"


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """Return the command-line parser (with examples in the epilog)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Simulate passes over equal-sized documents through a GPU (+ optional CPU) "
        "LRU KV cache and print the per-pass hits as one JSON object.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--gpu", type=int_argument(0, None), default=DEFAULT_GPU,
                        help=f"GPU tier capacity in tokens, any integer >= 0 (default {DEFAULT_GPU})")
    parser.add_argument("--cpu", type=int_argument(0, None), default=DEFAULT_CPU,
                        help=f"CPU tier capacity in tokens, any integer >= 0; 0 means no CPU tier (default {DEFAULT_CPU})")
    parser.add_argument("--docs", type=int_argument(1, MAX_DOCS), default=DEFAULT_DOCS,
                        help=f"number of documents, 1 to {MAX_DOCS:,} (each read is simulated; default {DEFAULT_DOCS})")
    parser.add_argument("--tokens", type=int_argument(1, None), default=DEFAULT_TOKENS,
                        help=f"tokens per document, any integer >= 1 (default {DEFAULT_TOKENS})")
    parser.add_argument("--passes", type=passes_argument, default=DEFAULT_PASSES,
                        help="comma-separated pass orders, each fwd or rev (default fwd,fwd,rev)")
    return parser


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Parse ``argv``, run the scenario and print the result JSON; return the exit code."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    result = run_scenario(args.gpu, args.cpu, args.docs, args.tokens, args.passes)
    if sys.stdout is None:  # started with stdout closed: say so (exit 1) rather than print into nothing
        print(f"{parser.prog}: error: stdout is closed", file=sys.stderr)
        return 1
    try:
        print(json.dumps(result), flush=True)
    except BrokenPipeError:
        return 141
    except OSError as error:
        print(f"{parser.prog}: error: cannot write to stdout: {error.strerror or error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: one line and 130, never a traceback
        print(f"{os.path.basename(sys.argv[0] or 'scenario.py')}: interrupted", file=sys.stderr)
        sys.exit(130)
