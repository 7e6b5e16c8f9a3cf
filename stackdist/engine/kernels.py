"""The fast path: compiled replay kernels (numba), same results as :mod:`.reference` access by access.

Why numba: the replay is an inherently sequential loop (each access reads the state the
previous one left), so numpy cannot vectorize it; a compiled loop over state that fits in cache
runs at tens of millions of accesses per second. numba ships as wheels (no compiler needed at
install time) and compiles these few functions once; ``cache=True`` keeps the machine code on
disk between runs. Without numba the same functions run as plain Python (correct, about 100x
slower), so the package still works where numba is not available.

State layout (shared by the batch and streaming forms; built by
:class:`stackdist.engine.distances.ReplayState`). A state is *unit* (``slot_size`` empty: every
size is 1) or *sized*; the layout depends only on that, never on a call's ``unit`` flag.

- ``slot_of[k]`` (int32, int64 only past 2**31 slots): the slot of key ``k``'s most recent
  access, or -1 before its first.
- ``size_of[k]``: key ``k``'s size, written at its first access, or an empty array (not kept).
  A sized state checks a key's size against its live slot's size instead.
- ``words[w]`` (uint64): unit states: bit ``b`` is set iff slot ``64 w + b`` is live (holds some
  key's most recent access). Sized states: scratch for compaction (a slot is live iff its size
  is non-zero, sizes being positive).
- ``slot_size[j]`` (sized states): the size in slot ``j`` if live, else 0; the narrowest of
  uint8, int32, int64 that holds the largest size (int64 when unknown, as in a stream).
- ``tree``: a flat *prefix pyramid* (int32 while the largest possible live total fits, else
  int64). Level 0 has one entry per *group*: a word of ``words`` (unit states) or a 64-byte line
  of ``slot_size`` (64 slots of uint8 ... 8 of int64; sized states); each next level one entry
  per 64-byte line of the last (16 int32 or 8 int64 entries), up to a level of one line; levels
  start at whole lines (:func:`level_offsets`). Every line holds the *exclusive prefix sums* of
  its raw entries (the live size in each entry's span): lane ``e`` is the live size of the
  lanes before ``e`` of that line. The live size below slot ``p`` is then one scalar load per
  level plus the part inside ``p``'s group (a popcount of ``p``'s word below its bit, or a
  masked vector sum over its ``slot_size`` line, ``intrinsics.line_sum_below``); an update adds
  to the lanes above the entry, one masked vector add per level
  (``intrinsics.line_add_above``). No data-dependent branch on either side, and no query waits
  on a vector reduction. Measured side by side on 4 M Zipf accesses over 10^5 keys against the
  layouts it replaced: sized 0.57x the time of plain per-entry counts (summed with one masked
  vector reduction per level; itself 0.58-0.65x a Fenwick tree over 16-slot leaves), unit 0.59x
  a Fenwick tree over the words (equal at 2 x 10^6 keys).
- ``scalars = [next_free_slot, total_size_of_live_keys]``.

The replay prefetches: ``PREFETCH_FAR`` accesses ahead it asks for the key's ``slot_of`` entry,
``PREFETCH_NEAR`` ahead (that entry now cached) for the slot's word or group and its level-0
tree entry. With millions of keys the state outgrows the caches and this hides most of the
memory latency (measured 3.1 -> 8.1 M accesses/s at 2 x 10^7 keys under load); a hint never
changes a result. The state's arrays start on 64-byte lines (``distances._aligned_zeros``).

Slots are handed out in access order, so the keys above slot ``p`` are exactly the distinct
keys accessed since slot ``p`` was written. When the slots run out the live ones are renumbered
densely in order (compaction), so the state is O(distinct keys), not O(trace length).
"""

from __future__ import annotations

import numpy as np

from .intrinsics import (
    HAVE_NUMBA,
    line_add_above,
    line_sum_below,
    njit,
    popcount,
    prefetch,
)

__all__ = ["COLD", "HAVE_NUMBA", "NO_ERROR", "arrival_depths", "compact", "njit", "replay", "replay_sized", "replay_unit",
           "segment_running_max", "split_runs"]

COLD = np.iinfo(np.int64).max
NO_ERROR = -1
WORD_SHIFT = 6  # 64 slots per word
PREFETCH_FAR = 16  # accesses ahead: start loading the key's slot_of entry
PREFETCH_NEAR = 6  # accesses ahead: that slot's group and level-0 entry (slot_of is in cache by then)
PACK_SHIFT = 36  # packed counting: hits in the bits above, hit sizes in the 36 bits below
COUNT_LAG = 16  # a distance is counted this many accesses after its table row was prefetched
_ONE = np.uint64(1)

@njit(cache=True, nogil=True, inline="always")
def line_shift(arr):
    """log2 of the entries of ``arr`` in one 64-byte line (uint8: 6, ..., int64: 3)."""
    shift = WORD_SHIFT
    width = arr.itemsize
    while width > 1:
        width >>= 1
        shift -= 1
    return shift


@njit(cache=True, nogil=True)
def level_offsets(capacity, group_shift, tree_shift):
    """Start of every pyramid level in ``tree`` and, last, the tree's length: level 0 has one
    entry per ``2**group_shift`` slots, each next level one per line (``2**tree_shift`` entries)
    of the last, up to a level of one line; levels start at whole lines. O(levels).

    >>> level_offsets(4096, 4, 4).tolist()  # 256 groups of 16 slots, then 16 entries
    [0, 256, 272]
    """
    line = 1 << tree_shift
    levels = 1
    width = group_shift
    while (capacity + (1 << width) - 1) >> width > line:
        levels += 1
        width += tree_shift
    offsets = np.zeros(levels + 1, np.int64)
    width = group_shift
    for level in range(levels):
        entries = (capacity + (1 << width) - 1) >> width
        offsets[level + 1] = offsets[level] + ((entries + line - 1) >> tree_shift << tree_shift)
        width += tree_shift
    return offsets


@njit(cache=True, nogil=True)
def build_levels(words, slot_size, tree, live):
    """Rebuild the prefix pyramid over the live slots ``0..live-1`` (layout: module docstring):
    the raw counts level by level, then every line turned into its exclusive prefix sums. O(slots)."""
    sized = slot_size.shape[0] > 0
    group = line_shift(slot_size) if sized else WORD_SHIFT
    tree_shift = line_shift(tree)
    offsets = level_offsets(slot_size.shape[0] if sized else words.shape[0] << WORD_SHIFT, group, tree_shift)
    tree[:] = 0
    if sized:
        for q in range(live):
            tree[q >> group] += slot_size[q]
    else:
        for w in range((live + 63) >> WORD_SHIFT):
            tree[w] = popcount(words[w])
    for level in range(offsets.shape[0] - 2):
        lo = offsets[level]
        for e in range(offsets[level + 1] - lo):
            tree[offsets[level + 1] + (e >> tree_shift)] += tree[lo + e]
    line = 1 << tree_shift
    for start in range(0, offsets[-1], line):
        acc = 0
        for e in range(start, start + line):
            raw = tree[e]
            tree[e] = acc
            acc += raw


@njit(cache=True, nogil=True)
def compact(slot_of, words, tree, slot_size, scalars):
    """Renumber the live slots densely (keeping their order) and rebuild the pyramid. O(keys + slots),
    without data-dependent branches over the slots."""
    t = scalars[0]
    sized = slot_size.shape[0] > 0
    used = (t + 63) >> WORD_SHIFT
    if sized:  # the live bits, from the sizes
        for w in range(used):
            bits = np.uint64(0)
            first = w << WORD_SHIFT
            for b in range(64):
                bits |= np.uint64(slot_size[first + b] != 0) << np.uint64(b)
            words[w] = bits
    base = np.empty(used + 1, np.int64)
    acc = np.int64(0)  # typed, not the literal 0: numba would also compile build_levels for Literal[int](0)
    for w in range(used):
        base[w] = acc
        acc += popcount(words[w])
    live = acc
    for k in range(slot_of.shape[0]):
        p = slot_of[k]
        if p >= 0:
            w = p >> WORD_SHIFT
            slot_of[k] = base[w] + popcount(words[w] & ((_ONE << np.uint64(p & 63)) - _ONE))
    if sized:
        dst = 0
        for q in range(t):
            v = slot_size[q]
            slot_size[dst] = v
            dst += v != 0
        slot_size[live:t] = 0
    else:
        words[:used] = 0
        words[: live >> WORD_SHIFT] = ~np.uint64(0)
        if live & 63:
            words[live >> WORD_SHIFT] = (_ONE << np.uint64(live & 63)) - _ONE
    build_levels(words, slot_size, tree, live)
    scalars[0] = live


@njit(cache=True, nogil=True)
def count_range(table, distances, sizes, unit, lo, hi):
    """Add ``distances[lo:hi]`` (and their sizes) to a counting table (layouts: :func:`count_into`)."""
    one = np.int64(1) << PACK_SHIFT
    packed = not unit and table.shape[1] == 1
    for i in range(lo, hi):
        d = distances[i]
        if d != COLD:
            if unit:
                table[d, 0] += 1
            elif packed:
                table[d, 0] += one + sizes[i]
            else:
                table[d, 0] += 1
                table[d, 1] += sizes[i]


@njit(cache=True, nogil=True)
def replay(ids, sizes, unit, slot_of, size_of, words, tree, slot_size, scalars, out, table, count_lo, count_hi):
    """Write the stack distance of every access of ``ids`` into ``out``; return -1 or an error index.

    ``sizes[i]`` is access ``i``'s size unless ``unit`` (then every size is 1). The return value
    is the index of the first access whose size differs from its key's earlier size (nothing
    from it on is processed), or -1. With a non-empty counting ``table`` (layouts:
    ``histogram.count_into``) the distances of accesses ``count_lo..count_hi-1`` are also
    counted, ``COUNT_LAG`` accesses late so that their table rows are prefetched first.
    O(log slots) per access, amortized compaction included.

    The distance of a hit at slot ``p`` is the total live size minus the live size below ``p``.
    The loop body is written out here and in :func:`arrival_depths` on purpose: as helper
    functions taking arrays, the compiled loop ran up to twice as slow (numba 0.68, measured).
    """
    sized = slot_size.shape[0] > 0
    cap = words.shape[0] << WORD_SHIFT
    group = line_shift(slot_size) if sized else WORD_SHIFT
    tree_shift = line_shift(tree)
    lane = (1 << tree_shift) - 1
    offsets = level_offsets(cap, group, tree_shift)
    levels = offsets.shape[0] - 1
    counting = table.shape[0] > 0
    flat = table.reshape(-1)
    columns = table.shape[1]
    one = np.int64(1) << PACK_SHIFT
    packed = not unit and table.shape[1] == 1
    keep_sizes = size_of.shape[0] > 0
    t = scalars[0]
    total = scalars[1]
    n = ids.shape[0]
    for i in range(n):
        if i + PREFETCH_FAR < n:
            prefetch(slot_of, ids[i + PREFETCH_FAR])
        if i + PREFETCH_NEAR < n:
            ahead = slot_of[ids[i + PREFETCH_NEAR]]
            if ahead >= 0:
                if sized:
                    prefetch(slot_size, ahead)
                else:
                    prefetch(words, ahead >> WORD_SHIFT)
                prefetch(tree, ahead >> group)
        k = ids[i]
        s = 1 if unit else sizes[i]
        p = slot_of[k]
        if p < 0:
            out[i] = COLD
            if keep_sizes:
                size_of[k] = s
        else:
            if sized:
                if slot_size[p] != s:
                    scalars[0] = t
                    scalars[1] = total
                    if counting:
                        count_range(table, out, sizes, unit, max(count_lo, i - COUNT_LAG), min(count_hi, i))
                    return i
                below = line_sum_below(slot_size, p >> group << group, p & ((1 << group) - 1))
                slot_size[p] = 0
            else:
                bit = _ONE << np.uint64(p & 63)
                below = popcount(words[p >> WORD_SHIFT] & (bit - _ONE))
                words[p >> WORD_SHIFT] &= ~bit
            idx = p >> group
            for level in range(levels):  # read the prefix below p, then take s out of the lanes above
                at = offsets[level] + idx
                below += tree[at]
                line_add_above(tree, at - (idx & lane), idx & lane, -s)
                idx >>= tree_shift
            d = total - below
            out[i] = d
            total -= s
            if counting:
                prefetch(flat, d * columns)
        if counting:
            j = i - COUNT_LAG
            if count_lo <= j < count_hi:
                dj = out[j]
                if dj != COLD:
                    if unit:
                        table[dj, 0] += 1
                    elif packed:
                        table[dj, 0] += one + sizes[j]
                    else:
                        table[dj, 0] += 1
                        table[dj, 1] += sizes[j]
        if t == cap:
            scalars[0] = t
            compact(slot_of, words, tree, slot_size, scalars)
            t = scalars[0]
        if sized:
            slot_size[t] = s
        else:
            words[t >> WORD_SHIFT] |= _ONE << np.uint64(t & 63)
        idx = t >> group
        for level in range(levels):
            line_add_above(tree, offsets[level] + (idx & ~lane), idx & lane, s)
            idx >>= tree_shift
        slot_of[k] = t
        total += s
        t += 1
    if counting:
        count_range(table, out, sizes, unit, max(count_lo, n - COUNT_LAG), min(count_hi, n))
    scalars[0] = t
    scalars[1] = total
    return NO_ERROR


@njit(cache=True, nogil=True)
def replay_unit(ids, slot_of, size_of, words, tree, scalars, out, table, count_lo, count_hi):
    """:func:`replay` for a unit state (``slot_size`` empty, every size 1), written out alone:
    with the sized branches in the same loop the unit replay ran 1.3-1.4x slower (more live
    values than registers; measured at 10^5 and 2 x 10^7 keys). Same results, same state."""
    cap = words.shape[0] << WORD_SHIFT
    tree_shift = line_shift(tree)
    lane = (1 << tree_shift) - 1
    offsets = level_offsets(cap, np.int64(WORD_SHIFT), tree_shift)  # typed: one level_offsets signature
    levels = offsets.shape[0] - 1
    counting = table.shape[0] > 0
    keep_sizes = size_of.shape[0] > 0
    t = scalars[0]
    total = scalars[1]
    n = ids.shape[0]
    for i in range(n):
        if i + PREFETCH_FAR < n:
            prefetch(slot_of, ids[i + PREFETCH_FAR])
        if i + PREFETCH_NEAR < n:
            ahead = slot_of[ids[i + PREFETCH_NEAR]]
            if ahead >= 0:
                prefetch(words, ahead >> WORD_SHIFT)
                prefetch(tree, ahead >> WORD_SHIFT)
        k = ids[i]
        p = slot_of[k]
        if p < 0:
            out[i] = COLD
            if keep_sizes:
                size_of[k] = 1
        else:
            w = p >> WORD_SHIFT
            bit = _ONE << np.uint64(p & 63)
            below = popcount(words[w] & (bit - _ONE))
            words[w] &= ~bit
            idx = w
            for level in range(levels):
                at = offsets[level] + idx
                below += tree[at]
                line_add_above(tree, at - (idx & lane), idx & lane, -1)
                idx >>= tree_shift
            d = total - below
            out[i] = d
            total -= 1
            if counting:
                prefetch(table, d)
        if counting:
            j = i - COUNT_LAG
            if count_lo <= j < count_hi and out[j] != COLD:
                table[out[j], 0] += 1
        if t == cap:
            scalars[0] = t
            compact(slot_of, words, tree, np.zeros(0, np.int64), scalars)
            t = scalars[0]
        words[t >> WORD_SHIFT] |= _ONE << np.uint64(t & 63)
        idx = t >> WORD_SHIFT
        for level in range(levels):
            line_add_above(tree, offsets[level] + (idx & ~lane), idx & lane, 1)
            idx >>= tree_shift
        slot_of[k] = t
        total += 1
        t += 1
    if counting:  # the last COUNT_LAG distances (written out: count_range would compile once more per table dtype)
        for j in range(max(count_lo, n - COUNT_LAG), min(count_hi, n)):
            if out[j] != COLD:
                table[out[j], 0] += 1
    scalars[0] = t
    scalars[1] = total
    return NO_ERROR


@njit(cache=True, nogil=True)
def replay_sized(ids, sizes, slot_of, size_of, words, tree, slot_size, scalars, out):
    """:func:`replay` for a sized state without counting, written out alone for the same reason
    as :func:`replay_unit`: with the unit and counting branches in its loop the sized replay ran
    1.7x slower (4 M Zipf accesses over 10^5 keys, measured side by side). Same results, same
    state, same error index."""
    cap = words.shape[0] << WORD_SHIFT
    group = line_shift(slot_size)
    tree_shift = line_shift(tree)
    lane = (1 << tree_shift) - 1
    offsets = level_offsets(cap, group, tree_shift)
    levels = offsets.shape[0] - 1
    keep_sizes = size_of.shape[0] > 0
    t = scalars[0]
    total = scalars[1]
    n = ids.shape[0]
    for i in range(n):
        if i + PREFETCH_FAR < n:
            prefetch(slot_of, ids[i + PREFETCH_FAR])
        if i + PREFETCH_NEAR < n:
            ahead = slot_of[ids[i + PREFETCH_NEAR]]
            if ahead >= 0:
                prefetch(slot_size, ahead)
                prefetch(tree, ahead >> group)
        k = ids[i]
        s = sizes[i]
        p = slot_of[k]
        if p < 0:
            out[i] = COLD
            if keep_sizes:
                size_of[k] = s
        else:
            if slot_size[p] != s:
                scalars[0] = t
                scalars[1] = total
                return i
            below = line_sum_below(slot_size, p >> group << group, p & ((1 << group) - 1))
            slot_size[p] = 0
            idx = p >> group
            for level in range(levels):
                at = offsets[level] + idx
                below += tree[at]
                line_add_above(tree, at - (idx & lane), idx & lane, -s)
                idx >>= tree_shift
            out[i] = total - below
            total -= s
        if t == cap:
            scalars[0] = t
            compact(slot_of, words, tree, slot_size, scalars)
            t = scalars[0]
        slot_size[t] = s
        idx = t >> group
        for level in range(levels):
            line_add_above(tree, offsets[level] + (idx & ~lane), idx & lane, s)
            idx >>= tree_shift
        slot_of[k] = t
        total += s
        t += 1
    scalars[0] = t
    scalars[1] = total
    return NO_ERROR


@njit(cache=True, nogil=True)
def arrival_depths(ids, sizes, unit, offsets, slot_of, size_of, words, tree, slot_size, scalars, out):
    """Engine semantics: per request, every block's depth in the stack as the request found it.

    Request ``r`` is ``ids[offsets[r]:offsets[r+1]]`` (head first, blocks distinct within a
    request). All its depths are read before any of its blocks is touched; then the blocks are
    committed tail first, so the head ends most recent. A block's depth is its own size plus the
    sizes of the distinct blocks above it (COLD if never seen). Returns -1 or an error index.
    """
    sized = slot_size.shape[0] > 0
    cap = words.shape[0] << WORD_SHIFT
    group = line_shift(slot_size) if sized else WORD_SHIFT
    tree_shift = line_shift(tree)
    lane = (1 << tree_shift) - 1
    at_level = level_offsets(cap, group, tree_shift)
    levels = at_level.shape[0] - 1
    keep_sizes = size_of.shape[0] > 0
    t = scalars[0]
    total = scalars[1]
    for r in range(offsets.shape[0] - 1):
        lo = offsets[r]
        hi = offsets[r + 1]
        for i in range(lo, hi):
            p = slot_of[ids[i]]
            if p < 0:
                out[i] = COLD
                continue
            if sized:
                if slot_size[p] != (1 if unit else sizes[i]):
                    scalars[0] = t
                    scalars[1] = total
                    return i
                below = line_sum_below(slot_size, p >> group << group, p & ((1 << group) - 1))
            else:
                below = popcount(words[p >> WORD_SHIFT] & ((_ONE << np.uint64(p & 63)) - _ONE))
            idx = p >> group
            for level in range(levels):
                below += tree[at_level[level] + idx]
                idx >>= tree_shift
            out[i] = total - below
        for i in range(hi - 1, lo - 1, -1):
            k = ids[i]
            s = 1 if unit else sizes[i]
            p = slot_of[k]
            if p < 0:
                if keep_sizes:
                    size_of[k] = s
            else:
                if sized:
                    slot_size[p] = 0
                else:
                    words[p >> WORD_SHIFT] &= ~(_ONE << np.uint64(p & 63))
                idx = p >> group
                for level in range(levels):
                    line_add_above(tree, at_level[level] + (idx & ~lane), idx & lane, -s)
                    idx >>= tree_shift
                total -= s
            if t == cap:
                scalars[0] = t
                compact(slot_of, words, tree, slot_size, scalars)
                t = scalars[0]
            if sized:
                slot_size[t] = s
            else:
                words[t >> WORD_SHIFT] |= _ONE << np.uint64(t & 63)
            idx = t >> group
            for level in range(levels):
                line_add_above(tree, at_level[level] + (idx & ~lane), idx & lane, s)
                idx >>= tree_shift
            slot_of[k] = t
            total += s
            t += 1
    scalars[0] = t
    scalars[1] = total
    return NO_ERROR


@njit(cache=True, nogil=True)
def segment_running_max(values, offsets):
    """Running maximum of ``values`` restarted at every segment ``offsets[r]:offsets[r+1]``. O(n)."""
    out = np.empty_like(values)
    for r in range(offsets.shape[0] - 1):
        best = values[offsets[r]] if offsets[r] < offsets[r + 1] else 0
        for i in range(offsets[r], offsets[r + 1]):
            best = max(best, values[i])
            out[i] = best
    return out




@njit(cache=True, nogil=True)
def split_runs(ids, lengths, piece, per_id, out_ids, out_lengths):
    """Cut run ``r`` (``lengths[r]`` units, id ``ids[r]``) into pieces of ``piece`` units (the
    last one holds the remainder) with ids ``ids[r] * per_id + j``, j = 0, 1, ...; written into
    ``out_ids`` / ``out_lengths`` (sized by the caller: sum of ceil(length / piece)). O(pieces)."""
    pos = 0
    for r in range(ids.shape[0]):
        left = lengths[r]
        base = ids[r] * per_id
        j = 0
        while left > piece:
            out_ids[pos] = base + j
            out_lengths[pos] = piece
            left -= piece
            pos += 1
            j += 1
        if left > 0:
            out_ids[pos] = base + j
            out_lengths[pos] = left
            pos += 1
