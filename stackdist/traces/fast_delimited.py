r"""The compiled scan of the common delimited access trace: integer ``key[,size]`` lines.

:func:`parse_int_lines` accepts only lines ``[+-]digits`` or ``[+-]digits<delim>digits`` (an
optional ``\r``, blank lines skipped), and says ``ok = False`` at the first line of any other
shape; :func:`scan_delimited_file` runs it over a whole file (an optional ``key[,size]`` header
first) and gives ``None`` unless every line has that shape, so the exact reader
(:func:`~.access.read_access_trace`) then reads the file: same keys, sizes and errors.

>>> import numpy as np
>>> keys, sizes, m, cols, ok = parse_int_lines(np.frombuffer(b"7,2\n-1,3\n", np.uint8), ord(","))
>>> keys.tolist(), sizes.tolist(), m, cols, ok
([7, -1], [2, 3], 2, 2, True)
"""

from __future__ import annotations

import os

import numpy as np

from stackdist.engine.kernels import njit

from .lines import is_regular_file, scan_in_halves, whole_line_blocks

__all__ = ["parse_int_lines", "scan_delimited_file"]


@njit(cache=True, nogil=True)
def parse_int_lines(buf, delim):
    """The common delimited form at memory speed: every line ``[+-]digits`` or
    ``[+-]digits<delim>digits`` (an optional ``\\r``), all with the same column count.

    Returns ``(keys as int64, sizes, lines, columns, ok)``; ``ok`` is False at the first line of
    any other shape (a header, a comment, spaces, a bad or huge number, a change of columns), and
    the caller then parses the block with the exact reader. O(bytes).
    """
    n = buf.shape[0]
    bound = 1
    for j in range(n):
        if buf[j] == 10:
            bound += 1
    keys = np.empty(bound, np.int64)
    sizes = np.empty(bound, np.int64)
    m = 0
    cols = 0
    i = 0
    while i < n:
        if buf[i] == 10 or (buf[i] == 13 and i + 1 < n and buf[i + 1] == 10):
            i += 1 if buf[i] == 10 else 2
            continue
        neg = False
        if buf[i] == 43 or buf[i] == 45:
            neg = buf[i] == 45
            i += 1
        v = 0
        digits = 0
        while i < n and 48 <= buf[i] <= 57 and digits < 19:
            v = v * 10 + (buf[i] - 48)
            digits += 1
            i += 1
        if digits == 0 or digits == 19:
            return keys[:m], sizes[:m], m, cols, False
        here = 1
        s = 0
        if i < n and buf[i] == delim:
            i += 1
            sd = 0
            while i < n and 48 <= buf[i] <= 57 and sd < 19:
                s = s * 10 + (buf[i] - 48)
                sd += 1
                i += 1
            if sd == 0 or sd == 19 or s < 1:
                return keys[:m], sizes[:m], m, cols, False
            here = 2
        if i < n and buf[i] == 13:
            i += 1
        if i < n and buf[i] != 10:
            return keys[:m], sizes[:m], m, cols, False
        if cols == 0:
            cols = here
        elif here != cols:
            return keys[:m], sizes[:m], m, cols, False
        keys[m] = -v if neg else v
        sizes[m] = s
        m += 1
        i += 1
    return keys[:m], sizes[:m], m, cols, True


def _header_columns(block: bytes, delimiter: str) -> tuple[int, int]:
    """(bytes of the first line, its column count) when the block's first line is a
    ``key[,size]`` header as the exact reader reads one, else (0, 0)."""
    end = block.find(b"\n") + 1 or len(block)
    try:
        text = block[:end].decode("utf-8").strip(" \r\n")
    except UnicodeDecodeError:
        return 0, 0
    fields = [part.strip() for part in text.split(delimiter)]
    if fields[0].lower() == "key" and len(fields) <= 2:
        return end, len(fields)
    return 0, 0


def scan_delimited_file(path: str | os.PathLike[str], delimiter: str | None) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(int64 keys, int64 sizes or None) of a delimited file whose every line is a plain integer
    ``key[,size]`` (after an optional header), read in 32 MiB blocks; ``None`` for any other
    file (then the exact reader reads it), for an empty one and for one it cannot open.
    ``delimiter`` None means the first tab or comma of the file (a file with both is not plain).
    O(bytes); memory O(lines).

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "t.csv"); _ = open(p, "w").write("Key\\n5\\n+7\\n")
    >>> [a.tolist() for a in scan_delimited_file(p, ",") if a is not None]
    [[5, 7]]
    >>> _ = open(p, "w").write("5\\n# a comment\\n")
    >>> scan_delimited_file(p, ",") is None
    True
    """
    keys: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    expected = 0
    if not is_regular_file(path):
        return None
    try:
        with open(path, "rb") as stream:
            for block in whole_line_blocks(stream):
                if not keys and expected == 0:
                    if delimiter is None:
                        delimiter = "\t" if b"\t" in block else ","
                    start, expected = _header_columns(block, delimiter)
                    block = block[start:]
                k, s, m, cols, ok = scan_in_halves(parse_int_lines, block, ord(delimiter or ","))
                if not ok or (m and expected and cols != expected):
                    return None
                if m:
                    expected = cols
                    keys.append(k)
                    sizes.append(s if cols == 2 else np.zeros(0, np.int64))
    except OSError:
        return None
    if not keys:
        return None
    return np.concatenate(keys), (np.concatenate(sizes) if expected == 2 else None)
