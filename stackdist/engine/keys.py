"""Keys as dense ids: the engine's input form, and the checks on per-access sizes.

Package-internal helpers shared by every replay (:mod:`.distances`, :mod:`.curve`,
:mod:`.stream`, :mod:`.tiers`) live here with public names.

>>> dense_keys(["x", "y", "x"]).ids.tolist()
[0, 1, 0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .intrinsics import njit

__all__ = ["SIZE_LIMIT", "DenseKeys", "KeyIdMap", "check_sizes", "check_total_size", "checked_sizes", "dense_keys",
           "first_size_change", "unique_sorted"]

_DIRECT_ID_LIMIT = 1 << 22


@dataclass(frozen=True)
class DenseKeys:
    """A trace's keys as dense integer ids ``0..n_keys-1`` (the engine's input form)."""

    ids: np.ndarray
    n_keys: int
    original: Any = field(repr=False, default=None)

    def key_of(self, position: int) -> Any:
        """The user's key at access ``position`` (for error messages)."""
        key = self.original[position]
        return key.item() if isinstance(key, np.generic) else key


def dense_keys(keys: Sequence[Any] | np.ndarray) -> DenseKeys:
    """Map any hashable keys (or integer ids) to dense int64 ids.

    Non-negative integer arrays with a small maximum are used as they are (``n_keys`` is then
    ``max + 1``); other integers go through an open-addressing hash table; anything else
    through a dict. O(n) expected.

    >>> dense_keys(np.array([7, 3, 7])).ids.tolist()
    [7, 3, 7]
    >>> dense_keys(["x", "y", "x"]).ids.tolist()
    [0, 1, 0]
    """
    arr = keys if isinstance(keys, np.ndarray) else _key_array(list(keys))
    if arr.ndim != 1:
        raise ValueError(f"keys must be one-dimensional; got shape {arr.shape}.")
    if arr.size == 0:
        return DenseKeys(np.zeros(0, np.int64), 0, arr)
    if arr.dtype.kind in "iu":
        return _dense_integer_keys(arr)
    if arr.dtype.kind == "b":
        return DenseKeys(arr.astype(np.int64), 2, arr)
    mapping: dict[Any, int] = {}
    ids = np.fromiter((mapping.setdefault(k, len(mapping)) for k in arr.tolist()), np.int64, arr.size)
    return DenseKeys(ids, len(mapping), arr)


def _key_array(items: list[Any]) -> np.ndarray:
    """A 1-D array of the keys: integer dtype when every key is an int, else object."""
    if items and all(isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)) for k in items):
        for dtype in (np.int64, np.uint64):
            try:
                return np.array(items, dtype=dtype)
            except OverflowError:
                pass
    return np.fromiter(items, dtype=object, count=len(items))


def _dense_integer_keys(arr: np.ndarray) -> DenseKeys:
    lo, hi = (int(v) for v in min_max(arr))
    if lo >= 0 and hi < max(2 * arr.size, _DIRECT_ID_LIMIT):
        return DenseKeys(arr.astype(np.int64, copy=False), hi + 1, arr)
    values = arr.astype(np.int64, copy=False).view(np.uint64) if arr.dtype.kind == "i" else arr.astype(np.uint64, copy=False)
    bits = max(16, int(np.ceil(np.log2(max(arr.size, 2)))) - 2)
    while True:
        ids, _uniques, n = factorize(values, bits)
        if n >= 0:
            return DenseKeys(ids, int(n), arr)
        bits += 2


def check_sizes(sizes: Any, n: int) -> np.ndarray | None:
    """Per-access sizes as int64 (None for unit sizes); ValueError unless positive integers, one per access.

    >>> check_sizes([2, 3], 2).tolist()
    [2, 3]
    """
    return checked_sizes(sizes, n)[0]


def checked_sizes(sizes: Any, n: int) -> tuple[np.ndarray | None, int | None, int]:
    """:func:`check_sizes` with what its checks found: (sizes, largest size or None, exact total),
    from one compiled pass (min, max and sum together) when the total cannot overflow.

    >>> checked_sizes([2, 3], 2)[1:], checked_sizes(None, 4)[1:]
    ((3, 5), (None, 4))
    """
    if sizes is None:
        return None, None, n
    arr = np.asarray(sizes)
    if arr.shape != (n,):
        raise ValueError(f"sizes must have one entry per access ({n}); got shape {arr.shape}.")
    if n == 0:
        return arr.astype(np.int64), None, 0
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError("sizes must be positive integers; got a non-integer value.")
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"sizes must be positive integers; got dtype {arr.dtype}.")
    arr = arr.astype(np.int64, copy=False)
    lo, hi, wrapped = (int(v) for v in min_max_sum(arr))
    if lo <= 0:
        bad = int(np.argmax(arr <= 0))
        raise ValueError(f"sizes must be positive integers; got {int(arr[bad])} at position {bad}.")
    total = wrapped if hi * n < 2**62 else check_total_size(arr, hi)  # the int64 sum is exact below 2**62
    return arr, hi, total


SIZE_LIMIT = 2**63 - 2
"""The largest total size a trace may have: every distance and hit size stays below the
cold sentinel (``COLD`` = 2**63 - 1), so no sum can wrap or be mistaken for a cold miss."""


def check_total_size(sizes: np.ndarray, largest: int | None = None) -> int:
    """The exact total of ``sizes`` (int64, positive); ValueError when it exceeds :data:`SIZE_LIMIT`.
    ``largest``, the largest size if known, lets small totals skip the overflow guard's pass.

    >>> check_total_size(np.array([2**62, 2**62 - 3]))
    9223372036854775805
    """
    if sizes.size == 0:
        return 0
    if largest is not None and largest * sizes.size < 2**62:
        return int(np.sum(sizes))
    rough = float(np.sum(sizes, dtype=np.float64))
    total = int(np.sum(sizes)) if rough < 2.0**62 else sum(sizes.tolist())
    if total > SIZE_LIMIT:
        raise ValueError(f"the sizes sum to {total:,}, more than 2^63-2: the counts would overflow 64 bits; "
                         "use a coarser size unit (e.g. blocks or KiB instead of bytes).")
    return total


def first_size_change(keys: np.ndarray, sizes: np.ndarray | None) -> int | None:
    """The first access (0-based) whose key had another size before, or None. O(n log n).

    >>> first_size_change(np.array([1, 2, 1, 1]), np.array([3, 3, 3, 4]))
    3
    """
    if sizes is None or sizes.size == 0:
        return None
    ids = dense_keys(keys).ids
    order = np.argsort(ids, kind="stable")
    sid, ssz = ids[order], sizes[order]
    changed = (sid[1:] == sid[:-1]) & (ssz[1:] != ssz[:-1])
    if not np.any(changed):
        return None
    return int(order[1:][changed].min())


def unique_sorted(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an array: a presence table when they are non-negative
    integers below about twice their count (O(n), no sort), else one sort and a mask.

    (``np.unique`` on large integer arrays is many times slower on some numpy versions.)

    >>> unique_sorted(np.array([3, 1, 3, 2])).tolist(), unique_sorted(np.array([10**12, -1, 10**12])).tolist()
    ([1, 2, 3], [-1, 1000000000000])
    """
    arr = np.asarray(values).ravel()
    if arr.size > 64 and arr.dtype.kind in "iu":
        lo, hi = int(arr.min()), int(arr.max())
        if lo >= 0 and hi < 2 * arr.size + 1024:
            seen = np.zeros(hi + 1, bool)
            seen[arr] = True
            return np.flatnonzero(seen).astype(arr.dtype, copy=False)
    ordered = np.sort(arr)
    if ordered.size == 0:
        return ordered
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]]


@njit(cache=True, nogil=True)
def factorize(values, table_bits):
    """Dense ids 0..n-1 in order of first appearance for uint64 ``values`` (open addressing,
    :func:`assign_ids` on a fresh table).

    Returns ``(ids, uniques, n)``, or ``n == -1`` when the table (``2**table_bits`` slots) got
    more than half full; the caller then retries with a larger table. O(1) expected per value.
    """
    size = 1 << table_bits
    table_keys = np.empty(size, np.uint64)
    table_ids = np.full(size, -1, np.int64)
    ids = np.empty(values.shape[0], np.int64)
    uniques = np.empty(size // 2, np.uint64)
    order = np.empty(size // 2, np.int64)
    zero = np.int64(0)  # typed, not the literal 0: one assign_ids signature for this call and KeyIdMap's
    done, _, n = assign_ids(values, zero, ids, table_keys, table_ids, uniques, order, zero, zero, np.int64(64 - table_bits))
    if done < values.shape[0]:
        return ids, uniques, -1
    return ids, uniques[:n], n


@njit(cache=True, nogil=True)
def min_max(values):
    """(smallest, largest) of a non-empty array in one pass (branch-free: it vectorizes; 4x
    faster than compare-and-branch on 4 M int64, measured)."""
    lo = values[0]
    hi = values[0]
    for i in range(values.shape[0]):
        v = values[i]
        lo = min(lo, v)
        hi = max(hi, v)
    return lo, hi


@njit(cache=True, nogil=True)
def min_max_sum(values):
    """(smallest, largest, int64 sum wrapping on overflow) of a non-empty int64 array in one pass."""
    lo = values[0]
    hi = values[0]
    total = np.int64(0)
    for i in range(values.shape[0]):
        v = values[i]
        lo = min(lo, v)
        hi = max(hi, v)
        total += v
    return lo, hi, total


class KeyIdMap:
    """Ids for uint64 key values, kept across batches: a stream's key dictionary, compiled. While
    every value is below ``direct`` (2**24: a trace's small dense ids) the values are their own
    ids; from the first batch with a larger one, the small values seen so far keep their ids in
    an open-addressing table (at most half full, doubled as keys arrive) and new keys get the next
    ids, in order of first appearance. O(1) expected per value; memory O(distinct keys) plus a
    ``direct``-bit map, not the stream. Every id given is below :attr:`n_keys`.

    >>> m = KeyIdMap(direct=8); m.ids(np.array([7, 3, 7], np.uint64)).tolist(), m.ids(np.array([90, 3, 50, 90], np.uint64)).tolist()
    ([7, 3, 7], [8, 3, 9, 8])
    >>> m.n_keys
    10
    """

    def __init__(self, bits: int = 12, direct: int = 1 << 24) -> None:
        self.n_keys = 0
        self._entries = 0  # keys in the table
        self._direct = direct
        self._seen = np.zeros(0, np.bool_)  # the direct ids seen
        self._bits = bits
        self._table_keys = np.empty(1 << bits, np.uint64)
        self._table_ids = np.full(1 << bits, -1, np.int64)
        self._pair_keys = np.empty(1 << (bits - 1), np.uint64)  # the table's entries, in insertion order
        self._pair_ids = np.empty(1 << (bits - 1), np.int64)

    @property
    def nbytes(self) -> int:
        """Bytes of the table, its entries and the direct ids' map. O(1)."""
        return sum(a.nbytes for a in (self._table_keys, self._table_ids, self._pair_keys, self._pair_ids, self._seen))

    def ids(self, values: np.ndarray) -> np.ndarray:
        """The ids of one batch of uint64 ``values``. O(len)."""
        if self._direct and values.shape[0]:
            hi = int(min_max(values)[1])
            if hi < self._direct:
                if hi >= self._seen.shape[0]:
                    self._seen = np.concatenate([self._seen, np.zeros(max(hi + 1, 2 * self._seen.shape[0]) - self._seen.shape[0], np.bool_)])
                self._seen[values] = True
                self.n_keys = max(self.n_keys, hi + 1)
                return values.astype(np.int64)
            self._start_table()
        out = np.empty(values.shape[0], np.int64)
        done = 0
        while done < values.shape[0]:
            done, self._entries, self.n_keys = assign_ids(values, done, out, self._table_keys, self._table_ids,
                                                          self._pair_keys, self._pair_ids, self._entries, self.n_keys,
                                                          64 - self._bits)
            if done < values.shape[0]:  # half full: double the table
                self._resize(self._bits + 1)
        return out

    def _resize(self, bits: int) -> None:
        """A table of 2**bits slots holding the same entries. O(entries)."""
        self._bits = bits
        self._table_keys = np.empty(1 << bits, np.uint64)
        self._table_ids = np.full(1 << bits, -1, np.int64)
        room = 1 << (bits - 1)
        self._pair_keys = np.concatenate([self._pair_keys, np.empty(room - self._pair_keys.shape[0], np.uint64)])
        self._pair_ids = np.concatenate([self._pair_ids, np.empty(room - self._pair_ids.shape[0], np.int64)])
        reinsert_ids(self._table_keys, self._table_ids, self._pair_keys, self._pair_ids, self._entries, 64 - bits)

    def _start_table(self) -> None:
        """Leave the direct ids: the ids seen go into the table as their own keys."""
        seen = np.flatnonzero(self._seen)
        self._direct, self._seen = 0, np.zeros(0, np.bool_)
        bits = self._bits
        while (1 << (bits - 1)) <= seen.shape[0]:
            bits += 1
        self._pair_keys = seen.astype(np.uint64)
        self._pair_ids = seen.astype(np.int64)
        self._entries = int(seen.shape[0])
        self._resize(bits)


@njit(cache=True, nogil=True)
def _slot(v, shift):
    return ((v ^ (v >> np.uint64(31))) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(shift)


@njit(cache=True, nogil=True)
def assign_ids(values, start, out, table_keys, table_ids, pair_keys, pair_ids, entries, n, shift):
    """:func:`factorize` continued from a table of ``entries`` keys, new keys getting ids ``n,
    n + 1, ...``: ``out[i]`` for ``i`` from ``start`` until the table is half full (or the end).
    Returns (next i, entries, n). O(1) expected per value."""
    mask = np.uint64(table_keys.shape[0] - 1)
    limit = table_keys.shape[0] // 2
    for i in range(start, values.shape[0]):
        v = values[i]
        h = _slot(v, shift)
        while True:
            j = table_ids[h]
            if j < 0:
                if entries >= limit:
                    return i, entries, n
                table_keys[h] = v
                table_ids[h] = n
                pair_keys[entries] = v
                pair_ids[entries] = n
                out[i] = n
                entries += 1
                n += 1
                break
            if table_keys[h] == v:
                out[i] = j
                break
            h = (h + np.uint64(1)) & mask
    return values.shape[0], entries, n


@njit(cache=True, nogil=True)
def reinsert_ids(table_keys, table_ids, pair_keys, pair_ids, entries, shift):
    """Put the first ``entries`` (key, id) pairs into an empty table. O(entries)."""
    mask = np.uint64(table_keys.shape[0] - 1)
    for j in range(entries):
        h = _slot(pair_keys[j], shift)
        while table_ids[h] >= 0:
            h = (h + np.uint64(1)) & mask
        table_keys[h] = pair_keys[j]
        table_ids[h] = pair_ids[j]
