"""stack_distances, the streaming form and the kernels against obviously correct references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from naive import mooncake_block_stream, naive_distances, random_trace, real_trace_paths

from stackdist import (
    COLD,
    StackDistanceStream,
    dense_keys,
    engine_depths,
    stack_distances,
)
from stackdist.engine import kernels as _kernels
from stackdist.engine.reference import (
    Fenwick,
    FenwickStackDistance,
    SortedListStackDistance,
)


def as_optional(distances: np.ndarray) -> list:
    return [None if d == COLD else int(d) for d in distances]


@pytest.mark.parametrize("size_kind", ["unit", "equal", "varied"])
def test_fast_path_equals_list_stack_and_fenwick_reference(size_kind):
    rng = np.random.default_rng(7)
    # 1,000 small traces per size kind (0 to 80 accesses, 1 to 12 keys: empty and one-key traces
    # among them); many words, compactions and cyclic scans are the bit-packed test's below.
    for _ in range(1000):
        keys, sizes = random_trace(rng, size_kind=size_kind)
        expected = naive_distances(keys.tolist(), sizes.tolist())
        assert FenwickStackDistance().distances(keys.tolist(), sizes.tolist()) == expected
        assert as_optional(stack_distances(keys, sizes)) == expected
        if size_kind == "unit":
            assert as_optional(stack_distances(keys)) == expected
            assert SortedListStackDistance().distances(keys.tolist()) == expected


def test_long_trace_exercises_compaction_access_by_access():
    # 200 keys, 20k accesses: the slots (2 x keys) run out and are compacted ~100 times.
    rng = np.random.default_rng(11)
    keys = rng.zipf(1.3, 20_000) % 200
    sizes = (keys * 7919 % 13 + 1).astype(np.int64)
    reference = FenwickStackDistance().distances(keys.tolist(), sizes.tolist())
    assert as_optional(stack_distances(keys, sizes)) == reference


def test_uncompiled_kernel_matches_compiled():
    if not _kernels.HAVE_NUMBA:
        pytest.skip("numba missing: the kernels already run as plain Python")
    rng = np.random.default_rng(3)
    keys, sizes = random_trace(rng, max_len=300, max_keys=40)
    out_fast, out_slow = np.empty(keys.size, np.int64), np.empty(keys.size, np.int64)
    from stackdist.engine.distances import ReplayState as _ReplayState

    for out, fn in ((out_fast, _kernels.replay), (out_slow, _kernels.replay.py_func)):
        state = _ReplayState(int(keys.max()) + 1)
        assert state.run(fn, keys, sizes, out) == _kernels.NO_ERROR
    assert out_fast.tolist() == out_slow.tolist()


def test_edge_cases():
    assert stack_distances([]).tolist() == []
    assert stack_distances([5]).tolist() == [COLD]
    assert stack_distances([5, 5, 5], [3, 3, 3]).tolist() == [COLD, 3, 3]
    # A cyclic scan over k keys: after the first pass every distance is k.
    assert stack_distances(list(range(4)) * 3).tolist()[4:] == [4] * 8


def test_keys_of_any_hashable_type_and_huge_ids():
    huge = np.array([2**64 - 1, 2**63, 2**64 - 1, 5, 2**63], dtype=np.uint64)
    assert as_optional(stack_distances(huge)) == [None, None, 2, None, 3]
    negative = np.array([-5, 10**15, -5], dtype=np.int64)
    assert as_optional(stack_distances(negative)) == [None, None, 2]
    assert as_optional(stack_distances(["a", ("t", 1), "a"])) == [None, None, 2]
    assert as_optional(stack_distances([b"x", b"y", b"x"])) == [None, None, 2]


def test_dense_keys_are_first_appearance_ids_for_sparse_integers():
    dk = dense_keys(np.array([10**12, 7, 10**12, -1], dtype=np.int64))
    assert dk.ids.tolist() == [0, 1, 0, 2] and dk.n_keys == 3
    rng = np.random.default_rng(0)
    values = rng.integers(-(2**62), 2**62, 50_000)
    values = values[rng.integers(0, values.size, 200_000)]
    dk = dense_keys(values)
    _, inverse = np.unique(values, return_inverse=True)
    # Same partition into equal keys as np.unique.
    pairs = np.unique(np.stack([dk.ids, inverse]), axis=1)
    assert pairs.shape[1] == dk.n_keys == np.unique(values).size


def test_size_change_is_an_error_naming_key_sizes_and_position():
    with pytest.raises(ValueError, match=r"key 'b' has size 2 earlier but size 3 at position 3"):
        stack_distances(["a", "b", "a", "b"], [1, 2, 1, 3])


@pytest.mark.parametrize(
    ("sizes", "message"),
    [([1, 0], "positive integers; got 0 at position 1"), ([1, 1.5], "non-integer"), ([1], "one entry per access")],
)
def test_bad_sizes(sizes, message):
    with pytest.raises(ValueError, match=message):
        stack_distances([1, 2], sizes)


def test_stream_equals_batch_for_any_split_and_keeps_state_bounded():
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 50, 30_000)
    sizes = keys % 5 + 1
    expected = stack_distances(keys, sizes)
    stream = StackDistanceStream()
    cuts = np.sort(rng.integers(0, keys.size, 40))
    got = [stream.feed(k, s) for k, s in zip(np.split(keys, cuts), np.split(sizes, cuts))]
    assert np.concatenate(got).tolist() == expected.tolist()
    assert stream.n_accesses == keys.size and stream.n_keys == 50
    assert stream.state_nbytes < 8 * 1024  # O(distinct keys), not O(30k accesses)


def test_stream_error_keeps_earlier_accesses():
    stream = StackDistanceStream()
    with pytest.raises(ValueError, match="at position 2"):
        stream.feed(["a", "b", "a"], [1, 1, 2])
    assert stream.n_accesses == 2
    assert stream.feed(["a"], [1]).tolist() == [2]


def test_fenwick_grows():
    f = Fenwick()
    values = [3, 0, 5, 7, 1, 2, 9]
    for i, v in enumerate(values):
        f.add(i, v)
    assert [f.prefix_sum(i) for i in range(len(values))] == np.cumsum(values).tolist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(1, 6)), max_size=60))
def test_property_distance_matches_list_stack(accesses):
    size_of: dict = {}
    keys = [k for k, _ in accesses]
    sizes = [size_of.setdefault(k, s) for k, s in accesses]
    assert as_optional(stack_distances(keys, sizes)) == naive_distances(keys, sizes)


@pytest.mark.xdist_group("real_lru")  # one worker: naive's memoised block streams of the real traces are shared
@pytest.mark.parametrize("path", real_trace_paths(), ids=lambda p: p.stem)
def test_real_trace_matches_sorted_list_reference(path):
    ids = mooncake_block_stream(path)
    reference = SortedListStackDistance().distances(ids.tolist())
    assert as_optional(stack_distances(ids)) == reference


def naive_engine_depths(requests, size_of):
    """Per request: depths read from a list stack (most recent first), then a tail-first commit."""
    stack, out = [], []
    for blocks in requests:
        for b in blocks:
            if b in stack:
                depth = stack.index(b)
                out.append(size_of[b] + sum(size_of[k] for k in stack[:depth]))
            else:
                out.append(None)
        for b in reversed(blocks):
            if b in stack:
                stack.remove(b)
            stack.insert(0, b)
    return out


@pytest.mark.parametrize("chunk", [1 << 21, 3])
def test_engine_depths_equal_list_stack(monkeypatch, chunk):
    from stackdist.engine import distances

    monkeypatch.setattr(distances, "_CHUNK_BLOCKS", chunk)
    rng = np.random.default_rng(17)
    for _ in range(150):
        n_keys = int(rng.integers(1, 15))
        size_of = rng.integers(1, 6, n_keys).tolist()
        requests = [rng.permutation(n_keys)[: int(rng.integers(0, min(n_keys, 5) + 1))].tolist() for _ in range(int(rng.integers(1, 12)))]
        keys = [b for r in requests for b in r]
        offsets = np.r_[0, np.cumsum([len(r) for r in requests])]
        got = distances.engine_depths(keys, offsets, [size_of[k] for k in keys] if keys else None)
        assert as_optional(got) == naive_engine_depths(requests, size_of)


@pytest.mark.parametrize("offsets", [[0, 3], [1, 2], [0, 2, 1, 2], []])
def test_engine_depths_bad_offsets(offsets):
    from stackdist import engine_depths

    with pytest.raises(ValueError, match="offsets must be non-decreasing"):
        engine_depths([1, 2], offsets)


@pytest.mark.parametrize("size_kind", ["unit", "equal", "varied"])
def test_stream_curve_equals_hit_curve_of_the_prefix(size_kind):
    from stackdist import hit_curve

    rng = np.random.default_rng(19)
    for _ in range(30):
        keys, sizes = random_trace(rng, max_len=120, max_keys=15, size_kind=size_kind)
        sizes_arg = None if size_kind == "unit" else sizes
        stream = StackDistanceStream()
        cuts = np.sort(rng.integers(0, keys.size + 1, 3))
        # Past the total size of the distinct keys nothing changes (every reuse hits): capacities
        # up to it and one past it cover the whole curve of every prefix.
        top = int(sizes[np.unique(keys, return_index=True)[1]].sum()) + 2 if keys.size else 2
        for part_keys, part_sizes in zip(np.split(keys, cuts), np.split(sizes, cuts)):
            stream.feed(part_keys, None if sizes_arg is None else part_sizes)
            seen = stream.n_accesses
            curve = hit_curve(keys[:seen], None if sizes_arg is None else sizes[:seen])
            low = 0 if size_kind != "varied" else stream.max_object_size
            for c in sorted({*range(low, top, 3), top - 2, top - 1, top + 5} - set(range(low))):
                assert stream.hits_at(c) == curve.hits_at(c)
                assert stream.hit_size_at(c) == curve.hit_size_at(c)
            exact = np.arange(stream.max_object_size, top)
            exact_hits = curve.hits_at(exact)
            for target in range(0, seen + 1, 4):
                expected = curve.min_capacity_for(hits=target)
                if expected is not None and size_kind == "varied" and target > 0:
                    reached = exact[exact_hits >= target]
                    expected = int(reached[0]) if reached.size else None
                assert stream.min_capacity_for(hits=target) == expected


def test_stream_refuses_inexact_capacities():
    stream = StackDistanceStream()
    stream.feed(["a", "b", "a"], [1, 5, 1])
    with pytest.raises(ValueError, match="exact only at capacities of at least the largest object seen"):
        stream.hits_at(4)
    assert stream.hits_at(6) == 1 and stream.hit_rate_at(6) == pytest.approx(1 / 3)


def test_stream_unit_batch_after_sized_batch_still_checks_sizes():
    stream = StackDistanceStream()
    stream.feed(["a", "b"], [5, 1])
    with pytest.raises(ValueError, match="key 'a' has size 5 earlier but size 1"):
        stream.feed(["a"])
    assert stream.feed(["a"], [5]).tolist() == [6]  # below b: its own 5 plus b's 1


def test_stream_unit_batches_then_sized_batches_on_one_state():
    # One stream state takes unit batches (no sizes given) and sized ones in any order; a unit
    # batch once laid the counts out as unit sizes, and the sized batch after it read them wrongly.
    rng = np.random.default_rng(31)
    keys = rng.integers(0, 300, 3000)
    stream = StackDistanceStream()
    got = np.concatenate([stream.feed(keys[:1500]), stream.feed(keys[1500:], np.ones(1500, np.int64))])
    assert as_optional(got) == FenwickStackDistance().distances(keys.tolist(), [1] * keys.size)


@pytest.mark.parametrize("size_kind", ["unit", "equal", "varied"])
def test_bit_packed_state_across_many_words_and_compactions(size_kind):
    # Hundreds of keys: many 64-slot words, partial words, and a compaction every few hundred
    # accesses; Zipf-like, uniform and cyclic scans; the compiled and the uncompiled kernel.
    rng = np.random.default_rng(23)
    for trial in range(24):
        n_keys = int(rng.integers(1, 900))
        n = int(rng.integers(0, 4000))
        shape = trial % 3
        keys = (rng.zipf(1.2, n) % n_keys) if shape == 0 else rng.integers(0, n_keys, n) if shape == 1 else np.arange(n) % n_keys
        per_key = {"unit": np.ones(n_keys, np.int64), "equal": np.full(n_keys, 7, np.int64),
                   "varied": rng.integers(1, 300, n_keys)}[size_kind]
        sizes = per_key[keys]
        expected = FenwickStackDistance().distances(keys.tolist(), sizes.tolist())
        assert as_optional(stack_distances(keys, sizes)) == expected
        if size_kind == "unit":
            assert as_optional(stack_distances(keys)) == expected
    if _kernels.HAVE_NUMBA:
        from stackdist.engine.distances import ReplayState as _ReplayState

        keys = rng.integers(0, 500, 3000)
        sizes = None if size_kind == "unit" else rng.integers(1, 50, 500)[keys]
        outs = []
        for fn in (_kernels.replay, _kernels.replay.py_func):
            state = _ReplayState(500, sized=sizes is not None)
            outs.append(np.empty(keys.size, np.int64))
            assert state.run(fn, keys, sizes, outs[-1]) == _kernels.NO_ERROR
        assert outs[0].tolist() == outs[1].tolist()


def test_engine_depths_across_many_words():
    rng = np.random.default_rng(29)
    for _ in range(12):
        n_keys = int(rng.integers(70, 600))
        size_of = rng.integers(1, 40, n_keys).tolist()
        requests = [rng.permutation(n_keys)[: int(rng.integers(0, 40))].tolist() for _ in range(int(rng.integers(1, 80)))]
        keys = [b for r in requests for b in r]
        offsets = np.r_[0, np.cumsum([len(r) for r in requests])]
        sized = [size_of[k] for k in keys] if keys else None
        assert as_optional(engine_depths(keys, offsets, sized)) == naive_engine_depths(requests, size_of)
        assert as_optional(engine_depths(keys, offsets)) == naive_engine_depths(requests, [1] * n_keys)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64])
def test_line_intrinsics_equal_their_python_forms(dtype):
    # line_add_above / line_sum_below (the prefix pyramid's two operations), compiled (inside a
    # kernel) against the plain-Python forms, for every lane of a 64-byte line.
    from stackdist.engine import intrinsics

    if not _kernels.HAVE_NUMBA:
        pytest.skip("numba missing: only the Python forms exist")
    lanes = 64 // np.dtype(dtype).itemsize

    @_kernels.njit
    def add_then_sum(arr, base, first, value):
        intrinsics.line_add_above(arr, base, first, value)
        return intrinsics.line_sum_below(arr, base, first)

    rng = np.random.default_rng(31)
    for first in range(lanes):
        start = rng.integers(0, 100, 3 * lanes).astype(dtype)
        fast, slow = start.copy(), start.copy()
        got = add_then_sum(fast, lanes, first, 3)
        intrinsics.line_add_above(slow, lanes, first, 3)
        assert fast.tolist() == slow.tolist()
        assert got == intrinsics.line_sum_below(slow, lanes, first) == int(slow[lanes : lanes + first].sum())
        if np.dtype(dtype).kind == "i":
            add_then_sum(fast, 0, first, -2)
            intrinsics.line_add_above(slow, 0, first, -2)
            assert fast.tolist() == slow.tolist()


@pytest.mark.parametrize("size_kind", ["unit", "equal", "varied", "huge"])
def test_deep_prefix_pyramid_equals_reference(size_kind):
    # 9,000 keys: 18,000 slots, three pyramid levels for unit sizes (int32 lines), four with
    # 2**40-sized objects (int64 slot sizes and lines); Zipf, uniform and cyclic accesses with
    # compactions; the fast replay and the uncompiled kernel against the Fenwick reference.
    from stackdist.engine.distances import ReplayState as _ReplayState

    rng = np.random.default_rng(37)
    n_keys, n = 9_000, 20_000
    per_key = {"unit": np.ones(n_keys, np.int64), "equal": np.full(n_keys, 5, np.int64),
               "varied": rng.integers(1, 65, n_keys), "huge": rng.integers(1, 2**40, n_keys)}[size_kind]
    for keys in (rng.zipf(1.1, n) % n_keys, rng.integers(0, n_keys, n // 2), np.arange(n) % (n_keys - 7)):
        sizes = per_key[keys]
        expected = FenwickStackDistance().distances(keys.tolist(), sizes.tolist())
        assert as_optional(stack_distances(keys, sizes)) == expected
        if size_kind == "unit":
            assert as_optional(stack_distances(keys)) == expected
    if _kernels.HAVE_NUMBA:
        keys = keys[:1500]
        sizes = None if size_kind == "unit" else per_key[keys]
        state = _ReplayState(n_keys, sized=sizes is not None, max_size=None if sizes is None else int(sizes.max()))
        slow = np.empty(keys.size, np.int64)
        assert state.run(_kernels.replay.py_func, keys, sizes, slow) == _kernels.NO_ERROR
        assert as_optional(slow) == expected[:1500]


def test_checked_sizes_gives_the_exact_largest_and_total():
    # One fused pass (min, max, wrapping sum) must give Python's exact max and sum, or the same
    # overflow error as the exact path, including totals near and past 2**62 and 2**63 - 2.
    from stackdist.engine.keys import SIZE_LIMIT, checked_sizes

    rng = np.random.default_rng(41)
    cases = [rng.integers(1, 100, int(rng.integers(1, 50))) for _ in range(20)]
    cases += [np.array([2**62, 2**62 - 3]), np.array([2**61] * 3), np.array([2**40] * 5000), np.array([5])]
    cases += [rng.integers(2**59, 2**60, 9) for _ in range(5)]
    for sizes in cases:
        exact = sum(sizes.tolist())
        if exact > SIZE_LIMIT:
            with pytest.raises(ValueError, match="2\\^63-2"):
                checked_sizes(sizes, sizes.size)
            continue
        arr, largest, total = checked_sizes(sizes.tolist(), sizes.size)
        assert arr.tolist() == sizes.tolist() and largest == max(sizes.tolist()) and total == exact
    assert checked_sizes(None, 3) == (None, None, 3)
    assert checked_sizes([], 0)[1:] == (None, 0)
    with pytest.raises(ValueError, match="position 2"):
        checked_sizes([3, 1, -4], 3)
