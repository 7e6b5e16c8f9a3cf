"""PNG figures (matplotlib is an optional extra: ``pip install 'stackdist[plot]'``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._io import write_atomic
from .errors import UsageError


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(
            "matplotlib is needed for PNG plots; install it with: pip install 'stackdist[plot]'"
        ) from None
    return plt


def _save(fig: Any, path: str | os.PathLike[str]) -> None:
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
    targets: Sequence[float] = (),
    vlines: Sequence[tuple[str, float]] = (),
) -> None:
    """Step curves ``(label, x, y)`` on one axis, with horizontal target lines, saved as PNG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for label, x, y in series:
        ax.step(x, y, where="post", label=label)
    for t in targets:
        ax.axhline(t, color="grey", lw=0.8, ls=":")
        ax.annotate(f"{t:g}", (0, t), xycoords=("axes fraction", "data"), fontsize=8, color="grey", va="bottom")
    for label, x in vlines:
        ax.axvline(x, color="tab:red", lw=0.8, ls="--")
        ax.annotate(label, (x, 0.02), xycoords=("data", "axes fraction"), fontsize=8, rotation=90, color="tab:red")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=8)
    _save(fig, path)
    plt.close(fig)
