"""The readable reference engine: pure Python, one access at a time.

The fast kernels in :mod:`stackdist.engine.kernels` must agree with these classes access by access.

Fenwick form (any sizes). Every access gets the next time slot; a key's most recent access
holds its size in a Fenwick tree indexed by slot. The distance of an access to a key last seen
in slot ``p`` is its own size plus the sum of the sizes in slots after ``p`` (exactly the
distinct keys accessed since). Then slot ``p`` is cleared and the new slot gets the size.

Order-statistics form (unit sizes). The same idea with a ``SortedList`` of the live slots:
the distance is one plus the number of live slots after ``p``.

>>> FenwickStackDistance().distances(["a", "b", "a"], [2, 3, 2])
[None, None, 5]
>>> SortedListStackDistance().distances([1, 2, 3, 1])
[None, None, None, 3]
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from sortedcontainers import SortedList


class Fenwick:
    """A Fenwick (binary indexed) tree of integers that grows on demand.

    ``add`` and ``prefix_sum`` take O(log n).

    >>> f = Fenwick(); f.add(0, 5); f.add(3, 2); f.prefix_sum(2), f.prefix_sum(3)
    (5, 7)
    """

    def __init__(self) -> None:
        self._tree = [0]
        self._values: list[int] = []

    def __len__(self) -> int:
        return len(self._values)

    def _grow(self, size: int) -> None:
        while len(self._values) < size:
            index = len(self._values) + 1
            # A new node covers (index - lowbit(index), index]: sum those existing values.
            low = index - (index & -index)
            self._values.append(0)
            self._tree.append(sum(self._values[low:index]))

    def add(self, index: int, delta: int) -> None:
        """Add ``delta`` at ``index`` (0-based)."""
        self._grow(index + 1)
        self._values[index] += delta
        i = index + 1
        while i < len(self._tree):
            self._tree[i] += delta
            i += i & -i

    def prefix_sum(self, index: int) -> int:
        """Sum of the values at 0..index (inclusive)."""
        i = min(index + 1, len(self._tree) - 1)
        total = 0
        while i > 0:
            total += self._tree[i]
            i &= i - 1
        return total


class FenwickStackDistance:
    """Stack distances for sized keys; ``None`` marks a cold access. O(log n) per access."""

    def __init__(self) -> None:
        self._tree = Fenwick()
        self._slot: dict[Hashable, int] = {}
        self._size: dict[Hashable, int] = {}
        self._total = 0
        self._clock = 0

    def access(self, key: Hashable, size: int = 1) -> int | None:
        """Replay one access and return its stack distance."""
        distance = None
        if key in self._slot:
            if self._size[key] != size:
                raise ValueError(f"key {key!r} changed size from {self._size[key]} to {size}.")
            slot = self._slot[key]
            distance = size + self._total - self._tree.prefix_sum(slot)
            self._tree.add(slot, -size)
            self._total -= size
        self._slot[key] = self._clock
        self._size[key] = size
        self._tree.add(self._clock, size)
        self._total += size
        self._clock += 1
        return distance

    def distances(self, keys: Sequence[Hashable], sizes: Sequence[int] | None = None) -> list[int | None]:
        """Replay a whole trace."""
        sizes = [1] * len(keys) if sizes is None else sizes
        return [self.access(k, s) for k, s in zip(keys, sizes)]


class SortedListStackDistance:
    """Unit-size stack distances from an order-statistics structure (``SortedList``).

    O(log n) per access.
    """

    def __init__(self) -> None:
        self._live = SortedList()
        self._slot: dict[Hashable, int] = {}
        self._clock = 0

    def access(self, key: Hashable) -> int | None:
        """Replay one access and return its stack distance."""
        distance = None
        slot = self._slot.get(key)
        if slot is not None:
            distance = len(self._live) - self._live.bisect_right(slot) + 1
            self._live.remove(slot)
        self._slot[key] = self._clock
        self._live.add(self._clock)
        self._clock += 1
        return distance

    def distances(self, keys: Sequence[Hashable]) -> list[int | None]:
        """Replay a whole trace."""
        return [self.access(k) for k in keys]
