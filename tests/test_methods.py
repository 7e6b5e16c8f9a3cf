"""The methods layer's contract (stackdist/methods): every method value gives the same result type
for the same question, and the methods that claim exactness agree with the one-process replay
(and with the reference LRU caches, through it).

- ``curve_of`` / ``tiers_of`` by ``Exact()``, by ``Distributed(client)`` with a client the test
  owns (and which the call must leave open: the cluster is the caller's), and by
  ``Sampled(rate=1.0)`` (at rate 1 the seeded hash is a bijection: every key is kept, so the
  estimate is the exact curve) answer every capacity the same, on seeded random traces with and
  without sizes, a window and a warm-up;
- a sample that keeps nothing is an error, never a curve of zeros;
- the online planner (``methods.watch``) equals the exact curves of its intervals.
"""

from __future__ import annotations

import numpy as np
import pytest
from naive import lru_hits

from stackdist.engine import HitCurve
from stackdist.errors import EmptyInputError, UsageError
from stackdist.methods import (
    CurveResult,
    Distributed,
    Exact,
    Sampled,
    TiersResult,
    TraceInput,
    curve_of,
    method_of,
    tiers_of,
)
from stackdist.methods.watch import OnlinePlan, WatchOptions

pytestmark = pytest.mark.xdist_group("dask")


@pytest.fixture(scope="module")
def client():
    """A client the test owns: an in-process cluster (threads), started once for the module."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


def _trace(tmp_path, seed: int, sized: bool) -> tuple[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 700))
    keys = rng.zipf(1.3, n) % int(rng.integers(5, 120))
    path = tmp_path / f"t{seed}.csv"
    if sized:
        sizes = rng.integers(1, 4, 200)[keys % 200]
        path.write_text("".join(f"{k},{s}\n" for k, s in zip(keys, sizes)))
    else:
        path.write_text("".join(f"{k}\n" for k in keys))
    return str(path), keys


def test_every_method_gives_the_same_result_type_and_the_exact_ones_agree(tmp_path, client):
    for seed in range(6):  # one test item, 6 seeded cases
        path, keys = _trace(tmp_path, seed, sized=seed % 2 == 1)
        window = None if seed % 3 else "10:-5"
        source = TraceInput(path, window=window, warmup="3" if seed % 3 == 0 else None)
        exact = curve_of(source, Exact())
        caps = np.unique(np.r_[0, 1, exact.curve.default_capacities(12)])
        for method in (Distributed(client), Sampled(rate=1.0, seeds=2)):
            if isinstance(method, Sampled) and (seed % 2 == 1 or window):
                continue  # rate 1 equals the exact curve for unit sizes at or above one unit; the window is index-only there
            got = curve_of(source, method)
            assert isinstance(got, CurveResult) and got.method == method
            assert np.allclose(got.curve.hit_rate_at(caps), exact.curve.hit_rate_at(caps)), (seed, method)
        if seed % 2 == 0:  # and the exact one is the reference LRU's (an OrderedDict), capacity by capacity
            start, stop = (10, keys.size - 5) if window else (0, keys.size)
            start += 3 if seed % 3 == 0 else 0
            for c in caps[:6]:
                assert exact.curve.hits_at(int(c)) == lru_hits(keys.tolist(), None, int(c), (start, stop))[0], (seed, c)
    assert client.status == "running"  # a caller's client is never closed


def test_tiers_are_the_same_grid_by_every_exact_method(tmp_path, client):
    path, _keys = _trace(tmp_path, 11, sized=False)
    source = TraceInput(path)
    grids = [tiers_of(source, [0, 4, 20], m, [0, 8, 30], exclusive=True)
             for m in (Exact(), Distributed(client), Sampled(rate=1.0, seeds=1))]
    assert all(isinstance(g, TiersResult) for g in grids)
    for g in grids[1:]:
        assert g.inclusive["gpu_hits"] == pytest.approx(grids[0].inclusive["gpu_hits"])
        assert g.inclusive["cpu_hits"] == pytest.approx(grids[0].inclusive["cpu_hits"])
    assert all(np.array_equal(grids[1].exclusive[k], v) for k, v in grids[0].exclusive.items())
    assert grids[2].sampled and not grids[1].sampled and grids[0].rate == 1.0


def test_an_empty_sample_is_an_error_not_a_curve_of_zeros(tmp_path):
    path = tmp_path / "few.csv"
    path.write_text("".join(f"{k}\n" for k in [1, 2, 1, 2] * 5))
    with pytest.raises(EmptyInputError, match="kept none"):
        curve_of(TraceInput(str(path)), Sampled(rate=1e-9, seeds=1))


def test_method_values_check_themselves():
    with pytest.raises(ValueError):
        Sampled(rate=0.0)
    with pytest.raises(ValueError):
        Sampled(rate=0.5, seeds=0)
    assert method_of(dask="local:2") == Distributed("local:2")
    assert method_of(rate=0.5, dask="local:2").cluster == "local:2"
    with pytest.raises(UsageError, match="takes sample rate only"):  # a fixed-size sample cannot be split by file
        curve_of(TraceInput("x.csv"), Sampled(size=5, cluster="local:2"))


def test_the_online_planner_equals_the_exact_curves_of_its_intervals():
    rng = np.random.default_rng(5)
    keys = rng.zipf(1.2, 2500) % 300
    plan = OnlinePlan(WatchOptions("k.csv", "csv", targets=(0.5, 0.8), capacities=(3, 40)))
    cut = 1500
    plan.feed([(i + 1, str(k).encode()) for i, k in enumerate(keys[:cut])])
    first = plan.snapshot(final=False)
    plan.feed([(i + 1, str(k).encode()) for i, k in enumerate(keys[cut:], cut)])
    second = plan.snapshot(final=True)
    for record, window in ((first, (0, cut)), (second, (cut, keys.size))):
        exact = HitCurve.from_trace(keys, window=window)
        caps = np.arange(0, 400)  # the working set of 0.8: the first capacity reaching 80% of the ceiling's hits
        reach = int(caps[np.argmax(np.asarray(exact.hits_at(caps)) >= 0.8 * exact.ceiling_hits - 1e-9)])
        assert record["window"]["working_set"]["0.8"] == reach and record["window"]["targets_of"] == "ceiling"
        assert record["window"]["hit_rate"]["40"] == pytest.approx(exact.hit_rate_at(40))
    assert second["cumulative"]["accesses"] == keys.size and not second["sampled"]


def test_formats_whose_files_cannot_be_read_apart_are_not_split_across_workers(tmp_path, client):
    # LMCache numbers its chunk hashes across the whole input: two files read apart would reuse each
    # other's block ids. The cluster methods read such inputs whole and answer as one process does.
    import json

    rng = np.random.default_rng(3)
    rows = []
    for i in range(80):
        n = int(rng.integers(1, 6))
        chain = [f"0x{int(rng.integers(0, 3)):x}" + "".join(str(int(rng.integers(0, 2))) for _ in range(j)) for j in range(1, n + 1)]
        rows.append(json.dumps({"timestamp": float(i), "request_id": f"r{i}", "model_name": "m", "chunk_size": 4,
                                "seq_len": 4 * n, "chunk_hashes": chain}) + "\n")
    parts = [tmp_path / "a" / "lookup_hashes_1.jsonl", tmp_path / "b" / "lookup_hashes_1.jsonl"]
    for part, lines in zip(parts, (rows[:40], rows[40:])):
        part.parent.mkdir()
        part.write_text("".join(lines))
    source = TraceInput([str(p) for p in parts], "lmcache")
    exact = curve_of(source, Exact()).curve
    caps = exact.default_capacities(10)
    for method in (Distributed(client), Sampled(rate=1.0, seeds=1, cluster=client)):
        assert np.allclose(curve_of(source, method).curve.hit_rate_at(caps), exact.hit_rate_at(caps)), method
