"""Which records of a trace count: a window ``START:STOP`` (indices, durations from the first or
last record, percentages) and a warm-up (a count, a percentage or a duration), resolved against a
trace's length and timestamps; and the bounded integer parse every count shares.

Plain text in, record positions out: the CLI passes its flag's name as ``name`` so that every
error names what the user typed; the library's default names are neutral.
"""

from __future__ import annotations

import math
from typing import Any

from stackdist.errors import INT64_MAX, UsageError

__all__ = ["WindowEnd", "access_window", "parse_int", "resolve_window", "warmup_accesses", "warmup_count", "window_spec"]


def _request_formats() -> str:
    """The request-trace formats, for messages (``mooncake, qwen, ... or lmcache``)."""
    from .formats import REQUESTS, format_names

    names = format_names(REQUESTS)
    return ", ".join(names[:-1]) + " or " + names[-1]


def parse_int(text: str, name: str, lo: int = 0, hi: int = INT64_MAX) -> int:
    """One integer in [lo, hi] (decimal, ``_`` separators and an exact ``1e6`` allowed); a
    :class:`UsageError` naming ``name`` otherwise.

    >>> parse_int("4096", "--gpu"), parse_int("1e6", "--gpu")
    (4096, 1000000)
    """
    raw = text.strip()
    value: int | None = None
    if len(raw) <= 40:
        try:
            value = int(raw)
        except ValueError:
            try:
                f = float(raw)
                if math.isfinite(f) and f == int(f) and "e" in raw.lower():
                    value = int(f)
            except (ValueError, OverflowError):
                value = None
    if value is None:
        raise UsageError(f"{name} must be an integer; got {text!r}.")
    if not lo <= value <= hi:
        top = "2^63-1" if hi == INT64_MAX else f"{hi:,}"
        raise UsageError(f"{name} must be an integer from {lo:,} to {top}; got {text!r}.")
    return value


WindowEnd = tuple[str, float] | None
"""One end of a counted window: None (open), ``("index", i)``, ``("seconds", s)`` or ``("percent", p)``."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def _window_end(text: str, name: str, whole: str) -> WindowEnd:
    raw = text.strip()
    if not raw:
        return None
    try:
        if raw.endswith("%"):
            value = float(raw[:-1])
            if math.isfinite(value) and -100 <= value <= 100:
                return ("percent", value)
        elif raw[-1] in _UNITS and raw[:-1].strip():
            value = float(raw[:-1]) * _UNITS[raw[-1]]
            if math.isfinite(value):
                return ("seconds", value)
        else:
            return ("index", parse_int(raw, name, -INT64_MAX - 1))
    except (ValueError, UsageError):
        pass
    raise UsageError(f"{name} must be START:STOP, each end an index, a duration like 10m or a percentage like 25% "
                     f"(either may be empty; write a negative start as {name}=-2:); got {whole!r}.")


def window_spec(text: str | None, name: str = "window") -> tuple[WindowEnd, WindowEnd] | None:
    """``START:STOP`` as two :data:`WindowEnd`; a :class:`UsageError` naming ``name`` otherwise.

    >>> window_spec("10:", "--window"), window_spec("-2:", "--window"), window_spec("1m:50%")
    ((('index', 10), None), (('index', -2), None), (('seconds', 60.0), ('percent', 50.0)))
    """
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) != 2:
        raise UsageError(f"{name} must look like START:STOP (each end an index, a duration like 10m or a percentage "
                         f"like 25%; either may be empty; write a negative start as {name}=-2:); got {text!r}.")
    start, stop = (_window_end(p, name, text) for p in parts)
    return start, stop


def _position(end: WindowEnd, n: int, timestamps: Any, default: int, name: str) -> int:
    """The record index [0, n] an end of a window names."""
    if end is None:
        return default
    kind, value = end
    if kind == "index":
        i = int(value)
        return max(0, min(n, i + n if i < 0 else i))
    if kind == "percent":
        k = math.ceil(abs(value) * n / 100)
        return min(n, n - k if value < 0 else k)
    if timestamps is None:
        raise UsageError(f"{name}: a duration ({value:g} s) needs a request trace with timestamps "
                         f"(--format {_request_formats()}); give indices or percentages here.")
    import numpy as np

    if n == 0:
        return 0
    at = float(np.max(timestamps)) + value if value < 0 else float(np.min(timestamps)) + value
    return int(np.argmax(np.r_[timestamps >= at, True]))  # the first record at or after that time


def resolve_window(spec: tuple[WindowEnd, WindowEnd] | None, n: int, timestamps: Any = None,
                   name: str = "window") -> tuple[int, int]:
    """The records [start, stop) a :func:`window_spec` names in ``n`` records (``timestamps``, in
    seconds, for durations). O(n) with a duration, else O(1).

    >>> resolve_window(window_spec("-2:"), 10), resolve_window(window_spec("10%:50%"), 10)
    ((8, 10), (1, 5))
    """
    if spec is None:
        return 0, n
    start = _position(spec[0], n, timestamps, 0, name)
    stop = _position(spec[1], n, timestamps, n, name)
    return start, max(start, stop)


def warmup_count(text: str | None, start: int, stop: int, timestamps: Any = None, name: str = "warmup") -> int:
    """How many of the window's records [start, stop) a ``--warmup`` excludes: a count, a
    percentage of the window, or (with ``timestamps``) a duration from the window's first record.

    >>> warmup_count("10%", 0, 50), warmup_count("7", 10, 50), warmup_count(None, 0, 50)
    (5, 7, 0)
    """
    if text is None or not text.strip():
        return 0
    n = stop - start
    raw = text.strip()
    if raw.endswith("%") or raw.isdigit() or raw[-1] not in _UNITS:
        return warmup_accesses(raw, n, name)
    try:
        seconds = float(raw[:-1]) * _UNITS[raw[-1]]
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise UsageError(f"{name} must be N records, P% or a duration like 90s, 10m or 1.5h; got {text!r}.")
    if timestamps is None:
        raise UsageError(f"{name} {text}: a duration needs a request trace with timestamps (--format "
                         f"{_request_formats()}); give a count or a percentage here.")
    if n <= 0:
        return 0
    import numpy as np

    ts = np.asarray(timestamps[start:stop])
    return int(np.argmax(np.r_[ts >= float(ts.min()) + seconds, True]))


def access_window(text: str | None, name: str = "window") -> tuple[int | None, int | None] | None:
    """``START:STOP`` of indices only (the sampled, distributed and streamed paths) as a pair; a
    :class:`UsageError` naming ``name`` otherwise.

    >>> access_window("10:", "--window"), access_window("-2:", "--window")
    ((10, None), (-2, None))
    """
    spec = window_spec(text, name)
    if spec is None:
        return None
    if any(end is not None and end[0] != "index" for end in spec):
        raise UsageError(f"{name} {text}: with --sample-rate/--sample-size, --dask or a streamed input the window "
                         "takes indices only (no durations or percentages).")
    start, stop = (None if end is None else int(end[1]) for end in spec)
    return start, stop


def warmup_accesses(text: str | None, n: int, name: str = "warmup") -> int:
    """A warm-up as a count of accesses (``1000``) or a percentage of the trace (``10%``).

    >>> warmup_accesses("10%", 50), warmup_accesses("7", 50), warmup_accesses(None, 50)
    (5, 7, 0)
    """
    if text is None:
        return 0
    raw = text.strip()
    if raw.endswith("%"):
        try:
            pct = float(raw[:-1])
        except ValueError:
            pct = math.nan
        if not 0 <= pct <= 100:
            raise UsageError(f"{name} must be a count of accesses or a percentage from 0% to 100%; got {text!r}.")
        return min(n, math.ceil(pct * n / 100))
    try:
        return min(n, parse_int(raw, name))
    except UsageError:
        raise UsageError(f"{name} must be a count of accesses or a percentage like 10% (a duration like 10m needs a "
                         f"request trace: --format {_request_formats()}); got {text!r}.") from None
