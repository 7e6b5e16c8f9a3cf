"""``curve --sample-rate`` without numba: the whole-process fast path of a sampled curve.

When the trace is one or more plain local files of integer keys with unit sizes (``.npy``
integer arrays; ``.csv``/``.tsv``/``.txt`` whose lines are all ``[+-]digits``, after an
optional ``key`` header; JSONL lines ``{"key": INT}``; ``--format mooncake`` request lines,
their ``hash_ids`` the accesses: :mod:`stackdist.engine.scale.native_json`) and the run asks
for a fixed rate over the whole trace (no ``--sample-size``, ``--window``, ``--warmup`` or
``--dask``), the native library
(:mod:`stackdist.engine.scale.native`) samples and replays it with only numpy imported. The
curves are those of the compiled path (:class:`~stackdist.engine.scale.sampling.ShardsSampler`)
field for field; anything else (another form, a line of another shape, an empty sample, no C
compiler, ``STACKDIST_NATIVE=0``) makes :func:`native_curves` say None, and the compiled path
reads the trace and gives the answer or the error.
"""

from __future__ import annotations

import argparse
import mmap
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from stackdist.engine.scale.estimate import SampledCurve, fixed_rate_curve
from stackdist.engine.scale.native import NativeShards, library
from stackdist.engine.scale.native_json import feed_jsonl, feed_mooncake
from stackdist.engine.scale.thresholds import (
    rate_of_threshold,
    seed_mix,
    threshold_for_rate,
)
from stackdist.errors import TraceFormatError
from stackdist.input_names import access_suffix, compression_of, expand_inputs

__all__ = ["native_curves"]

_TEXT = (".csv", ".tsv", ".txt")
MOONCAKE_BLOCK_SIZE = 512
"""Tokens per block of a Mooncake trace's ``curve`` (``stackdist.traces.formats.DEFAULT_BLOCK_SIZE``,
whose module imports numba)."""
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
    sampler = NativeShards(lib, [seed_mix(s) for s in seeds], [cut] * len(seeds))
    for path in files:
        if not _feed_file(sampler, path, args.format):
            return None
    if sampler.n_accesses == 0 or min(sampler.kept()) == 0 or max(sampler.kept()) >= 2**31 - 1:
        return None  # nothing to answer (the compiled path says why), or past the replay's 32-bit tree
    rate = float(rate_of_threshold(cut))
    return [fixed_rate_curve(counts, cold, keys, rate=rate, n_accesses=sampler.n_accesses, seed=seed)
            for (counts, cold, keys), seed in zip(sampler.histograms(), seeds)]


def _feed_file(sampler: NativeShards, path: str, fmt: str | None) -> bool:
    """Feed one local file of the run's format (``--format``, else its name's); False when the
    fast path does not take it."""
    if fmt == "mooncake":
        return _feed_json_lines(sampler, path, lambda s, data: feed_mooncake(s, data, MOONCAKE_BLOCK_SIZE))
    suffix = access_suffix(path, fmt)
    if suffix == ".npy":
        return _feed_npy(sampler, path)
    if suffix in _TEXT:
        return _feed_text(sampler, path)
    if suffix == ".jsonl":
        return _feed_json_lines(sampler, path, feed_jsonl)
    return False


def _feed_json_lines(sampler: NativeShards, path: str, feed: Callable[[NativeShards, np.ndarray], bool]) -> bool:
    """JSON lines through a scanner of :mod:`~stackdist.engine.scale.native_json`, memory-mapped,
    a UTF-8 BOM at the start dropped (as the compiled path's block reader does)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return False
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            data = np.frombuffer(mapped, np.uint8)
            try:
                return feed(sampler, data[3:] if mapped[:3] == b"\xef\xbb\xbf" else data)
            finally:
                del data  # the map closes only when no array views it


def _feed_npy(sampler: NativeShards, path: str) -> bool:
    """A 1-D integer ``.npy`` array, memory-mapped, keys by their 64-bit value."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return False
    if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype.kind not in "iu":
        return False
    wide = np.dtype(np.int64 if array.dtype.kind == "i" else np.uint64)
    if array.dtype == wide:
        sampler.feed_values(array)
        return True
    for lo in range(0, array.shape[0], _CONVERT):
        sampler.feed_values(np.asarray(array[lo : lo + _CONVERT]).astype(wide))
    return True


def _feed_text(sampler: NativeShards, path: str) -> bool:
    """Delimited text whose lines are all ``[+-]digits``, after an optional ``key`` header."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return False
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            data = np.frombuffer(mapped, np.uint8)
            try:
                start = _data_start(mapped)
                return start is not None and sampler.feed_lines(data[start:])
            finally:
                del data  # the map closes only when no array views it


def _data_start(mapped: Any) -> int | None:
    """Where the data lines begin: after a UTF-8 BOM and a ``key`` header line, when present;
    None when the first non-blank line is neither a key nor that header (a comment, say)."""
    pos = 3 if mapped[:3] == b"\xef\xbb\xbf" else 0
    while True:
        end = mapped.find(b"\n", pos)
        line = mapped[pos : len(mapped) if end < 0 else end]
        if line.strip(b"\r"):
            break
        if end < 0:
            return pos
        pos = end + 1
    head = line.strip(b" \r")
    if b"," not in head and b"\t" not in head and head.strip().lower() == b"key":
        return len(mapped) if end < 0 else end + 1
    return pos
