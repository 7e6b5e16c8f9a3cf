"""Policies of kvlab.placement: hand-derived eviction orders and one contract suite for all."""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any

import pytest

from kvlab.placement.hierarchy import TieredCache
from kvlab.placement.policies import (
    POLICIES,
    EWMANextTouch,
    HeapTier,
    Policy,
    PredictedReuse,
    Recency,
    ReuseFrequency,
    make_policy,
)


def drive(policy: Policy, accesses: list[tuple[int, Hashable]]) -> Any:
    """Feed (now, block) demand accesses to one unbounded tier; return the tier."""
    tier = policy.new_tier()
    for now, block in accesses:
        policy.on_access(block, now)
        if block in tier:
            tier.touch(block)
        else:
            tier.insert(block)
    return tier


def drain(tier: Any) -> list[Hashable]:
    out = []
    while len(tier):
        out.append(tier.pop_victim())
        tier._check()
    return out


# ------------------------------------------------------------------ exact orders, hand-derived
def test_recency_order() -> None:
    tier = drive(Recency(), [(1, "a"), (2, "b"), (3, "c"), (4, "a")])
    assert drain(tier) == ["b", "c", "a"]


def test_reuse_frequency_order_and_recency_tie_break() -> None:
    # counts: a 2 (last 3), b 3 (last 6), c 1 (last 4), d 1 (last 7)
    seq = [(1, "a"), (2, "b"), (3, "a"), (4, "c"), (5, "b"), (6, "b"), (7, "d")]
    assert drain(drive(ReuseFrequency(), seq)) == ["c", "d", "a", "b"]


def test_predicted_reuse_order() -> None:
    # a: gap 2, next 3+2=5; b: gap 4, next 6+4=10; c: cold (never reused) goes first.
    seq = [(1, "a"), (2, "b"), (3, "a"), (6, "b"), (7, "c")]
    assert drain(drive(PredictedReuse(), seq)) == ["c", "b", "a"]


def test_ewma_order_differs_from_last_gap() -> None:
    # a: gaps 1 then 10; b: gap 8 (next 21).
    # last gap: a next 12+10=22 > 21 -> a first.  EWMA(0.5): 0.5*10+0.5*1=5.5, next 17.5 -> b first.
    seq = [(1, "a"), (2, "a"), (5, "b"), (12, "a"), (13, "b")]
    assert drain(drive(PredictedReuse(), seq)) == ["a", "b"]
    assert drain(drive(EWMANextTouch(alpha=0.5), seq)) == ["b", "a"]


def test_cold_blocks_go_first_least_recent_first() -> None:
    seq = [(1, "x"), (2, "a"), (3, "a"), (4, "y")]
    assert drain(drive(PredictedReuse(), seq)) == ["x", "y", "a"]
    assert drain(drive(EWMANextTouch(), seq)) == ["x", "y", "a"]


def test_heap_tier_keeps_the_key_of_its_last_touch() -> None:
    policy = ReuseFrequency()
    upper, lower = policy.new_tier(), policy.new_tier()
    for now, block in [(1, "a"), (2, "b")]:
        policy.on_access(block, now)
        upper.insert(block)
        lower.insert(block)
    policy.on_access("a", 3)
    policy.on_access("a", 4)
    upper.touch("a")  # only the upper tier saw the new accesses
    assert upper.victim_order() == ["b", "a"]
    assert lower.victim_order() == ["a", "b"]


# ------------------------------------------------------------------ contract suite (all policies)
class ReferenceTier:
    """Obvious model of a tier: stored key per block; victim = smallest (key, block)."""

    def __init__(self, policy: Policy) -> None:
        self.policy, self.keys, self.clock = policy, {}, 0

    def score(self, block: Hashable) -> Any:
        self.clock += 1
        return self.clock if isinstance(self.policy, Recency) else self.policy.priority(block)

    def insert(self, block: Hashable) -> None:
        self.keys[block] = self.score(block)

    touch = insert

    def remove(self, block: Hashable) -> None:
        del self.keys[block]

    def pop_victim(self) -> Hashable:
        victim = min(self.keys, key=lambda b: (self.keys[b], b))
        del self.keys[victim]
        return victim


@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize("seed", range(6))
def test_tier_contract_against_reference(name: str, seed: int) -> None:
    rng = random.Random(seed)
    policy = make_policy(name)
    tier, ref = policy.new_tier(), ReferenceTier(policy)
    now = 0
    for _ in range(600):
        block = rng.randrange(25)
        op = rng.random()
        if op < 0.6:
            now += 1
            policy.on_access(block, now)
            if block in tier:
                tier.touch(block)
                ref.touch(block)
            else:
                tier.insert(block)
                ref.insert(block)
        elif op < 0.75 and block in tier:
            tier.remove(block)
            ref.remove(block)
        elif op >= 0.75 and len(tier):
            assert tier.pop_victim() == ref.pop_victim()
        assert len(tier) == len(ref.keys) and set(tier) == set(ref.keys)
        tier._check()
        policy._check()
    assert tier.victim_order() == sorted(ref.keys, key=lambda b: (ref.keys[b], b))


@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize("organisation", ["exclusive", "inclusive"])
def test_policies_fill_capacity_and_never_exceed_it(name: str, organisation: str) -> None:
    cache = TieredCache([3, 4, 5], name, organisation)
    for b in range(40):
        cache.access(b % 17)
        cache._check()
    sizes = [len(t) for t in cache.tiers]
    assert sizes[0] == 3 and sizes[1] == 4 and sizes[2] == 5


# ------------------------------------------------------------------ equivalences
class LastAccess(Policy):
    """A 'predictor' whose key is monotone in the last access time: recency in disguise."""

    name = "last-access"

    def __init__(self) -> None:
        self.last: dict[Hashable, int] = {}

    def on_access(self, block: Hashable, now: int) -> None:
        self.last[block] = now

    def priority(self, block: Hashable) -> int:
        return self.last[block]


@pytest.mark.parametrize("organisation", ["exclusive", "inclusive"])
@pytest.mark.parametrize("seed", range(5))
def test_a_predictor_monotone_in_last_access_is_byte_identical_to_recency(organisation: str, seed: int) -> None:
    rng = random.Random(seed)
    keys = [int(rng.paretovariate(1.0)) % 60 for _ in range(3000)]
    caps = [rng.randint(1, 6), rng.randint(0, 12), rng.randint(0, 20)]
    lru, other = TieredCache(caps, "lru", organisation), TieredCache(caps, LastAccess(), organisation)
    assert [lru.access(k) for k in keys] == [other.access(k) for k in keys]
    assert lru.moves() == other.moves() and lru.contents() == other.contents()


@pytest.mark.parametrize("seed", range(5))
def test_ewma_with_alpha_one_is_predicted_reuse(seed: int) -> None:
    rng = random.Random(seed)
    keys = [int(rng.paretovariate(1.0)) % 50 for _ in range(2000)]
    a, b = TieredCache([4, 8, 16], PredictedReuse()), TieredCache([4, 8, 16], EWMANextTouch(alpha=1.0))
    assert [a.access(k) for k in keys] == [b.access(k) for k in keys]
    assert a.moves() == b.moves()


def test_policy_parameter_errors_are_named() -> None:
    with pytest.raises(ValueError, match=r"alpha must be a number in \(0, 1\], got 0\."):
        EWMANextTouch(alpha=0)
    with pytest.raises(NotImplementedError):
        Policy().priority(1)
    assert isinstance(Policy().new_tier(), HeapTier)
