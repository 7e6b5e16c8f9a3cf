"""PNG figures: the one matplotlib loader and the curve plot (matplotlib is an optional extra: ``pip install 'stackdist[plot]'``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from stackdist.errors import UsageError
from stackdist.output import write_atomic

__all__ = ["pyplot", "save_png", "plot_curves", "plot_plan"]


def pyplot() -> Any:
    """matplotlib's pyplot with the Agg backend (the one plot loader of the project);
    :class:`~stackdist.errors.UsageError` with the install hint when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(
            "matplotlib is needed for PNG plots; install it with: pip install 'stackdist[plot]'"
        ) from None
    return plt


def save_png(fig: Any, path: str | os.PathLike[str]) -> None:
    """Write a figure as PNG (120 dpi) atomically."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    write_atomic(path, buf.getvalue())


def plot_curves(
    path: str | os.PathLike[str],
    series: Sequence[tuple[str, np.ndarray, np.ndarray]],
    *,
    xlabel: str,
    ylabel: str = "hit rate",
    title: str = "",
    hlines: Sequence[tuple[str, float]] = (),
    vlines: Sequence[tuple[str, float]] = (),
    xscale: str = "linear",
) -> None:
    """Step curves ``(label, x, y)`` on one axis, with labelled horizontal and vertical marker
    lines, saved atomically as a PNG."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for label, xs, ys in series:
        ax.step(xs, ys, where="post", label=label)
    for i, (label, level) in enumerate(hlines):
        ax.axhline(level, color="grey", lw=0.8, ls=":")
        ax.annotate(label, (0.01 + 0.16 * i, level), xycoords=("axes fraction", "data"), fontsize=7, color="dimgrey", va="bottom")
    for label, at in vlines:
        ax.axvline(at, color="tab:red", lw=0.8, ls="--")
        ax.annotate(label, (at, 0.02), xycoords=("data", "axes fraction"), fontsize=8, rotation=90, color="tab:red")
    if xscale == "symlog":
        positive = [float(np.min(x[x > 0])) for _, x, _ in series if np.any(np.asarray(x) > 0)]
        ax.set_xscale("symlog", linthresh=min(positive) if positive else 1.0)
        ax.set_xlim(left=0)
    else:
        ax.set_xscale(xscale)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    top = max([float(np.max(y)) for _, _, y in series if np.size(y)] + [y for _, y in hlines] + [0.0])
    ax.set_ylim(0, min(1.02, top * 1.15 + 0.02))
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=8)
    save_png(fig, path)
    plt.close(fig)


def plot_plan(path: str | os.PathLike[str], report: Any, targets: Sequence[float]) -> None:
    """The plan's hit curves against GiB with the ceiling, the targets and the working sets."""
    series = []
    for name, sem in report["semantics"].items():
        c = sem["curve"]
        series.append((f"{name}: prefix token hit rate", np.array(c["capacity_gib"]), np.array(c["prefix_token_hit_rate"])))
        series.append((f"{name}: block hit rate", np.array(c["capacity_gib"]), np.array(c["block_hit_rate"])))
    first = next(iter(report["semantics"].values()))
    ceiling = first["summary"]["ceiling_token_hit_rate"]
    hlines = [(f"ceiling {ceiling:.1%}", ceiling)] + [(f"{t:g} x ceiling", t * ceiling) for t in targets]
    vlines = [(f"{w['target']:g}: {w['fraction_of_ceiling']['gib']:.1f} GiB", w["fraction_of_ceiling"]["gib"])
              for w in first["working_set"] if w["fraction_of_ceiling"]]
    plot_curves(path, series, xlabel=f"KV-cache capacity (GiB, {report['model']['name']}, symlog)", hlines=hlines,
                vlines=vlines, title=f"{report['trace']['source']}", xscale="symlog")
