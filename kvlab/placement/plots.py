"""PNG figures of the experiments, drawn with the project's one plot loader and PNG writer
(:func:`stackdist.render.plot.pyplot`, :func:`stackdist.render.plot.save_png`: matplotlib's Agg
backend, each file written atomically; a missing matplotlib is a
:class:`~stackdist.errors.UsageError` naming the install command)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stackdist.render.plot import pyplot, save_png

__all__ = ["FIGURES", "figure", "write_figures"]

POLICIES = ["lru", "lfu", "predicted", "ewma"]
#: The figures, in the order they are written.
FIGURES = ("migration_bytes.png", "hit_split.png", "frontier.png", "slo_capacity.png")


def _short(name: str) -> str:
    return name.replace("mooncake:mooncake_", "mooncake:").replace("_trace", "")


def _row(grid: dict[str, list[dict[str, Any]]], name: str, policy: str) -> dict[str, Any]:
    """The grid row of ``policy`` on workload ``name``, exclusive tiers, no prefetch."""
    return next(r for r in grid[name] if r["config"]["policy"].split("(")[0] == policy
                and r["config"]["organisation"] == "exclusive" and r["config"]["prefetch"] == "none")


def _per_workload_axes(plt: Any, grid: dict[str, Any]) -> tuple[Any, Any]:
    return plt.subplots(1, len(grid), figsize=(3.2 * len(grid), 3.4), squeeze=False, layout="constrained")


def _migration_bytes(plt: Any, results: dict[str, Any]) -> Any:
    grid = results["grid"]
    fig, axes = _per_workload_axes(plt, grid)
    for ax, name in zip(axes[0], grid):
        values = [_row(grid, name, p)["migration_bytes_total"] / 1e9 for p in POLICIES]
        ax.bar(POLICIES, values, color=["#4c72b0", "#dd8452", "#55a868", "#c44e52"])
        ax.set_title(_short(name), fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    axes[0][0].set_ylabel("migration GB (PCIe + NVMe, both ways)")
    fig.suptitle("Migration bytes by policy (exclusive, no prefetch, tiers 1:8:64)", fontsize=10)
    return fig


def _hit_split(plt: Any, results: dict[str, Any]) -> Any:
    grid = results["grid"]
    fig, axes = _per_workload_axes(plt, grid)
    colors = {"hbm": "#2a9d8f", "dram": "#e9c46a", "ssd": "#f4a261", "miss": "#999999"}
    for ax, name in zip(axes[0], grid):
        bottom = [0.0] * len(POLICIES)
        for part in ("hbm", "dram", "ssd", "miss"):
            rows = [_row(grid, name, p) for p in POLICIES]
            vals = [r["miss_rate"] if part == "miss" else r["hit_rates"][part] for r in rows]
            ax.bar(POLICIES, vals, bottom=bottom, color=colors[part], label=part)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_title(_short(name), fontsize=9)
        ax.set_ylim(0, 1)
        ax.tick_params(axis="x", labelsize=8)
    axes[0][0].set_ylabel("share of block accesses")
    # one legend for all panels, outside them on the right (constrained layout makes room), top to
    # bottom in the order the bars stack (miss on top): inside a panel it covered the bars
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles[::-1], labels[::-1], fontsize=8, loc="outside right upper", title="served from", title_fontsize=8)
    fig.suptitle("Where block accesses were served (exclusive, no prefetch)", fontsize=10)
    return fig


def _frontier(plt: Any, results: dict[str, Any]) -> Any:
    sweep = results["composition_sweep"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained")
    for ax, key, front in ((axes[0], "ttft_mean_ms", sweep["frontier_mean"]), (axes[1], "ttft_p99_ms", sweep["frontier"])):
        ax.scatter([p["cost_usd"] for p in sweep["points"]], [p[key] for p in sweep["points"]], s=14,
                   color="#8888aa", label="every split")
        ax.plot([p["cost_usd"] for p in front], [p[key] for p in front], "-o", color="#c44e52", ms=4, label="frontier")
        # number the frontier points (alternately above and below the line) and list the splits in a
        # box, so labels never collide with each other or with the axis ticks
        for i, p in enumerate(front):
            ax.annotate(str(i + 1), (p["cost_usd"], p[key]), fontsize=7, color="#c44e52", ha="center",
                        textcoords="offset points", xytext=(0, 5 if i % 2 == 0 else -11))
        ax.text(1.02, 1.0, "frontier (HBM/DRAM/SSD blocks):\n" + "\n".join(
            f"{i + 1}: " + "/".join(f"{c:,}" for c in p["capacities"]) for i, p in enumerate(front)),
            transform=ax.transAxes, fontsize=6, va="top", ha="left", family="monospace")
        _cost_axis(ax, [p["cost_usd"] for p in sweep["points"]])
        ax.set_xlabel("tier cost, USD (assumed prices)")
        ax.set_ylabel(key.replace("_ms", "").replace("ttft_", "TTFT ") + ", ms")
        ax.legend(fontsize=8)
    fig.suptitle(f"{sweep['workload']}: every HBM/DRAM/SSD split of {sweep['budget_blocks']:,} blocks "
                 "(numbered: the cost/TTFT frontier, splits listed beside each panel)", fontsize=9)
    return fig


def _cost_axis(ax: Any, costs: list[float]) -> None:
    """Log scale over more than a decade (major labels only: the minor ones overlapped), else linear."""
    from matplotlib.ticker import MaxNLocator, NullFormatter

    positive = [c for c in costs if c > 0]
    if positive and max(positive) / min(positive) > 10:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.tick_params(axis="x", labelsize=7)


def _slo_capacity(plt: Any, results: dict[str, Any]) -> Any:
    slo = results["slo_capacity"]
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    xs = [r["ssd_multiple"] for r in slo["rows"]]
    ys = [r["min_hbm_blocks"] if r["min_hbm_blocks"] is not None else float("nan") for r in slo["rows"]]
    ax.plot(xs, ys, "-o")
    ax.set_xlabel("SSD capacity, multiple of HBM (DRAM = 8x HBM)")
    ax.set_ylabel("smallest HBM meeting SLO, blocks")
    ax.set_title(f"{slo['workload']}: TTFT p99 <= {slo['slo_ttft_p99_ms']} ms", fontsize=9)
    return fig


_DRAW = dict(zip(FIGURES, (_migration_bytes, _hit_split, _frontier, _slo_capacity)))


def figure(name: str, results: dict[str, Any]) -> Any:
    """The matplotlib figure ``name`` (one of :data:`FIGURES`) of ``results``, drawn, not saved. O(grid rows)."""
    return _DRAW[name](pyplot(), results)


def write_figures(results: dict[str, Any], out: Path) -> list[Path]:
    """Write the :data:`FIGURES` of ``results`` (from ``run_experiments``) into ``out``; return their paths."""
    plt = pyplot()
    written = []
    for name in FIGURES:
        fig = figure(name, results)
        save_png(fig, Path(out) / name)
        plt.close(fig)
        written.append(Path(out) / name)
    return written
