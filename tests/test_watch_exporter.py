"""``stackdist watch`` as a Prometheus exporter: the HTTP endpoint scraped and parsed with
prometheus_client's own parser, checked against the exact curves; empty intervals have no
samples; the trailing window; capacities and working sets in units, tokens and model bytes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from stackdist.cli.main import main
from stackdist.engine import HitCurve
from stackdist.methods import Exact
from stackdist.methods.watch import OnlinePlan, WatchOptions
from stackdist.planning.geometry import model_spec
from stackdist.render.prometheus import prometheus_text

parser = pytest.importorskip("prometheus_client.parser")
ROOT = Path(__file__).resolve().parents[1]


def _smallest_reaching(curve, fraction, top=2000):
    """Reference working set: scan every capacity for the first whose hits reach ``fraction`` of the ceiling's."""
    caps = np.arange(0, top)
    return int(caps[np.argmax(np.asarray(curve.hits_at(caps)) >= fraction * curve.ceiling_hits - 1e-9)])


def _samples(text):
    """{(name, window, extra label): value} and the families' HELP, from prometheus_client's parser."""
    values, helps, labels = {}, {}, {}
    for fam in parser.text_string_to_metric_families(text):
        helps[fam.name] = fam.documentation
        for s in fam.samples:
            extra = s.labels.get("target") or s.labels.get("capacity") or s.labels.get("quantile")
            values[(s.name, s.labels.get("window"), extra)] = s.value
            labels[s.name] = s.labels
    return values, helps, labels


def _scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def test_listen_serves_metrics_equal_to_the_exact_curve_and_empty_intervals_have_no_samples(tmp_path):
    rng = np.random.default_rng(3)
    keys = rng.zipf(1.3, 1500) % 150
    trace = tmp_path / "t.csv"
    trace.write_text("".join(f"{k}\n" for k in keys))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "stackdist", "watch", str(trace), "--listen", "127.0.0.1:0",
                             "--every", "200ms", "--targets", "50%,0.9", "--capacities", "5,40", "-o", os.devnull],
                            stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        assert "serving metrics at http://127.0.0.1:" in line, line
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        exact = HitCurve.from_trace(keys)
        full = empty = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and empty is None:
            values, helps, labels = _samples(_scrape(port))
            if values.get(("stackdist_kv_accesses_total", None, None)) == len(keys):
                full = full or (values, helps, labels)
                if values.get(("stackdist_kv_window_accesses", "200ms", None)) == 0:
                    empty = values
            time.sleep(0.05)
        assert full is not None and empty is not None, "no complete scrape in 60 s"
        values, helps, labels = full
        assert labels["stackdist_kv_accesses_total"] == {"trace": str(trace), "semantics": "per-access", "unit": "units"}
        assert helps["stackdist_kv_hit_ratio"].startswith("LRU hit ratio at the capacity")
        assert values[("stackdist_kv_ceiling_hit_ratio", "all", None)] == pytest.approx(exact.ceiling_hit_rate)
        for t in ("0.5", "0.9"):
            assert values[("stackdist_kv_working_set_units", "all", t)] == _smallest_reaching(exact, float(t))
        for c in (5, 40):
            assert values[("stackdist_kv_hit_ratio", "all", str(c))] == pytest.approx(exact.hit_rate_at(c))
        # an interval with no new access: its count is 0, its rates and sizes are absent; the cumulative ones stay
        assert [k for k in empty if k[1] == "200ms"] == [("stackdist_kv_window_accesses", "200ms", None)]
        assert empty[("stackdist_kv_hit_ratio", "all", "40")] == pytest.approx(exact.hit_rate_at(40))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 130


def test_textfile_parses_with_prometheus_client_and_an_empty_window_has_no_sample():
    w = OnlinePlan(WatchOptions("t.csv", "csv", targets=(0.5,), capacities=(3,), window_label="1m"))
    w.feed([(i + 1, str(k).encode()) for i, k in enumerate([1, 2, 1, 3, 2, 1])])
    busy = w.snapshot(final=False)
    idle = w.snapshot(final=False)
    assert idle["window"]["accesses"] == 0 and idle["window"]["ceiling_hit_rate"] is None
    assert idle["window"]["hit_rate"] == {"3": None} and idle["window"]["working_set"] == {"0.5": None}
    exact = HitCurve.from_trace([1, 2, 1, 3, 2, 1])
    for record in (busy, idle):
        values, helps, _ = _samples(prometheus_text(record, {"trace": "t.csv"}))
        assert values[("stackdist_kv_hit_ratio", "all", "3")] == pytest.approx(exact.hit_rate_at(3))
        assert all(helps.values())
    assert ("stackdist_kv_hit_ratio", "1m", "3") in _samples(prometheus_text(busy))[0]
    assert [k[0] for k in _samples(prometheus_text(idle))[0] if k[1] == "1m"] == ["stackdist_kv_window_accesses"]


@pytest.mark.parametrize("seed, k", [(8, 2), (9, 1), (10, 3), (11, 5)])
def test_trailing_window_is_the_last_intervals(seed, k):
    rng = np.random.default_rng(seed)
    keys = rng.zipf(1.2, 3000) % 250
    cuts = np.r_[0, np.sort(rng.choice(np.arange(1, 3000), 5, replace=False)), 3000].tolist()
    w = OnlinePlan(WatchOptions("t.csv", "csv", None, "per-access", Exact(), (0.9,), (10, 60), window_intervals=k))
    for i in range(len(cuts) - 1):
        w.feed([(j + 1, str(key).encode()) for j, key in enumerate(keys[cuts[i]:cuts[i + 1]], cuts[i])])
        record = w.snapshot(final=False)
        window = (cuts[max(i + 1 - k, 0)], cuts[i + 1])
        exact = HitCurve.from_trace(keys[: cuts[i + 1]], window=window)
        assert record["window"]["accesses"] == window[1] - window[0]
        assert record["window"]["hit_rate"]["60"] == pytest.approx(exact.hit_rate_at(60))
        assert record["window"]["working_set"]["0.9"] == _smallest_reaching(exact, 0.9)
        assert record["window_info"]["intervals"] == min(i + 1, k)


def _mooncake(tmp_path, n=60):
    rng = np.random.default_rng(5)
    rows, ids = [], []
    for i in range(n):
        blocks = [int(rng.integers(0, 4)), 10 + int(rng.integers(0, 15)), 1000 + i]
        rows.append(json.dumps({"timestamp": i, "input_length": 16 * len(blocks), "hash_ids": blocks}))
        ids += blocks
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path, ids


def test_model_bytes_capacities_with_units_and_the_default_model_note(tmp_path, capsys):
    path, ids = _mooncake(tmp_path)
    per_token = model_spec("qwen3-8b", "fp8").geometry.kv_bytes_per_token
    block = 16 * per_token
    caps = f"{3 * block + block // 2}B,64tokens,5blocks,7"
    assert main(["watch", str(path), "--format", "mooncake", "--block-size", "16", "--model", "qwen3-8b", "--kv-dtype",
                 "fp8", "--no-follow", "--capacities", caps, "--targets", "90%"]) == 0
    out, err = capsys.readouterr()
    record = json.loads(out.splitlines()[-1])["cumulative"]
    exact = HitCurve.from_trace(np.array(ids))
    assert list(record["hit_rate"]) == caps.split(",")
    for label, blocks in zip(caps.split(","), (3, 4, 5, 7)):
        assert record["hit_rate"][label] == pytest.approx(exact.hit_rate_at(blocks))
    ws = _smallest_reaching(exact, 0.9)
    assert record["working_set"]["0.9"] == ws and record["working_set_tokens"]["0.9"] == ws * 16
    assert record["working_set_bytes"]["0.9"] == ws * block
    assert "no --model" not in err
    assert main(["watch", str(path), "--format", "mooncake", "--block-size", "16", "--no-follow"]) == 0
    err = capsys.readouterr().err
    assert err.count("no --model given") == 1 and "qwen2.5-1.5b" in err


@pytest.mark.parametrize("argv, flag", [
    (["--model", "qwen3-8b"], "--model"),  # an access trace has no tokens
    (["--capacities", "1GiB"], "--bytes-per-unit"),
    (["--capacities", "64tokens"], "request trace"),
    (["--targets", "0%"], "--targets"),
    (["--every", "1s", "--window", "1500ms"], "--window"),
    (["--listen", "localhost"], "--listen"),
])
def test_usage_errors(tmp_path, capsys, argv, flag):
    trace = tmp_path / "t.csv"
    trace.write_text("1\n2\n1\n")
    assert main(["watch", str(trace), "--no-follow", *argv]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err


def test_listen_without_prometheus_client_names_the_extra_and_version_works(tmp_path, capsys, monkeypatch):
    trace = tmp_path / "t.csv"
    trace.write_text("1\n")
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    assert main(["watch", str(trace), "--no-follow", "--listen", "127.0.0.1:0"]) == 2
    assert "pip install 'stackdist[watch]'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["watch", "--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("stackdist ")


@pytest.mark.parametrize("seed", range(4))
def test_merged_coverage_counters_equal_one_counter_of_all_values(seed):
    from stackdist.engine.scale.estimate import QuantileCounter
    from stackdist.methods.watch import _merged

    rng = np.random.default_rng(seed)
    parts = [rng.integers(0, 10 ** int(rng.integers(1, 7)), int(rng.integers(0, 300))) for _ in range(4)]
    counters = []
    for part in parts:
        counters.append(QuantileCounter())
        counters[-1].add(part)
    whole = QuantileCounter()
    whole.add(np.concatenate(parts))
    merged = _merged(counters)
    assert merged.count == whole.count
    for q in (0.1, 0.5, 0.9, 0.99, 1.0):
        assert merged.quantile(q) == whole.quantile(q)
