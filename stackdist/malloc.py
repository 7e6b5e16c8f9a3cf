"""Keep freed large arrays in the process (glibc): the engine models allocate arrays of tens of
MiB per simulation (one entry per distinct page), and a deployment search runs hundreds of them.
glibc serves such allocations with ``mmap`` and returns them with ``munmap`` on free, so every
simulation faults its arrays in again, page by page: on the README's first command that was 2m17s
of system time in a 2m16s run. Raising ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` (as the
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` environment variables would) keeps them in
the heap for reuse: the same run took 48 s with 2.5 s of system time. Peak memory is unchanged in
kind (the arrays were live at their peak anyway); at most ``TRIM`` bytes of freed heap are kept.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["keep_freed_memory"]

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP = 1 << 30
"""Allocations below 1 GiB come from the heap (not mmap)."""
TRIM = 1 << 30
"""Up to 1 GiB of freed heap is kept for the next simulation."""


def keep_freed_memory() -> bool:
    """Set glibc's thresholds (module docstring); False where there is no glibc (macOS, musl) or
    it refuses (tests/test_malloc.py). O(1).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(MMAP)) == 1
                    and libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(TRIM)) == 1)
    except (OSError, AttributeError):
        return False
