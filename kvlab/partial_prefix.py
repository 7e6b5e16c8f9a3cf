"""TTFT against the cached prefix: the partial-prefix measurement ``partial_prefix_h200.json``.

:func:`load_partial_prefix` reads the fixture (column :data:`FIXTURE_COLUMN`: the lab is
GPU-only, so the prefix KV is already on the GPU) into a :class:`PartialPrefixTTFT`, which
values a prefix hit by linear interpolation in the measured prefixes (``kvlab block-lab``).
A bad file is a :class:`FixtureError` naming the file and the field, or the line for a file that
is not UTF-8, not JSON, or holds an integer too long to read; ``kvlab block-lab`` exits 1 for it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DEFAULT_FIXTURE", "FIXTURE_COLUMN", "FixtureError", "PartialPrefixTTFT", "load_partial_prefix"]

#: Package data (``kvlab/data`` links to the checkout's ``data/``), so it is found from any folder.
DEFAULT_FIXTURE = Path(__file__).resolve().parent / "data" / "fixtures" / "partial_prefix_h200.json"
#: The fixture column used: the scenario is GPU-only, so the prefix KV is already on the GPU.
FIXTURE_COLUMN = "gpu_prefix"


class FixtureError(ValueError):
    """The partial-prefix fixture is unreadable or malformed (the message names file and field)."""


@dataclass(frozen=True)
class PartialPrefixTTFT:
    """TTFT against the cached prefix, from ``partial_prefix_h200.json`` (column ``gpu_prefix``).

    ``prefixes`` are ``rows[].P`` (tokens of a ``doc_tokens``-token document whose KV is cached),
    ``wall_ms`` the ``rows[].gpu_prefix.wall_ms_median`` and ``gpu_work_ms`` the
    ``rows[].gpu_prefix.gpu_work_ms`` at those P. :meth:`estimate` interpolates linearly between
    the measured P, as a fraction of the document (the scaling assumption: a request whose
    document has the same fraction cached costs what the fixture's request costs; no time is
    rescaled for a different document length).

    >>> m = PartialPrefixTTFT("f.json", 100, 8, (0, 50, 100), (40.0, 50.0, 30.0), (35.0, 45.0, 9.0))
    >>> m.estimate(0.75)["wall_ms"], m.estimate(0.0)["wall_ms"], m.estimate(0.2)["mixes_attention_paths"]
    (40.0, 40.0, True)
    """

    source: str
    doc_tokens: int
    question_tokens: int
    prefixes: tuple[int, ...]
    wall_ms: tuple[float, ...]
    gpu_work_ms: tuple[float, ...]

    def estimate(self, cached_fraction: float) -> dict[str, Any]:
        """Interpolated wall and GPU-work TTFT with this fraction of the document cached.

        ``mixes_attention_paths`` is True strictly between P=0 (no cache: the causal SDPA call)
        and the smallest measured P>0 (masked SDPA): the interpolation there joins two paths.
        """
        if not 0 <= cached_fraction <= 1:
            raise ValueError(f"cached_fraction must be between 0 and 1, got {cached_fraction}.")
        p = cached_fraction * self.doc_tokens
        upper = min(int(np.searchsorted(self.prefixes, p, side="left")), len(self.prefixes) - 1)
        lower = upper if self.prefixes[upper] == p else upper - 1
        return {
            "fixture_P": round(p, 1),
            "between_P": [self.prefixes[lower], self.prefixes[upper]],
            "wall_ms": round(float(np.interp(p, self.prefixes, self.wall_ms)), 3),
            "gpu_work_ms": round(float(np.interp(p, self.prefixes, self.gpu_work_ms)), 3),
            "mixes_attention_paths": bool(0 < p < self.prefixes[1]),
        }

    def describe(self) -> dict[str, Any]:
        """The model's inputs for the JSON report, each named by its field in the fixture."""
        return {
            "source": self.source,
            "column": FIXTURE_COLUMN,
            "doc_tokens": self.doc_tokens,
            "question_tokens": self.question_tokens,
            "points": [
                {"P": p, "wall_ms_median": w, "gpu_work_ms": g}
                for p, w, g in zip(self.prefixes, self.wall_ms, self.gpu_work_ms)
            ],
            "fields": {
                "P": "rows[].P",
                "wall_ms": f"rows[].{FIXTURE_COLUMN}.wall_ms_median",
                "gpu_work_ms": f"rows[].{FIXTURE_COLUMN}.gpu_work_ms",
                "doc_tokens": "doc_tokens",
                "question_tokens": "question_tokens",
            },
        }


def load_partial_prefix(path: str | Path = DEFAULT_FIXTURE) -> PartialPrefixTTFT:
    """Read the partial-prefix fixture; FixtureError names the file and the bad field.

    Requires ``doc_tokens`` and ``question_tokens`` (positive ints) and ``rows``: P strictly
    increasing from 0 to ``doc_tokens``, each with positive finite ``gpu_prefix.wall_ms_median``
    and ``gpu_prefix.gpu_work_ms``.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise FixtureError(f"{path}: cannot read the partial-prefix fixture: {error.strerror or error}") from None
    data = _parse_json(raw, path)
    if not isinstance(data, dict):
        raise FixtureError(f"{path}: the fixture must be a JSON object, got {type(data).__name__}")
    doc_tokens = _fixture_int(data, "doc_tokens", path, "doc_tokens")
    question_tokens = _fixture_int(data, "question_tokens", path, "question_tokens")
    rows = data.get("rows")
    if not isinstance(rows, list) or len(rows) < 2:
        raise FixtureError(f"{path}: rows must be a list of at least 2 measured prefixes")
    prefixes: list[int] = []
    wall: list[float] = []
    work: list[float] = []
    for index, row in enumerate(rows):
        where = f"rows[{index}]"
        if not isinstance(row, dict):
            raise FixtureError(f"{path}: {where} must be an object")
        p = row.get("P")
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= doc_tokens:
            raise FixtureError(f"{path}: {where}.P must be an int in 0..doc_tokens ({doc_tokens}), got {p!r}")
        if prefixes and p <= prefixes[-1]:
            raise FixtureError(f"{path}: {where}.P must be greater than the previous row's P ({prefixes[-1]}), got {p}")
        column = row.get(FIXTURE_COLUMN)
        if not isinstance(column, dict):
            raise FixtureError(f"{path}: {where}.{FIXTURE_COLUMN} must be an object")
        prefixes.append(p)
        wall.append(_fixture_ms(column, "wall_ms_median", path, f"{where}.{FIXTURE_COLUMN}"))
        work.append(_fixture_ms(column, "gpu_work_ms", path, f"{where}.{FIXTURE_COLUMN}"))
    if prefixes[0] != 0 or prefixes[-1] != doc_tokens:
        raise FixtureError(
            f"{path}: rows must run from P=0 to P=doc_tokens ({doc_tokens}), got P={prefixes[0]}..{prefixes[-1]}"
        )
    return PartialPrefixTTFT(_display_path(path), doc_tokens, question_tokens, tuple(prefixes), tuple(wall), tuple(work))


#: Python's limit on the digits of an integer read from text (``sys.get_int_max_str_digits``).
INT_MAX_STR_DIGITS = 4300


def _parse_json(raw: bytes, path: str | Path) -> Any:
    """The fixture's JSON value; FixtureError naming ``path`` and the line for bytes that are not
    UTF-8, text that is not JSON, or an integer too long to read (more than 4300 digits)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[:error.start].count(b"\n") + 1
        raise FixtureError(f"{path}:{line}: not UTF-8 text (byte {raw[error.start]:#04x} at offset {error.start}); "
                           "the fixture must be a UTF-8 JSON file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise FixtureError(f"{path}:{error.lineno}: not valid JSON: {error.msg}") from None
    except ValueError:  # an integer beyond Python's digit limit: find it to name its line
        long_number = re.search(rf"\d{{{INT_MAX_STR_DIGITS + 1},}}", text)
        where = f"{path}:{text.count(chr(10), 0, long_number.start()) + 1}" if long_number else str(path)
        digits = f"{len(long_number.group()):,}" if long_number else f"over {INT_MAX_STR_DIGITS:,}"
        raise FixtureError(f"{where}: a number of {digits} digits; numbers in the fixture can have at most "
                           f"{INT_MAX_STR_DIGITS:,} digits (token counts and milliseconds)") from None


def _display_path(path: str | Path) -> str:
    """``path`` relative to the current folder when it lies inside it, else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _fixture_int(data: dict[str, Any], key: str, path: str | Path, where: str) -> int:
    """Return ``data[key]`` if it is a positive int, else FixtureError naming ``where``."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FixtureError(f"{path}: {where} must be a positive int, got {value!r}")
    return value


def _fixture_ms(column: dict[str, Any], key: str, path: str | Path, where: str) -> float:
    """Return ``column[key]`` if it is a positive finite number, else FixtureError."""
    value = column.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise FixtureError(f"{path}: {where}.{key} must be a positive number of ms, got {value!r}")
    return float(value)
