"""The fast path: compiled replay kernels (numba), same results as :mod:`.reference` access by access.

Why numba: the replay is an inherently sequential loop (each access reads the state the
previous one left), so numpy cannot vectorize it; a compiled loop over a Fenwick tree that fits
in cache runs at tens of millions of accesses per second. numba ships as wheels (no compiler
needed at install time) and compiles these few functions once; ``cache=True`` keeps the
machine code on disk between runs. Without numba the same functions run as plain Python
(correct, about 100x slower), so the package still works where numba is not available.

State layout (shared by the batch and streaming forms):

- ``slot_of[k]``: the Fenwick slot of key ``k``'s most recent access, or -1 before its first.
- ``size_of[k]``: key ``k``'s size (fixed per key), 0 before its first access.
- ``key_at[j]``: the key whose most recent access sits in slot ``j``, or -1.
- ``tree``: a Fenwick tree (1-based, length ``cap + 1``) of sizes over slots; only the
  nodes of used slots are valid (see :func:`replay`).
- ``scalars = [next_free_slot, total_size_of_live_keys]``.

Slots are handed out in access order, so the keys above slot ``p`` are exactly the distinct
keys accessed since slot ``p`` was written. When the slots run out the live ones are renumbered
densely in order (compaction), so the state is O(distinct keys), not O(trace length).
"""

from __future__ import annotations

import numpy as np

try:  # pragma: no cover - exercised implicitly
    from numba import njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - the fallback is tested by running without jit
    HAVE_NUMBA = False

    def njit(*args, **kwargs):  # type: ignore[no-redef]
        """Stand-in for numba.njit: return the function unchanged."""
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda f: f


COLD = np.iinfo(np.int64).max
NO_ERROR = -1


@njit(cache=True, nogil=True, inline="always")
def _prefix_sum(tree, slot):
    """Sum of the sizes in slots 0..slot (inclusive). O(log slot)."""
    total = 0
    i = slot + 1
    while i > 0:
        total += tree[i]
        i &= i - 1
    return total


@njit(cache=True, nogil=True, inline="always")
def _remove(tree, slot, used, size):
    """Subtract ``size`` at ``slot`` from every built node above it (nodes 1..used)."""
    i = slot + 1
    while i <= used:
        tree[i] -= size
        i += i & (-i)


@njit(cache=True, nogil=True, inline="always")
def _append(tree, slot, size):
    """Build node ``slot + 1`` for a new last slot holding ``size``: its value plus its children
    (nodes i-1, i-2, i-4, ... below its low bit). O(1) amortized."""
    i = slot + 1
    low = i & (-i)
    acc = size
    j = 1
    while j < low:
        acc += tree[i - j]
        j <<= 1
    tree[i] = acc


@njit(cache=True, nogil=True)
def compact(slot_of, size_of, key_at, tree, scalars):
    """Renumber the live slots densely (keeping their order) and rebuild the tree in O(cap)."""
    cap = key_at.shape[0]
    live = 0
    for j in range(cap):
        k = key_at[j]
        if k >= 0:
            key_at[j] = -1
            key_at[live] = k
            slot_of[k] = live
            live += 1
    for j in range(live):
        _append(tree, j, size_of[key_at[j]])
    scalars[0] = live


@njit(cache=True, nogil=True)
def replay(ids, sizes, unit, slot_of, size_of, key_at, tree, scalars, out):
    """Write the stack distance of every access of ``ids`` into ``out``; return -1 or an error index.

    ``sizes[i]`` is access ``i``'s size unless ``unit`` (then every size is 1). The return value
    is the index of the first access whose size differs from its key's earlier size (nothing
    from it on is processed), or -1. O(log cap) per access, amortized compaction included.

    Only the tree nodes of used slots (1..t) are kept up to date: a new last slot builds its
    node from its children, and a removal stops at the last used node, so appending is O(1)
    and a removal costs O(log(t - p)) rather than O(log cap).
    """
    cap = key_at.shape[0]
    t = scalars[0]
    total = scalars[1]
    # The loop body is written out here and in arrival_depths on purpose: as helper functions
    # (even inlined) the compiled loop ran up to twice as slow (numba 0.68, measured).
    for i in range(ids.shape[0]):
        k = ids[i]
        s = 1 if unit else sizes[i]
        p = slot_of[k]
        if p < 0:
            out[i] = COLD
            size_of[k] = s
        else:
            if not unit and size_of[k] != s:
                scalars[0] = t
                scalars[1] = total
                return i
            out[i] = total - _prefix_sum(tree, p) + s
            _remove(tree, p, t, s)
            key_at[p] = -1
            total -= s
        if t == cap:
            scalars[0] = t
            compact(slot_of, size_of, key_at, tree, scalars)
            t = scalars[0]
        _append(tree, t, s)
        slot_of[k] = t
        key_at[t] = k
        total += s
        t += 1
    scalars[0] = t
    scalars[1] = total
    return NO_ERROR


@njit(cache=True, nogil=True)
def arrival_depths(ids, sizes, unit, offsets, slot_of, size_of, key_at, tree, scalars, out):
    """Engine semantics: per request, every block's depth in the stack as the request found it.

    Request ``r`` is ``ids[offsets[r]:offsets[r+1]]`` (head first, blocks distinct within a
    request). All its depths are read before any of its blocks is touched; then the blocks are
    committed tail first, so the head ends most recent. A block's depth is its own size plus the
    sizes of the distinct blocks above it (COLD if never seen). Returns -1 or an error index.
    """
    cap = key_at.shape[0]
    t = scalars[0]
    total = scalars[1]
    for r in range(offsets.shape[0] - 1):
        lo = offsets[r]
        hi = offsets[r + 1]
        for i in range(lo, hi):
            k = ids[i]
            p = slot_of[k]
            if p < 0:
                out[i] = COLD
            elif not unit and size_of[k] != sizes[i]:
                scalars[0] = t
                scalars[1] = total
                return i
            else:
                out[i] = total - _prefix_sum(tree, p) + (1 if unit else sizes[i])
        for i in range(hi - 1, lo - 1, -1):
            k = ids[i]
            s = 1 if unit else sizes[i]
            p = slot_of[k]
            if p < 0:
                size_of[k] = s
            else:
                _remove(tree, p, t, s)
                key_at[p] = -1
                total -= s
            if t == cap:
                scalars[0] = t
                compact(slot_of, size_of, key_at, tree, scalars)
                t = scalars[0]
            _append(tree, t, s)
            slot_of[k] = t
            key_at[t] = k
            total += s
            t += 1
    scalars[0] = t
    scalars[1] = total
    return NO_ERROR


@njit(cache=True, nogil=True)
def factorize(values, table_bits):
    """Dense ids 0..n-1 in order of first appearance for uint64 ``values`` (open addressing).

    Returns ``(ids, uniques, n)``, or ``n == -1`` when the table (``2**table_bits`` slots) got
    more than half full; the caller then retries with a larger table. O(1) expected per value.
    """
    size = 1 << table_bits
    mask = np.uint64(size - 1)
    shift = np.uint64(64 - table_bits)
    table_keys = np.empty(size, np.uint64)
    table_ids = np.full(size, -1, np.int64)
    ids = np.empty(values.shape[0], np.int64)
    uniques = np.empty(size // 2, np.uint64)
    n = 0
    for i in range(values.shape[0]):
        v = values[i]
        h = ((v ^ (v >> np.uint64(31))) * np.uint64(0x9E3779B97F4A7C15)) >> shift
        while True:
            j = table_ids[h]
            if j < 0:
                if n >= size // 2:
                    return ids, uniques, -1
                table_keys[h] = v
                table_ids[h] = n
                uniques[n] = v
                ids[i] = n
                n += 1
                break
            if table_keys[h] == v:
                ids[i] = j
                break
            h = (h + np.uint64(1)) & mask
    return ids, uniques[:n], n


@njit(cache=True, nogil=True)
def sorted_histogram(sorted_packed, shift):
    """Collapse sorted ``(distance << shift) | size`` codes into unique distances with counts
    and size sums. O(n)."""
    n = sorted_packed.shape[0]
    values = np.empty(n, np.int64)
    counts = np.empty(n, np.int64)
    sums = np.empty(n, np.int64)
    mask = (np.int64(1) << shift) - 1
    m = -1
    last = -1
    for i in range(n):
        code = sorted_packed[i]
        d = code >> shift
        if d != last:
            m += 1
            values[m] = d
            counts[m] = 0
            sums[m] = 0
            last = d
        counts[m] += 1
        sums[m] += code & mask
    return values[: m + 1], counts[: m + 1], sums[: m + 1]


@njit(cache=True, nogil=True)
def segment_running_max(values, offsets):
    """Running maximum of ``values`` restarted at every segment ``offsets[r]:offsets[r+1]``. O(n)."""
    out = np.empty_like(values)
    for r in range(offsets.shape[0] - 1):
        best = values[offsets[r]] if offsets[r] < offsets[r + 1] else 0
        for i in range(offsets[r], offsets[r + 1]):
            if values[i] > best:
                best = values[i]
            out[i] = best
    return out


@njit(cache=True, nogil=True)
def min_max(values):
    """(smallest, largest) of a non-empty array in one pass."""
    lo = values[0]
    hi = values[0]
    for v in values:
        if v < lo:
            lo = v
        elif v > hi:
            hi = v
    return lo, hi


@njit(cache=True, nogil=True)
def finite_max(distances):
    """The largest distance that is not COLD, or -1 when there is none. O(n)."""
    best = -1
    for d in distances:
        if d != COLD and d > best:
            best = d
    return best


PACK_SHIFT = 36  # packed counting: hits in the bits above, hit sizes in the 36 bits below


@njit(cache=True, nogil=True)
def count_into(table, distances, sizes, unit, packed):
    """Add the finite distances (and their sizes) to a counting table indexed by distance.

    Layouts: one column of hits (``unit``); one packed column, hits above bit PACK_SHIFT and
    hit sizes below (``packed``: the caller checks that fewer than 2**27 accesses and a total
    size below 2**36 cannot overflow), so an access touches one word; else two columns.
    """
    one = np.int64(1) << PACK_SHIFT
    for i in range(distances.shape[0]):
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
def table_histogram(table, unit, packed):
    """The distinct distances of a counting table with cumulative hits and hit sizes. O(rows)."""
    rows = table.shape[0]
    values = np.empty(rows, np.int64)
    cum_hits = np.empty(rows, np.int64)
    cum_sizes = np.empty(rows, np.int64)
    mask = (np.int64(1) << PACK_SHIFT) - 1
    m = 0
    hits = 0
    total = 0
    for d in range(rows):
        cell = table[d, 0]
        if cell != 0:
            if unit:
                hits += cell
                total += cell
            elif packed:
                hits += cell >> PACK_SHIFT
                total += cell & mask
            else:
                hits += cell
                total += table[d, 1]
            values[m] = d
            cum_hits[m] = hits
            cum_sizes[m] = total
            m += 1
    return values[:m], cum_hits[:m], cum_sizes[:m]
