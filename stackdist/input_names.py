"""What an input argument names: its files (several, a glob), standard input, compression.
Plain Python (no numpy): the command line and the readers share it. The format a name implies
is the format registry's (:func:`stackdist.traces.formats.format_of_path`).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from stackdist.errors import TraceFormatError

__all__ = ["compression_of", "expand_inputs", "input_specs", "is_streamed", "strip_compression"]


def input_specs(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The names in ``spec``: one, a sequence, or a str that keeps several in ``files`` (the
    command line's several files, :class:`stackdist.cli.args.InputPaths`)."""
    files = getattr(spec, "files", None)
    if files is not None:
        return [os.fspath(f) for f in files]
    return [os.fspath(spec)] if isinstance(spec, (str, os.PathLike)) else [os.fspath(s) for s in spec]


def expand_inputs(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The input files of ``spec`` in order: ``-``, names, globs (sorted; one matching nothing
    is a TraceFormatError). O(files).

    >>> expand_inputs(["-", "x.csv"])
    ['-', 'x.csv']
    """
    specs = input_specs(spec)
    out: list[str] = []
    for item in specs:
        text = os.fspath(item)
        if text != "-" and any(c in text for c in "*?["):
            matches = sorted(glob.glob(text))
            if not matches:
                raise TraceFormatError(text, None, "no file matches this pattern")
            out += matches
        else:
            out.append(text)
    return out


def compression_of(path: str) -> str:
    lower = path.lower()
    return "gz" if lower.endswith(".gz") else "zst" if lower.endswith(".zst") else ""


def is_streamed(spec: str | Sequence[str]) -> bool:
    """True when ``spec`` needs the streaming readers (stdin, a glob, several files, ``.gz``/``.zst``). O(1).

    >>> is_streamed("t.csv"), is_streamed("t.csv.gz"), is_streamed("-")
    (False, True, True)
    """
    specs = input_specs(spec)
    return len(specs) != 1 or specs[0] == "-" or any(c in specs[0] for c in "*?[") or bool(compression_of(specs[0]))


def strip_compression(path: str) -> str:
    kind = compression_of(path)
    return path[: -len(kind) - 1] if kind else path
