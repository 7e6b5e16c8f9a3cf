"""Stack distances: one replay of a trace gives every access's LRU stack distance.

The stack distance of an access is its own size plus the sizes of the distinct other keys
accessed since that key's previous access. A first access has no distance: it is a cold miss,
marked by the sentinel :data:`COLD` (the largest int64, so ``distance <= capacity`` is False for
every capacity and comparisons need no special case). At capacity ``C`` an access hits an LRU
cache iff its distance is at most ``C``, provided no object larger than ``C`` is in the trace
(see :mod:`stackdist.engine.curve` for that case).

>>> stack_distances([1, 2, 1, 3, 2, 1]).tolist() == [COLD, COLD, 2, COLD, 3, 3]
True
>>> stack_distances(["a", "b", "a"], sizes=[5, 3, 5]).tolist()[2]
8
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from . import kernels
from .kernels import COLD
from .keys import DenseKeys, check_sizes, dense_keys

__all__ = [
    "COLD",
    "ReplayState",
    "engine_depths",
    "raise_size_mismatch",
    "replay_arrival_depths",
    "replay_distances",
    "replay_keeping_state",
    "stack_distances",
]


class ReplayState:
    """The mutable replay state of :mod:`.kernels` (its layout is documented there), grown as
    keys appear. Package-internal: shared by the batch replays here and :mod:`.stream`.

    ``sized``: keep per-slot sizes (a sized replay); ``track_sizes``: keep ``size_of`` (a key's
    size as first seen; a batch replay can do without it, its caller has the sizes).
    ``max_size`` / ``max_total``: the largest size and the largest possible live total, when
    known, choose the narrowest per-slot and pyramid integers (int64 when unknown, as in a
    stream). ``slots_per_key``: capacity per key (more slots, fewer compactions).
    """

    def __init__(self, n_keys: int = 0, sized: bool = True, track_sizes: bool = True, max_size: int | None = None,
                 max_total: int | None = None, slots_per_key: int = 2) -> None:
        self.sized = sized
        self.track_sizes = track_sizes
        self.slots_per_key = slots_per_key
        cap = _round_slots(slots_per_key * n_keys, sized)
        self.slot_of: np.ndarray = np.full(n_keys, -1, _slot_dtype(cap))
        self.size_of = np.zeros(n_keys if track_sizes else 0, np.int64)
        self.words = _aligned_zeros(cap >> kernels.WORD_SHIFT, np.uint64)
        self.slot_size: np.ndarray = _aligned_zeros(cap if sized else 0, _size_dtype(max_size))
        self.tree_dtype: type = np.int32 if sized and max_total is not None and max_total < 2**31 else np.int64
        self.tree: np.ndarray = self._pyramid(cap)
        self.scalars = np.zeros(2, np.int64)

    def _pyramid(self, cap: int) -> np.ndarray:
        """The zeroed prefix pyramid for ``cap`` slots (layout: :mod:`.kernels`): over words for a
        unit state (int32 counts while the slots fit), over ``slot_size`` lines when sized."""
        dtype = self.tree_dtype if self.sized else _slot_dtype(cap)
        group = int(kernels.line_shift(self.slot_size)) if self.sized else kernels.WORD_SHIFT
        shift = int(kernels.line_shift(np.zeros(0, dtype)))
        return _aligned_zeros(int(kernels.level_offsets(cap, group, shift)[-1]), dtype)

    @property
    def capacity(self) -> int:
        """Slots (a multiple of 64 when sized, 512 for unit sizes)."""
        return self.words.shape[0] << kernels.WORD_SHIFT

    def reserve(self, n_keys: int) -> None:
        """Make room for key ids below ``n_keys`` (capacity stays at least twice the keys)."""
        old = self.slot_of.shape[0]
        if n_keys > old:
            grow = max(n_keys, 2 * old)
            self.slot_of = np.concatenate([self.slot_of, np.full(grow - old, -1, self.slot_of.dtype)])
            if self.track_sizes:
                self.size_of = np.concatenate([self.size_of, np.zeros(grow - old, np.int64)])
        if self.capacity < 2 * n_keys:
            cap = _round_slots(2 * max(n_keys, self.capacity), self.sized)
            if _slot_dtype(cap) != self.slot_of.dtype:
                self.slot_of = self.slot_of.astype(_slot_dtype(cap))
            words = _aligned_zeros(cap >> kernels.WORD_SHIFT, np.uint64)
            words[: self.words.shape[0]] = self.words
            self.words = words
            if self.sized:
                slot_size = _aligned_zeros(cap, self.slot_size.dtype)
                slot_size[: self.slot_size.shape[0]] = self.slot_size
                self.slot_size = slot_size
            self.tree = self._pyramid(cap)
            kernels.compact(self.slot_of, self.words, self.tree, self.slot_size, self.scalars)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.slot_of, self.size_of, self.words, self.tree, self.slot_size))

    def size_of_key(self, key_id: int) -> int:
        """The size of a key seen before (from ``size_of`` or its live slot)."""
        if self.track_sizes:
            return int(self.size_of[key_id])
        return int(self.slot_size[self.slot_of[key_id]]) if self.sized else 1

    def run(self, kernel: Any, ids: np.ndarray, sizes: np.ndarray | None, out: np.ndarray, *extra: Any) -> int:
        """Run a replay kernel of :mod:`.kernels` on this state; returns its error index or -1.

        ``kernels.replay`` takes ``extra`` after the state (a counting table and a window; none:
        no counting); ``kernels.arrival_depths`` takes its request offsets before it.
        """
        unit = sizes is None
        if not unit and not self.sized:
            raise ValueError("this replay state was made for unit sizes")
        size_arg = _UNIT_SIZES if unit else sizes
        state = (self.slot_of, self.size_of, self.words, self.tree, self.slot_size, self.scalars, out)
        if kernel is kernels.arrival_depths or getattr(kernel, "__name__", "") == "arrival_depths":
            return int(kernel(ids, size_arg, unit, *extra, *state))
        if kernel is kernels.replay and not self.sized:  # the unit-only loop (faster; same results)
            return int(kernels.replay_unit(ids, self.slot_of, self.size_of, self.words, self.tree, self.scalars, out,
                                           *(extra or (_NO_UNIT_TABLE, 0, 0))))
        counting = extra or (_NO_TABLE, 0, 0)
        if kernel is kernels.replay and not unit and not extra:  # the sized loop without counting (faster; same)
            return int(kernels.replay_sized(ids, sizes, self.slot_of, self.size_of, self.words, self.tree, self.slot_size,
                                            self.scalars, out))
        return int(kernel(ids, size_arg, unit, *state, *counting))


_UNIT_SIZES = np.ones(1, np.int64)
_NO_TABLE = np.zeros((0, 1), np.int64)
_NO_UNIT_TABLE = np.zeros((0, 1), np.int32)  # the dtype of a unit CountingTable: one replay_unit signature for both


def _aligned_zeros(count: int, dtype: Any) -> np.ndarray:
    """Zeros whose first element starts a 64-byte cache line, so that each 64-byte line the
    kernels load as one vector is one cache line (numpy aligns large arrays to 16 bytes only)."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.zeros(count + 64 // itemsize, dtype)
    skip = (-raw.ctypes.data % 64) // itemsize
    return raw[skip : skip + count]


def _round_slots(slots: int, sized: bool) -> int:
    """Whole words (64 slots; a sized state's groups are at most 64 slots)."""
    return max(-(-slots // 64) * 64, 64)


def _size_dtype(max_size: int | None) -> type:
    """Per-slot sizes in the narrowest of uint8, int32 and int64 that holds the largest size
    (int64 when unknown): a 64-byte group is then 64, 16 or 8 slots, loaded as one vector.

    No uint16: measured side by side (sizes 1000..64000, 4 M and 10 M Zipf accesses over 10^5
    keys, 4 M over 2 x 10^6), uint16 slot sizes ran at 0.98-1.02x the time of int32 ones, while
    each size dtype costs numba a compile of the sized replay, compaction and pyramid build
    (about 3.5 s of CPU on a cold cache). uint8 (sizes up to 255) is 0.90-0.95x int32's time.
    """
    if max_size is None:
        return np.int64
    for dtype in (np.uint8, np.int32):
        if max_size <= np.iinfo(dtype).max:
            return dtype
    return np.int64


def _largest(sizes: np.ndarray | None) -> int | None:
    return int(sizes.max()) if sizes is not None and sizes.size else None


def _slot_dtype(cap: int) -> type:
    """int32 slots while they fit (half the memory traffic of the key-to-slot map)."""
    return np.int32 if cap < 2**31 else np.int64


def raise_size_mismatch(
    keys: DenseKeys, sizes: np.ndarray | None, state: ReplayState, position: int, offset: int = 0
) -> NoReturn:
    """Raise the error for a key whose size changed at ``position`` (a kernel's error index)."""
    assert sizes is not None, "unit sizes cannot change"
    key_id = int(keys.ids[position])
    raise ValueError(
        f"key {keys.key_of(position)!r} has size {state.size_of_key(key_id)} earlier but size "
        f"{int(sizes[position])} at position {position + offset}; a key's size must be fixed."
    )


def stack_distances(keys: Sequence[Any] | np.ndarray, sizes: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """The LRU stack distance of every access (int64; :data:`COLD` for a first access).

    ``keys``: any hashable keys or integer ids, one per access. ``sizes``: positive integers,
    one per access (unit sizes when None); a key's size must not change.
    O(n log k) time for n accesses over k distinct keys, O(k) state.

    >>> stack_distances([0, 1, 2, 0, 0]).tolist()[3:]
    [3, 1]
    """
    dk = dense_keys(keys)
    return replay_distances(dk, check_sizes(sizes, dk.ids.shape[0]))


_CHUNK = 1 << 21


def replay_distances(dense: DenseKeys, sizes: np.ndarray | None, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """Stack distances of already-dense ids (the shared core of every replay)."""
    return replay_keeping_state(dense, sizes, progress)[0]


def replay_keeping_state(
    dense: DenseKeys,
    sizes: np.ndarray | None,
    progress: Callable[[int, int], None] | None = None,
    on_chunk: Callable[[int, int, np.ndarray], None] | None = None,
    chunk: int | None = None,
    table: np.ndarray | None = None,
    window: tuple[int, int] = (0, 0),
    max_total: int | None = None,
    max_size: int | None = None,
) -> tuple[np.ndarray, ReplayState]:
    """Stack distances and the final replay state (its ``size_of`` holds every key's size when
    sized; ``scalars[1]`` the total size of the distinct keys).

    With ``progress`` or ``on_chunk`` the replay runs in chunks of ``chunk`` accesses, calling
    ``progress(done, total)`` and ``on_chunk(lo, hi, distances[lo:hi])`` after each. With a
    counting ``table`` (see :class:`stackdist.engine.histogram.CountingTable`) the distances of
    the accesses in ``window`` are counted into it during the replay. ``max_total``: a bound on
    the total size of the distinct keys, if known (narrower pyramid integers); ``max_size``:
    the largest size, if known (saves a pass).
    """
    n = dense.ids.shape[0]
    out = np.empty(n, np.int64)
    sized = sizes is not None
    max_size = max_size or _largest(sizes)
    if max_total is None and max_size is not None:
        max_total = dense.n_keys * max_size  # the live keys' total is at most this: narrower pyramid integers
    state = ReplayState(dense.n_keys, sized=sized, track_sizes=sized, max_size=max_size, max_total=max_total)
    step = n if progress is None and on_chunk is None else chunk or _CHUNK
    start, stop = window
    for lo in range(0, n, max(step, 1)):
        hi = min(n, lo + step)
        chunk_sizes = None if sizes is None else sizes[lo:hi]
        extra = () if table is None else (table, max(start - lo, 0), max(min(stop, hi) - lo, 0))
        error = state.run(kernels.replay, dense.ids[lo:hi], chunk_sizes, out[lo:hi], *extra)
        if error >= 0:
            raise_size_mismatch(dense, sizes, state, lo + error)
        if on_chunk is not None:
            on_chunk(lo, hi, out[lo:hi])
        if progress is not None:
            progress(hi, n)
    return out, state


def engine_depths(
    keys: Sequence[Any] | np.ndarray, offsets: Sequence[int] | np.ndarray, sizes: Sequence[int] | np.ndarray | None = None
) -> np.ndarray:
    """Arrival-time depths of every block under engine (request-at-a-time) semantics.

    Request ``r`` is ``keys[offsets[r]:offsets[r+1]]``, head first. Each block's depth is
    measured in the stack as the request found it (its own size plus the sizes of the distinct
    blocks above it; :data:`COLD` if never seen); then the request's blocks are committed tail
    first, so its head ends most recent. A block hits at capacity ``C`` under engine semantics
    iff the running maximum of depths up to and including it is at most ``C``.
    O(n log k).

    >>> engine_depths([0, 1, 0, 1], [0, 2, 4]).tolist() == [COLD, COLD, 1, 2]
    True
    """
    dk = dense_keys(keys)
    size_arr = check_sizes(sizes, dk.ids.shape[0])
    offs = np.asarray(offsets, dtype=np.int64)
    if offs.ndim != 1 or offs.size == 0 or offs[0] != 0 or offs[-1] != dk.ids.shape[0] or np.any(np.diff(offs) < 0):
        raise ValueError(
            f"offsets must be non-decreasing, start at 0 and end at the number of accesses ({dk.ids.shape[0]})."
        )
    return replay_arrival_depths(dk, size_arr, offs)


_CHUNK_BLOCKS = 1 << 21


def replay_arrival_depths(
    dense: DenseKeys, sizes: np.ndarray | None, offsets: np.ndarray, progress: Callable[[int, int], None] | None = None
) -> np.ndarray:
    """Arrival-time depths of dense ids, whole requests at a time in chunks of about 2M blocks."""
    n = dense.ids.shape[0]
    out = np.empty(n, np.int64)
    max_size = _largest(sizes)
    max_total = None if max_size is None else dense.n_keys * max_size  # as replay_keeping_state: narrower pyramid
    state = ReplayState(dense.n_keys, sized=sizes is not None, track_sizes=sizes is not None, max_size=max_size,
                        max_total=max_total)
    n_req = offsets.shape[0] - 1
    r = 0
    while r < n_req:
        stop = min(max(int(np.searchsorted(offsets, offsets[r] + _CHUNK_BLOCKS, side="right")) - 1, r + 1), n_req)
        lo, hi = int(offsets[r]), int(offsets[stop])
        chunk_sizes = None if sizes is None else sizes[lo:hi]
        error = state.run(kernels.arrival_depths, dense.ids[lo:hi], chunk_sizes, out[lo:hi], offsets[r : stop + 1] - lo)
        if error >= 0:
            raise_size_mismatch(dense, sizes, state, lo + error)
        if progress is not None:
            progress(hi, n)
        r = stop
    return out
