"""Intrusive doubly linked lists over integer node ids, for the offload kernels (compiled).

A list is two int64 arrays, ``nx`` and ``pv`` (next and previous node of each id), and a root
node (a sentinel id past the real ones) that links the least recent end (``nx[root]``) and the
most recent end (``pv[root]``); ``nx[k] = -1`` marks a node that is in no list. O(1) each.

>>> import numpy as np
>>> nx = np.full(4, -1, np.int64); pv = np.full(4, -1, np.int64); nx[3] = pv[3] = 3
>>> append(0, nx, pv, 3); append(1, nx, pv, 3); link_after(2, 0, nx, pv); unlink(0, nx, pv)
>>> nx.tolist()  # the list is now 2, 1 (root 3); 0 is in none
[-1, 3, 1, 2]
"""

from __future__ import annotations

from stackdist.engine.kernels import njit

__all__ = ["append", "link_after", "unlink"]


@njit(cache=True, nogil=True)
def link_after(k, at, nx, pv):  # type: ignore[no-untyped-def]
    """Insert node ``k`` right after node ``at``."""
    n = nx[at]
    nx[at] = k
    pv[k] = at
    nx[k] = n
    pv[n] = k


@njit(cache=True, nogil=True)
def append(k, nx, pv, root):  # type: ignore[no-untyped-def]
    """Insert node ``k`` at the most recent end of ``root``'s list."""
    link_after(k, pv[root], nx, pv)


@njit(cache=True, nogil=True)
def unlink(k, nx, pv):  # type: ignore[no-untyped-def]
    """Remove node ``k`` from its list (``nx[k] = -1`` after)."""
    nx[pv[k]] = nx[k]
    pv[nx[k]] = pv[k]
    nx[k] = -1
