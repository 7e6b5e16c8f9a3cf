"""The small files a plan reads beside its trace: a model's ``config.json``, a schedule CSV
(``request,arrival_s,prefill_end_s,finish_s``), JSON-lines calibration records and a deployment
TOML file. Every file
the package parses is read in ``traces/``; a malformed one names its file (and line).
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from typing import Any

import numpy as np

from stackdist.errors import TraceFormatError, UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (pyproject: tomli; python_version < "3.11")
    import tomli as tomllib

__all__ = ["SCHEDULE_HEADER", "read_config_json", "read_json_lines", "read_schedule_rows", "read_toml"]

SCHEDULE_HEADER = ["request", "arrival_s", "prefill_end_s", "finish_s"]
"""The header of a schedule CSV, in order."""


def read_config_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A model's ``config.json`` (a JSON object); a :class:`UsageError` naming the file when it
    is missing, unreadable or not an object. O(file).

    >>> read_config_json("/no/such/config.json")
    Traceback (most recent call last):
    ...
    stackdist.errors.UsageError: /no/such/config.json: no such config file
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such config file") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable JSON config: {exc}") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: a config.json must hold a JSON object")
    return config


def read_json_lines(path: str | os.PathLike[str], label: str = "") -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file (blank lines skipped); a :class:`UsageError` naming
    ``label`` and the file when it cannot be read or a line is not an object. O(file).

    >>> read_json_lines("/no/such.jsonl", "calibration")[:1]
    Traceback (most recent call last):
    ...
    stackdist.errors.UsageError: calibration /no/such.jsonl: cannot read it (No such file or directory)
    """
    records = []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    record = json.loads(line)
                    if not isinstance(record, dict):
                        raise ValueError(f"line {number} is not a JSON object")
                    records.append(record)
    except OSError as exc:
        raise UsageError(f"{label} {os.fspath(path)}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise UsageError(f"{label} {os.fspath(path)}: not JSON lines ({exc})") from None
    return records


def read_schedule_rows(path: str | os.PathLike[str], n_requests: int | None = None) -> np.ndarray:
    """A schedule CSV as an ``(n, 3)`` float64 array of ``arrival_s, prefill_end_s, finish_s``
    (rows ``0..n-1`` in order); a malformed line raises :class:`TraceFormatError` naming the file
    and 1-based line. O(n)."""
    rows: list[tuple[float, float, float]] = []
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header] != SCHEDULE_HEADER:
            raise TraceFormatError(path, 1, f"header must be {','.join(SCHEDULE_HEADER)}; got {header}")
        for line_no, row in enumerate(reader, start=2):
            rows.append(_parse_row(path, line_no, row, len(rows)))
    if n_requests is not None and len(rows) != n_requests:
        raise TraceFormatError(path, None, f"schedule must have {n_requests} rows; got {len(rows)}")
    return np.array(rows, dtype=np.float64).reshape(-1, 3)


def _parse_row(path: str | os.PathLike[str], line_no: int, row: list[str], expected: int) -> tuple[float, float, float]:
    """One CSV row as three floats; raises TraceFormatError stating the constraint."""
    if len(row) != 4:
        raise TraceFormatError(path, line_no, f"a row must have 4 fields; got {len(row)}")
    try:
        request = int(row[0])
        a, p, f = (float(x) for x in row[1:])
    except ValueError:
        raise TraceFormatError(path, line_no, f"fields must be an integer and three numbers; got {row}") from None
    if request != expected:
        raise TraceFormatError(path, line_no, f"request must be {expected} (rows in order); got {request}")
    if not all(np.isfinite(x) for x in (a, p, f)):
        raise TraceFormatError(path, line_no, f"times must be finite; got {row[1:]}")
    if not a <= p <= f:
        raise TraceFormatError(path, line_no, f"times must satisfy arrival_s <= prefill_end_s <= finish_s; got {row[1:]}")
    return a, p, f


def read_toml(path: str | os.PathLike[str], what: str = "TOML file") -> dict[str, Any]:
    """A TOML file as a dict (``tomllib``); a :class:`TraceFormatError` (exit 1) naming the file
    when it is missing or unreadable, and its line on a syntax error. O(file).

    >>> read_toml("/no/such/deployment.toml", "deployment file")
    Traceback (most recent call last):
    ...
    stackdist.errors.TraceFormatError: /no/such/deployment.toml: no such deployment file
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise TraceFormatError(path, None, f"no such {what}") from None
    except IsADirectoryError:
        raise TraceFormatError(path, None, f"is a folder, not a {what}") from None
    except OSError as exc:
        raise TraceFormatError(path, None, f"cannot read the {what}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(path, None, f"not a {what}: not UTF-8 ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = int(found.group(1)) if found else None
        raise TraceFormatError(path, line, f"not valid TOML: {exc}") from None
