"""The figures' layout, read from the matplotlib objects (not pixels): tick labels never overlap
on the symlog axis, the right-margin target labels keep clear space, the budgets of ``--gpu``
and ``--capacity`` are drawn and labelled, the title names the KV dtype, and the tiers plot
names its unit and metric (GiB with a model)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from stackdist.cli.main import main

pytest.importorskip("matplotlib")
from stackdist.render import plot

pytestmark = pytest.mark.xdist_group("matplotlib")  # one matplotlib import per worker


def _boxes(fig, texts):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in texts]


def _x_tick_labels(ax):
    ax.figure.canvas.draw()  # the labels' texts are set at drawing
    lo, hi = sorted(ax.get_xlim())
    return [t.label1 for t in ax.xaxis.get_major_ticks()
            if lo <= t.get_loc() <= hi and t.label1.get_visible() and t.label1.get_text()]


def _overlapping(boxes, pad=0.0):
    boxes = sorted(boxes, key=lambda b: b.x0)
    return [(a, b) for a, b in itertools.pairwise(boxes) if b.x0 < a.x1 + pad]


@pytest.mark.parametrize("smallest, top", [(0.05, 1e5), (0.5, 1e7), (3e-4, 1e7), (0.0166, 3000), (7.0, 1e4)])
def test_symlog_tick_labels_never_overlap_and_zero_stays(smallest, top):
    x = np.r_[0.0, np.geomspace(smallest, top, 50)]
    fig = plot.curves_figure([("a", x, np.linspace(0, 0.4, x.size))], xlabel="GiB", xscale="symlog")
    ax = fig.axes[0]
    labels = _x_tick_labels(ax)
    assert not _overlapping(_boxes(fig, labels), pad=2.0), [t.get_text() for t in labels]
    assert labels[0].get_text() == "$\\mathdefault{0}$" and len(labels) >= 4
    # the check itself finds an overprint: the old axis (linear part up to the smallest x) has one here
    if (smallest, top) == (0.05, 1e5):
        plt = plot.pyplot()
        old, oax = plt.subplots(figsize=(9, 5))
        oax.step(x, np.linspace(0, 0.4, x.size))
        oax.set_xscale("symlog", linthresh=smallest)
        oax.set_xlim(left=0)
        assert _overlapping(_boxes(old, _x_tick_labels(oax)))
        plt.close(old)
    plot.pyplot().close(fig)


def test_right_margin_labels_keep_clear_space():
    ceiling = 0.3736
    levels = [(f"ceiling {ceiling:.1%} (engine)", ceiling)] + [(f"{t:.0%} of ceiling", t * ceiling) for t in (0.9, 0.95, 0.99)]
    x = np.linspace(0, 10, 20)
    fig = plot.curves_figure([("a", x, np.linspace(0, ceiling, 20))], xlabel="x", hlines=levels)
    from matplotlib.text import Text

    texts = [c for c in fig.axes[0].texts if c.get_gid() == "target-label"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = sorted((Text.get_window_extent(t, renderer) for t in texts), key=lambda b: b.y0)  # the text, not its arrow
    assert len(boxes) == 4
    for low, high in itertools.pairwise(boxes):
        assert high.y0 - low.y1 >= 0.5 * max(low.height, high.height)  # half a line of white between neighbours
    plot.pyplot().close(fig)


def _mooncake(tmp_path, n=80):
    rng = np.random.default_rng(11)
    rows = []
    for i in range(n):
        ids = [int(rng.integers(0, 5)), 100 + int(rng.integers(0, 30)), 10_000 + i]
        rows.append(json.dumps({"timestamp": i * 1000, "input_length": 512 * len(ids), "output_length": 8,
                                "hash_ids": ids}))
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def _captured(monkeypatch):
    """The figures the command saves, each with its x tick label boxes (read before pyplot closes it)."""
    figs = []
    monkeypatch.setattr(plot, "save_png", lambda fig, path: figs.append((fig, _boxes(fig, _x_tick_labels(fig.axes[0])))))
    return figs


def test_plan_plot_marks_the_gpu_budget_and_names_the_dtype(tmp_path, capsys, monkeypatch):
    figs = _captured(monkeypatch)
    out = tmp_path / "p.json"
    argv = ["plan", str(_mooncake(tmp_path)), "--gpu", "h200", "--capacity", "2GiB", "--kv-dtype", "fp8",
            "--semantics", "engine", "--plot", str(tmp_path / "p.png"), "--json", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    ((fig, ticks),) = figs
    ax = fig.axes[0]
    budgets = {row["budget"]: row for row in report["budgets"]["rows"]}
    hbm = next(row for name, row in budgets.items() if name.startswith("HBM"))
    lines = [ln for ln in ax.lines if ln.get_gid() == "budget-line"]
    assert sorted(float(ln.get_xdata()[0]) for ln in lines) == pytest.approx(sorted(r["gib"] for r in budgets.values()))
    box = next(t for t in ax.texts if t.get_gid() == "marker-box").get_text()
    assert f"{hbm['gib']:,.0f} GiB = {hbm['blocks']:,} blocks" in box and "budget 2GiB: 2 GiB = " in box
    assert "KV dtype fp8, 1 B/element" in ax.get_title()
    assert f"({report['model']['kv_bytes_per_token']:,} B/token)" in ax.get_title()
    assert not _overlapping(ticks, pad=2.0) and len(ticks) >= 3


def test_tiers_plot_names_the_block_hit_rate_and_draws_gib_with_a_model(tmp_path, capsys, monkeypatch):
    from stackdist.planning.geometry import model_spec

    figs = _captured(monkeypatch)
    trace, out = _mooncake(tmp_path), tmp_path / "t.json"
    common = ["tiers", str(trace), "--format", "mooncake", "--gpu", "4", "--cpu", "0,10,40", "-o", str(out),
              "--plot", str(tmp_path / "t.png")]
    assert main([*common, "--model", "qwen3-8b"]) == 0, capsys.readouterr().err
    assert main(common) == 0
    with_model, blocks = (f.axes[0] for f, _ in figs)
    per_block = model_spec("qwen3-8b").geometry.kv_bytes_per_token * 512
    report = json.loads(out.read_text())
    x = with_model.lines[0].get_xdata()
    assert np.allclose(x, np.asarray(report["inclusive"]["cpu_capacity"]) * per_block / 2**30)
    assert "GiB" in with_model.get_xlabel() and f"{per_block:,} B per block of 512 tokens" in with_model.get_xlabel()
    assert blocks.get_xlabel() == "CPU tier capacity (blocks of 512 tokens)"
    for ax in (with_model, blocks):
        assert ax.get_ylabel().startswith("block hit rate") and "GPU tier 4 blocks" in ax.get_title()
    assert main([*common, "--kv-dtype", "fp8"]) == 2  # a dtype without a model


def test_engine_models_plot_names_the_dtype(tmp_path, capsys, monkeypatch):
    figs = []
    monkeypatch.setattr(plot, "save_png", lambda fig, path: figs.append(fig.axes[0].get_title()))
    argv = ["plan", str(_mooncake(tmp_path)), "--semantics", "vllm", "--gpu-blocks", "400", "--kv-dtype", "fp16",
            "--model", "qwen3-8b", "--plot", str(tmp_path / "e.png"), "--json", str(tmp_path / "e.json")]
    assert main(argv) == 0, capsys.readouterr().err
    (title,) = figs
    assert "model qwen3-8b, KV dtype float16, 2 B/element" in title  # vLLM's name for fp16


def test_offload_plot_labels_targets_of_one_size_once(tmp_path, capsys, monkeypatch):
    """Targets the GPU pool reaches alone all need 0 GiB of the tier: one line, one label naming
    them all (three labels at one x overprinted)."""
    figs = []
    monkeypatch.setattr(plot, "save_png", lambda fig, path: figs.append(fig))
    argv = ["plan", str(_mooncake(tmp_path)), "--semantics", "vllm", "--gpu-blocks", "inf,2000", "--model", "qwen3-8b",
            "--offload", "vllm-native:cpu=100blocks", "--targets", "0.1,0.2,0.9", "--plot", str(tmp_path / "o.png")]
    assert main(argv) == 0, capsys.readouterr().err
    (fig,) = [f for f in figs if "tier size" in f.axes[0].get_xlabel()]
    for ax in fig.axes:
        labels = [t for t in ax.texts if "GiB" in t.get_text() and "ceiling" not in t.get_text()]
        xs = [t.xy[0] for t in labels]
        assert len(xs) == len(set(xs)), [t.get_text() for t in labels]
    assert any(t.get_text().startswith("10%, 20%") for ax in fig.axes for t in ax.texts)


def test_hybrid_plot_shows_what_the_other_groups_cut(tmp_path, capsys, monkeypatch):
    """A hybrid model: beside its hits, the full-attention group's own hit in the same runs (from
    the plan's JSON), and an x axis in the hybrid's bytes per block."""
    from pathlib import Path

    figs = []
    monkeypatch.setattr(plot, "save_png", lambda fig, path: figs.append(fig))
    data = Path(__file__).parent / "data"
    argv = ["plan", str(data / "hybrid_two_miss.jsonl"), "--format", "mooncake", "--semantics", "vllm", "--model",
            "gpt-oss-120b", "--gpu-blocks", "200,inf", "--schedule", "serial", "--no-decode", "--plot",
            str(tmp_path / "h.png"), "--json", str(tmp_path / "h.json")]
    assert main(argv) == 0, capsys.readouterr().err
    (fig,) = figs
    ax = fig.axes[0]
    hybrid = json.loads((tmp_path / "h.json").read_text())["engine_models"]["vllm"]["hybrid"]
    own = [line for line in ax.get_lines() if "full-attention group's own hit" in line.get_label()]
    assert len(own) == 1
    assert own[0].get_ydata().tolist() == [p["full_attention_prefix_token_hit_rate"] for p in hybrid["pools"]
                                           if p["gpu_blocks"] != "inf"]
    assert own[0].get_ydata()[0] > [p["prefix_token_hit_rate"] for p in hybrid["pools"]][0]  # the window cut hits
    assert f"{hybrid['bytes_per_block']:,} B per 16-token block" in ax.get_xlabel()
