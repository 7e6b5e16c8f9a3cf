"""``curve --sample-rate`` without numba: the whole-process fast path of a sampled curve.

When the trace is one or more plain local files of integer keys, with or without sizes
(``.npy`` integer arrays, ``(n, 2)`` or ``key``/``size`` structured; ``.csv``/``.tsv``/``.txt``
whose lines are all ``[+-]digits`` or all ``[+-]digits<delim>size``, after an optional
``key[,size]`` header; JSONL lines ``{"key": INT[, "size": INT]}``; ``--format mooncake``
request lines, their ``hash_ids`` the accesses: :mod:`stackdist.engine.scale.native_json`) and
the run asks for a fixed rate over the whole trace (no ``--sample-size``, ``--window``,
``--warmup`` or ``--dask``), the native library (:mod:`stackdist.engine.scale.native`) samples
and replays it with only numpy imported. The
curves are those of the compiled path (:class:`~stackdist.engine.scale.sampling.ShardsSampler`)
field for field; anything else (another form, a line of another shape, a size that changes,
an empty or too large sample, no C compiler, ``STACKDIST_NATIVE=0``) makes :func:`native_curves` say None, and the compiled path
reads the trace and gives the answer or the error.
"""

from __future__ import annotations

import argparse
import contextlib
import mmap
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from stackdist.engine.scale.estimate import (
    EXACT_SIZE,
    SampledCurve,
    collapse_sized,
    fixed_rate_curve,
    fixed_rate_sized_curve,
)
from stackdist.engine.scale.native import SAMPLE_LIMIT, NativeShards, library
from stackdist.engine.scale.native_json import feed_jsonl, feed_mooncake
from stackdist.engine.scale.thresholds import (
    rate_of_threshold,
    seed_mix,
    threshold_for_rate,
)
from stackdist.errors import TraceFormatError
from stackdist.input_names import (
    DEFAULT_BLOCK_SIZE,
    access_suffix,
    compression_of,
    expand_inputs,
)

__all__ = ["native_curves"]

_TEXT = (".csv", ".tsv", ".txt")
MOONCAKE_BLOCK_SIZE = DEFAULT_BLOCK_SIZE["mooncake"]
"""Tokens per block of a Mooncake trace's ``curve`` (the compiled block-id reader's)."""
_CONVERT = 1 << 22  # keys converted to 64 bits this many at a time (narrow .npy dtypes)


def native_curves(args: argparse.Namespace, seeds: list[int]) -> list[SampledCurve] | None:
    """Each seed's fixed-rate curve of the run's trace, or None when the fast path does not
    apply (the caller then runs the compiled path). O(trace) plus the sampled replays."""
    if args.sample_rate is None or args.sample_size is not None or args.dask or args.window:
        return None
    if getattr(args, "warmup", None) or args.format not in (None, "csv", "tsv", "txt", "npy", "jsonl", "mooncake"):
        return None
    lib = library()
    if lib is None or len(seeds) > 62:  # 62: the C sampler's seeds
        return None
    try:
        files = expand_inputs(args.trace)
    except TraceFormatError:  # a glob matching nothing: the compiled path reports it
        return None
    if any(f == "-" or compression_of(f) or not os.path.isfile(f) for f in files):
        return None
    cut = threshold_for_rate(args.sample_rate)
    sampler = NativeShards(lib, [seed_mix(s) for s in seeds], [cut] * len(seeds), SAMPLE_LIMIT)
    for path in files:
        if not _feed_file(sampler, path, args.format) or sampler.too_large:
            return None
    if sampler.n_accesses == 0 or min(sampler.kept()) == 0 or sampler.kind == 3:
        return None  # nothing to answer, or sized and unit files together: the compiled path says which
    rate = float(rate_of_threshold(cut))
    if sampler.kind == 2:
        return _sized_curves(sampler, seeds, rate)
    return [fixed_rate_curve(counts, cold, keys, rate=rate, n_accesses=sampler.n_accesses, seed=seed)
            for (counts, cold, keys), seed in zip(sampler.histograms(), seeds)]


def _sized_curves(sampler: NativeShards, seeds: list[int], rate: float) -> list[SampledCurve] | None:
    """The seeds' curves of a sized sample; None when a key's size changed or the sizes' sum
    passed 2**62 (the compiled path reports the one, weights the other in floats)."""
    samples = sampler.sized_histograms() if sampler.total_size >= 0 else None
    if samples is None:
        return None
    totals = (sampler.n_accesses, sampler.total_size)
    return [fixed_rate_sized_curve(collapse_sized(d, z), (cold, cold_size), keys, rate=rate, totals=totals, seed=seed,
                                   unit=False)
            for (d, z, cold, cold_size, keys, _), seed in zip(samples, seeds)]


def _feed_file(sampler: NativeShards, path: str, fmt: str | None) -> bool:
    """Feed one local file of the run's format (``--format``, else its name's); False when the
    fast path does not take it."""
    if fmt == "mooncake":
        return _feed_json_lines(sampler, path, lambda s, data: feed_mooncake(s, data, MOONCAKE_BLOCK_SIZE))
    suffix = access_suffix(path, fmt)
    if suffix == ".npy":
        return _feed_npy(sampler, path)
    if suffix in _TEXT:
        return _feed_text(sampler, path, suffix)
    if suffix == ".jsonl":
        return _feed_json_lines(sampler, path, feed_jsonl)
    return False


def _feed_json_lines(sampler: NativeShards, path: str, feed: Callable[[NativeShards, np.ndarray], bool]) -> bool:
    """JSON lines through a scanner of :mod:`~stackdist.engine.scale.native_json`, memory-mapped,
    a UTF-8 BOM at the start dropped (as the compiled path's block reader does)."""
    with _mapped(path) as (mapped, data):
        return mapped is not None and feed(sampler, data[3:] if mapped[:3] == b"\xef\xbb\xbf" else data)


@contextlib.contextmanager
def _mapped(path: str) -> Iterator[tuple[Any, np.ndarray]]:
    """The file memory-mapped read-only, and a uint8 view of it; (None, empty) when it is empty.
    The map is released with the last reference to it or its view (the caller's included)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield None, np.zeros(0, np.uint8)
            return
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    yield mapped, np.frombuffer(mapped, np.uint8)


def _feed_npy(sampler: NativeShards, path: str) -> bool:
    """An integer ``.npy`` array, memory-mapped: 1-D keys (their 64-bit values), or an (n, 2)
    array or a structured one of ``key`` and ``size`` (every size in 1..:data:`EXACT_SIZE`)."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return False
    if not isinstance(array, np.ndarray):
        return False
    if array.dtype.names is not None:
        if array.ndim != 1 or set(array.dtype.names) not in ({"key"}, {"key", "size"}):
            return False
        keys, sizes = array["key"], (array["size"] if "size" in array.dtype.names else None)
    elif array.ndim == 2 and array.shape[1] == 2:
        keys, sizes = array[:, 0], array[:, 1]
    elif array.ndim == 1:
        keys, sizes = array, None
    else:
        return False
    if keys.dtype.kind not in "iu" or (sizes is not None and sizes.dtype.kind not in "iu"):
        return False
    wide = np.dtype(np.int64 if keys.dtype.kind == "i" else np.uint64)
    if sizes is None and keys.dtype == wide and keys.flags.c_contiguous:
        sampler.feed_values(keys)  # the map itself, in one two-thread pass
        return True
    for lo in range(0, max(keys.shape[0], 1), _CONVERT):
        part = np.ascontiguousarray(keys[lo : lo + _CONVERT], dtype=wide)
        if sizes is None:
            sampler.feed_values(part)
            continue
        size = np.asarray(sizes[lo : lo + _CONVERT])
        if size.size and (int(size.min()) < 1 or int(size.max()) > EXACT_SIZE):
            return False  # the compiled path reports a size below 1, weights a huge one in floats
        sampler.feed_sized_values(part, size.astype(np.int64))
    return True


def _feed_text(sampler: NativeShards, path: str, suffix: str) -> bool:
    """Delimited text whose lines are all ``[+-]digits`` or all ``[+-]digits<delim>digits``,
    after an optional ``key`` header or a first line that is a text key (a header of another
    name, as the readers take it)."""
    with _mapped(path) as (mapped, data):
        layout = None if mapped is None else _text_layout(mapped, suffix)
        if layout is None:
            return False
        start, delimiter, first_key = layout
        if first_key is not None:
            sampler.feed_values(np.array([first_key], np.uint64))
        if delimiter is None:
            return sampler.feed_lines(data[start:])
        return sampler.feed_sized_lines(data[start:], delimiter)


def _text_layout(mapped: Any, suffix: str) -> tuple[int, str | None, int | None] | None:
    """(where the C scan begins, the delimiter when the lines hold a size column, the value of a
    first line that is a text key or None): after a UTF-8 BOM, and after a header whose first
    field is ``key`` (any case) or a first line the readers take as a text key (``block_id``,
    say: one field, not a number); the delimiter is ``,`` (.csv), a tab (.tsv) or the first of
    them in the first line (.txt). None when the first line is something else the compiled
    reader must judge (three columns, a comment, a non-numeric first field beside a size)."""
    pos = 3 if mapped[:3] == b"\xef\xbb\xbf" else 0
    while True:
        end = mapped.find(b"\n", pos)
        line = mapped[pos : len(mapped) if end < 0 else end]
        if line.strip(b"\r"):
            break
        if end < 0:
            return pos, None, None
        pos = end + 1
    after = len(mapped) if end < 0 else end + 1
    head = line.strip(b" \r")
    delim = {".csv": b",", ".tsv": b"\t"}.get(suffix) or (b"\t" if b"\t" in head else b"," if b"," in head else None)
    fields = head.split(delim) if delim else [head]
    if len(fields) > 2:
        return None
    sized = None if len(fields) == 1 else delim.decode()  # type: ignore[union-attr]
    if fields[0].strip().lower() == b"key":
        return after, sized, None
    if sized is None and b"," not in head and b"\t" not in head and not re.fullmatch(rb"[+-]?[0-9]+", head):
        value = _text_key_value(head)
        return None if value is None else (after, None, value)
    return pos, sized, None


def _text_key_value(head: bytes) -> int | None:
    """The 64-bit value the readers give the text key of a first line (``key_values`` in
    :mod:`stackdist.traces.stream_input`: blake2b-64 of its UTF-8 text); None for a comment, an
    empty key or text that is not UTF-8 (the compiled path judges those)."""
    try:
        text = head.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if not text or head.startswith(b"#"):
        return None
    import hashlib

    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
