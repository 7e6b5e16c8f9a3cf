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

import numpy as np

from stackdist.engine.kernels import njit

__all__ = ["scan_mooncake"]


@njit(cache=True, nogil=True, inline="always")
def _skip_ws(buf, i, n):
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


@njit(cache=True, nogil=True)
def scan_mooncake(buf, block_size):
    """Scan whole Mooncake lines of ``buf`` (blank lines skipped). Returns ``(ids, n_blocks,
    timestamps_ms, input_length, output_length, lines scanned, ok)``; ``ok`` is False at the
    first line not of the accepted shape (nothing of that line is returned). O(bytes)."""
    n = buf.shape[0]
    ids = np.empty(n // 2 + 1, np.int64)
    n_ids = 0
    cap = n // 16 + 1
    nb = np.empty(cap, np.int64)
    ts = np.empty(cap, np.int64)
    inp = np.empty(cap, np.int64)
    out = np.empty(cap, np.int64)
    m = 0
    i = 0
    while i < n:
        i = _skip_ws(buf, i, n)
        if i < n and buf[i] == 10:
            i += 1
            continue
        if i >= n:
            break
        if buf[i] != 123 or m >= cap:
            return ids[:n_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
        i += 1
        seen = 0  # bits: timestamp 1, input_length 2, output_length 4, hash_ids 8
        t_v = 0
        in_v = 0
        out_v = 0
        line_ids = n_ids
        while True:
            i = _skip_ws(buf, i, n)
            if i >= n or buf[i] != 34:
                return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
            j = i + 1
            while j < n and buf[j] != 34 and buf[j] != 92 and buf[j] != 10:
                j += 1
            if j >= n or buf[j] != 34:
                return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
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
                return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
            expect = "timestamp" if key == 1 else "input_length" if key == 2 else "output_length" if key == 4 else "hash_ids"
            for q in range(length):
                if buf[i + 1 + q] != ord(expect[q]):
                    return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
            seen |= key
            i = _skip_ws(buf, j + 1, n)
            if i >= n or buf[i] != 58:
                return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
            i = _skip_ws(buf, i + 1, n)
            if key == 8:
                if i >= n or buf[i] != 91:
                    return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
                i = _skip_ws(buf, i + 1, n)
                n_ids = line_ids
                if i < n and buf[i] == 93:
                    i += 1
                else:
                    while True:
                        v, i, ok = _number(buf, i, n)
                        if not ok or n_ids >= ids.shape[0]:
                            return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
                        ids[n_ids] = v
                        n_ids += 1
                        i = _skip_ws(buf, i, n)
                        if i < n and buf[i] == 44:
                            i = _skip_ws(buf, i + 1, n)
                            continue
                        if i < n and buf[i] == 93:
                            i += 1
                            break
                        return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
            else:
                v, i, ok = _number(buf, i, n)
                if not ok:
                    return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
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
            return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
        i = _skip_ws(buf, i, n)
        count = n_ids - line_ids
        if (i < n and buf[i] != 10) or (seen & 11) != 11 or count != (in_v + block_size - 1) // block_size:
            return ids[:line_ids], nb[:m], ts[:m], inp[:m], out[:m], m, False
        nb[m] = count
        ts[m] = t_v
        inp[m] = in_v
        out[m] = out_v
        m += 1
        i += 1
    return ids[:n_ids], nb[:m], ts[:m], inp[:m], out[:m], m, True
