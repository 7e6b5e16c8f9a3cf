"""Eviction and demotion policies for the tiered KV-block cache.

A policy scores blocks; the tier evicts (exclusive organisation: demotes) its lowest-scored
block first. A policy is a small class overriding a few hooks:

- ``on_access(block, now)``: update the policy's per-block metadata on a demand access
  (``now`` is the simulator's block-access clock, 1, 2, 3, ...).
- ``priority(block)``: the eviction key from that metadata; the tier's victim is the block
  with the smallest key. A tier stores the key it computed when it last inserted or touched
  the block, so a tier only re-scores a block when it sees it (this is what makes the
  inclusive organisation's lower tiers see the *filtered* stream of upper-tier misses).
- ``new_tier()``: the per-tier index; :class:`HeapTier` (any ``priority``) by default,
  :class:`LRUTier` (an ``OrderedDict``) for recency.

Metadata is per block and global (not per tier) and is kept after a block leaves the cache
("perfect" history), so a block that comes back remembers its count and its gaps.

>>> lfu = ReuseFrequency()
>>> tier = lfu.new_tier()
>>> for now, block in enumerate([7, 8, 7, 9], start=1):
...     lfu.on_access(block, now)
...     tier.touch(block) if block in tier else tier.insert(block)
>>> tier.pop_victim()  # 8 and 9 were used once; 8 less recently
8
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

__all__ = [
    "POLICIES",
    "EWMANextTouch",
    "HeapTier",
    "LRUTier",
    "Policy",
    "PredictedReuse",
    "Recency",
    "ReuseFrequency",
    "make_policy",
]


class LRUTier:
    """One tier's blocks in recency order; the victim is the least recently inserted/touched.

    Complexity: O(1) per operation (``collections.OrderedDict``).

    >>> t = LRUTier(); t.insert(1); t.insert(2); t.touch(1)
    >>> t.pop_victim(), len(t)
    (2, 1)
    """

    __slots__ = ("_order",)

    def __init__(self) -> None:
        self._order: OrderedDict[Hashable, None] = OrderedDict()

    @property
    def order(self) -> OrderedDict[Hashable, None]:
        """The blocks, least recent first (the live dict: the tiered cache's LRU fast path edits it)."""
        return self._order

    def insert(self, block: Hashable) -> None:
        """Add an absent block as the most recent."""
        self._order[block] = None

    def touch(self, block: Hashable) -> None:
        """Make a present block the most recent."""
        self._order.move_to_end(block)

    def remove(self, block: Hashable) -> None:
        """Remove a present block."""
        del self._order[block]

    def pop_victim(self) -> Hashable:
        """Remove and return the least recent block (the tier must not be empty)."""
        return self._order.popitem(last=False)[0]

    def victim_order(self) -> list[Hashable]:
        """All blocks, next victim first."""
        return list(self._order)

    def __contains__(self, block: object) -> bool:
        return block in self._order

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._order)

    def _check(self) -> None:
        """Assert the invariants in O(n): an OrderedDict of blocks mapped to None."""
        assert isinstance(self._order, OrderedDict)
        assert all(value is None for value in self._order.values())


class HeapTier:
    """One tier's blocks keyed by a priority function; the victim has the smallest key.

    The key is computed when the block is inserted or touched and kept until the next touch.
    A binary heap with lazy deletion; stale entries are compacted away when they outnumber
    the live ones. Ties on equal keys go to the smaller block id.

    Complexity: O(log n) amortised per operation.

    >>> keys = {1: 5, 2: 3, 3: 9}
    >>> t = HeapTier(keys.__getitem__)
    >>> for b in (1, 2, 3): t.insert(b)
    >>> t.pop_victim(), t.pop_victim()
    (2, 1)
    """

    __slots__ = ("_heap", "_key", "_priority")

    def __init__(self, priority: Callable[[Hashable], Any]) -> None:
        self._priority = priority
        self._key: dict[Hashable, Any] = {}
        self._heap: list[tuple[Any, Hashable]] = []

    def insert(self, block: Hashable) -> None:
        """Add (or re-score) a block with its current priority."""
        key = self._priority(block)
        self._key[block] = key
        heapq.heappush(self._heap, (key, block))
        if len(self._heap) > 2 * len(self._key) + 64:
            self._compact()

    touch = insert

    def remove(self, block: Hashable) -> None:
        """Remove a present block (its heap entry becomes stale)."""
        del self._key[block]

    def pop_victim(self) -> Hashable:
        """Remove and return the block with the smallest stored key (tier must not be empty)."""
        heap, current = self._heap, self._key
        while True:
            key, block = heapq.heappop(heap)
            if block in current and current[block] == key:
                del current[block]
                return block

    def victim_order(self) -> list[Hashable]:
        """All blocks, next victim first (O(n log n))."""
        return [block for _, block in sorted((key, block) for block, key in self._key.items())]

    def _compact(self) -> None:
        self._heap = [(key, block) for block, key in self._key.items()]
        heapq.heapify(self._heap)

    def __contains__(self, block: object) -> bool:
        return block in self._key

    def __len__(self) -> int:
        return len(self._key)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._key)

    def _check(self) -> None:
        """Assert in O(n): every live block has a heap entry with its current key; heap ordered.

        A block removed and re-inserted with an unchanged key may have two equal entries; the
        first one popped returns it and makes the other stale.
        """
        live = {block for key, block in self._heap if block in self._key and self._key[block] == key}
        assert live == set(self._key), "live heap entries != live blocks"
        for i in range(1, len(self._heap)):
            assert not (self._heap[i] < self._heap[(i - 1) // 2]), "heap order violated"


class Policy:
    """Base policy: override ``on_access`` and ``priority`` (smallest key is evicted first)."""

    name = "base"
    #: True when ``on_access`` keeps metadata (lets the cache skip the call for LRU).
    tracks_accesses = True

    def on_access(self, block: Hashable, now: int) -> None:
        """Update this block's metadata on a demand access at clock ``now``."""

    def priority(self, block: Hashable) -> Any:
        """The eviction key of ``block``; smaller is evicted (or demoted) first."""
        raise NotImplementedError

    def new_tier(self) -> LRUTier | HeapTier:
        """A fresh, empty index for one tier."""
        return HeapTier(self.priority)

    def describe(self) -> str:
        """One line naming the policy and its parameters."""
        return self.name

    def _check(self) -> None:
        """Assert the metadata invariants (none in the base class)."""


class Recency(Policy):
    """Recency (LRU): evict the block least recently inserted or touched in that tier.

    >>> t = Recency().new_tier(); [t.insert(b) for b in (1, 2, 3)] and None; t.touch(1)
    >>> t.victim_order()
    [2, 3, 1]
    """

    name = "lru"
    tracks_accesses = False

    def priority(self, block: Hashable) -> Any:  # pragma: no cover - LRUTier needs no key
        raise NotImplementedError("Recency orders blocks by the tier's own insertion order.")

    def new_tier(self) -> LRUTier:
        return LRUTier()


class ReuseFrequency(Policy):
    """Reuse frequency (LFU with a recency tie-break): key = (accesses so far, last access).

    >>> p = ReuseFrequency(); p.on_access("a", 1); p.on_access("a", 2); p.on_access("b", 3)
    >>> p.priority("a") > p.priority("b")
    True
    """

    name = "lfu"

    def __init__(self) -> None:
        self.count: dict[Hashable, int] = {}
        self.last: dict[Hashable, int] = {}

    def on_access(self, block: Hashable, now: int) -> None:
        self.count[block] = self.count.get(block, 0) + 1
        self.last[block] = now

    def priority(self, block: Hashable) -> tuple[int, int]:
        return (self.count.get(block, 0), self.last.get(block, 0))

    def _check(self) -> None:
        assert self.count.keys() == self.last.keys()
        assert all(c >= 1 for c in self.count.values())


class PredictedReuse(Policy):
    """Predicted reuse: next use predicted at ``last + last inter-access gap``; evict the farthest.

    Our definition (the paper's text was not available to us): the prediction is a reuse-distance
    predictor from each block's most recent inter-access gap, in block accesses. A block never
    reused yet has no gap; it is predicted never to return and goes first, least recent first.
    Key: ``(0, 0, last)`` for such blocks, else ``(1, -(last + gap), last)``.

    >>> p = PredictedReuse()
    >>> for now, b in enumerate("abab", 1): p.on_access(b, now)
    >>> p.priority("a"), p.priority("b")
    ((1, -5, 3), (1, -6, 4))
    """

    name = "predicted"

    def __init__(self) -> None:
        self.last: dict[Hashable, int] = {}
        self.gap: dict[Hashable, float] = {}

    def on_access(self, block: Hashable, now: int) -> None:
        previous = self.last.get(block)
        if previous is not None:
            self.gap[block] = now - previous
        self.last[block] = now

    def priority(self, block: Hashable) -> tuple[int, float, int]:
        last = self.last.get(block, 0)
        gap = self.gap.get(block)
        if gap is None:
            return (0, 0, last)
        return (1, -(last + gap), last)

    def _check(self) -> None:
        assert self.gap.keys() <= self.last.keys()
        assert all(g > 0 for g in self.gap.values())


class EWMANextTouch(PredictedReuse):
    """EWMA next-touch predictor: next use at ``last + EWMA of inter-access gaps``.

    ``ewma = alpha * gap + (1 - alpha) * ewma`` (the first gap initialises it); with
    ``alpha=1`` it is exactly :class:`PredictedReuse`. Cold blocks go first, as there.

    >>> p = EWMANextTouch(alpha=0.5)
    >>> for now, b in [(1, "a"), (3, "a"), (9, "a")]: p.on_access(b, now)
    >>> p.gap["a"]  # 0.5 * 6 + 0.5 * 2
    4.0
    """

    name = "ewma"

    def __init__(self, alpha: float = 0.3) -> None:
        super().__init__()
        if not (isinstance(alpha, (int, float)) and 0.0 < alpha <= 1.0):
            raise ValueError(f"alpha must be a number in (0, 1], got {alpha!r}.")
        self.alpha = float(alpha)

    def on_access(self, block: Hashable, now: int) -> None:
        previous = self.last.get(block)
        if previous is not None:
            gap = now - previous
            old = self.gap.get(block)
            self.gap[block] = float(gap) if old is None else self.alpha * gap + (1.0 - self.alpha) * old
        self.last[block] = now

    def describe(self) -> str:
        return f"{self.name}(alpha={self.alpha:g})"


#: Policy names accepted by :func:`make_policy` and the command line.
POLICIES: dict[str, type[Policy]] = {
    "lru": Recency,
    "lfu": ReuseFrequency,
    "predicted": PredictedReuse,
    "ewma": EWMANextTouch,
}


def make_policy(policy: str | Policy) -> Policy:
    """Return a fresh policy for a name in :data:`POLICIES` (an instance is returned as is).

    >>> make_policy("lfu").name
    'lfu'
    """
    if isinstance(policy, Policy):
        return policy
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}.")
    return POLICIES[policy]()
