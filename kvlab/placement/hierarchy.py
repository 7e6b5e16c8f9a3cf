"""The tiered block cache: N tiers (GPU HBM, CPU DRAM, SSD, ...) under one policy.

Sizes are in blocks (every block occupies one slot, as in a paged KV allocator). Link ``l``
joins tier ``l`` and tier ``l + 1`` (link 0 = PCIe between HBM and DRAM, link 1 = NVMe
between DRAM and SSD); ``up`` counts block moves towards the GPU, ``down`` moves away from it.

Organisations (tiers of capacity 0 are skipped: nothing is stored there, data passes through):

- ``exclusive`` (promote on hit, demote on eviction): a block lives in at most one tier. A hit
  in tier k > 0 moves it to the top tier; a miss is computed on the GPU and placed in the top
  tier; inserting into a full tier demotes that tier's victim one (non-empty) tier down,
  cascading; the last tier's victim is dropped. With LRU this is one LRU stack cut into bands,
  so tier k serves exactly the accesses with ``c0+..+c(k-1) < stack distance <= c0+..+ck``.
- ``inclusive`` (write-through, as LMCache and vLLM's CPU offload): a miss is written to every
  tier; a hit in tier k is copied into the tiers above it (tier k is touched, the tiers below
  it are not); each tier evicts (drops) its own victim. Tier k therefore sees only the accesses
  that missed tiers 0..k-1, so two LRU tiers behave exactly as ``kvlab.kvsim.TwoTierCache``.

Traffic: a demand hit in tier k moves the block up every link below k (it must reach the GPU
to be used); a miss moves it down to every tier that stores it (write-back or write-through);
a demotion moves it down the links it crosses. A ``usable=False`` access (a block after the
first miss of a request, which the engine recomputes although it is cached) is placed like a
hit but charged like a miss: no fetch, only the writes a miss would do.

>>> from kvlab.placement.policies import Recency
>>> cache = TieredCache([1, 1, 1], Recency(), "exclusive")
>>> [cache.access(b) for b in (1, 2, 3, 1, 4)]
[-1, -1, -1, 2, -1]
>>> cache.contents(), cache.up, cache.down
([[4], [1], [3]], [1, 1], [4, 3])
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import cast

from .policies import LRUTier, Policy, Recency, make_policy

__all__ = ["MISS", "ORGANISATIONS", "TieredCache"]

#: Tier index returned for a miss.
MISS = -1
ORGANISATIONS = ("exclusive", "inclusive")


def _check_capacities(capacities: Sequence[int]) -> list[int]:
    if isinstance(capacities, (str, bytes)):
        raise TypeError(f"capacities must be a sequence of non-negative ints, got {capacities!r}.")
    caps = list(capacities)
    if not caps:
        raise ValueError("capacities must name at least one tier.")
    for index, cap in enumerate(caps):
        if isinstance(cap, bool) or not isinstance(cap, int):
            raise TypeError(f"capacities[{index}] must be a non-negative int, got {cap!r}.")
        if cap < 0:
            raise ValueError(f"capacities[{index}] must be a non-negative int, got {cap}.")
    return caps


class TieredCache:
    """Blocks in N tiers with one policy and one organisation; counts block moves per link.

    ``access(block, usable=True)`` returns the tier that held the block (-1 on a miss).
    ``locate(block)`` returns it without changing anything. ``prefetch(block)`` brings a block
    held in a lower tier to the top tier, charged to ``prefetch_up``/``prefetch_down``.

    Complexity: O(number of tiers) plus the policy's cost per insertion/eviction
    (O(1) for LRU, O(log n) for the heap policies).
    """

    def __init__(self, capacities: Sequence[int], policy: str | Policy = "lru", organisation: str = "exclusive") -> None:
        self.capacities = _check_capacities(capacities)
        if organisation not in ORGANISATIONS:
            raise ValueError(f"organisation must be one of {', '.join(ORGANISATIONS)}; got {organisation!r}.")
        self.organisation = organisation
        self.exclusive = organisation == "exclusive"
        self.policy = make_policy(policy)
        n = len(self.capacities)
        self.tiers = [self.policy.new_tier() for _ in range(n)]
        self.active = [k for k, cap in enumerate(self.capacities) if cap > 0]
        self.top = self.active[0] if self.active else n
        self._next_active = [next((j for j in self.active if j > k), n) for k in range(n)]
        self._where: dict[Hashable, int] = {}
        self.up = [0] * (n - 1)
        self.down = [0] * (n - 1)
        self.prefetch_up = [0] * (n - 1)
        self.prefetch_down = [0] * (n - 1)
        self.dropped = 0
        self.now = 0
        self._track = self.policy.tracks_accesses
        if isinstance(self.policy, Recency):
            # Fast path (same results; the generic path is tested to agree): plain OrderedDicts.
            self._orders = [cast(LRUTier, tier).order for tier in self.tiers]  # Recency's tiers
            if self.exclusive:
                self.access = self._access_exclusive_lru  # type: ignore[method-assign]
            else:
                self.access = self._access_inclusive_lru  # type: ignore[method-assign]

    # ----------------------------------------------------------------- queries
    def locate(self, block: Hashable) -> int:
        """The tier holding ``block`` (the topmost one when inclusive), or -1; no side effects."""
        if self.exclusive:
            return self._where.get(block, MISS)
        for k in self.active:
            if block in self.tiers[k]:
                return k
        return MISS

    def contents(self) -> list[list[Hashable]]:
        """Each tier's blocks, next victim first."""
        return [tier.victim_order() for tier in self.tiers]

    def moves(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """Copies of the move counters ``(up, down, prefetch_up, prefetch_down)``."""
        return list(self.up), list(self.down), list(self.prefetch_up), list(self.prefetch_down)

    # ----------------------------------------------------------------- accesses
    def access(self, block: Hashable, usable: bool = True) -> int:
        """One demand access; return the tier that held ``block`` before it (-1 = miss)."""
        self.now += 1
        if self._track:
            self.policy.on_access(block, self.now)
        if self.exclusive:
            return self._access_exclusive(block, usable)
        return self._access_inclusive(block, usable)

    def _access_exclusive(self, block: Hashable, usable: bool) -> int:
        where = self._where
        t = where.get(block, MISS)
        top = self.top
        if t == top:  # already in the top tier (usually the GPU): a touch
            self.tiers[t].touch(block)
            if usable:
                up = self.up
                for link in range(t):
                    up[link] += 1
            return t
        if top == len(self.tiers):  # no capacity anywhere
            return MISS
        if t > 0:
            self.tiers[t].remove(block)
        if usable and t > 0:
            up = self.up
            for link in range(t):
                up[link] += 1
        else:
            down = self.down
            for link in range(top):
                down[link] += 1
        self._insert_exclusive(top, block, self.down)
        return t

    def _access_exclusive_lru(self, block: Hashable, usable: bool = True) -> int:
        """:meth:`access` for exclusive LRU tiers, inlined on the tiers' OrderedDicts."""
        where = self._where
        t = where.get(block, MISS)
        top = self.top
        orders = self._orders
        if t == top:
            orders[t].move_to_end(block)
            if usable and t:
                up = self.up
                for link in range(t):
                    up[link] += 1
            return t
        if top == len(orders):
            return MISS
        if t > 0:
            del orders[t][block]
        if usable and t > 0:
            up = self.up
            for link in range(t):
                up[link] += 1
        elif top:
            down = self.down
            for link in range(top):
                down[link] += 1
        caps, next_active, down = self.capacities, self._next_active, self.down
        k = top
        order = orders[k]
        order[block] = None
        where[block] = k
        while len(order) > caps[k]:
            victim = order.popitem(last=False)[0]
            j = next_active[k]
            if j == len(orders):
                del where[victim]
                self.dropped += 1
                break
            for link in range(k, j):
                down[link] += 1
            k = j
            order = orders[k]
            order[victim] = None
            where[victim] = k
        return t

    def _insert_exclusive(self, k: int, block: Hashable, down: list[int]) -> None:
        """Insert ``block`` into tier k and demote victims down the active tiers."""
        tiers, caps, where, next_active = self.tiers, self.capacities, self._where, self._next_active
        n = len(tiers)
        tiers[k].insert(block)
        where[block] = k
        while len(tiers[k]) > caps[k]:
            victim = tiers[k].pop_victim()
            j = next_active[k]
            if j == n:
                del where[victim]
                self.dropped += 1
                return
            for link in range(k, j):
                down[link] += 1
            tiers[j].insert(victim)
            where[victim] = j
            k = j

    def _access_inclusive(self, block: Hashable, usable: bool) -> int:
        tiers = self.tiers
        t = MISS
        for k in self.active:
            if block in tiers[k]:
                t = k
                break
        if t >= 0 and usable:
            tiers[t].touch(block)
            up = self.up
            for link in range(t):
                up[link] += 1
            for k in self.active:
                if k >= t:
                    break
                self._insert_dropping(k, block)
            return t
        deepest = -1  # miss (or a recomputed block): write through to every tier
        for k in self.active:
            if block in tiers[k]:
                tiers[k].touch(block)
            else:
                self._insert_dropping(k, block)
                deepest = k
        down = self.down
        for link in range(deepest):
            down[link] += 1
        return t

    def _access_inclusive_lru(self, block: Hashable, usable: bool = True) -> int:
        """:meth:`access` for inclusive LRU tiers, inlined on the tiers' OrderedDicts."""
        orders, caps, active = self._orders, self.capacities, self.active
        t = MISS
        for k in active:
            if block in orders[k]:
                t = k
                break
        if t >= 0 and usable:
            orders[t].move_to_end(block)
            up = self.up
            for link in range(t):
                up[link] += 1
            for k in active:
                if k >= t:
                    break
                order = orders[k]
                order[block] = None
                if len(order) > caps[k]:
                    order.popitem(last=False)
                    self.dropped += 1
            return t
        deepest = -1
        for k in active:
            order = orders[k]
            if block in order:
                order.move_to_end(block)
            else:
                order[block] = None
                deepest = k
                if len(order) > caps[k]:
                    order.popitem(last=False)
                    self.dropped += 1
        down = self.down
        for link in range(deepest):
            down[link] += 1
        return t

    def _insert_dropping(self, k: int, block: Hashable) -> None:
        tier = self.tiers[k]
        tier.insert(block)
        if len(tier) > self.capacities[k]:
            tier.pop_victim()
            self.dropped += 1

    # ----------------------------------------------------------------- prefetch
    def prefetch(self, block: Hashable) -> int:
        """Bring a block held below the top tier up to it; return the source tier or -1.

        Not a demand access: the policy's metadata is not updated. Returns -1 (and does
        nothing) when the block is not cached or is already in the top tier.
        """
        t = self.locate(block)
        top = self.top
        if t <= top:
            return MISS
        pup = self.prefetch_up
        for link in range(top, t):
            pup[link] += 1
        if self.exclusive:
            self.tiers[t].remove(block)
            self._insert_exclusive(top, block, self.prefetch_down)
        else:
            for k in self.active:
                if k >= t:
                    break
                self._insert_dropping(k, block)
        return t

    # ----------------------------------------------------------------- invariants
    def _check(self) -> None:
        """Assert in O(n): tiers within capacity, exclusivity and the location map agree."""
        for k, tier in enumerate(self.tiers):
            tier._check()
            assert len(tier) <= self.capacities[k], (k, len(tier), self.capacities[k])
        if self.exclusive:
            seen: dict[Hashable, int] = {}
            for k, tier in enumerate(self.tiers):
                for block in tier:
                    assert block not in seen, f"block {block!r} in tiers {seen[block]} and {k}"
                    seen[block] = k
            assert seen == self._where, "location map out of sync with the tiers"
        else:
            assert not self._where
        for counter in (self.up, self.down, self.prefetch_up, self.prefetch_down):
            assert all(value >= 0 for value in counter)
        self.policy._check()
