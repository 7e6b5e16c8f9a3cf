"""A compiled fast path for Mooncake lines, with the exact reader as its judge.

Mooncake (and Qwen-like) request logs are JSON lines of a fixed shape:
``{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}``.
:func:`scan_mooncake` accepts exactly that shape (the four keys in any order, ``output_length``
optional, each once; plain non-negative integers of at most 18 digits without leading zeros;
``len(hash_ids) == ceil(input_length / block_size)``) and stops at the first line of any other
shape (another key, a float, a string, a bad count, broken JSON). The caller hands such a block to
:func:`stackdist.traces.hashed.read_mooncake`, so the trace read, and every error, is the exact
reader's; on accepted lines both give the same arrays (tested).

>>> import numpy as np
>>> buf = np.frombuffer(b'{"timestamp": 5, "input_length": 20, "hash_ids": [7, 8]}\\n', np.uint8)
>>> ids, n_blocks, times, inputs, outputs, lines, ok = scan_mooncake(buf, 16)
>>> ids.tolist(), n_blocks.tolist(), times.tolist(), ok
([7, 8], [2], [5], True)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from stackdist.engine.kernels import njit

from .lines import helper_thread, is_regular_file, scan_in_halves, whole_line_blocks

if TYPE_CHECKING:
    from .requests import RequestTrace

__all__ = ["jsonl_access_chunks", "mooncake_block_ids", "mooncake_chunks", "numbered_lines", "scan_access_jsonl", "scan_jsonl_file",
           "scan_mooncake", "scan_mooncake_in_halves"]


@njit(cache=True, nogil=True)
def _skip_ws(buf, i, n):  # not inline="always": inlined by numba at its 16 call sites it compiled 1-2 s longer, ran no faster (measured)
    while i < n and (buf[i] == 32 or buf[i] == 9 or buf[i] == 13):
        i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _number(buf, i, n):
    """A plain JSON non-negative integer at i: (value, next index, ok)."""
    start = i
    v = 0
    while i < n and 48 <= buf[i] <= 57:
        v = v * 10 + (buf[i] - 48)
        i += 1
    digits = i - start
    ok = 0 < digits <= 18 and not (digits > 1 and buf[start] == 48)
    if i < n and (buf[i] == 46 or buf[i] == 101 or buf[i] == 69):  # a fraction or an exponent
        ok = False
    return v, i, ok


def _packed(name: bytes) -> tuple[int, int]:
    """A field name as (its first 8 bytes, the rest) read as little-endian integers."""
    return int.from_bytes(name[:8], "little"), int.from_bytes(name[8:], "little")


_TS, _IN, _OUT, _HASH = (_packed(k) for k in (b"timestamp", b"input_length", b"output_length", b"hash_ids"))


@njit(cache=True, nogil=True, inline="always")
def _word(buf, i, n_bytes):
    """The ``n_bytes`` (at most 8) bytes at ``i`` as a little-endian integer (wrapping past 2**63)."""
    v = 0
    for q in range(n_bytes):
        v |= np.int64(buf[i + q]) << np.int64(8 * q)
    return v


@njit(cache=True, nogil=True)
def scan_mooncake(buf, block_size):
    """Scan whole Mooncake lines of ``buf`` (blank lines skipped). Returns ``(ids, n_blocks,
    timestamps_ms, input_length, output_length, lines scanned, ok)``; ``ok`` is False at the
    first line not of the accepted shape (nothing of that line is returned). O(bytes)."""
    n = buf.shape[0]
    bound = 1  # every id but a list's last is followed by a comma; every list opens with "["
    for j in range(n):
        if buf[j] == 44 or buf[j] == 91:
            bound += 1
    ids = np.empty(bound, np.int64)
    cap = n // 16 + 1
    nb = np.empty(cap, np.int64)
    ts = np.empty(cap, np.int64)
    inp = np.empty(cap, np.int64)
    out = np.empty(cap, np.int64)
    n_ids, m, ok = _scan_mooncake_into(buf, block_size, ids, nb, ts, inp, out)
    return ids[:n_ids], nb[:m], ts[:m], inp[:m], out[:m], m, ok


@njit(cache=True, nogil=True)
def _scan_mooncake_into(buf, block_size, ids, nb, ts, inp, out):
    """:func:`scan_mooncake` into its arrays (``nb`` to ``out`` of one capacity); returns
    ``(ids kept, lines, ok)``. Apart from the caller, so that each of its many exits returns
    three integers (five array slices at each exit compiled to about 2 s of numba's time)."""
    n = buf.shape[0]
    cap = nb.shape[0]
    n_ids = 0
    m = 0
    i = np.int64(0)  # typed: a literal 0 would compile _skip_ws once more, for Literal[int](0)
    while i < n:
        i = _skip_ws(buf, i, n)
        if i < n and buf[i] == 10:
            i += 1
            continue
        if i >= n:
            break
        if buf[i] != 123 or m >= cap:
            return n_ids, m, False
        i += 1
        seen = 0  # bits: timestamp 1, input_length 2, output_length 4, hash_ids 8
        t_v = 0
        in_v = 0
        out_v = 0
        line_ids = n_ids
        while True:
            i = _skip_ws(buf, i, n)
            if i >= n or buf[i] != 34:
                return line_ids, m, False
            j = i + 1
            while j < n and buf[j] != 34 and buf[j] != 92 and buf[j] != 10:
                j += 1
            if j >= n or buf[j] != 34:
                return line_ids, m, False
            length = j - i - 1
            c0 = buf[i + 1] if length > 0 else 0
            key = 0
            if length == 9 and c0 == 116:  # timestamp
                key = 1
            elif length == 12 and c0 == 105:  # input_length
                key = 2
            elif length == 13 and c0 == 111:  # output_length
                key = 4
            elif length == 8 and c0 == 104:  # hash_ids
                key = 8
            if key == 0 or seen & key:
                return line_ids, m, False
            head, tail = (_TS if key == 1 else _IN if key == 2 else _OUT if key == 4 else _HASH)
            if _word(buf, i + 1, 8) != head or _word(buf, i + 9, length - 8) != tail:
                return line_ids, m, False
            seen |= key
            i = _skip_ws(buf, j + 1, n)
            if i >= n or buf[i] != 58:
                return line_ids, m, False
            i = _skip_ws(buf, i + 1, n)
            if key == 8:
                if i >= n or buf[i] != 91:
                    return line_ids, m, False
                i = _skip_ws(buf, i + 1, n)
                n_ids = line_ids
                if i < n and buf[i] == 93:
                    i += 1
                else:
                    while True:
                        v, i, ok = _number(buf, i, n)
                        if not ok or n_ids >= ids.shape[0]:
                            return line_ids, m, False
                        ids[n_ids] = v
                        n_ids += 1
                        i = _skip_ws(buf, i, n)
                        if i < n and buf[i] == 44:
                            i = _skip_ws(buf, i + 1, n)
                            continue
                        if i < n and buf[i] == 93:
                            i += 1
                            break
                        return line_ids, m, False
            else:
                v, i, ok = _number(buf, i, n)
                if not ok:
                    return line_ids, m, False
                if key == 1:
                    t_v = v
                elif key == 2:
                    in_v = v
                else:
                    out_v = v
            i = _skip_ws(buf, i, n)
            if i < n and buf[i] == 44:
                i += 1
                continue
            if i < n and buf[i] == 125:
                i += 1
                break
            return line_ids, m, False
        i = _skip_ws(buf, i, n)
        count = n_ids - line_ids
        if (i < n and buf[i] != 10) or (seen & 11) != 11 or count != (in_v + block_size - 1) // block_size:
            return line_ids, m, False
        nb[m] = count
        ts[m] = t_v
        inp[m] = in_v
        out[m] = out_v
        m += 1
        i += 1
    return n_ids, m, True


@njit(cache=True, nogil=True)
def scan_access_jsonl(buf):
    """Scan whole JSONL access lines ``{"key": INT}`` or ``{"key": INT, "size": INT}`` (either
    order, each once; keys ``-?digits`` and sizes positive, plain JSON integers of at most 18
    digits; the same fields on every line). Returns ``(keys, sizes, lines, has_size, ok)``; ``ok``
    is False at the first line of any other shape (a string key, another field, a float, broken
    JSON), and the caller hands the block to the exact reader. O(bytes).
    """
    keys = np.empty(buf.shape[0] // 10 + 1, np.int64)
    sizes = np.empty(buf.shape[0] // 10 + 1, np.int64)
    m, shape, ok = _scan_access_jsonl_into(buf, keys, sizes)
    return keys[:m], sizes[:m], m, shape == 3, ok


@njit(cache=True, nogil=True)
def _scan_access_jsonl_into(buf, keys, sizes):
    """:func:`scan_access_jsonl` into ``keys`` and ``sizes``; returns ``(lines, the first line's
    fields, ok)``: each exit returns three integers, not two array slices (compile time)."""
    n = buf.shape[0]
    m = 0
    shape = 0  # the first line's fields: 1 key only, 3 key and size
    i = np.int64(0)
    while i < n:
        i = _skip_ws(buf, i, n)
        if i < n and buf[i] == 10:
            i += 1
            continue
        if i >= n:
            break
        if buf[i] != 123 or m >= keys.shape[0]:
            return m, shape, False
        i = _skip_ws(buf, i + 1, n)
        seen = 0
        k_v = 0
        s_v = 0
        while True:
            if i + 5 >= n or buf[i] != 34:
                return m, shape, False
            if buf[i + 1] == 107 and buf[i + 2] == 101 and buf[i + 3] == 121 and buf[i + 4] == 34:  # "key"
                field = 1
                i += 5
            elif i + 6 < n and buf[i + 1] == 115 and buf[i + 2] == 105 and buf[i + 3] == 122 and buf[i + 4] == 101 \
                    and buf[i + 5] == 34:  # "size"
                field = 2
                i += 6
            else:
                return m, shape, False
            if seen & field:
                return m, shape, False
            seen |= field
            i = _skip_ws(buf, i, n)
            if i >= n or buf[i] != 58:
                return m, shape, False
            i = _skip_ws(buf, i + 1, n)
            neg = field == 1 and i < n and buf[i] == 45
            if neg:
                i += 1
            v, i, ok = _number(buf, i, n)
            if not ok or (field == 2 and v < 1):
                return m, shape, False
            if field == 1:
                k_v = -v if neg else v
            else:
                s_v = v
            i = _skip_ws(buf, i, n)
            if i < n and buf[i] == 44:
                i = _skip_ws(buf, i + 1, n)
                continue
            if i < n and buf[i] == 125:
                i += 1
                break
            return m, shape, False
        i = _skip_ws(buf, i, n)
        if (i < n and buf[i] != 10) or (seen & 1) == 0 or (shape != 0 and seen != shape):
            return m, shape, False
        shape = seen
        keys[m] = k_v
        sizes[m] = s_v
        m += 1
        i += 1
    return m, shape, True


def scan_mooncake_in_halves(data: bytes, block_size: int) -> tuple[Any, ...]:
    """:func:`scan_mooncake` of a whole buffer of lines, its two halves (cut at a newline) at
    once on two threads, joined in order: the same 7-tuple (``ok`` only when both halves are).
    Small buffers are scanned whole. O(bytes / 2) wall.

    >>> scan_mooncake_in_halves(b'{"timestamp": 0, "input_length": 9, "hash_ids": [4]}\\n', 16)[0].tolist()
    [4]
    """
    buf = np.frombuffer(data, np.uint8)
    mid = data.find(b"\n", len(data) // 2) + 1 if len(data) >= 1 << 20 else 0
    if mid <= 0 or mid >= len(data):
        ids, n_blocks, ts, inputs, outputs, m, ok = scan_mooncake(buf, block_size)
        return ids.copy(), n_blocks, ts, inputs, outputs, m, ok
    first = helper_thread().submit(scan_mooncake, buf[:mid], block_size)
    second = scan_mooncake(buf[mid:], block_size)
    head = first.result()
    joined = tuple(np.concatenate([a, b]) for a, b in zip(head[:5], second[:5]))
    return (*joined, head[5] + second[5], bool(head[6] and second[6]))


def scan_jsonl_file(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(int64 keys, int64 sizes or None) of a JSONL access trace whose every line is a plain
    ``{"key": INT}`` or ``{"key": INT, "size": INT}`` (:func:`scan_access_jsonl`, the same fields
    on every line), read in 32 MiB blocks; ``None`` for any other file (then the exact reader
    reads it: same keys, sizes and errors), an empty one, or one it cannot open. O(bytes).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.jsonl"); _ = open(p, "w").write('{"key": 5}\\n{"key": -2}\\n')
    >>> scan_jsonl_file(p)[0].tolist()
    [5, -2]
    """
    keys: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    sized = None
    if not is_regular_file(path):
        return None
    try:
        with open(path, "rb") as stream:
            for block in whole_line_blocks(stream):
                k, s, m, has_size, ok = scan_in_halves(scan_access_jsonl, block)
                if not ok or (m and sized not in (None, has_size)):
                    return None
                if m:
                    sized = has_size
                    keys.append(k.copy() if k.base is not None else k)  # the scan's arrays are sized by bytes / 10
                    sizes.append(s.copy() if has_size else np.zeros(0, np.int64))
    except OSError:
        return None
    if not keys:
        return None
    return np.concatenate(keys), (np.concatenate(sizes) if sized else None)


def mooncake_block_ids(blocks: Iterable[bytes], block_size: int, exact: Callable[[list[tuple[int, bytes]]], Any]
                       ) -> Iterator[np.ndarray]:
    """The block ids of a Mooncake trace given in blocks of whole lines, straight from
    :func:`scan_mooncake` (no per-request arrays), or ``exact(numbered lines).block_ids`` (the
    exact reader) for any block the scan does not accept. O(bytes).

    >>> [c.tolist() for c in mooncake_block_ids([b'{"timestamp": 0, "input_length": 9, "hash_ids": [4]}\\n'], 16, None)]
    [[4]]
    """
    lines_before = 0
    for block in blocks:
        got = scan_mooncake_in_halves(block, block_size)
        if got[6]:
            yield got[0]
        else:
            numbered = numbered_lines(block, lines_before)
            if numbered:
                yield exact(numbered).block_ids
        lines_before += block.count(b"\n")


def mooncake_chunks(blocks: Iterable[bytes], path: str, block_size: int, exact: Callable[[list[tuple[int, bytes]]], Any]
                    ) -> Iterator[RequestTrace]:
    """A Mooncake trace given in blocks of whole lines: :func:`scan_mooncake` when every line of
    a block has the plain shape, else ``exact(numbered lines)`` (the exact reader: same trace,
    same errors). O(bytes)."""
    from .requests import assemble

    lines_before = 0
    for block in blocks:
        ids, n_blocks, ts, inputs, outputs, _, ok = scan_mooncake_in_halves(block, block_size)
        if ok:
            yield assemble(path, ids, n_blocks, ts / 1000.0, inputs, outputs, block_size, 0)
        else:
            numbered = numbered_lines(block, lines_before)
            if numbered:
                yield exact(numbered)
        lines_before += block.count(b"\n")


def jsonl_access_chunks(blocks: Iterable[bytes], exact: Callable[[list[tuple[int, bytes]]], Any]
                        ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """A JSONL access trace given in blocks of whole lines: (key values, sizes or None) by
    :func:`scan_access_jsonl` when a block's lines are plain ``{"key": INT[, "size": INT]}`` with
    the first block's fields, else ``exact(numbered lines)`` (the exact reader: same keys, sizes
    and errors). O(bytes).

    >>> [k.tolist() for k, _ in jsonl_access_chunks([b'{"key": 3}\\n{"key": 4}\\n'], None)]
    [[3, 4]]
    """
    lines_before, sized = 0, None
    for block in blocks:
        keys, sizes, m, has_size, ok = scan_in_halves(scan_access_jsonl, block)
        if ok and m and sized in (None, has_size):
            sized = has_size
            yield keys.view(np.uint64), (sizes if has_size else None)
        else:
            numbered = numbered_lines(block, lines_before)
            if numbered:
                got = exact(numbered)
                sized = got[1] is not None if sized is None else sized
                yield got
        lines_before += block.count(b"\n")


def numbered_lines(block: bytes, lines_before: int) -> list[tuple[int, bytes]]:
    """The non-blank lines of a block of whole lines, numbered from ``lines_before + 1``. O(bytes).

    >>> numbered_lines(b"a\\n\\nb\\r\\n", 10)
    [(11, b'a'), (13, b'b')]
    """
    numbered = [(lines_before + j + 1, raw.rstrip(b"\r")) for j, raw in enumerate(block.split(b"\n"))]
    return [(j, raw) for j, raw in numbered if raw.strip()]
