"""Summarize measured TTFT lines: per config and pass, the median and mean ``ttft_ms``, and ratios.

Usage: ``python3 summarize.py INPUT.jsonl OUTPUT.json``

Input: one JSON object per line with the fields ``config``, ``pass``, ``doc``, ``doc_tokens``,
``ttft_ms`` and ``total_ms``. Blank lines are skipped and other fields are ignored. Only
``config`` (one of ``baseline``, ``lmcache``), ``pass`` (a non-empty string) and ``ttft_ms``
(a finite number >= 0) are checked beyond being present; ``doc``, ``doc_tokens`` and
``total_ms`` only have to be present. Output (JSON, indent 2, trailing newline)::

    {"baseline": {PASS: {"n": N, "p50_ms": X, "mean_ms": Y}, ...},
     "lmcache":  {PASS: {...}, ...},
     "ratio":    {PASS: {"p50": R, "mean": R}, ...}}

Choices (documented here because the format leaves them open):

- **Configs.** The output has exactly the keys ``baseline``, ``lmcache`` and ``ratio``, so any
  other config name is an error that names the allowed values (it is not silently dropped).
- **Pass names** are used exactly as written, in the order of their first appearance anywhere
  in the file; each config lists the passes it has, in that order. ``ratio`` lists the passes
  present in both configs.
- **Statistics.** ``p50_ms`` is the median (the mean of the two middle values for an even count),
  ``mean_ms`` the arithmetic mean; both are rounded to one decimal with Python's ``round``.
- **Ratios** are baseline / lmcache computed from the *unrounded* statistics, then rounded to
  two decimals. A zero lmcache statistic gives ``null`` for that ratio.
- **Errors.** A malformed line stops the run with ``FILE:LINE: reason`` on stderr and exit code 1;
  a missing or unreadable input file also exits 1. The output file is written atomically (a
  temporary file in the same folder, then ``os.replace``), so on any error no output file is
  created or changed. Input with no data lines gives empty sections (and a warning on stderr).
  ``OUTPUT.json`` ``-`` writes to stdout; with stdout closed that is one line on stderr and exit 1.

Standard library only; also runs when copied alone into an empty folder. That is why this file
keeps its own atomic writer (:func:`write_bytes_atomic`, :func:`write_json_atomic`): the one
deliberate exception to the project's one atomic writer, ``stackdist.output.write_atomic``,
which every other module (the rest of ``kvlab`` included) uses instead of this one.

>>> summary = summarize([
...     '{"config": "baseline", "pass": "p1", "doc": 0, "doc_tokens": 8, "ttft_ms": 30, "total_ms": 90}',
...     '{"config": "lmcache", "pass": "p1", "doc": 0, "doc_tokens": 8, "ttft_ms": 20, "total_ms": 80}',
... ])
>>> summary["ratio"]
{'p1': {'p50': 1.5, 'mean': 1.5}}
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["CONFIGS", "REQUIRED_FIELDS", "SummaryError", "main", "summarize", "write_bytes_atomic", "write_json_atomic"]

#: The allowed ``config`` values, in output order.
CONFIGS: tuple[str, ...] = ("baseline", "lmcache")
#: Fields every data line must have.
REQUIRED_FIELDS: tuple[str, ...] = ("config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms")

_JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}

Summary = dict[str, dict[str, dict[str, object]]]


class SummaryError(Exception):
    """The input cannot be summarized; the message names the file (and line, for a bad line)."""


def _parse_line(text: str, where: str) -> tuple[str, str, float]:
    """Return ``(config, pass, ttft_ms)`` of one non-blank line, or raise SummaryError at ``where``."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise SummaryError(f"{where}: invalid JSON: {error.msg} (column {error.colno})") from None
    except ValueError:  # an integer of more than 4300 digits
        raise SummaryError(f"{where}: invalid JSON: a number has more digits than can be read (4300)") from None
    if not isinstance(record, dict):
        kind = _JSON_TYPE_NAMES.get(type(record), "null")
        raise SummaryError(f"{where}: each line must be a JSON object, got a JSON {kind}")
    missing = [field for field in REQUIRED_FIELDS if field not in record]
    if missing:
        raise SummaryError(
            f"{where}: missing required field(s) {', '.join(missing)}; every line needs {', '.join(REQUIRED_FIELDS)}"
        )
    config, pass_name, ttft = record["config"], record["pass"], record["ttft_ms"]
    if config not in CONFIGS:
        raise SummaryError(f"{where}: config must be one of {', '.join(CONFIGS)}, got {json.dumps(config)}")
    if not isinstance(pass_name, str) or not pass_name:
        raise SummaryError(f"{where}: pass must be a non-empty string, got {json.dumps(pass_name)}")
    try:
        value = float(ttft) if isinstance(ttft, (int, float)) and not isinstance(ttft, bool) else math.nan
    except OverflowError:  # an integer beyond the float range
        value = math.inf
    if not math.isfinite(value) or value < 0:
        shown = ttft if isinstance(ttft, float) else json.dumps(ttft)
        shown = shown if len(str(shown)) <= 40 else f"{str(shown)[:20]}... ({len(str(shown))} characters)"
        raise SummaryError(f"{where}: ttft_ms must be a finite number >= 0, got {shown}")
    return config, pass_name, value


def _read_samples(lines: Iterable[str | bytes], name: str) -> tuple[list[str], dict[str, dict[str, list[float]]]]:
    """Return the pass names in first-appearance order and the ttft samples per config and pass."""
    pass_order: dict[str, None] = {}
    samples: dict[str, dict[str, list[float]]] = {config: {} for config in CONFIGS}
    for number, line in enumerate(lines, start=1):
        where = f"{name}:{number}"
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise SummaryError(f"{where}: line is not valid UTF-8") from None
        if not line.strip():
            continue
        config, pass_name, ttft = _parse_line(line.rstrip("\r\n"), where)
        pass_order.setdefault(pass_name, None)
        samples[config].setdefault(pass_name, []).append(ttft)
    return list(pass_order), samples


def _median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence: the middle value, or the mean of the two middle values."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return ordered[middle - 1] / 2 + ordered[middle] / 2  # never overflows near the float maximum


def _ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator`` rounded to 2 decimals, or None when the denominator is 0."""
    if denominator == 0:
        return None
    try:
        ratio = numerator / denominator
    except OverflowError:
        return None
    return round(ratio, 2) if math.isfinite(ratio) else None


def summarize(source: str | os.PathLike[str] | Iterable[str | bytes], *, name: str | None = None) -> Summary:
    """Summarize a JSONL file (a path) or an iterable of lines (str or bytes) as described above.

    ``name`` is used in error messages (default: the path, or ``<lines>``).
    Raises SummaryError for a malformed line or an unreadable file.

    Complexity: O(n log n) for n lines (sorting for the medians).
    """
    if isinstance(source, (str, os.PathLike)):
        label = name if name is not None else os.fspath(source)
        try:
            with open(source, "rb") as handle:
                pass_order, samples = _read_samples(handle, label)
        except OSError as error:
            raise SummaryError(f"{label}: cannot read the input file: {error.strerror or error}") from None
    else:
        pass_order, samples = _read_samples(source, name if name is not None else "<lines>")

    exact: dict[str, dict[str, tuple[int, float, float]]] = {
        config: {
            pass_name: (len(values), _median(values), math.fsum(v / len(values) for v in values))
            for pass_name in pass_order
            if (values := samples[config].get(pass_name))
        }
        for config in CONFIGS
    }
    summary: Summary = {
        config: {
            pass_name: {"n": n, "p50_ms": round(p50, 1), "mean_ms": round(mean, 1)}
            for pass_name, (n, p50, mean) in exact[config].items()
        }
        for config in CONFIGS
    }
    baseline, lmcache = exact["baseline"], exact["lmcache"]
    summary["ratio"] = {
        pass_name: {
            "p50": _ratio(baseline[pass_name][1], lmcache[pass_name][1]),
            "mean": _ratio(baseline[pass_name][2], lmcache[pass_name][2]),
        }
        for pass_name in pass_order
        if pass_name in baseline and pass_name in lmcache
    }
    return summary


def _same_file(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` name one existing file (through symlinks and hard links)."""
    try:
        return os.path.samefile(a, b) or os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, then os.replace.

    The same rules as ``stackdist.output.write_atomic``: ``-``, ``/dev/stdout``, character devices
    and FIFOs are written directly; a symlink is written through to its target; an existing file
    keeps its permission bits, a new one gets ``0666 & ~umask``.
    """
    shown = os.fspath(path)
    if shown in ("-", "/dev/stdout"):
        if getattr(sys.stdout, "buffer", None) is None:  # started with stdout closed (sys.stdout is None)
            raise OSError(errno.EBADF, "stdout is closed")
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    try:
        st = os.stat(shown)
    except OSError:
        st = None
    if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        with open(shown, "wb") as handle:
            handle.write(data)
        return
    target = Path(os.path.realpath(shown))
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_current_umask()
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)  # mkstemp creates 0600
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_json_atomic(path: str | os.PathLike[str], value: object) -> None:
    """Write ``value`` as JSON (indent 2, trailing newline) to ``path`` atomically."""
    write_bytes_atomic(path, (json.dumps(value, indent=2, allow_nan=False) + "\n").encode("utf-8"))


def _version() -> str:
    """``--version``: the installed stackdist's version (standard library only), or a note that
    this is a standalone copy."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"%(prog)s (stackdist) {version('stackdist')}"
    except PackageNotFoundError:
        return "%(prog)s (a standalone copy of the kvlab lab file; stackdist is not installed)"


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Summarize measured TTFT JSONL into per-config, per-pass median/mean and "
        "baseline/lmcache ratios (see the module docstring for the rules).",
        epilog="example:\n  python3 summarize.py data/ttft.jsonl results/measured.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("input", metavar="INPUT.jsonl", help="measured lines, one JSON object per line")
    parser.add_argument("output", metavar="OUTPUT.json", help="summary file to write (atomically)")
    return parser


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the command line; return 0, or 1 for a data error (2 for usage errors, via argparse)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if _same_file(args.input, args.output):
        print(f"{parser.prog}: error: OUTPUT.json {args.output} is the input {args.input}; refusing to overwrite "
              "the input (choose another output file)", file=sys.stderr)
        return 2
    if not args.output.strip() or os.path.isdir(args.output):
        print(f"{parser.prog}: error: OUTPUT.json {args.output!r} is {'a folder' if args.output.strip() else 'empty'}; "
              "give a file name", file=sys.stderr)
        return 2
    try:
        summary = summarize(args.input)
    except SummaryError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    try:
        write_json_atomic(args.output, summary)
    except BrokenPipeError:
        return 141
    except OSError as error:
        print(f"{parser.prog}: error: cannot write {args.output}: {error.strerror or error}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{config} {len(summary[config])} pass(es)" for config in CONFIGS)
    if not summary["baseline"] and not summary["lmcache"]:
        print(f"{parser.prog}: warning: {args.input} has no data lines", file=sys.stderr)
    print(f"{parser.prog}: wrote {args.output} ({counts})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: one line and 130, never a traceback
        print(f"{os.path.basename(sys.argv[0] or 'summarize.py')}: interrupted", file=sys.stderr)
        sys.exit(130)
