"""Compiled helpers of the replay kernels: popcount, prefetch hints and one-cache-line masked
sums as LLVM intrinsics, with plain-Python equivalents (used when numba is missing or a kernel
runs as Python, e.g. ``kernels.replay.py_func`` in the tests).

Each is a Python function with a compiled ``overload`` inlined where a kernel calls it: an
``njit`` helper taking an array made numba add a reference-count increment and decrement (two
atomic instructions) per call, per access in a replay loop (seen in the generated assembly).

>>> line_sum_below(np.arange(8, dtype=np.int64), 2, 3), words_popcount_below(np.array([3, 1], np.uint64), 0, 2)
(9, 3)
>>> line = np.zeros(8, np.int64); line_add_above(line, 0, 5, 2); line.tolist()
[0, 0, 0, 0, 0, 0, 2, 2]
"""

from __future__ import annotations

import numpy as np

try:  # pragma: no cover - exercised implicitly
    import numba
    from llvmlite import ir
    from numba import config, types
    from numba.core import cgutils
    from numba.extending import intrinsic, overload

    HAVE_NUMBA = True
    _COMPILED = not getattr(config, "DISABLE_JIT", False)

    def njit(*args, **kwargs):  # type: ignore[no-untyped-def]
        """numba.njit without the C-callable ("cfunc") wrapper numba otherwise builds and optimizes
        for every compiled signature: the kernels are called from Python (the CPython wrapper,
        kept) or from each other, never as first-class function values. About a tenth less
        compile time (the SGLang kernel tree, median of 6 cold compiles: 4.73 -> 3.95 s CPU)."""
        kwargs.setdefault("no_cfunc_wrapper", True)
        if len(args) == 1 and callable(args[0]):
            return numba.njit(**kwargs)(args[0])
        return numba.njit(*args, **kwargs)
except ImportError:  # pragma: no cover - the fallback is tested by running without jit
    HAVE_NUMBA = False
    _COMPILED = False

    def njit(*args, **kwargs):  # type: ignore[no-redef]
        """Stand-in for numba.njit: return the function unchanged."""
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda f: f



__all__ = ["HAVE_NUMBA", "line_add_above", "line_sum_below", "njit", "popcount", "prefetch", "words_popcount_below"]

if _COMPILED:

    @intrinsic
    def _ctpop(typingctx, x):  # pragma: no cover - compiled
        """LLVM's ctpop: the CPU's popcount instruction."""
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            return builder.ctpop(args[0])

        return x(x), codegen

    def _item_pointer(context, builder, array_type, array, index):  # pragma: no cover - compiled
        """Pointer to ``array[index]`` (no wraparound, no bounds check)."""
        arr = context.make_array(array_type)(context, builder, array)
        return cgutils.get_item_pointer(context, builder, array_type, arr, [index], wraparound=False, boundscheck=False)

    def _lanes_below(builder, lanes, width, limit):  # pragma: no cover - compiled
        """The vector mask ``lane < limit`` for lanes 0..lanes-1, compared as ``width``-bit integers."""
        ity = ir.IntType(width)
        vty = ir.VectorType(ity, lanes)
        limit = builder.trunc(limit, ity) if width < 64 else limit
        splat = builder.insert_element(ir.Constant(vty, ir.Undefined), limit, ir.Constant(ir.IntType(32), 0))
        splat = builder.shuffle_vector(splat, splat, ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))
        return builder.icmp_signed("<", ir.Constant(vty, list(range(lanes))), splat)

    def _reduce_add(builder, vector, lanes, width):  # pragma: no cover - compiled
        ity = ir.IntType(width)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ity, [ir.VectorType(ity, lanes)]),
                                            f"llvm.vector.reduce.add.v{lanes}i{width}")
        return builder.call(fn, [vector])

    @intrinsic
    def _line_sum_below(typingctx, arr, base, limit):  # pragma: no cover - compiled
        """``sum(arr[base : base + limit])`` (int64) over one 64-byte line of ``arr`` (64 // itemsize
        lanes, ``0 <= limit <= lanes``, the line in bounds): one vector load, a lane mask, a
        horizontal add in integers twice as wide as the elements (so no lane sum can overflow)."""
        if not (isinstance(arr, types.Array) and isinstance(arr.dtype, types.Integer)
                and isinstance(base, types.Integer) and isinstance(limit, types.Integer)):
            return None
        signed = arr.dtype.signed

        def codegen(context, builder, signature, args):
            pointer = _item_pointer(context, builder, signature.args[0], args[0], args[1])
            elem = pointer.type.pointee
            lanes = 512 // elem.width
            vector = builder.load(builder.bitcast(pointer, ir.VectorType(elem, lanes).as_pointer()), align=elem.width // 8)
            width = min(64, 2 * elem.width)
            wide_type = ir.VectorType(ir.IntType(width), lanes)
            if width > elem.width:
                vector = builder.sext(vector, wide_type) if signed else builder.zext(vector, wide_type)
            limit64 = context.cast(builder, args[2], signature.args[2], types.int64)
            mask = _lanes_below(builder, lanes, elem.width, limit64)
            total = _reduce_add(builder, builder.select(mask, vector, ir.Constant(wide_type, [0] * lanes)), lanes, width)
            return builder.zext(total, ir.IntType(64)) if width < 64 else total

        return types.int64(arr, base, limit), codegen

    def _splat(builder, vector_type, value):  # pragma: no cover - compiled
        """``value`` in every lane of ``vector_type``."""
        lanes = vector_type.count
        one = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
        return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))

    @intrinsic
    def _line_add_above(typingctx, arr, base, first, value):  # pragma: no cover - compiled
        """``arr[base + e] += value`` for the lanes ``first < e < 64 // itemsize`` of one 64-byte
        line (the line in bounds): one vector load, a lane mask, one add, one vector store."""
        if not (isinstance(arr, types.Array) and isinstance(arr.dtype, types.Integer) and isinstance(base, types.Integer)
                and isinstance(first, types.Integer) and isinstance(value, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            pointer = _item_pointer(context, builder, signature.args[0], args[0], args[1])
            elem = pointer.type.pointee
            lanes = 512 // elem.width
            vty = ir.VectorType(elem, lanes)
            vector_pointer = builder.bitcast(pointer, vty.as_pointer())
            vector = builder.load(vector_pointer, align=elem.width // 8)
            first64 = context.cast(builder, args[2], signature.args[2], types.int64)
            value64 = context.cast(builder, args[3], signature.args[3], types.int64)
            lane_first = builder.trunc(first64, elem) if elem.width < 64 else first64
            lane_value = builder.trunc(value64, elem) if elem.width < 64 else value64
            mask = builder.icmp_signed(">", ir.Constant(vty, list(range(lanes))), _splat(builder, vty, lane_first))
            added = builder.select(mask, _splat(builder, vty, lane_value), ir.Constant(vty, [0] * lanes))
            builder.store(builder.add(vector, added), vector_pointer, align=elem.width // 8)
            return context.get_dummy_value()

        return types.void(arr, base, first, value), codegen

    @intrinsic
    def _words_popcount_below(typingctx, words, base, limit):  # pragma: no cover - compiled
        """Set bits of ``words[base : base + limit]`` for ``0 <= limit <= 8`` with ``words[base :
        base + 8]`` in bounds (uint64): one 8-lane load, a vector popcount, a masked add."""
        if not (isinstance(words, types.Array) and isinstance(base, types.Integer) and isinstance(limit, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            pointer = _item_pointer(context, builder, signature.args[0], args[0], args[1])
            vty = ir.VectorType(ir.IntType(64), 8)
            vector = builder.load(builder.bitcast(pointer, vty.as_pointer()), align=8)
            counts = builder.call(cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty]),
                                                                 "llvm.ctpop.v8i64"), [vector])
            limit64 = context.cast(builder, args[2], signature.args[2], types.int64)
            masked = builder.select(_lanes_below(builder, 8, 64, limit64), counts, ir.Constant(vty, [0] * 8))
            return _reduce_add(builder, masked, 8, 64)

        return types.int64(words, base, limit), codegen

    @intrinsic
    def _prefetch(typingctx, arr, idx):  # pragma: no cover - compiled
        """Ask the CPU to start loading ``arr[idx]`` (LLVM's prefetch: read, all cache levels; a
        hint, no effect on results; no bounds check)."""
        if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            pointer = _item_pointer(context, builder, signature.args[0], args[0], args[1])
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

else:

    def popcount(x):  # type: ignore[misc]
        """Set bits of a uint64 word."""
        return int(x).bit_count()


def prefetch(arr, i):
    """Ask the CPU to start loading ``arr[i]`` (compiled: LLVM's prefetch hint; no effect on
    results; in plain Python a no-op)."""


def line_sum_below(arr, base, limit):
    """``sum(arr[base : base + limit])`` within one 64-byte line (``0 <= limit <= 64 // itemsize``,
    the line in bounds; compiled: one vector load and a masked add)."""
    return int(arr[base : base + limit].sum())


def line_add_above(arr, base, first, value):
    """``arr[base + e] += value`` for the lanes ``first < e < 64 // itemsize`` of the 64-byte
    line at ``base`` (the line in bounds; compiled: one masked vector add, no branch)."""
    arr[base + first + 1 : base + 64 // arr.itemsize] += value


def words_popcount_below(words, base, limit):
    """Set bits of ``words[base : base + limit]`` for ``0 <= limit <= 8`` (compiled: one vector
    popcount of 8 words and a masked add)."""
    return sum(int(w).bit_count() for w in words[base : base + limit])


if _COMPILED:  # the compiled forms, inlined where called (an njit helper taking the array adds reference counting)

    @overload(prefetch, inline="always")
    def _prefetch_compiled(arr, i):  # pragma: no cover - compiled
        return lambda arr, i: _prefetch(arr, i)

    @overload(line_sum_below, inline="always")
    def _line_sum_below_compiled(arr, base, limit):  # pragma: no cover - compiled
        return lambda arr, base, limit: _line_sum_below(arr, base, limit)

    @overload(line_add_above, inline="always")
    def _line_add_above_compiled(arr, base, first, value):  # pragma: no cover - compiled
        return lambda arr, base, first, value: _line_add_above(arr, base, first, value)

    @overload(words_popcount_below, inline="always")
    def _words_popcount_below_compiled(words, base, limit):  # pragma: no cover - compiled
        return lambda words, base, limit: _words_popcount_below(words, base, limit)
