"""Reference KV-cache simulators: a size-aware LRU cache and two tiered caches built on it.

These are the lab's *obviously correct* simulators. They favour clarity over speed and are
the ground truth that faster engines are checked against.

- :class:`LRUCache`: one size-aware LRU tier (whole-entry eviction, oldest first).
- :class:`TwoTierCache`: a GPU tier plus a CPU tier with the LMCache-style rules
  (a GPU hit leaves the CPU tier alone; a CPU hit is copied up into the GPU tier;
  a miss is stored in both tiers).
- :class:`ExclusiveTierCache`: two or more tiers where each entry lives in at most one
  tier; hits are promoted to the top tier and evictions are demoted one tier down.
- :class:`EnginePrefixCache`: a prefix cache of unit-size blocks with engine (vLLM) request
  semantics: the hit is the longest cached prefix, then the blocks are committed tail first.

Sizes are positive ints (tokens or bytes); capacities are non-negative ints. An entry
larger than a tier's capacity is never stored in that tier and evicts nothing there.

Standard library only: this file must also run when copied alone into an empty folder.

>>> cache = LRUCache(10)
>>> cache.access("a", 4), cache.access("b", 4), cache.access("a", 4)
(False, False, True)
>>> cache.access("c", 4)  # evicts "b", the least recently used entry
False
>>> cache.keys(), cache.used
(['a', 'c'], 8)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from numbers import Integral

__all__ = ["MISS", "EnginePrefixCache", "ExclusiveTierCache", "LRUCache", "TwoTierCache"]

#: Tier index that :meth:`ExclusiveTierCache.access` returns for a miss.
MISS = -1


def _is_integer(value: object) -> bool:
    """An int or any other integral number (numpy's included), but not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def _require_capacity(value: object, name: str = "capacity") -> int:
    """Return ``value`` as an int if it is a non-negative integer (bool rejected), else raise
    TypeError/ValueError."""
    if not _is_integer(value):
        raise TypeError(f"{name} must be a non-negative int, got {value!r} of type {type(value).__name__}.")
    if value < 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be a non-negative int, got {value}.")
    return int(value)  # type: ignore[call-overload]


def _require_size(value: object) -> int:
    """Return ``value`` as an int if it is a positive integer (bool rejected), else raise
    TypeError/ValueError."""
    if not _is_integer(value):
        raise TypeError(f"size must be a positive int, got {value!r} of type {type(value).__name__}.")
    if value <= 0:  # type: ignore[operator]
        raise ValueError(f"size must be a positive int, got {value}.")
    return int(value)  # type: ignore[call-overload]


class LRUCache:
    """A size-aware LRU cache: whole entries, evicted least recently used first.

    ``access(key, size)`` returns True on a hit (and makes the entry the most recent) and
    False on a miss (evicting the oldest entries until the new one fits, then storing it).
    An entry larger than the capacity is not stored and evicts nothing. ``key in cache``
    does not change the order. ``used`` is the sum of the stored sizes.

    Complexity: O(1) per hit, O(1 + evictions) per miss (``collections.OrderedDict``).

    >>> cache = LRUCache(5)
    >>> cache.access("big", 6), "big" in cache, cache.used  # oversized: not stored
    (False, False, 0)
    """

    def __init__(self, capacity: int) -> None:
        self.capacity: int = _require_capacity(capacity)
        self.used: int = 0
        self._entries: OrderedDict[Hashable, int] = OrderedDict()

    def access(self, key: Hashable, size: int) -> bool:
        """Look up ``key``; on a miss store it with ``size``. Return True on a hit.

        A hit keeps the stored size (``size`` is still validated).
        """
        size = _require_size(size)
        if key in self._entries:
            self._entries.move_to_end(key)
            return True
        if size <= self.capacity:
            self._store(key, size)
        return False

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[Hashable]:
        """Return the stored keys from the oldest (next to evict) to the newest."""
        return list(self._entries)

    def items(self) -> list[tuple[Hashable, int]]:
        """Return the stored ``(key, size)`` pairs from the oldest to the newest."""
        return list(self._entries.items())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity}, used={self.used}, entries={len(self)})"

    # Internal hooks shared with ExclusiveTierCache; they assume validated input.

    def _store(self, key: Hashable, size: int) -> list[tuple[Hashable, int]]:
        """Store an absent ``key`` of ``size <= capacity`` as the newest entry.

        Evicts the oldest entries until it fits and returns them, oldest first.
        """
        evicted: list[tuple[Hashable, int]] = []
        while self.used + size > self.capacity:
            old_key, old_size = self._entries.popitem(last=False)
            self.used -= old_size
            evicted.append((old_key, old_size))
        self._entries[key] = size
        self.used += size
        return evicted

    def _pop(self, key: Hashable) -> int:
        """Remove a stored ``key`` and return its size."""
        size = self._entries.pop(key)
        self.used -= size
        return size

    def _size_of(self, key: Hashable) -> int:
        """Return the stored size of ``key`` without changing the order."""
        return self._entries[key]

    def _check(self) -> None:
        """Assert the invariants in O(n): used == sum of sizes <= capacity, sizes valid."""
        assert isinstance(self._entries, OrderedDict)
        total = 0
        for key, size in self._entries.items():
            assert isinstance(size, int) and not isinstance(size, bool), (key, size)
            assert 0 < size <= self.capacity, (key, size, self.capacity)
            total += size
        assert self.used == total, (self.used, total)
        assert 0 <= self.used <= self.capacity, (self.used, self.capacity)


class TwoTierCache:
    """A GPU LRU tier plus a CPU LRU tier with the LMCache-style lookup rules.

    ``access(key, size)`` returns:

    - ``"gpu"``: GPU hit. The entry becomes the most recent on the GPU; the CPU tier is
      not touched.
    - ``"cpu"``: GPU miss, CPU hit. The CPU copy becomes the most recent there and the
      entry (with its stored CPU size) is loaded into the GPU tier with normal GPU eviction.
    - ``"miss"``: in neither tier. The entry is stored in both tiers (each tier applies its
      own eviction and oversize rule).

    With ``cpu_capacity == 0`` it behaves exactly like ``LRUCache(gpu_capacity)``.
    The tiers are not kept inclusive: the GPU may hold entries the CPU has evicted.

    Complexity: O(1 + evictions) per access.

    >>> cache = TwoTierCache(gpu_capacity=4, cpu_capacity=8)
    >>> [cache.access(k, 4) for k in ("a", "b", "a", "a")]
    ['miss', 'miss', 'cpu', 'gpu']
    """

    def __init__(self, gpu_capacity: int, cpu_capacity: int) -> None:
        self.gpu = LRUCache(_require_capacity(gpu_capacity, "gpu_capacity"))
        self.cpu = LRUCache(_require_capacity(cpu_capacity, "cpu_capacity"))

    def access(self, key: Hashable, size: int) -> str:
        """Look up ``key`` in the GPU tier, then the CPU tier; return "gpu", "cpu" or "miss"."""
        size = _require_size(size)
        if key in self.gpu:
            self.gpu.access(key, size)
            return "gpu"
        if key in self.cpu:
            self.cpu.access(key, size)
            self.gpu.access(key, self.cpu._size_of(key))
            return "cpu"
        self.gpu.access(key, size)
        self.cpu.access(key, size)
        return "miss"

    def __contains__(self, key: object) -> bool:
        return key in self.gpu or key in self.cpu

    def __repr__(self) -> str:
        return f"{type(self).__name__}(gpu={self.gpu!r}, cpu={self.cpu!r})"

    def _check(self) -> None:
        """Assert both tiers' invariants in O(n)."""
        assert isinstance(self.gpu, LRUCache) and isinstance(self.cpu, LRUCache)
        self.gpu._check()
        self.cpu._check()


class ExclusiveTierCache:
    """Two or more exclusive LRU tiers (tier 0 is the top, e.g. the GPU).

    Each entry lives in at most one tier. ``access(key, size)`` returns the index of the
    tier that held ``key`` (0, 1, 2, ...) on a hit and :data:`MISS` (-1) on a miss.

    - Hit in tier 0: the entry becomes the most recent there.
    - Hit in tier k > 0: the entry is removed from tier k and inserted into tier 0
      (promotion), keeping its stored size.
    - Miss: the entry is inserted into tier 0.
    - Inserting into tier k evicts the oldest entries of tier k until there is room; each
      evicted entry is demoted (inserted as most recent) into tier k + 1, which may evict
      and demote in turn. Evictions from the last tier are dropped. The order is depth
      first: each evicted entry (oldest first) is demoted completely, with the cascade it
      triggers, before the next evicted entry is demoted. This matters only when an entry
      skips a tier (see the pass-down rule), since then two tiers feed the same lower tier.
    - An entry larger than tier k's capacity passes straight down to tier k + 1 without
      evicting anything in tier k; an entry that fits no tier is dropped.

    With tiers ``[c, 0]`` it behaves exactly like ``LRUCache(c)``.

    Complexity: O(1 + number of tiers + evictions and demotions) per access.

    >>> cache = ExclusiveTierCache([4, 4])
    >>> [cache.access(k, 4) for k in ("a", "b", "a", "a")]
    [-1, -1, 1, 0]
    >>> [tier.keys() for tier in cache.tiers]
    [['a'], ['b']]
    """

    def __init__(self, capacities: Iterable[int]) -> None:
        if isinstance(capacities, (str, bytes)) or not isinstance(capacities, Iterable):
            raise TypeError(f"capacities must be a sequence of 2 or more non-negative ints, got {capacities!r}.")
        capacity_list = list(capacities)
        if len(capacity_list) < 2:
            raise ValueError(f"capacities must hold 2 or more tiers, got {len(capacity_list)}.")
        self.tiers: list[LRUCache] = [
            LRUCache(_require_capacity(capacity, f"capacities[{index}]"))
            for index, capacity in enumerate(capacity_list)
        ]

    def access(self, key: Hashable, size: int) -> int:
        """Look up ``key`` tier by tier; return the hit tier's index, or -1 on a miss."""
        size = _require_size(size)
        tier_index = self.tier_of(key)
        if tier_index == 0:
            self.tiers[0].access(key, size)
        elif tier_index > 0:
            stored_size = self.tiers[tier_index]._pop(key)
            self._insert(0, key, stored_size)
        else:
            self._insert(0, key, size)
        return tier_index

    def tier_of(self, key: Hashable) -> int:
        """Return the index of the tier holding ``key``, or -1; does not change any order."""
        for index, tier in enumerate(self.tiers):
            if key in tier:
                return index
        return MISS

    def __contains__(self, key: object) -> bool:
        return any(key in tier for tier in self.tiers)

    @property
    def used(self) -> int:
        """Sum of the stored sizes over all tiers."""
        return sum(tier.used for tier in self.tiers)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tiers={self.tiers!r})"

    def _insert(self, level: int, key: Hashable, size: int) -> None:
        """Insert an absent ``key`` into the first tier from ``level`` on that can hold it.

        Entries evicted there are demoted into the next tier, recursively (depth is at
        most the number of tiers).
        """
        for index in range(level, len(self.tiers)):
            tier = self.tiers[index]
            if size <= tier.capacity:
                for old_key, old_size in tier._store(key, size):
                    self._insert(index + 1, old_key, old_size)
                return
        # Fits no tier from ``level`` down: dropped.

    def _check(self) -> None:
        """Assert every tier's invariants and that no key is in two tiers, in O(n)."""
        seen: set[Hashable] = set()
        for tier in self.tiers:
            assert isinstance(tier, LRUCache)
            tier._check()
            keys = set(tier.keys())
            assert not (keys & seen), sorted(map(repr, keys & seen))
            seen |= keys


class EnginePrefixCache:
    """A prefix cache of unit-size blocks with engine semantics (vLLM's free-block queue).

    A request is a sequence of prefix-chained block ids, head first. ``lookup(blocks)`` returns
    the length of the longest contiguous prefix of ``blocks`` that is cached, as the cache was
    when the request arrived (nothing changes). ``commit(blocks)`` then stores the request tail
    first: each block is made the most recent (or inserted, evicting the oldest block beyond
    the capacity), so the head ends the most recent and the tail is evicted first, as when
    vLLM frees a finished request's blocks. ``access`` is ``lookup`` then ``commit``. With
    capacity 0 nothing is stored. ``block in cache`` does not change the order.

    Complexity: O(k) per lookup, commit or access of k blocks (``collections.OrderedDict``).

    >>> cache = EnginePrefixCache(3)
    >>> cache.access(["a", "ab", "abc"]), cache.access(["a", "ab", "abd"])
    (0, 2)
    >>> cache.keys()  # oldest first: "abc" is evicted, the head "a" is the most recent
    ['abd', 'ab', 'a']
    """

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity: int = _require_capacity(capacity_blocks, "capacity_blocks")
        self._blocks: OrderedDict[Hashable, None] = OrderedDict()

    def lookup(self, blocks: Iterable[Hashable]) -> int:
        """Return how many leading blocks of ``blocks`` are cached (the hit prefix); no change."""
        prefix = 0
        for block in blocks:
            if block not in self._blocks:
                break
            prefix += 1
        return prefix

    def commit(self, blocks: Iterable[Hashable]) -> None:
        """Store ``blocks`` tail first: each becomes the most recent, the oldest beyond capacity go."""
        ordered = blocks if isinstance(blocks, Sequence) else list(blocks)
        for block in reversed(ordered):
            if block in self._blocks:
                self._blocks.move_to_end(block)
            elif self.capacity > 0:
                if len(self._blocks) >= self.capacity:
                    self._blocks.popitem(last=False)
                self._blocks[block] = None

    def access(self, blocks: Iterable[Hashable]) -> int:
        """Serve one request: return its hit prefix length (``lookup``), then ``commit`` it."""
        ordered = blocks if isinstance(blocks, Sequence) else list(blocks)
        prefix = self.lookup(ordered)
        self.commit(ordered)
        return prefix

    def __contains__(self, block: object) -> bool:
        return block in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def keys(self) -> list[Hashable]:
        """Return the cached blocks from the oldest (next to evict) to the newest."""
        return list(self._blocks)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity_blocks={self.capacity}, blocks={len(self)})"

    def _check(self) -> None:
        """Assert the invariants in O(n): an OrderedDict of at most ``capacity`` blocks."""
        assert isinstance(self._blocks, OrderedDict)
        assert isinstance(self.capacity, int) and self.capacity >= 0, self.capacity
        assert len(self._blocks) <= self.capacity, (len(self._blocks), self.capacity)
        assert all(value is None for value in self._blocks.values())
