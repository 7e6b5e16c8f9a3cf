"""kvlab.placement.kernel: the compiled tiered cache equals the Python reference (TieredCache), result for result.

Each case runs ``simulate(..., engine="compiled")`` and ``simulate(..., engine="python")`` and
compares every summary number, the per-request TTFT / TPOT / stall / wait arrays and the
per-access tiers (``record_tiers``), on seeded random workloads (uniform, skewed, cyclic scans,
one key, repeated blocks in a request, requests longer than every tier) across every policy,
organisation, lookup mode and prefetcher, with capacities including 0 and above the distinct
blocks. The causal predictor's precomputed lists are checked against ``SessionPredictor`` itself.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from kvlab.placement import EWMANextTouch, SimConfig, Workload, chat, simulate
from kvlab.placement.kernel import HAVE_NUMBA, compiled_policy, dense_blocks
from kvlab.placement.simulator import SessionPredictor, prefetch_candidates

pytestmark = pytest.mark.skipif(not HAVE_NUMBA, reason="the compiled cache needs numba")

POLICIES = ["lru", "lfu", "predicted", "ewma"]


def random_workload(seed: int) -> Workload:
    """A small random request stream (not prefix-chained: the cache does not need it)."""
    rng = random.Random(seed)
    kind = seed % 4
    n_keys = [1, 6, 30, 12][kind]
    requests = []
    for r in range(rng.randint(0, 14)):
        length = rng.randint(0, 9)
        if kind == 2:  # skewed
            req = [min(n_keys - 1, int(rng.paretovariate(1.2))) for _ in range(length)]
        elif kind == 3:  # cyclic scan
            req = [(r * length + i) % n_keys for i in range(length)]
        else:
            req = [rng.randrange(n_keys) * 7 + 3 for _ in range(length)]  # sparse ids
        requests.append(req)
    n = len(requests)
    offsets = np.concatenate(([0], np.cumsum([len(q) for q in requests]))).astype(np.int64)
    arrivals = np.cumsum([rng.choice([0.0, 0.001, 0.05, 2.0]) for _ in range(n)])
    return Workload(
        name=f"random{seed}", blocks=np.array([b for q in requests for b in q], dtype=np.int64), offsets=offsets,
        input_tokens=np.array([max(1, 16 * len(q) - rng.randrange(16)) for q in requests], dtype=np.int64),
        output_tokens=np.array([rng.randint(1, 50) for _ in requests], dtype=np.int64),
        arrival_s=np.asarray(arrivals, dtype=float), session=np.array([rng.randrange(3) for _ in requests]),
        block_tokens=16,
    )


def assert_same(workload: Workload, config: SimConfig) -> None:
    fast = simulate(workload, config, engine="compiled")
    ref = simulate(workload, config, engine="python")
    assert fast.to_dict() == ref.to_dict()
    for name in ("ttft_ms", "tpot_ms", "stall_ms", "link_wait_ms", "gpu_wait_ms", "tiers"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(ref, name), err_msg=name)


CAPACITIES = [(3, 5, 9), (0, 4, 20), (2, 0, 6), (4, 8, 0), (0, 0, 0), (5,), (2, 30), (1, 1, 1), (100, 100, 100)]


COMBOS = list(itertools.product(POLICIES, ("exclusive", "inclusive"), ("prefix", "block"), ("none", "causal", "oracle")))


@pytest.mark.parametrize("seed", range(12))
def test_compiled_equals_python_on_random_streams(seed: int) -> None:
    """Every policy x organisation x mode x prefetcher on three of the workloads (a quarter per seed)."""
    workload = random_workload(seed)
    rng = random.Random(seed)
    for policy, org, mode, prefetch in COMBOS[seed % 4 :: 4]:
        caps = rng.choice(CAPACITIES)
        assert_same(workload, SimConfig(capacities=caps, policy=policy, organisation=org, mode=mode,
                                        prefetch=prefetch, lookahead=rng.randint(1, 3), record_tiers=True))


def test_compiled_equals_python_on_a_generated_chat_with_tiers_under_pressure() -> None:
    workload = chat(n_sessions=3, accesses_per_session=100, seed=4)
    for (policy, org), prefetch in zip(itertools.product(POLICIES, ("exclusive", "inclusive")),
                                       itertools.cycle(("none", "oracle", "causal"))):
        assert_same(workload, SimConfig(capacities=(6, 20, 60), policy=policy, organisation=org, prefetch=prefetch,
                                        record_tiers=True))


def test_ewma_alpha_and_policy_instances_are_compiled_only_when_exact() -> None:
    workload = random_workload(7)
    assert_same(workload, SimConfig(capacities=(2, 4, 8), policy=EWMANextTouch(alpha=0.55), record_tiers=True))

    class Custom(EWMANextTouch):
        pass

    assert compiled_policy(Custom()) is None and compiled_policy("nope") is None
    with pytest.raises(ValueError, match="compiled engine needs"):
        simulate(workload, SimConfig(policy=Custom()), engine="compiled")
    with pytest.raises(ValueError, match="compiled engine needs"):
        simulate(workload, SimConfig(check_every=1), engine="compiled")
    with pytest.raises(ValueError, match="engine must be"):
        simulate(workload, SimConfig(), engine="fast")


def test_dense_ids_keep_the_order_of_the_block_ids() -> None:
    blocks = np.array([9, -4, 2**40, 9, 0], dtype=np.int64)
    dense, n = dense_blocks(blocks)
    assert n == 4 and dense.tolist() == [2, 0, 3, 2, 1]


def test_causal_lists_equal_the_session_predictor() -> None:
    rng = random.Random(3)
    for _ in range(15):
        workload = random_workload(rng.randrange(1000))
        k = rng.randint(1, 4)
        offsets, candidates = prefetch_candidates(workload, SimConfig(prefetch="causal", lookahead=k))
        predictor = SessionPredictor()
        for r in range(workload.n_requests):
            predictor.observe(int(workload.session[r]), float(workload.arrival_s[r]), [r])
            expected = [q[0] for q in predictor.predict(k)]
            assert candidates[offsets[r] : offsets[r + 1]].tolist() == expected
