"""What an input argument names: its files (several, a glob), compression, and the access
format its name implies. Plain Python: the readers and the numba-free native path share it.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from stackdist.errors import TraceFormatError

__all__ = ["DEFAULT_BLOCK_SIZE", "REQUEST_FORMATS", "access_suffix", "compression_of", "expand_inputs", "input_specs", "is_streamed", "strip_compression"]


REQUEST_FORMATS = ("mooncake", "qwen", "tokens", "dynamo", "lmcache")
"""The request-trace formats (:mod:`.formats` reads them); any other format is an access trace."""

DEFAULT_BLOCK_SIZE = {"mooncake": 512, "qwen": 16, "tokens": 16, "dynamo": 16, "lmcache": 256}
"""Tokens per block of each request format when ``--block-size`` is not given."""


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


def access_suffix(path: str, format: str | None) -> str:
    if format is not None:
        return {"csv": ".csv", "tsv": ".tsv", "jsonl": ".jsonl", "npy": ".npy"}.get(format, ".txt")
    if path == "-":
        return ".txt"
    ext = os.path.splitext(strip_compression(path))[1].lower()
    return {".json": ".jsonl", ".ndjson": ".jsonl"}.get(ext, ext) if ext else ".txt"
