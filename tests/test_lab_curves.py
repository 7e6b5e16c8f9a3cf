"""The lab's files derived from the engine's curves, verified against direct simulation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kvlab import lab
from kvlab.scenario import run_scenario


def test_scenario_from_curves_equals_direct_scenario():
    rng = np.random.default_rng(80)
    for _ in range(60):
        docs = int(rng.integers(1, 8))
        tokens = int(rng.integers(1, 50))
        passes = tuple(rng.choice(["fwd", "rev"], int(rng.integers(1, 4))).tolist())
        total = docs * tokens
        gpu, cpu = (int(rng.integers(0, total + 2)) for _ in range(2))
        kw = {"gpu": gpu, "cpu": cpu, "docs": docs, "tokens": tokens, "passes": passes}
        assert lab.scenario_from_curves(**kw) == run_scenario(**kw)


def test_cliffs_from_curves_equal_direct_at_every_capacity():
    docs, tokens = 10, 5011
    total = docs * tokens
    caps = sorted({0, 1, tokens - 1, tokens, total - 1, total, total + 1, *range(0, total + 2, 2500)})
    assert lab.cliff_from_curve(caps) == lab.cliff_direct(caps)
    assert lab.cpu_cliff_from_curve(caps) == lab.cpu_cliff_direct(caps)
    for gpu, cpu_caps in itertools.product((0, 5011, 21520, 50110), [caps[::3]]):
        assert lab.cpu_cliff_from_curve(cpu_caps, gpu=gpu) == lab.cpu_cliff_direct(cpu_caps, gpu=gpu)


def test_cliff_sits_at_the_total_document_size():
    cliff = lab.cliff_from_curve()
    assert cliff["50109"] == 0 and cliff["50110"] == 10
    cpu = lab.cpu_cliff_from_curve()
    assert cpu["50109"] == 10 and cpu["50110"] == 0


def test_a_mismatch_is_an_error_not_a_fallback(monkeypatch):
    wrong = dict(lab.cliff_direct())
    wrong["50110"] = 9
    monkeypatch.setattr(lab, "cliff_direct", lambda *a, **k: wrong)
    with pytest.raises(lab.LabMismatchError, match="cliff.json"):
        lab.build_lab()


def test_run_lab_reports_a_mismatch_without_writing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(lab, "cpu_cliff_direct", lambda *a, **k: {"0": -1})
    assert lab.run_lab_command(tmp_path / "out") == 1
    assert "cpu_cliff.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
