"""``stackdist watch`` and the scale flags of ``curve``: answers equal the exact curve's, lines are never lost."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from stackdist.cli.main import main
from stackdist.engine import HitCurve, dense_keys
from stackdist.methods import Exact, Sampled
from stackdist.methods.watch import OnlinePlan, WatchOptions
from stackdist.render.prometheus import prometheus_text
from stackdist.traces.follow import follow_lines

ROOT = Path(__file__).resolve().parents[1]


def _plan(format="csv", block_size=None, capacities=(2, 5), bytes_per_unit=None, sample_size=None, semantics="per-access"):
    """The library's online planner as ``watch`` builds it from its flags (targets 0.5,0.9)."""
    method = Sampled(size=sample_size, seeds=1) if sample_size is not None else Exact()
    return OnlinePlan(WatchOptions("t.csv", format, block_size, semantics, method, (0.5, 0.9), capacities, bytes_per_unit))


def _lines(keys, start=1):
    return [(start + i, str(k).encode()) for i, k in enumerate(keys)]


def test_window_and_cumulative_answers_equal_the_exact_curves():
    rng = np.random.default_rng(0)
    keys = rng.zipf(1.3, 3000) % 200
    w = _plan()
    w.feed(_lines(keys[:1800]))
    first = w.snapshot(final=False)
    w.feed(_lines(keys[1800:], 1801))
    second = w.snapshot(final=True)
    for record, window in ((first, (0, 1800)), (second, (1800, 3000))):
        exact = HitCurve.from_trace(keys, window=window)
        assert record["window"]["accesses"] == window[1] - window[0]
        assert record["window"]["working_set"]["0.5"] == _smallest_reaching(exact, 0.5)
        assert record["window"]["hit_rate"]["5"] == pytest.approx(exact.hit_rate_at(5))
    total = HitCurve.from_trace(keys)
    assert second["cumulative"]["working_set"]["0.9"] == _smallest_reaching(total, 0.9)
    assert second["cumulative"]["ceiling_hit_rate"] == pytest.approx(total.ceiling_hit_rate)


def _smallest_reaching(curve, fraction):
    """The reference working set: the first capacity (by scanning them all) whose hits reach
    ``fraction`` of the ceiling's hits."""
    caps = np.arange(0, 5000)
    return int(caps[np.argmax(np.asarray(curve.hits_at(caps)) >= fraction * curve.ceiling_hits - 1e-9)])


def test_request_traces_report_coverage_and_bytes():
    w = _plan(format="mooncake", bytes_per_unit=1024, block_size=16)
    rows = [json.dumps({"timestamp": i, "input_length": 32, "hash_ids": [i % 3, 100 + i % 3]}).encode() for i in range(9)]
    w.feed(list(enumerate(rows, 1)))
    record = w.snapshot(final=True)["cumulative"]
    assert record["coverage"]["requests"] == 9 and record["coverage"]["requests_with_reuse"] == 6
    assert record["coverage"]["p50"] == 6 and record["working_set_bytes"]["0.5"] == record["working_set"]["0.5"] * 1024


def test_sampled_watch_keeps_at_most_s_keys():
    w = _plan(sample_size=50)
    w.feed(_lines(np.arange(20_000) % 2_000))
    record = w.snapshot(final=True)
    assert record["sampled"] and record["sample_rate"] < 0.05 and w.sampler.n_sampled_keys <= 50
    assert record["cumulative"]["hit_rate"]["5"] == 0.0


def test_follow_waits_for_the_rest_of_a_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"1\n2")
    stop = threading.Event()
    got = []
    with open(path, "rb") as stream:
        thread = threading.Thread(target=lambda: got.extend(follow_lines(stream, True, 0.02, stop)))
        thread.start()
        time.sleep(0.2)
        assert got == [(1, b"1")]
        with open(path, "ab") as f:
            f.write(b"3\n")
        time.sleep(0.2)
        stop.set()
        thread.join(2)
    assert got == [(1, b"1"), (2, b"23")]
    assert list(follow_lines(io.BytesIO(b"\xef\xbb\xbfa\nb"), False, 0.1, threading.Event())) == [(1, b"a"), (2, b"b")]


def test_prometheus_text_names():
    text = prometheus_text({"cumulative": {"accesses": 3, "ceiling_hit_rate": 0.25, "working_set": {"0.95": None},
                                           "working_set_bytes": {"0.95": 2048}, "hit_rate": {"4": 0.5}}})
    assert 'stackdist_kv_working_set_bytes{window="all",target="0.95",of="ceiling"} 2048' in text
    assert 'stackdist_kv_hit_ratio{window="all",capacity="4"} 0.5' in text
    assert "stackdist_kv_working_set_units" not in text  # its only sample has no value: no family


def test_watch_command_no_follow_writes_json_lines_and_the_prometheus_file(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("".join(f"{k}\n" for k in [1, 2, 1, 3, 2, 1]))
    prom = tmp_path / "kv.prom"
    out = tmp_path / "answers.jsonl"
    assert main(["watch", str(trace), "--no-follow", "--output", str(out), "--prometheus", str(prom)]) == 0
    record = json.loads(out.read_text().splitlines()[-1])
    assert record["final"] and record["cumulative"]["accesses"] == 6
    assert f'stackdist_kv_accesses_total{{trace="{trace}",semantics="per-access",unit="units"}} 6' in prom.read_text()
    with pytest.raises(SystemExit) as info:
        main(["watch", str(trace), "--interval", "0"])
    assert info.value.code == 2 and "--interval" in capsys.readouterr().err
    for bad in ("10", "0s", "-1s", "ten seconds"):  # a duration names its unit
        assert main(["watch", str(trace), f"--every={bad}"]) == 2
        assert "--every" in capsys.readouterr().err


def test_ctrl_c_stops_cleanly_and_writes_the_last_line():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "stackdist", "watch", "-", "--every", "200ms"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(b"".join(f"{k}\n".encode() for k in [5, 6, 5, 5]))
    proc.stdin.flush()
    assert b"following -" in proc.stderr.readline()  # started: the reader is running
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # an interval's line has all four accesses (no fixed sleep: a loaded machine)
        line = proc.stdout.readline()
        if not line or json.loads(line)["cumulative"]["accesses"] == 4:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    record = json.loads(out.decode().splitlines()[-1])
    assert record["final"] and record["cumulative"]["accesses"] == 4


def test_curve_scale_flags(tmp_path, capsys):
    rng = np.random.default_rng(2)
    keys = rng.zipf(1.3, 2000) % 300
    trace = tmp_path / "t.csv"
    trace.write_text("".join(f"{k}\n" for k in keys))
    exact = HitCurve.from_trace(keys)
    assert main(["curve", str(trace), "--sample-rate", "1", "--capacities", "10,50", "-o", str(tmp_path / "s.json")]) == 0
    report = json.loads((tmp_path / "s.json").read_text())
    assert report["sampled"] and report["curve"]["hits"] == exact.hits_at([10, 50]).tolist()
    assert report["min_capacity_for_hit_rate"]["0.5"] == exact.min_capacity_for(hit_rate=0.5)
    assert report["min_capacity_for_hit_rate_spread"]["0.5"]["seeds"] == 3
    for argv, flag in ((["--sample-rate", "0"], "--sample-rate"), (["--sample-size", "0"], "--sample-size")):
        with pytest.raises(SystemExit) as info:
            main(["curve", str(trace), *argv])
        assert info.value.code == 2 and flag in capsys.readouterr().err
    for argv in (["--dask", "local:0"], ["--dask", "local:2", "--sample-size", "5"]):
        assert main(["curve", str(trace), *argv]) == 2
        assert "--dask" in capsys.readouterr().err


def test_tiers_sampled_at_rate_one_equals_the_exact_grid(tmp_path):
    rng = np.random.default_rng(4)
    keys = rng.zipf(1.3, 3000) % 400
    trace = tmp_path / "t.csv"
    trace.write_text("".join(f"{k}\n" for k in keys))
    exact, sampled = tmp_path / "e.json", tmp_path / "s.json"
    common = ["tiers", str(trace), "--gpu", "20", "--cpu", "0,50,300", "--exclusive"]
    assert main([*common, "-o", str(exact)]) == 0
    assert main([*common, "-o", str(sampled), "--sample-rate", "1"]) == 0
    e, s = json.loads(exact.read_text()), json.loads(sampled.read_text())
    assert s["sampled"] and s["seeds"] == [0, 1, 2]
    for kind in ("inclusive", "exclusive"):
        assert s[kind]["gpu_hits"] == e[kind]["gpu_hits"] and s[kind]["cpu_hits"] == e[kind]["cpu_hits"]
    assert main([*common, "--dask", "local:2", "--sample-rate", "1"]) == 2  # --dask is exact: no sampling


def test_sampling_on_workers_equals_one_process(tmp_path):
    from stackdist.engine.scale.distributed import sequential_map
    from stackdist.engine.scale.sampling import ShardsSampler, sampled_curve
    from stackdist.methods.curve import sampled_from_files

    rng = np.random.default_rng(9)
    keys = rng.zipf(1.2, 6000) % 700
    files = []
    for i, part in enumerate(np.array_split(keys, 3)):
        files.append(str(tmp_path / f"p{i}.csv"))
        Path(files[-1]).write_text("".join(f"{k}\n" for k in part))
    curves = sampled_from_files(files, None, [ShardsSampler(rate=0.3, seed=s) for s in (4, 5)], sequential_map)
    for curve, seed in zip(curves, (4, 5)):
        alone = sampled_curve(keys, rate=0.3, seed=seed)
        caps = np.arange(0, 700, 23)
        assert curve.n_accesses == 6000 and np.array_equal(curve.hits_at(caps), alone.hits_at(caps))


def test_engine_semantics_count_prefix_hits_of_request_traces():
    from stackdist.engine import engine_depths
    from stackdist.engine.kernels import segment_running_max

    rng = np.random.default_rng(4)
    rows, ids, offsets = [], [], [0]
    for i in range(200):
        blocks = [int(rng.integers(0, 3)), 10 + int(rng.integers(0, 20))] + [100 + i]
        rows.append(json.dumps({"timestamp": i, "input_length": 16 * len(blocks), "hash_ids": blocks}).encode())
        ids += blocks
        offsets.append(len(ids))
    w = _plan(format="mooncake", block_size=16, semantics="engine", capacities=(2, 5, 30))
    w.feed(list(enumerate(rows[:120], 1)))
    w.feed(list(enumerate(rows[120:], 121)))
    record = w.snapshot(final=True)["cumulative"]
    eff = segment_running_max(np.asarray(engine_depths(ids, offsets)), np.array(offsets))
    exact = HitCurve(dense_keys(np.array(ids)), None, eff, (0, len(ids)))
    for cap in (2, 5, 30):
        assert record["hit_rate"][str(cap)] == pytest.approx(exact.hit_rate_at(cap))
    assert record["working_set"]["0.5"] == _smallest_reaching(exact, 0.5)
    assert main(["watch", "x.csv", "--semantics", "engine", "--no-follow"]) == 2
