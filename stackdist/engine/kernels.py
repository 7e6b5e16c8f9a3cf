"""The fast path: compiled replay kernels (numba), same results as :mod:`.reference` access by access.

Why numba: the replay is an inherently sequential loop (each access reads the state the
previous one left), so numpy cannot vectorize it; a compiled loop over state that fits in cache
runs at tens of millions of accesses per second. numba ships as wheels (no compiler needed at
install time) and compiles these few functions once; ``cache=True`` keeps the machine code on
disk between runs. Without numba the same functions run as plain Python (correct, about 100x
slower), so the package still works where numba is not available.

State layout (shared by the batch and streaming forms; built by
:class:`stackdist.engine.distances.ReplayState`):

- ``slot_of[k]`` (int32, int64 only past 2**31 slots): the slot of key ``k``'s most recent
  access, or -1 before its first.
- ``size_of[k]``: key ``k``'s size (fixed per key), 0 before its first access. May be empty
  (length 0) for a unit-size batch replay, which then never writes it.
- ``words[w]`` (uint64): bit ``b`` is set iff slot ``64 w + b`` is live (holds some key's most
  recent access). A live slot's key is not stored: nothing needs it (compaction renumbers the
  keys through ``slot_of``).
- ``slot_size[j]`` (sized replays only; empty for unit sizes): the size in slot ``j`` if live,
  else 0; int32 when the sizes fit, else int64.
- ``tree``: a Fenwick tree (1-based, int64) over *leaves* of slots: a leaf is one word (64
  slots) for unit sizes and one 64-byte cache line of ``slot_size`` for sized replays (16 slots
  of int32, 8 of int64; :func:`sized_leaf_shift`). Node ``g + 1`` sums the live sizes (unit
  sizes: live slots) of leaves ``g - lowbit + 1 .. g``. Only the nodes of used leaves are valid
  (see :func:`replay`). The tree is 64 (16) times shorter than the slots, so it stays in cache:
  the sum over the slots below slot ``p`` is the tree's prefix over the leaves below ``p``'s
  leaf plus, inside the leaf, a popcount of the word's bits below ``p`` (unit sizes) or a masked
  sum of one cache line of ``slot_size`` (sized; fixed length, so it vectorizes).
- ``scalars = [next_free_slot, total_size_of_live_keys]``.

The replay prefetches: ``PREFETCH_FAR`` accesses ahead it asks for the key's ``slot_of`` entry,
``PREFETCH_NEAR`` ahead (that entry now cached) for the slot's word, leaf node and sizes. With
millions of keys the state outgrows the caches and this hides most of the memory latency
(measured 3.1 -> 8.1 M accesses/s at 2 x 10^7 keys under load); a hint never changes a result.

Slots are handed out in access order, so the keys above slot ``p`` are exactly the distinct
keys accessed since slot ``p`` was written. When the slots run out the live ones are renumbered
densely in order (compaction), so the state is O(distinct keys), not O(trace length): about
4 bytes per key for ``slot_of``, 0.25 bytes per slot for ``words`` (plus 4 per slot of
``slot_size`` and 8 per key of ``size_of`` when sized), with twice as many slots as keys.
"""

from __future__ import annotations

import numpy as np

try:  # pragma: no cover - exercised implicitly
    from llvmlite import ir
    from numba import config, njit, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    HAVE_NUMBA = True
    _COMPILED = not getattr(config, "DISABLE_JIT", False)
except ImportError:  # pragma: no cover - the fallback is tested by running without jit
    HAVE_NUMBA = False
    _COMPILED = False

    def njit(*args, **kwargs):  # type: ignore[no-redef]
        """Stand-in for numba.njit: return the function unchanged."""
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda f: f


COLD = np.iinfo(np.int64).max
NO_ERROR = -1
WORD_SHIFT = 6  # 64 slots per word
PREFETCH_FAR = 16  # accesses ahead: start loading the key's slot_of entry
PREFETCH_NEAR = 6  # accesses ahead: that slot's word and tree leaf (slot_of is in cache by then)
_ONE = np.uint64(1)

if _COMPILED:

    @intrinsic
    def _ctpop(typingctx, x):  # pragma: no cover - compiled
        """LLVM's ctpop: the CPU's popcount instruction."""
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            return builder.ctpop(args[0])

        return x(x), codegen

    @intrinsic
    def _prefetch(typingctx, arr, idx):  # pragma: no cover - compiled
        """LLVM's prefetch hint (read, keep in all cache levels) for ``arr[idx]``; no bounds check."""
        if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            array = context.make_array(signature.args[0])(context, builder, args[0])
            pointer = cgutils.get_item_pointer(context, builder, signature.args[0], array, [args[1]],
                                               wraparound=False, boundscheck=False)
            byte_pointer = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            hint = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), "llvm.prefetch.p0")
            builder.call(hint, [builder.bitcast(pointer, byte_pointer), ir.Constant(i32, 0), ir.Constant(i32, 3),
                                ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.void(arr, idx), codegen

    @njit(cache=True, nogil=True, inline="always")
    def popcount(x):
        """Set bits of a uint64 word."""
        return np.int64(_ctpop(x))

    @njit(cache=True, nogil=True, inline="always")
    def prefetch(arr, i):
        """Ask the CPU to start loading ``arr[i]`` (a hint: no effect on results; ``i`` in bounds)."""
        _prefetch(arr, i)

else:

    def popcount(x):  # type: ignore[misc]
        """Set bits of a uint64 word."""
        return int(x).bit_count()

    def prefetch(arr, i):  # type: ignore[misc]
        """A no-op without the compiler."""


@njit(cache=True, nogil=True, inline="always")
def sized_leaf_shift(slot_size):
    """A sized replay's slots per tree leaf, as a shift: one 64-byte cache line of ``slot_size``
    (64 slots of uint8 sizes, 32 of uint16, 16 of int32, 8 of int64)."""
    shift = WORD_SHIFT
    width = slot_size.itemsize
    while width > 1:
        width >>= 1
        shift -= 1
    return shift


@njit(cache=True, nogil=True)
def compact(slot_of, words, tree, slot_size, scalars):
    """Renumber the live slots densely (keeping their order) and rebuild words and tree. O(keys + slots)."""
    t = scalars[0]
    sized = slot_size.shape[0] > 0
    used = (t + 63) >> WORD_SHIFT
    base = np.empty(used + 1, np.int64)
    acc = 0
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
            if (words[q >> WORD_SHIFT] >> np.uint64(q & 63)) & _ONE:
                slot_size[dst] = slot_size[q]
                dst += 1
        for q in range(live, t):
            slot_size[q] = 0
    for w in range(used):
        words[w] = 0
    for w in range(live >> WORD_SHIFT):
        words[w] = ~np.uint64(0)
    if live & 63:
        words[live >> WORD_SHIFT] = (_ONE << np.uint64(live & 63)) - _ONE
    leaf = sized_leaf_shift(slot_size) if sized else WORD_SHIFT
    for g in range((live + (1 << leaf) - 1) >> leaf):
        node = g + 1
        if sized:
            own = 0
            for q in range(g << leaf, min((g + 1) << leaf, live)):
                own += slot_size[q]
        else:
            own = popcount(words[g])
        low = node & (-node)
        c = 1
        while c < low:
            own += tree[node - c]
            c <<= 1
        tree[node] = own
    scalars[0] = live


@njit(cache=True, nogil=True)
def replay(ids, sizes, unit, slot_of, size_of, words, tree, slot_size, scalars, out):
    """Write the stack distance of every access of ``ids`` into ``out``; return -1 or an error index.

    ``sizes[i]`` is access ``i``'s size unless ``unit`` (then every size is 1). The return value
    is the index of the first access whose size differs from its key's earlier size (nothing
    from it on is processed), or -1. O(log(slots / 64)) per access, amortized compaction included.

    The distance of a hit at slot ``p`` is the total live size minus the live sizes below ``p``.
    Only the tree nodes of used words are kept up to date: the first slot of a new last word
    builds that word's node from its children, later slots of that word add to that node only,
    and a removal stops at the last used node, so appending is O(1) amortized.
    """
    cap = words.shape[0] << WORD_SHIFT
    t = scalars[0]
    total = scalars[1]
    leaf = WORD_SHIFT if unit else sized_leaf_shift(slot_size)  # slots per tree leaf: 2**leaf
    keep_sizes = size_of.shape[0] > 0
    # The loop body is written out here and in arrival_depths on purpose: as helper functions
    # (even inlined) the compiled loop ran up to twice as slow (numba 0.68, measured).
    n = ids.shape[0]
    for i in range(n):
        # Two-stage prefetch: the keys ahead are known, so their state can be on its way (with
        # millions of keys the state is far bigger than the caches; a hint never changes results).
        if i + PREFETCH_FAR < n:
            prefetch(slot_of, ids[i + PREFETCH_FAR])
        if i + PREFETCH_NEAR < n:
            ahead = slot_of[ids[i + PREFETCH_NEAR]]
            if ahead >= 0:
                prefetch(words, ahead >> WORD_SHIFT)
                prefetch(tree, (ahead >> leaf) + 1)
                if not unit:
                    prefetch(slot_size, ahead)
        k = ids[i]
        s = 1 if unit else sizes[i]
        p = slot_of[k]
        if p < 0:
            out[i] = COLD
            if keep_sizes:
                size_of[k] = s
        else:
            if not unit and size_of[k] != s:
                scalars[0] = t
                scalars[1] = total
                return i
            w = p >> WORD_SHIFT
            bit = _ONE << np.uint64(p & 63)
            g = p >> leaf
            below = 0
            j = g
            while j > 0:
                below += tree[j]
                j &= j - 1
            if unit:
                below += popcount(words[w] & (bit - _ONE))
            else:
                first = g << leaf
                for q in range(1 << leaf):  # one cache line, masked: vectorized
                    below += slot_size[first + q] if first + q < p else 0
                slot_size[p] = 0
            out[i] = total - below
            words[w] &= ~bit
            used = ((t - 1) >> leaf) + 1
            j = g + 1
            while j <= used:
                tree[j] -= s
                j += j & (-j)
            total -= s
        if t == cap:
            scalars[0] = t
            compact(slot_of, words, tree, slot_size, scalars)
            t = scalars[0]
        node = (t >> leaf) + 1
        if t & ((1 << leaf) - 1):
            tree[node] += s
        else:
            low = node & (-node)
            acc = s
            c = 1
            while c < low:
                acc += tree[node - c]
                c <<= 1
            tree[node] = acc
        words[t >> WORD_SHIFT] |= _ONE << np.uint64(t & 63)
        if not unit:
            slot_size[t] = s
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
    cap = words.shape[0] << WORD_SHIFT
    t = scalars[0]
    total = scalars[1]
    leaf = WORD_SHIFT if unit else sized_leaf_shift(slot_size)
    keep_sizes = size_of.shape[0] > 0
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
                g = p >> leaf
                below = 0
                j = g
                while j > 0:
                    below += tree[j]
                    j &= j - 1
                if unit:
                    below += popcount(words[p >> WORD_SHIFT] & ((_ONE << np.uint64(p & 63)) - _ONE))
                else:
                    first = g << leaf
                    for q in range(1 << leaf):
                        below += slot_size[first + q] if first + q < p else 0
                out[i] = total - below
        for i in range(hi - 1, lo - 1, -1):
            k = ids[i]
            s = 1 if unit else sizes[i]
            p = slot_of[k]
            if p < 0:
                if keep_sizes:
                    size_of[k] = s
            else:
                words[p >> WORD_SHIFT] &= ~(_ONE << np.uint64(p & 63))
                if not unit:
                    slot_size[p] = 0
                used = ((t - 1) >> leaf) + 1
                j = (p >> leaf) + 1
                while j <= used:
                    tree[j] -= s
                    j += j & (-j)
                total -= s
            if t == cap:
                scalars[0] = t
                compact(slot_of, words, tree, slot_size, scalars)
                t = scalars[0]
            node = (t >> leaf) + 1
            if t & ((1 << leaf) - 1):
                tree[node] += s
            else:
                low = node & (-node)
                acc = s
                c = 1
                while c < low:
                    acc += tree[node - c]
                    c <<= 1
                tree[node] = acc
            words[t >> WORD_SHIFT] |= _ONE << np.uint64(t & 63)
            if not unit:
                slot_size[t] = s
            slot_of[k] = t
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
    flat = table.reshape(-1)
    columns = table.shape[1]
    n = distances.shape[0]
    for i in range(n):
        if i + PREFETCH_FAR < n:  # a big table is random access: start the row's load early
            ahead = distances[i + PREFETCH_FAR]
            if ahead != COLD:
                prefetch(flat, ahead * columns)
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
    """The distinct distances of a counting table with cumulative hits and hit sizes. O(rows).

    Two passes, so the arrays are exactly as long as the distinct distances; for unit sizes the
    hit sizes are the hits, and the same array is returned twice (read-only by convention).
    """
    rows = table.shape[0]
    m = 0
    for d in range(rows):
        if table[d, 0] != 0:
            m += 1
    values = np.empty(m, np.int64)
    cum_hits = np.empty(m, np.int64)
    cum_sizes = cum_hits if unit else np.empty(m, np.int64)
    mask = (np.int64(1) << PACK_SHIFT) - 1
    m = 0
    hits = 0
    total = 0
    for d in range(rows):
        cell = table[d, 0]
        if cell != 0:
            if unit:
                hits += cell
            elif packed:
                hits += cell >> PACK_SHIFT
                total += cell & mask
            else:
                hits += cell
                total += table[d, 1]
            values[m] = d
            cum_hits[m] = hits
            if not unit:
                cum_sizes[m] = total
            m += 1
    return values, cum_hits, cum_sizes


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
