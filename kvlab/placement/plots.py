"""PNG figures of the experiments (matplotlib, Agg backend), each written atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["write_figures", "MatplotlibMissing"]


class MatplotlibMissing(RuntimeError):
    """matplotlib is needed for the figures."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise MatplotlibMissing(
            "the figures need matplotlib (pip install 'stackdist[plot]'); rerun with --no-plots to skip them."
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _short(name: str) -> str:
    return name.replace("mooncake:mooncake_", "mooncake:").replace("_trace", "")


def write_figures(results: dict[str, Any], out: Path) -> list[Path]:
    """Write migration_bytes.png, hit_split.png, frontier.png and slo_capacity.png into ``out``."""
    plt = _pyplot()
    out = Path(out)
    grid = results["grid"]
    workloads = list(grid)
    policies = ["lru", "lfu", "predicted", "ewma"]
    written = []

    def row(name: str, policy: str) -> dict[str, Any]:
        return next(r for r in grid[name] if r["config"]["policy"].split("(")[0] == policy
                    and r["config"]["organisation"] == "exclusive" and r["config"]["prefetch"] == "none")

    fig, axes = plt.subplots(1, len(workloads), figsize=(3.2 * len(workloads), 3.4), squeeze=False,
                             layout="constrained")
    for ax, name in zip(axes[0], workloads):
        values = [row(name, p)["migration_bytes_total"] / 1e9 for p in policies]
        ax.bar(policies, values, color=["#4c72b0", "#dd8452", "#55a868", "#c44e52"])
        ax.set_title(_short(name), fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    axes[0][0].set_ylabel("migration GB (PCIe + NVMe, both ways)")
    fig.suptitle("Migration bytes by policy (exclusive, no prefetch, tiers 1:8:64)", fontsize=10)
    _save(fig, out / "migration_bytes.png")
    plt.close(fig)
    written.append(out / "migration_bytes.png")

    fig, axes = plt.subplots(1, len(workloads), figsize=(3.2 * len(workloads), 3.4), squeeze=False,
                             layout="constrained")
    colors = {"hbm": "#2a9d8f", "dram": "#e9c46a", "ssd": "#f4a261", "miss": "#999999"}
    for ax, name in zip(axes[0], workloads):
        bottom = [0.0] * len(policies)
        for part in ("hbm", "dram", "ssd", "miss"):
            vals = [row(name, p)["miss_rate"] if part == "miss" else row(name, p)["hit_rates"][part] for p in policies]
            ax.bar(policies, vals, bottom=bottom, color=colors[part], label=part)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_title(_short(name), fontsize=9)
        ax.set_ylim(0, 1)
        ax.tick_params(axis="x", labelsize=8)
    axes[0][0].set_ylabel("share of block accesses")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle("Where block accesses were served (exclusive, no prefetch)", fontsize=10)
    _save(fig, out / "hit_split.png")
    plt.close(fig)
    written.append(out / "hit_split.png")

    sweep = results["composition_sweep"]
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.8), layout="constrained")
    for ax, key, front in ((axes[0], "ttft_mean_ms", sweep["frontier_mean"]), (axes[1], "ttft_p99_ms", sweep["frontier"])):
        ax.scatter([p["cost_usd"] for p in sweep["points"]], [p[key] for p in sweep["points"]], s=14,
                   color="#8888aa", label="every split")
        ax.plot([p["cost_usd"] for p in front], [p[key] for p in front], "-o", color="#c44e52", ms=4, label="frontier")
        for p in front:
            ax.annotate("/".join(str(c) for c in p["capacities"]), (p["cost_usd"], p[key]), fontsize=6,
                        textcoords="offset points", xytext=(3, 3))
        ax.set_xscale("log")
        ax.set_xlabel("tier cost, USD (assumed prices)")
        ax.set_ylabel(key.replace("_ms", "").replace("ttft_", "TTFT ") + ", ms")
        ax.legend(fontsize=8)
    fig.suptitle(f"{sweep['workload']}: every HBM/DRAM/SSD split of {sweep['budget_blocks']} blocks "
                 "(labels: HBM/DRAM/SSD blocks)", fontsize=9)
    _save(fig, out / "frontier.png")
    plt.close(fig)
    written.append(out / "frontier.png")

    slo = results["slo_capacity"]
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    xs = [r["ssd_multiple"] for r in slo["rows"]]
    ys = [r["min_hbm_blocks"] if r["min_hbm_blocks"] is not None else float("nan") for r in slo["rows"]]
    ax.plot(xs, ys, "-o")
    ax.set_xlabel("SSD capacity, multiple of HBM (DRAM = 8x HBM)")
    ax.set_ylabel("smallest HBM meeting SLO, blocks")
    ax.set_title(f"{slo['workload']}: TTFT p99 <= {slo['slo_ttft_p99_ms']} ms", fontsize=9)
    _save(fig, out / "slo_capacity.png")
    plt.close(fig)
    written.append(out / "slo_capacity.png")
    return written
