"""Exact distributed replay (stackdist.engine.scale.distributed): equal to the one-process replay, access for access."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from naive import naive_distances

from stackdist.engine import COLD, HitCurve, dense_keys, engine_depths, stack_distances
from stackdist.engine.scale.distributed import (
    chunk_summary,
    connect,
    dask_map,
    distributed_distances,
    split_even,
    split_requests,
)
from stackdist.errors import UsageError


def _cuts(rng, n, parts):
    inner = sorted(rng.integers(0, n + 1, parts - 1).tolist()) if parts > 1 else []
    bounds = [0, *inner, n]
    return list(itertools.pairwise(bounds))


# One worker runs this file: the local cluster below (and the distributed import) is started once.
pytestmark = pytest.mark.xdist_group("dask")


@pytest.fixture(scope="module")
def scheduler():
    """One local cluster for the module's CLI tests (threads, TCP, so ``--dask tcp://...`` reaches it)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                                  protocol="tcp") as cluster:
        yield cluster.scheduler_address


def test_access_replay_equals_the_single_process_one():
    for seed in range(12):  # one test item, 12 seeded cases
        rng = np.random.default_rng(seed)
        n = int(rng.integers(0, 600))
        keys = rng.zipf(1.4, n) % int(rng.integers(1, 80))
        sizes = rng.integers(1, 5, 100)[keys % 100] if seed % 2 else None
        chunks = [(keys[a:b], None if sizes is None else sizes[a:b]) for a, b in _cuts(rng, n, int(rng.integers(1, 7)))]
        got = distributed_distances(chunks)
        assert got.tolist() == stack_distances(keys, sizes).tolist()
        if n <= 200:
            assert [None if d == COLD else int(d) for d in got] == naive_distances(keys.tolist(), None if sizes is None else sizes.tolist())


def test_engine_depths_equal_the_single_process_ones():
    for seed in range(8):  # one test item, 8 seeded cases
        rng = np.random.default_rng(100 + seed)
        n_req = int(rng.integers(1, 80))
        lengths = rng.integers(0, 6, n_req)
        blocks = []
        for length in lengths:  # prefix chains: a root and a path of children
            root = int(rng.integers(0, 10))
            blocks.append([root * 100 + j for j in range(int(length))])
        keys = np.array([b for r in blocks for b in r], np.int64)
        offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
        chunks = []
        for r0, r1 in _cuts(rng, n_req, int(rng.integers(1, 5))):
            lo, hi = offsets[r0], offsets[r1]
            chunks.append((keys[lo:hi], None, offsets[r0 : r1 + 1] - lo))
        assert distributed_distances(chunks).tolist() == engine_depths(keys, offsets).tolist()


def test_string_keys_empty_chunks_and_readers_run_where_the_chunk_is():
    keys = np.array(["a", "b", "a", "c", "b", "a"], dtype=object)
    assert distributed_distances([keys[:2], keys[2:2], keys[2:]]).tolist() == stack_distances(keys).tolist()
    assert distributed_distances([]).tolist() == []
    readers = [lambda: np.array([1, 2, 1]), lambda: (np.array([2, 3, 1]), None)]
    assert distributed_distances(readers).tolist() == stack_distances([1, 2, 1, 2, 3, 1]).tolist()
    summary = chunk_summary(np.array([4, 4, 4, 5]))
    assert summary.keys.tolist() == [4, 4, 5] and summary.is_first.tolist() == [True, False, True]


def test_mixed_chunks_and_bad_cluster_specs_are_refused():
    with pytest.raises(ValueError, match="sizes"):
        distributed_distances([(np.array([1]), np.array([2])), (np.array([1]), None)])
    for spec in ("local:0", "local:x", "udp://h:1", "tcp://host"):
        with pytest.raises(UsageError, match="--dask"):
            connect(spec)


def test_splits_cover_everything_once():
    assert split_even(0, 3) == [(0, 0)]
    for n in (1, 7, 100):
        ranges = split_even(n, 4)
        assert ranges[0][0] == 0 and ranges[-1][1] == n and all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    offsets = np.array([0, 5, 5, 9, 20, 21])
    ranges = split_requests(offsets, 3)
    assert ranges[0][0] == 0 and ranges[-1][1] == 5 and all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


def test_on_a_local_dask_cluster_the_curve_is_the_exact_one(scheduler):
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(7)
    keys = rng.zipf(1.2, 20_000) % 3_000
    with distributed.Client(scheduler) as client:
        got = distributed_distances([keys[a:b] for a, b in split_even(keys.size, 4)], dask_map(client))
    exact = HitCurve.from_trace(keys)
    assert got.tolist() == exact.distances.tolist()
    caps = np.arange(0, 3_000, 37)
    assert HitCurve(dense_keys(keys), None, got, (0, keys.size)).hits_at(caps).tolist() == exact.hits_at(caps).tolist()


def test_distributed_tiers_equal_the_one_process_tiers():
    for seed in range(6):  # one test item, 6 seeded cases
        from stackdist.engine.scale.distributed import (
            distributed_inclusive_tiers,
            sequential_map,
        )
        from stackdist.engine.tiers import inclusive_grid, inclusive_tiers

        rng = np.random.default_rng(seed)
        n = int(rng.integers(0, 400))
        keys = rng.zipf(1.3, n) % 50
        sizes = rng.integers(1, 4, 50)[keys] if seed % 2 else None
        window = (int(rng.integers(0, max(n // 3, 1))), n)
        curve = HitCurve.from_trace(keys, sizes, window)
        gpus = [0, 1, 3, 17, 10_000]
        got = distributed_inclusive_tiers(curve, gpus, sequential_map, parts=int(rng.integers(1, 5)))
        want = inclusive_tiers(gpu_capacities=gpus, curve=curve)
        caps = [0, 1, 2, 5, 20, 60, 500]
        grid_got, grid_want = inclusive_grid(got, caps), inclusive_grid(want, caps)
        assert grid_got.keys() == grid_want.keys()
        for key in grid_want:
            assert np.asarray(grid_got[key]).tolist() == np.asarray(grid_want[key]).tolist(), key
        for g, w in zip(got, want):
            assert g.cpu.distances.tolist() == w.cpu.distances.tolist()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("semantics", ["engine", "per-access"])
def test_distributed_request_depths_equal_the_one_process_ones(seed, semantics):
    from stackdist.engine.scale.distributed import (
        distributed_request_depths,
        sequential_map,
    )

    rng = np.random.default_rng(50 + seed)
    lengths = rng.integers(0, 6, int(rng.integers(0, 40)))
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    ids = np.concatenate([rng.choice(30, size=k, replace=False) for k in lengths]) if lengths.size else np.zeros(0, np.int64)
    got = distributed_request_depths(ids.astype(np.int64), offsets, semantics, sequential_map, int(rng.integers(1, 5)))
    want = engine_depths(ids, offsets) if semantics == "engine" else stack_distances(ids)
    assert got.tolist() == np.asarray(want).tolist()


def test_tiers_on_a_local_cluster_equal_one_process(tmp_path, scheduler):
    import json

    from stackdist.cli.main import main

    rng = np.random.default_rng(3)
    keys = rng.zipf(1.2, 3000) % 400
    trace = tmp_path / "t.csv"
    trace.write_text("".join(f"{k},{k % 3 + 1}\n" for k in keys))
    one, two = tmp_path / "a.json", tmp_path / "b.json"
    common = [str(trace), "--gpu", "10,100", "--cpu", "0,50,500", "--exclusive", "--warmup", "100"]
    assert main(["tiers", *common, "-o", str(one)]) == 0
    assert main(["tiers", *common, "--dask", scheduler, "-o", str(two)]) == 0
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert b.pop("dask")["workers"] == 2
    assert a == b
    assert main(["tiers", *common, "--dask", scheduler, "--sample-rate", "0.5"]) == 2


def test_plan_on_a_local_cluster_equals_one_process(tmp_path, scheduler):
    import json

    from stackdist.cli.main import main

    rng = np.random.default_rng(5)
    rows = []
    for i in range(300):  # sessions behind a few shared prompts: prefix-chained ids
        prompt, session = int(rng.integers(0, 4)), int(rng.integers(0, 40))
        ids = [prompt, 10 + prompt] + [1000 + session * 20 + j for j in range(int(rng.integers(0, 6)))]
        rows.append({"timestamp": i * 100, "input_length": 16 * len(ids) - int(rng.integers(0, 8)), "hash_ids": ids})
    trace = tmp_path / "m.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    one, two = tmp_path / "a.json", tmp_path / "b.json"
    common = [str(trace), "--block-size", "16", "--warmup", "20"]
    assert main(["plan", *common, "--json", str(one)]) == 0
    assert main(["plan", *common, "--dask", scheduler, "--json", str(two)]) == 0
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert b.pop("dask")["semantics"] == ["engine", "per-access"]
    assert a == b
    # --semantics all: both idealized semantics replayed on the cluster (it used to replay them here
    # and report "semantics": []), the engine models in this process; the same plan
    every = [*common, "--semantics", "all", "--gpu-blocks", "40,inf"]
    assert main(["plan", *every, "--json", str(one)]) == 0
    assert main(["plan", *every, "--dask", scheduler, "--json", str(two)]) == 0
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert b.pop("dask")["semantics"] == ["engine", "per-access"]
    assert a == b and set(a["engine_models"]) == {"vllm", "sglang"} and set(a["semantics"]) == {"engine", "per-access"}
    assert main(["plan", *common, "--dask", scheduler, "--sample-rate", "0.5"]) == 2


def test_plan_on_a_cluster_honours_every_semantics(tmp_path, scheduler):
    # --semantics all: engine and per-access replayed on the cluster, the engine models (one
    # sequential pool each) here, and the plan equal to one process's; a Client passed to the
    # library is the caller's (never closed).
    import json

    distributed = pytest.importorskip("distributed")
    from stackdist.cli.main import main
    from stackdist.methods import Distributed
    from stackdist.methods.plan import plan
    from stackdist.planning import PlanOptions
    from stackdist.traces import RequestTrace

    rows = [{"timestamp": i * 10, "input_length": 16 * 3, "output_length": 4, "hash_ids": [i % 3, 10 + i % 3, 100 + i % 7]}
            for i in range(80)]
    trace = tmp_path / "m.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    one, two = tmp_path / "a.json", tmp_path / "b.json"
    common = [str(trace), "--block-size", "16", "--semantics", "all", "--gpu-blocks", "64,inf"]
    assert main(["plan", *common, "--json", str(one)]) == 0
    assert main(["plan", *common, "--dask", scheduler, "--json", str(two)]) == 0
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    info = b.pop("dask")
    assert info["semantics"] == ["engine", "per-access"] and info["local"] == ["vllm", "sglang"] and info["local_reason"]
    assert a == b and set(a["engine_models"]) == {"vllm", "sglang"}
    t = RequestTrace.from_blocks([[1, 2, 3], [1, 2, 4], [1, 2, 3]], block_size=4)
    with distributed.Client(scheduler) as client:
        got = plan(t, PlanOptions(), Distributed(client)).plan
        assert client.status == "running"
    got.pop("dask")
    assert got == plan(t, PlanOptions()).plan


def test_histogram_merge_equals_the_one_process_histogram():
    for seed in range(8):  # one test item, 8 seeded cases
        from stackdist.engine.scale.distributed import chunk_histogram, merge_histograms

        rng = np.random.default_rng(200 + seed)
        n = int(rng.integers(0, 500))
        keys = rng.zipf(1.3, n) % 80
        sizes = rng.integers(1, 4, 80)[keys] if seed % 2 else None
        parts = [chunk_histogram((keys[a:b], None if sizes is None else sizes[a:b])) for a, b in _cuts(rng, n, int(rng.integers(1, 6)))]
        values, counts, cold = merge_histograms(parts)
        exact = naive_distances(keys.tolist(), None if sizes is None else sizes.tolist())
        finite = [d for d in exact if d is not None]
        want_values, want_counts = np.unique(np.array(finite, np.int64), return_counts=True)
        assert values.tolist() == want_values.tolist() and counts.tolist() == want_counts.tolist()
        assert cold == sum(d is None for d in exact)


@pytest.mark.parametrize("case", ["unit", "sized", "unit-window"])
def test_curve_of_many_files_on_a_local_cluster_equals_one_process(tmp_path, scheduler, case):
    # Unit-size files merge as histograms (the client holds O(distinct keys), not the trace);
    # sized files, and any window or warm-up, merge every distance. Both equal one process.
    import importlib.util
    import json

    from stackdist.cli.main import main

    rng = np.random.default_rng(len(case))
    keys = rng.zipf(1.2, 4000) % 500
    for i, (a, b) in enumerate([(0, 1300), (1300, 1300), (1300, 2900), (2900, 4000)]):  # one file empty
        rows = [f"{k},{k % 4 + 1}" if case == "sized" else str(k) for k in keys[a:b].tolist()]
        (tmp_path / f"part-{i}.csv").write_text("".join(r + "\n" for r in rows))
    common = [str(tmp_path / "part-*.csv"), "--points", "30"] + (["--window", "500:"] if case == "unit-window" else [])
    one, two = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["curve", *common, "-o", str(one)]) == 0
    plot = ["--plot", str(tmp_path / "d.png")] if case == "unit" and importlib.util.find_spec("matplotlib") else []
    assert main(["curve", *common, "--dask", scheduler, *plot, "-o", str(two)]) == 0
    assert not plot or (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"  # --plot is drawn with --dask too
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    info = b.pop("dask")
    assert info.get("merged") == ("histograms" if case == "unit" else None) and info["chunks"] == 4
    assert a == b


def test_files_mixing_sized_and_unsized_accesses_are_a_data_error(tmp_path, capsys, scheduler):
    from stackdist.cli.main import main

    (tmp_path / "a.csv").write_text("1,2\n2,3\n")
    (tmp_path / "b.csv").write_text("1\n2\n")
    for extra in ([], ["--dask", scheduler]):
        assert main(["curve", str(tmp_path / "*.csv"), *extra]) == 1
        err = capsys.readouterr().err
        assert "some inputs have a size column and some do not" in err and "Traceback" not in err
