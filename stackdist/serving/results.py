"""What the two engine models share (package-internal): the result type, pool checks, the
per-size fan-out over two threads and the feasibility search.

Both kernels release the GIL (``nogil=True``), so pool sizes run in parallel threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from stackdist.output import step

__all__ = ["ServingResult", "bisect_feasible", "check_pools", "run_pools"]


@dataclass(frozen=True)
class ServingResult:
    """Per-request hit tokens of one engine model at each pool size.

    ``pools[i]`` is a pool size (``None`` = infinite); ``hit_tokens[i]`` (int64, one entry per
    request in trace order) are the prompt tokens served from cache at each lookup, or all -1
    when pool ``i`` is infeasible; ``failed_request[i]`` is then the first request whose
    allocation failed (else -1). ``min_feasible_pool`` is filled when some pool is infeasible
    (see the engine module's docstring for what is proved about it); ``method`` says how the
    hits were computed (``"per-size"`` simulation or ``"one-replay"``).
    """

    engine: str
    pools: tuple[int | None, ...]
    hit_tokens: np.ndarray
    failed_request: np.ndarray
    min_feasible_pool: int | None
    method: str
    min_feasible_proved: bool = False

    def hits(self, pool: int | None) -> np.ndarray | None:
        """Hit tokens per request at ``pool``, or None when that pool is infeasible.

        >>> r = ServingResult("x", (2, None), np.array([[-1], [16]]), np.array([0, -1]), 3, "per-size")
        >>> r.hits(2) is None, r.hits(None).tolist(), r.feasible(None)
        (True, [16], True)
        """
        i = self.pools.index(pool)
        return None if self.failed_request[i] >= 0 else self.hit_tokens[i]

    def feasible(self, pool: int | None) -> bool:
        """Whether every allocation succeeded at ``pool``."""
        return bool(self.failed_request[self.pools.index(pool)] < 0)


def check_pools(pools: Sequence[int | None], minimum: int) -> tuple[int | None, ...]:
    """Validate pool sizes: each ``None`` or an integer ``>= minimum``.

    >>> check_pools([4, None], 1)
    (4, None)
    """
    out: list[int | None] = []
    for p in pools:
        if p is None:
            out.append(None)
            continue
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < minimum:
            raise ValueError(f"pool_blocks must be None (infinite) or integers >= {minimum}; got {p!r}")
        out.append(int(p))
    if not out:
        raise ValueError("pool_blocks must name at least one pool size; got none")
    return tuple(out)


def run_pools(sim: Callable[[int | None], tuple[np.ndarray, int]], sizes: Sequence[int | None], threads: int = 2,
              what: str = "") -> list[tuple[np.ndarray, int]]:
    """Run ``sim(size) -> (hits, failed)`` for every size, on ``threads`` threads (in order); a
    progress step (:func:`stackdist.output.step`, naming ``what``) as each size is done.

    >>> [f for _, f in run_pools(lambda n: (np.zeros(1), -1 if n else 0), [0, 5])]
    [0, -1]
    """
    done = [0]
    lock = threading.Lock()

    def run(size: int | None) -> tuple[np.ndarray, int]:
        out = sim(size)
        with lock:  # one progress step per size (stackdist.output.step: shown when the command shows progress)
            done[0] += 1
            step(f"{what + ' ' if what else ''}pool size {'inf' if size is None else f'{size:,}'} done "
                 f"({done[0]}/{len(sizes)})")
        return out

    if threads <= 1 or len(sizes) <= 1:
        return [run(s) for s in sizes]
    with ThreadPoolExecutor(max_workers=threads) as ex:
        return list(ex.map(run, sizes))


def bisect_feasible(feasible: Callable[[int], bool], lo: int, hi: int) -> int:
    """Smallest ``n`` in ``[lo, hi]`` with ``feasible(n)`` assuming ``feasible(hi)`` and that
    feasibility is monotone (else: some ``n`` with ``feasible(n)`` and not ``feasible(n - 1)``,
    or ``lo``). O(log(hi - lo)) calls.

    >>> bisect_feasible(lambda n: n >= 7, 1, 100)
    7
    """
    if feasible(lo):
        return lo
    while hi - lo > 1:  # invariant: not feasible(lo), feasible(hi)
        mid = (lo + hi) // 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return hi
