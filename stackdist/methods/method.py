"""How an answer is computed: the *method* value every ``curve`` / ``tiers`` / ``plan`` call takes.

Three methods, one result type per question (stumpy's rule: ``stumped(client, ...)`` returns what
``stump(...)`` returns; the cluster is the caller's):

- :class:`Exact`: one replay of the whole trace in this process (the default).
- :class:`Sampled`: SHARDS, a seeded hash filter on the reader's keys or request blocks
  (a fixed rate ``rate``, or a fixed size ``size`` of kept keys), run under ``seeds`` hash seeds
  ``seed, seed + 1, ...``; the first seed's estimate is the answer, the others give its error bar.
- :class:`Distributed`: the exact answer, replayed in time chunks on a Dask cluster (a
  ``distributed.Client`` the caller owns, or an address ``"local[:N]"`` / ``"tcp://HOST:PORT"``
  that the call opens and closes).

These are plain values (no argparse): the CLI builds one from its flags with :func:`method_of`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["EXACT", "Distributed", "Exact", "Method", "Sampled", "method_of"]


@dataclass(frozen=True)
class Exact:
    """The exact answer from one replay in this process.

    >>> Exact().name
    'exact'
    """

    name = "exact"


@dataclass(frozen=True)
class Sampled:
    """SHARDS sampling: keep the keys whose seeded hash falls under ``rate`` (fixed rate), or the
    ``size`` keys with the smallest hashes (fixed size: bounded memory; the rate falls as keys
    arrive). ``seeds`` hash seeds from ``seed`` give the error bar; the first one the answer.
    ``cluster`` (a Dask client or address, as :class:`Distributed` takes): the input files are
    read and filtered on its workers, the samples replayed here (fixed rate only; the same
    estimates).

    >>> Sampled(rate=0.01).seed_list(), Sampled(size=100, seeds=2, seed=7).seed_list()
    ([0, 1, 2], [7, 8])
    >>> Sampled()
    Traceback (most recent call last):
    ...
    ValueError: Sampled needs a rate in (0, 1] or a size >= 1 (or both); got rate=None, size=None
    """

    rate: float | None = None
    size: int | None = None
    seeds: int = 3
    seed: int = 0
    cluster: Any = None
    name = "sampled"

    def __post_init__(self) -> None:
        rate_ok = self.rate is None or (isinstance(self.rate, (int, float)) and 0 < self.rate <= 1)
        size_ok = self.size is None or (isinstance(self.size, int) and not isinstance(self.size, bool) and self.size >= 1)
        if not (rate_ok and size_ok) or (self.rate is None and self.size is None):
            raise ValueError(f"Sampled needs a rate in (0, 1] or a size >= 1 (or both); got rate={self.rate!r}, size={self.size!r}")
        if not 1 <= self.seeds <= 64 or self.seed < 0:
            raise ValueError(f"Sampled needs 1 to 64 seeds and a first seed >= 0; got seeds={self.seeds!r}, seed={self.seed!r}")

    def seed_list(self) -> list[int]:
        """The hash seeds, in order (the first gives the answer). O(seeds)."""
        return [self.seed + i for i in range(self.seeds)]


@dataclass(frozen=True)
class Distributed:
    """The exact answer on a Dask cluster: ``client`` is a ``distributed.Client`` (the caller's,
    never closed here) or an address, ``"local"``, ``"local:N"`` or ``"tcp://HOST:PORT"`` (opened
    for the call and closed after it).

    >>> Distributed("local:2").name
    'distributed'
    """

    client: Any
    name = "distributed"


Method = Exact | Sampled | Distributed
"""Any of the three method values."""

EXACT = Exact()
"""The default method."""


def method_of(rate: float | None = None, size: int | None = None, seeds: int = 3, seed: int = 0,
              dask: Any = None) -> Method:
    """The method named by the usual options: a rate or size samples (on the cluster ``dask``'s
    workers when given); a cluster alone is the exact distributed replay; nothing is exact. O(1).

    >>> method_of(), method_of(rate=0.5).name, method_of(dask="local").name, method_of(rate=0.5, dask="local").cluster
    (Exact(), 'sampled', 'distributed', 'local')
    """
    if rate is not None or size is not None:
        return Sampled(rate, size, seeds, seed, cluster=dask)
    if dask is not None:
        return Distributed(dask)
    return EXACT
