"""HitCurve against kvlab's LRUCache replayed once per capacity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from naive import (
    lru_cache_flags,
    lru_hits,
    mooncake_block_stream,
    random_trace,
    real_lru_flags,
    real_trace_capacities,
    real_trace_paths,
)

from kvlab.kvsim import LRUCache
from stackdist import hit_curve
from stackdist.engine.curve import parse_window


def every_capacity(keys, sizes) -> list[int]:
    """0 to past the total size of the distinct keys, including just under and at every object size."""
    keys, sizes = np.asarray(keys), np.asarray(sizes)
    total = int(sizes[np.unique(keys, return_index=True)[1]].sum()) if sizes.size else 0
    special = {s + d for s in np.unique(sizes).tolist() for d in (-1, 0, 1)}
    return sorted(set(range(total + 3)) | {c for c in special if c >= 0})


def _lru_window_hits(keys: list, sizes: list, capacity: int, start: int, stop: int) -> tuple[int, int]:
    """``naive.lru_hits``: the same LRUCache replay, driven by map (its loop runs in C)."""
    flags = list(map(LRUCache(int(capacity)).access, keys, sizes))[start:stop]
    return sum(flags), sum(s for hit, s in zip(flags, sizes[start:stop]) if hit)


@pytest.mark.parametrize("size_kind", ["unit", "equal", "varied"])
def test_curve_equals_lru_at_every_capacity(size_kind):
    rng = np.random.default_rng({"unit": 1, "equal": 2, "varied": 3}[size_kind])
    # 200 unit traces, 120 equal and 120 varied ones (whose capacities run to every object size
    # and past the working set, up to ~800 per trace), each windowed, at every capacity (also the
    # property test below, the edge cases at the end and the 3,000 traces of test_distances'
    # distance checks, which the curve reads).
    for _ in range(200 if size_kind == "unit" else 120):
        keys, sizes = random_trace(rng, size_kind=size_kind)
        start = int(rng.integers(0, keys.size + 1))
        stop = int(rng.integers(start, keys.size + 1))
        curve = hit_curve(keys, None if size_kind == "unit" else sizes, window=(start, stop))
        caps = np.array(every_capacity(keys, sizes))
        hits, hit_sizes = curve.hits_at(caps), curve.hit_size_at(caps)
        steps = curve.steps()
        key_list, size_list = keys.tolist(), sizes.tolist()
        for i, (c, h, hs) in enumerate(zip(caps.tolist(), hits.tolist(), hit_sizes.tolist())):
            assert (h, hs) == _lru_window_hits(key_list, size_list, c, start, stop)
            assert steps.at(c) == (h, hs)
            if i % 5 == 0 or i == caps.size - 1:  # the scalar path (a wrapper of the vector one): every 5th capacity and the last
                assert curve.hits_at(c) == h


def test_min_capacity_for_is_the_smallest_reaching_capacity():
    rng = np.random.default_rng(9)
    for _ in range(90):  # every hits target and every third hit-size target on each trace
        keys, sizes = random_trace(rng)
        curve = hit_curve(keys, sizes)
        caps = every_capacity(keys, sizes)
        hits = curve.hits_at(np.array(caps))
        sizes_hit = curve.hit_size_at(np.array(caps))
        for target in range(keys.size + 2):
            expected = next((c for c, h in zip(caps, hits) if h >= target), None)
            assert curve.min_capacity_for(hits=target) == expected
        # hit_size targets up to a few past the ceiling (every target above it has no capacity)
        for target in range(0, curve.ceiling_hit_size + 8, 3):
            reached = np.flatnonzero(sizes_hit >= target)
            expected = caps[reached[0]] if reached.size else None
            assert curve.min_capacity_for(hit_size=target) == expected


def test_non_monotone_below_the_largest_object():
    # C=4 holds a and b; at C=5 the big key c (size 5) is admitted and evicts them.
    keys = ["a", "b", "c", "a", "b"]
    sizes = [2, 2, 5, 2, 2]
    curve = hit_curve(keys, sizes)
    assert [curve.hits_at(c) for c in (3, 4, 5, 6, 8, 9)] == [0, 2, 0, 0, 0, 2]
    for c in range(12):
        assert curve.hits_at(c) == lru_hits(keys, sizes, c)[0]
    assert curve.min_capacity_for(hits=2) == 4


def test_cyclic_cliff_one_below_total_all_miss_at_total_all_hit():
    docs, tokens = 10, 5011
    keys = list(range(docs)) * 2
    curve = hit_curve(keys, [tokens] * len(keys), window=(docs, None))
    total = docs * tokens
    assert curve.hits_at(total - 1) == 0 and curve.hits_at(total) == docs
    assert curve.min_capacity_for(hit_rate=1.0) == total
    assert lru_hits(keys, [tokens] * len(keys), total - 1, (docs, None)) == (0, 0)


def test_totals_rates_and_ceiling():
    curve = hit_curve([1, 2, 1, 3, 1], [1, 4, 1, 2, 1])
    assert curve.n_accesses == 5 and curve.total_size == 9 and curve.cold_misses == 3
    assert curve.ceiling_hits == 2 and curve.ceiling_hit_size == 2 and curve.ceiling_hit_rate == 0.4
    assert curve.hit_rate_at(100) == 0.4 and curve.size_hit_rate_at(100) == pytest.approx(2 / 9)
    assert curve.misses_at(0) == 5
    assert curve.min_capacity_for(hit_rate=0.41) is None
    assert curve.summary()["max_object_size"] == 4


def test_empty_and_capacity_zero():
    curve = hit_curve([])
    assert curve.hits_at(0) == 0 and curve.hit_rate_at(10) == 0.0 and curve.min_capacity_for(hits=1) is None
    assert curve.steps().capacities.tolist() == [0]
    curve = hit_curve([7, 7, 7])
    assert curve.hits_at(0) == 0 and curve.hits_at(1) == 2


def test_rate_targets_are_exact_fractions():
    curve = hit_curve([0, 1, 2] * 10)  # 27 reuses of 30 accesses, all at distance 3
    assert curve.min_capacity_for(hit_rate=0.9) == 3
    assert curve.min_capacity_for(hit_rate=0.9000001) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({}, "exactly one target"), ({"hits": 1, "hit_rate": 0.5}, "exactly one target"), ({"hit_rate": 1.5}, "between 0 and 1")],
)
def test_min_capacity_for_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        hit_curve([1, 1]).min_capacity_for(**kwargs)


def test_capacity_errors():
    curve = hit_curve([1, 1])
    with pytest.raises(ValueError, match="non-negative"):
        curve.hits_at(-1)
    with pytest.raises(TypeError, match="integer"):
        curve.hits_at("10")


def test_windows():
    assert parse_window("5:", 10) == (5, 10)
    assert parse_window(":-2", 10) == (0, 8)
    assert parse_window(slice(3, 1), 10) == (3, 3)
    for bad in ("1:2:3", "a:b", (1, 2, 3), slice(0, 5, 2)):
        with pytest.raises(ValueError, match="window must"):
            parse_window(bad, 10)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(1, 8)), max_size=40),
    st.lists(st.integers(0, 40), min_size=1, max_size=5),
)
def test_property_hits_equal_lru(accesses, capacities):
    size_of: dict = {}
    keys = [k for k, _ in accesses]
    sizes = [size_of.setdefault(k, s) for k, s in accesses]
    curve = hit_curve(keys, sizes)
    for c in capacities:
        assert (curve.hits_at(c), curve.hit_size_at(c)) == lru_hits(keys, sizes, c)
    assert curve.hits_at(10**9) == curve.ceiling_hits


@pytest.mark.xdist_group("real_lru")  # one worker: the memoised naive.real_lru_flags replays are shared
@pytest.mark.parametrize("path", real_trace_paths(), ids=lambda p: p.stem)
def test_real_trace_curve_equals_lru_at_a_spread_of_capacities(path):
    ids = mooncake_block_stream(path)
    curve = hit_curve(ids)
    n_keys = int(np.unique(ids).size)
    for c in real_trace_capacities(n_keys):
        # An OrderedDict LRU over the whole stream (naive.real_lru_flags: each replay runs once per
        # process, shared with test_plan's per-access check and test_cli's of the same trace).
        assert curve.hits_at(c) == int(real_lru_flags(path, c).sum())
    # kvlab's LRUCache gives that reference's flags, access for access, on the real stream too.
    assert np.array_equal(lru_cache_flags(ids.tolist(), 2000), real_lru_flags(path, 2000))
    # Second half only (a warm-up window): the hits a whole replay counts inside the window.
    half = ids.size // 2
    assert hit_curve(ids, window=(half, None)).hits_at(2000) == int(real_lru_flags(path, 2000)[half:].sum())


def test_histogram_counting_and_sorting_paths_agree(monkeypatch):
    from stackdist.engine import histogram as curve_module

    rng = np.random.default_rng(12)
    for scale in (1, 10**6, 2**40):
        keys = rng.integers(0, 40, 3000)
        sizes = (keys + 1) * scale
        expected = hit_curve(keys, sizes)
        probe = np.unique(expected.distances[expected.distances != expected.distances.max()])[::7]
        monkeypatch.setattr(curve_module, "COUNTING_LIMIT", -1)
        forced = hit_curve(keys, sizes)
        monkeypatch.undo()
        assert forced.hits_at(probe).tolist() == expected.hits_at(probe).tolist()
        assert forced.hit_size_at(probe).tolist() == expected.hit_size_at(probe).tolist()
        assert forced.hits_at(probe[::5]).tolist() == [lru_hits(keys.tolist(), sizes.tolist(), c)[0] for c in probe[::5]]


def test_steps_without_the_levels_start_at_the_largest_object():
    curve = hit_curve(["a", "b", "c", "a", "b", "c"], [2, 2, 5, 2, 2, 5])
    top = curve.steps(below_largest=False)
    assert int(top.capacities[0]) == 5
    for c in range(5, 12):
        assert top.at(c) == (curve.hits_at(c), curve.hit_size_at(c))
    with pytest.raises(ValueError, match="start at capacity 5"):
        top.at(4)
    assert hit_curve([1, 1], [3, 3]).steps(below_largest=False).capacities[0] == 0


@pytest.mark.parametrize("total_size", [10**6, 1 << 40])
def test_counting_table_layouts_agree_with_numpy(total_size):
    from stackdist.engine import kernels as _kernels
    from stackdist.engine.histogram import CountingTable as _CountingTable

    rng = np.random.default_rng(13)
    distances = rng.integers(1, 500, 5000)
    distances[rng.random(5000) < 0.1] = _kernels.COLD
    sizes = rng.integers(1, 1000, 5000)
    table = _CountingTable(499, unit=False, n_accesses=5000, total_size=total_size)
    assert table.packed == (total_size < 1 << _kernels.PACK_SHIFT)
    for part in np.array_split(np.arange(5000), 7):
        table.add(distances[part], sizes[part])
    hist = table.histogram()
    finite = distances != _kernels.COLD
    expected_values = np.unique(distances[finite])
    assert hist.values.tolist() == expected_values.tolist()
    assert hist.cum_hits.tolist() == [int((distances[finite] <= v).sum()) for v in expected_values]
    assert hist.cum_sizes.tolist() == [int(sizes[finite & (distances <= v)].sum()) for v in expected_values]


@pytest.mark.parametrize("size_kind", ["unit", "varied"])
def test_counting_during_the_replay_equals_a_plain_build(monkeypatch, size_kind):
    # The replay counts each distance COUNT_LAG accesses late: windows and chunks (also shorter
    # than the lag) must not lose or double-count one.
    from stackdist.engine import distances as distances_module
    from stackdist.engine.curve import HitCurve
    from stackdist.engine.histogram import Histogram
    from stackdist.engine.kernels import COLD

    rng = np.random.default_rng(14)
    keys = rng.integers(0, 300, 5_000)
    sizes = None if size_kind == "unit" else (keys % 7 + 1)
    for chunk in (None, 777, 7):
        if chunk:
            monkeypatch.setattr(distances_module, "_CHUNK", chunk)
        for w in (None, (1000, 3_345), (4_990, None), (17, 18), (5, 5)):
            curve = HitCurve.from_trace(keys, sizes, window=w, progress=(lambda done, total: None) if chunk else None)
            start, stop = curve.window
            expected = Histogram.build(curve.distances[start:stop], None if sizes is None else sizes[start:stop])
            for name in ("values", "cum_hits", "cum_sizes"):
                assert getattr(curve.histogram, name).tolist() == getattr(expected, name).tolist()
            assert curve.cold_misses == int(np.count_nonzero(curve.distances[start:stop] == COLD))
    probe = [0, 5, 50, 300, 2000]
    assert hit_curve(keys, sizes).hits_at(probe).tolist() == [lru_hits(keys.tolist(), None if sizes is None else sizes.tolist(), c)[0] for c in probe]


@pytest.mark.parametrize("case", ["empty", "one_key", "equal", "oversize", "cyclic", "uint64_range", "int64_range", "negative"])
def test_curve_edges_on_the_prefix_pyramid_and_fused_size_pass(case):
    # The edges of the whole fast path (key ids, the one pass over the sizes, the prefix-pyramid
    # replay, the counted histogram, the step table) against LRUCache from capacity 0 through
    # every object size to past the working set.
    rng = np.random.default_rng(43)
    n = 250
    pools = {"uint64_range": np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1, 12345], np.uint64),
             "int64_range": np.array([-(2**63), -1, 0, 1, 2**62, 2**63 - 1], np.int64)}
    if case == "empty":
        keys = np.zeros(0, np.int64)
    elif case == "one_key":
        keys = np.full(n, 7, np.int64)
    elif case in pools:
        keys = pools[case][rng.integers(0, pools[case].size, n)]
    elif case == "cyclic":
        keys = np.arange(n) % 70
    elif case == "negative":
        keys = rng.integers(-50, 50, n)
    else:
        keys = rng.integers(0, 60, n)
    key_list = keys.tolist()
    size_of = {k: (1 if case == "int64_range" else 4 if case == "equal" else 3 if case == "one_key"
                   else int(rng.integers(1, 50 if case == "oversize" else 9))) for k in dict.fromkeys(key_list)}
    size_list = [size_of[k] for k in key_list]
    sizes = np.array(size_list, np.int64)
    top = sum(size_of.values()) + 2
    capacities = sorted(set(range(0, top, max(1, top // 60))) | set(range(52)) | {top - 2, top - 1, top})
    for unit in (True, False):
        curve = hit_curve(keys) if unit else hit_curve(keys, sizes)
        used = [1] * len(key_list) if unit else size_list
        got = zip(capacities, curve.hits_at(capacities).tolist(), curve.hit_size_at(capacities).tolist())
        for c, h, s in got:
            assert (h, s) == _lru_window_hits(key_list, used, c, 0, len(key_list)), (case, unit, c)
        steps = curve.steps()
        assert all(steps.at(c) == (curve.hits_at(c), curve.hit_size_at(c)) for c in capacities)
        assert curve.total_size == sum(used)
