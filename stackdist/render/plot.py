"""PNG figures: the one matplotlib loader, and the curve, tier and plan figures (matplotlib is
an optional extra: ``pip install 'stackdist[plot]'``).

Conventions of every figure: exact curves are drawn from their step functions (``steps()``),
never from a sample; one colour per configuration and one line style per semantics; the y axis
is a fraction labelled in percent; the x axis names its unit; the title names what was
replayed (the trace, the model, the semantics, the warm-up, the block size); marker labels are
spread so they never overlap (:func:`spread_labels`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from stackdist.errors import UsageError
from stackdist.output import write_atomic

__all__ = ["plot_curves", "plot_engine_models", "plot_hit_curve", "plot_offload", "plot_plan", "plot_tiers", "pyplot", "save_png", "spread_labels", "step_xy"]

STYLES = {"engine": "-", "per-access": "--"}
"""Line style per semantics; colours come from the configuration (one per series family)."""


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


def spread_labels(positions: Sequence[float], min_gap: float) -> list[float]:
    """Label positions as close as possible to ``positions`` but at least ``min_gap`` apart
    (order kept). O(n log n).

    >>> [round(v, 2) for v in spread_labels([0.5, 0.51, 0.52, 0.9], 0.05)]
    [0.46, 0.51, 0.56, 0.9]
    """
    order = sorted(range(len(positions)), key=lambda i: positions[i])
    placed = [float(positions[i]) for i in order]
    for _ in range(len(placed)):  # push apart, then re-centre each crowded cluster
        moved = False
        for j in range(1, len(placed)):
            if placed[j] - placed[j - 1] < min_gap - 1e-12:
                mid = (placed[j] + placed[j - 1]) / 2
                placed[j - 1], placed[j] = mid - min_gap / 2, mid + min_gap / 2
                moved = True
        if not moved:
            break
    for j in range(1, len(placed)):
        placed[j] = max(placed[j], placed[j - 1] + min_gap)
    out = [0.0] * len(placed)
    for rank, i in enumerate(order):
        out[i] = placed[rank]
    return out


def step_xy(capacities: np.ndarray, values: np.ndarray, right: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """An exact step function (value ``values[i]`` from ``capacities[i]`` on) extended to ``right``.

    >>> step_xy(np.array([0, 2]), np.array([0, 5]), 3)[0].tolist()
    [0.0, 2.0, 3.0]
    """
    x = np.asarray(capacities, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    end = float(right) if right is not None else (float(x[-1]) * 1.05 if x.size and x[-1] > 0 else 1.0)
    return np.r_[x, max(end, float(x[-1]) if x.size else end)], np.r_[y, y[-1] if y.size else 0.0]


def thin_steps(capacities: np.ndarray, max_bins: int = 4000) -> np.ndarray:
    """Indices of the breakpoints to draw a non-decreasing step curve with: all of them up to
    ``2 * max_bins``, else the first and last in each of ``max_bins`` log-spaced bins (the drawn
    steps then differ from the exact ones only inside a bin, far below a pixel). O(n).

    >>> thin_steps(np.arange(5)).tolist(), len(thin_steps(np.arange(100_000), 10)) <= 21
    ([0, 1, 2, 3, 4], True)
    """
    x = np.asarray(capacities, dtype=np.float64)
    if x.size <= 2 * max_bins:
        return np.arange(x.size)
    edges = np.geomspace(max(float(x[x > 0].min()), 1e-12), float(x[-1]) * (1 + 1e-12), max_bins)
    bins = np.searchsorted(edges, x, side="right")
    first = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    last = np.r_[first[1:] - 1, x.size - 1]
    return np.unique(np.r_[first, last])


def _percent_axis(ax: Any, top: float) -> None:
    from matplotlib.ticker import PercentFormatter

    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(0, min(1.02, max(top, 0.05) * 1.12 + 0.02))
    ax.grid(alpha=0.3)


LABEL_FONT = 7
"""Font size (points) of the marker labels."""


def _label_gap(ax: Any, ylim: float, fontsize: float = LABEL_FONT) -> float:
    """The vertical gap (data units of a 0..``ylim`` axis) between two label centres: 2.5 text
    heights in the axes' pixels, so neighbouring labels keep clear space between them."""
    height_px = max(float(ax.get_window_extent().height), 1.0)
    return 2.5 * fontsize / 72 * ax.figure.dpi / height_px * ylim


def _target_lines(ax: Any, levels: Sequence[tuple[str, float]], top: float) -> None:
    """Horizontal target lines with labels on the right edge, spread so they never overlap
    (at least 2.5 text heights apart)."""
    if not levels:
        return
    ylim = min(1.02, max(top, 0.05) * 1.12 + 0.02)
    ys = spread_labels([y for _, y in levels], max(0.045 * ylim, _label_gap(ax, ylim)))
    for (label, level), y in zip(levels, ys):
        ax.axhline(level, color="grey", lw=0.8, ls=":")
        ax.annotate(label, xy=(1.0, level), xycoords=("axes fraction", "data"), xytext=(1.01, y),
                    textcoords=("axes fraction", "data"), fontsize=LABEL_FONT, color="dimgrey", va="center",
                    arrowprops={"arrowstyle": "-", "color": "lightgrey", "lw": 0.6}, gid="target-label")


def plot_curves(path: str | os.PathLike[str], series: Sequence[tuple[str, np.ndarray, np.ndarray]], **options: Any) -> None:
    """Step curves ``(label, x, y)`` (y a fraction, drawn in percent) on one axis, with labelled
    horizontal and vertical marker lines (labels spread apart; a vertical line ``(label, x,
    colour)``: black solid for a budget, red dashed by default), saved atomically as a PNG;
    ``options`` are :func:`curves_figure`'s."""
    fig = curves_figure(series, **options)
    save_png(fig, path)
    pyplot().close(fig)


def curves_figure(
    series: Sequence[tuple[str, np.ndarray, np.ndarray]],
    *,
    xlabel: str,
    ylabel: str = "hit rate",
    title: str = "",
    hlines: Sequence[tuple[str, float]] = (),
    vlines: Sequence[tuple[str, float] | tuple[str, float, str]] = (),
    xscale: str = "linear",
    styles: Sequence[dict[str, Any]] | None = None,
    legend_loc: str = "lower right",
) -> Any:
    """The figure of :func:`plot_curves`, not saved (tests read its artists). O(points)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    for i, (label, xs, ys) in enumerate(series):
        kw = dict(styles[i]) if styles else {}
        if kw.pop("sampled", False):  # exact at these capacities only: points, never joined into a curve
            kw = {"marker": "o", "ms": 3.5, **kw, "ls": "none"}
            kw.pop("lw", None)
            ax.plot(xs, ys, label=label, **kw)
            continue
        kw.setdefault("where", "post")
        ax.step(xs, ys, label=label, **kw)
    top = max([float(np.max(y)) for _, _, y in series if np.size(y)] + [y for _, y in hlines] + [0.0])
    _percent_axis(ax, top)
    _target_lines(ax, hlines, top)
    marks = sorted(((v[0], float(v[1]), v[2] if len(v) > 2 else "tab:red") for v in vlines), key=lambda v: v[1])
    for k, (label, at, colour) in enumerate(marks):
        # the lines are numbered where they meet the top edge; the labels go in one box (never overlapping)
        budget = colour == "black"
        ax.axvline(at, color=colour, lw=1.1 if budget else 0.8, ls="-" if budget else "--", zorder=1,
                   gid="budget-line" if budget else "marker-line")
        ax.annotate(f"{k + 1}", (at, 1.0 + 0.04 * (k % 2)), xycoords=("data", "axes fraction"), fontsize=LABEL_FONT,
                    color=colour, ha="center", va="bottom")  # neighbours staggered, never overlapping
    if marks:
        box = "\n".join(f"{k + 1}: {label}" for k, (label, _, _) in enumerate(marks))
        ax.text(0.01, 0.98, box, transform=ax.transAxes, fontsize=LABEL_FONT, color="black" if any(
            m[2] == "black" for m in marks) else "tab:red", va="top", ha="left",
            bbox={"boxstyle": "round", "fc": "white", "ec": "lightgrey", "alpha": 0.9}, gid="marker-box")
    if xscale == "symlog":
        positive = [float(np.min(x[x > 0])) for _, x, _ in series if np.any(np.asarray(x) > 0)]
        positive += [m[1] for m in marks if m[1] > 0]
        # the linear part ends at a power of ten: 0 and the first decade are one decade's width apart
        ax.set_xscale("symlog", linthresh=10.0 ** np.floor(np.log10(min(positive))) if positive else 1.0, linscale=0.6)
        ax.set_xlim(left=0)
    else:
        ax.set_xscale(xscale)
        ax.set_xlim(left=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10, pad=22 if vlines else 6)
    if len(series) > 1:
        ax.legend(fontsize=8, loc=legend_loc, framealpha=0.9)
    drop_crowded_ticks(ax)
    return fig


def drop_crowded_ticks(ax: Any, pad_px: float = 4.0) -> None:
    """Keep only x tick labels at least ``pad_px`` apart (left to right, the first kept): a
    symlog axis puts 0 and the first decade close together. Fixes the kept ticks. O(ticks)."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    lo, hi = sorted(ax.get_xlim())
    kept, right = [], -np.inf
    for tick in ax.xaxis.get_major_ticks():
        loc = float(tick.get_loc())
        label = tick.label1
        if not (lo <= loc <= hi) or not label.get_visible() or not label.get_text():
            continue
        box = label.get_window_extent(renderer)
        if box.x0 >= right + pad_px:
            kept.append(loc)
            right = box.x1
    if kept:
        ax.set_xticks(kept)
        ax.set_xlim(lo, hi)


def _unit(fmt: str | None) -> str:
    from stackdist.traces.formats import unit_of

    return unit_of(fmt)


def _unit_text(fmt: str | None) -> str:
    """The capacity unit with the block size when the format fixes it (``blocks of 512 tokens``)."""
    unit, block = _unit(fmt), _block_tokens(fmt)
    return f"blocks of {block} tokens" if unit == "blocks" and block else unit


def _block_tokens(fmt: str | None) -> int | None:
    """Tokens per block of a request format with a fixed block size, else None."""
    from stackdist.traces.formats import FORMATS

    row = FORMATS.get(fmt) if fmt else None
    return None if row is None else row.block_size


def plot_hit_curve(path: str | os.PathLike[str], curve: Any, targets: Sequence[float], *, source: str,
                   window: str | None = None, warmup: str | None = None, fmt: str | None = None) -> None:
    """The exact LRU hit curve (from ``steps()``) with the hit-rate targets."""
    steps = curve.steps(below_largest=curve.summary()["distinct_sizes"] <= 64)
    x, y = step_xy(steps.capacities, steps.hits / max(curve.n_accesses, 1))
    counted = f"accesses {curve.window[0]:,}..{curve.window[1] - 1:,}" if curve.n_accesses else "no accesses"
    title = (f"exact LRU hit curve: {os.path.basename(source)}\n{counted} counted (--window {window or ':'}, "
             f"--warmup {warmup or 0}), ceiling {curve.ceiling_hit_rate:.1%}")
    hlines = [(f"target {t:.0%}", t) for t in targets]
    if curve.n_accesses:  # what no capacity exceeds
        hlines.append((f"ceiling {curve.ceiling_hit_rate:.1%} (infinite cache)", curve.ceiling_hit_rate))
    plot_curves(path, [("LRU hit rate (exact)", x, y)], xlabel=f"cache capacity ({_unit_text(fmt)})", hlines=hlines,
                title=title)


def plot_sampled_curve(path: str | os.PathLike[str], curves: Sequence[Any], targets: Sequence[float], *, source: str,
                       fmt: str | None = None) -> None:
    """A SHARDS-sampled LRU hit curve: the first seed's estimate as steps, the lowest and
    highest over the seeds as thin dashed steps (the error bar), with the hit-rate targets."""
    main = curves[0]
    x = main.default_capacities(400)
    rates = np.array([c.hit_rate_at(x) for c in curves])
    how = f"rate {main.rate:.3g}" + (f", at most {main.max_keys:,} keys" if main.max_keys else "")
    title = (f"SHARDS-sampled LRU hit curve: {os.path.basename(source)}\n{how}, {len(curves)} seed(s), "
             f"{main.n_accesses:,} accesses, ceiling about {main.ceiling_hit_rate:.1%}")
    series = [("LRU hit rate (estimate, first seed)", x, rates[0])]
    styles: list[dict[str, Any]] = [{"color": "C0"}]
    if len(curves) > 1:
        series += [(f"lowest and highest of the {len(curves)} seeds", x, rates.min(0)), ("_highest", x, rates.max(0))]
        styles += [{"color": "C0", "ls": "--", "lw": 0.8, "alpha": 0.6}] * 2
    plot_curves(path, series, xlabel=f"cache capacity ({_unit_text(fmt)})", hlines=[(f"target {t:.0%}", t) for t in targets],
                title=title, styles=styles)


def plot_tiers(path: str | os.PathLike[str], result: dict[str, Any], *, source: str, fmt: str | None = None,
               note: str = "", bytes_per_unit: float | None = None, model: str | None = None) -> None:
    """Total (GPU + CPU) hit rate over the CPU capacity: one colour per GPU capacity, circles for
    inclusive, crosses for exclusive tiers. Only the reported grid is exact, so it is drawn as
    points (never joined into steps the curve may not have). ``note``: a second title line. The
    rate counts accesses (blocks of a request trace): the y axis says so. With
    ``bytes_per_unit`` (a ``model``'s KV bytes per block) the x axis is in GiB."""
    save_png(tiers_figure(result, source=source, fmt=fmt, note=note, bytes_per_unit=bytes_per_unit, model=model), path)
    pyplot().close("all")


def tiers_figure(result: dict[str, Any], *, source: str, fmt: str | None = None, note: str = "",
                 bytes_per_unit: float | None = None, model: str | None = None) -> Any:
    """The figure of :func:`plot_tiers`, not saved. O(grid)."""
    n = max(int(result["summary"]["accesses"]), 1)
    unit, block = _unit_text(fmt), _block_tokens(fmt)
    scale = 1.0 if not bytes_per_unit else float(bytes_per_unit) / 2**30
    series, styles = [], []
    for kind in ("inclusive", "exclusive"):
        grid = result.get(kind)
        if grid is None:
            continue
        for i, g in enumerate(np.asarray(grid["gpu_capacity"]).tolist()):
            y = (np.asarray(grid["gpu_hits"])[i] + np.asarray(grid["cpu_hits"])[i]) / n
            gpu = f"GPU {g:,} {unit}" + (f" = {_gib_text(g * scale)}" if bytes_per_unit else "")
            series.append((f"{kind}, {gpu}", np.asarray(grid["cpu_capacity"]) * scale, y))
            styles.append({"sampled": True, "color": f"C{i % 10}", "marker": "o" if kind == "inclusive" else "x"})
    what = "block" if unit.startswith("blocks") else "access"
    gpus = sorted({int(g) for kind in ("inclusive", "exclusive") if result.get(kind) is not None
                   for g in np.asarray(result[kind]["gpu_capacity"]).tolist()})
    title = (f"two-tier {what} hit rate (GPU + CPU; every {what} read counts once): {os.path.basename(source)}"
             + (f"\nmodel {model}" if model else "")
             + f"\nGPU tier {', '.join(f'{g:,}' for g in gpus)} {unit}"
             + (f" ({', '.join(_gib_text(g * scale) for g in gpus)})" if bytes_per_unit else "")
             + f"; at the {len(series[0][1]) if series else 0} CPU capacities reported")
    title += f"\n{note}" if note else ""
    per = f"block of {block} tokens" if block else "unit"
    xlabel = (f"CPU tier capacity (GiB = 2^30 bytes of KV; {bytes_per_unit:,.0f} B per {per})" if bytes_per_unit
              else f"CPU tier capacity ({unit})")
    ylabel = "block hit rate (GPU + CPU)" if what == "block" else "access hit rate (GPU + CPU)"
    return curves_figure(series, xlabel=xlabel, ylabel=ylabel, title=title, styles=styles)


def _plan_series(name: str, sem: Any, curve: Any, bytes_per_block: float) -> list[tuple[str, np.ndarray, np.ndarray, bool]]:
    """One semantics' two metrics: exact steps from ``curve.breakpoints()``, or (no curve, e.g. a
    sampled plan) the report's sampled capacities, to be drawn as points."""
    metrics = (("prefix_token_hit_rate", "prefix_token_hit_rate_at"), ("block_hit_rate", "block_hit_rate_at"))
    if curve is None:
        c = sem["curve"]
        return [(f"{name}: {m.replace('_', ' ')} (sampled)", np.array(c["capacity_gib"]), np.array(c[m]), True)
                for m, _ in metrics]
    caps = curve.breakpoints()
    right = float(max(caps[-1], 1)) * 1.3 * bytes_per_block / 2**30
    keep = thin_steps(caps)
    out = []
    for metric, method in metrics:
        x, y = step_xy(caps[keep] * bytes_per_block / 2**30, np.asarray(getattr(curve, method)(caps[keep])), right)
        out.append((f"{name}: {metric.replace('_', ' ')}", x, y, False))
    return out


def plot_plan(path: str | os.PathLike[str], report: Any, targets: Sequence[float], curves: Any = None,
              kv_dtype: str | None = None) -> None:
    """The plan's hit curves against GiB with the ceiling, the targets and the working sets:
    one colour per metric, one line style per semantics (engine wide and solid under a thin
    dashed per-access line, so neither hides the other). With ``curves`` (semantics ->
    :class:`~stackdist.planning.prefix_curve.PrefixCurve`) the curves are drawn exactly, step by
    step; without (a sampled plan) the report's sampled capacities are drawn as points. Every
    budget of the report (``--gpu``'s HBM pool, each ``--capacity``) is a black vertical line
    labelled with its GiB and blocks; ``kv_dtype`` (e.g. ``bf16 (2 B)``) goes in the title."""
    save_png(plan_figure(report, targets, curves, kv_dtype), path)
    pyplot().close("all")


def plan_figure(report: Any, targets: Sequence[float], curves: Any = None, kv_dtype: str | None = None) -> Any:
    """The figure of :func:`plot_plan`, not saved (tests read its artists). O(steps)."""
    if not report["semantics"]:
        raise UsageError("--plot draws the hit curves: it needs --semantics engine or per-access (or both) too.")
    series, styles = [], []
    bytes_per_block = float(report["model"]["bytes_per_block"])
    exact = bool(curves)
    for name, sem in report["semantics"].items():
        engine = name == "engine"
        for (label, x, y, sampled), colour in zip(_plan_series(name, sem, (curves or {}).get(name), bytes_per_block),
                                                  ("C0", "C1")):
            series.append((label, x, y))
            styles.append({"sampled": sampled, "ls": STYLES.get(name, ":"), "color": colour,
                           "lw": 3.0 if engine else 1.2, "alpha": 0.45 if engine else 1.0, "zorder": 2 if engine else 3,
                           **({"marker": "o" if engine else "x"} if sampled else {})})
            exact = exact and not sampled
    first_name, first = next(iter(report["semantics"].items()))
    ceiling = first["summary"]["ceiling_token_hit_rate"]
    hlines = [(f"ceiling {ceiling:.1%} ({first_name})", ceiling)] + [(f"{t:.0%} of ceiling", t * ceiling) for t in targets]
    vlines: list[Any] = [(f"{first_name}: {w['target']:.0%} of the ceiling needs {w['fraction_of_ceiling']['gib']:,.2f} GiB",
                          w["fraction_of_ceiling"]["gib"]) for w in first["working_set"] if w["fraction_of_ceiling"]]
    t, m = report["trace"], report["model"]
    for row in (report.get("budgets") or {}).get("rows", []):
        if row.get("gib") is not None and row["gib"] > 0:
            label = (f"budget {row['budget']}: {_gib_text(row['gib'])} = {row['blocks']:,} blocks of "
                     f"{t['block_size_tokens']} tokens")
            vlines.append((label, row["gib"], "black"))
    counted = report.get("counted", {})
    warm = f"{counted.get('warmup_requests', 0):,} requests" + (
        f" / {counted['warmup_seconds']:g} s" if counted.get("warmup_seconds") else "")
    points = len(first["curve"]["capacity_gib"])
    drawn = "exact curves (every step)" if exact else f"points: exact at the {points} sampled capacities only"
    dtype = f", KV dtype {kv_dtype}" if kv_dtype else ""
    title = (f"KV-cache hit rate vs capacity: {os.path.basename(str(t['source']))}, model {m['name']}{dtype} "
             f"({m['kv_bytes_per_token']:,} B/token), {t['block_size_tokens']}-token blocks\n"
             f"semantics: {', '.join(report['semantics'])} "
             f"(solid engine, dashed per-access); warm-up {warm} excluded; {drawn}")
    return curves_figure(series, xlabel="KV-cache capacity (GiB = 2^30 bytes; symlog axis)",
                         ylabel="hit rate (counted requests)", hlines=hlines, vlines=vlines, title=title, xscale="symlog",
                         styles=styles, legend_loc="center left")


def plot_offload(path: str | os.PathLike[str], report: Any) -> None:
    """The offload tiers' hit rate against a tier's size in GiB, stacked by tier (the GPU, then
    each offload tier in lookup order): one panel per specification, GPU pool and sized tier
    (a second tier behind the first tier's size), every exact point the plan simulated (the
    ladder and the sizing search), with the ceiling and the sizes each target needs."""
    plt = pyplot()
    panels = [(section, s, tier) for section in report["offload"] for s in section["sizing"] for tier in s["tiers"]
              if "infeasible" not in tier]
    if not panels:
        raise UsageError("the offload plot needs a finite feasible GPU pool to size the tiers at.")
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.4 * len(panels)), squeeze=False)
    for ax, (section, s, tier) in zip(axes[:, 0], panels):
        name = tier["tier"]
        behind = "+".join(f"{t}{v}" for t, v in tier["behind"].items()) or None
        pts = sorted((p for p in section["sizing_points"] if p["gpu_blocks"] == s["gpu_blocks"] and p["tier"] == name
                      and p["behind"] == behind and p["prefix_token_hit_rate"] is not None), key=lambda p: p["gib"])
        x = np.array([p["gib"] for p in pts], float)
        total = np.array([p["prefix_token_hit_rate"] for p in pts], float)
        layers = [total - np.array([sum(p["tier_token_hit_rate"].values()) for p in pts], float)]
        labels = ["GPU prefix cache"]
        for t in next(iter(pts))["tier_token_hit_rate"] if pts else ():
            layers.append(np.array([p["tier_token_hit_rate"][t] for p in pts], float))
            labels.append(f"{t} tier")
        base = np.zeros_like(x)
        for k, (layer, label) in enumerate(zip(layers, labels)):
            ax.fill_between(x, base, base + layer, color=f"C{k}", alpha=0.5, label=label, lw=0)
            base = base + layer
        ax.plot(x, total, "o-", color="black", ms=2.5, lw=0.8, label="total (each point simulated)")
        ceiling = tier["ceiling_prefix_token_hit_rate"]
        top = max(float(total.max(initial=0.05)), ceiling)
        sizes: dict[float, list[str]] = {}  # targets that need the same size share one line and label
        for a in tier["answers"]:
            sizes.setdefault(a["gib"], []).append(f"{a['fraction_of_ceiling']:.0%}")
        for n, (gib, fractions) in enumerate(sizes.items()):
            ax.axvline(gib, color="grey", lw=0.7, ls="--")
            ax.annotate(f"{', '.join(fractions)}: " + (f"{gib:,.0f} GiB" if gib >= 100 else f"{gib:.3g} GiB"),
                        xy=(gib, 0.03 + 0.22 * n), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        color="dimgrey", va="bottom", ha="right")
        _percent_axis(ax, top)
        _target_lines(ax, [(f"ceiling {ceiling:.1%}", ceiling)], top)
        ax.set_xscale("symlog", linthresh=max(float(x[x > 0].min(initial=1.0)), 1e-3), linscale=0.25)
        ax.set_xlim(left=0, right=(float(x.max()) if x.size else 1.0) * 1.05)
        where = f" behind {', '.join(f'{t} {v}' for t, v in tier['behind'].items())} {section['unit']}" if behind else ""
        ax.set_xlabel(f"{name} tier size{where} (GiB = 2^30 bytes; symlog axis)")
        ax.set_ylabel("prefix token hit rate")
        ax.set_title(f"{section['spec']} behind {section['behind']} at GPU pool {s['gpu_blocks']} "
                     f"({'driven' if section['validation'].startswith('driven') else 'followed, not driven'})", fontsize=9)
        ax.legend(loc="upper left", fontsize=7)
    fig.suptitle(f"Offload tiers: {os.path.basename(str(report['trace']['source']))}, model {report['model']['name']}, "
                 "serial schedule", fontsize=10)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def plot_engine_models(path: str | os.PathLike[str], report: Any, kv_dtype: str | None = None) -> None:
    """The engine models' prefix token hit rate against their KV pool in GiB: one colour per
    model, named with the engine and version it follows. An exact curve (vLLM's one replay:
    every step between the plan's exact points) is drawn as steps, with the run's own pools on
    it as crosses; otherwise every simulated pool (the run's and the working-set search's
    probes) is a point, joined by a faint line only to guide the eye. Each model's ceiling (its
    infinite pool) is a dashed line; each working set and each GPU budget (the plan's
    ``budgets`` rows) a numbered vertical line, listed in the box; the pools too small for the trace
    are shaded. ``kv_dtype`` (e.g. ``fp8, 1 B/element``) goes in the title."""
    sections = report.get("engine_models") or {}
    if not sections:
        raise UsageError("the engine models' plot needs an engine model in the plan.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9.5, 5.4))
    levels: list[tuple[str, float]] = []
    marks: list[tuple[str, float, str]] = []  # (label, GiB, colour)
    top, xs_all, infeasible = 0.0, [], 0.0
    for k, (name, sec) in enumerate(sections.items()):
        colour = f"C{k}"
        who = f"{name} ({sec['engine']['name']} {sec['engine']['version']})" if sec.get("engine") else name
        ws = sec.get("working_set") or {}
        rows = [r for r in sec["pools"] if r["feasible"] and r["gib"] is not None]
        pts = ws.get("points") or [{"gib": r["gib"], "prefix_token_hit_rate": r["prefix_token_hit_rate"]} for r in rows]
        x = np.array([p["gib"] for p in pts], float)
        y = np.array([p["prefix_token_hit_rate"] for p in pts], float)
        if ws.get("exact"):  # the last step holds to the right edge (set below)
            x, y = np.r_[x, x[-1:] * 1e6], np.r_[y, y[-1:]]
            ax.step(x, y, where="post", color=colour, lw=1.8, label=f"{who}: exact hit curve (one replay, every pool)")
            if rows:
                ax.plot([r["gib"] for r in rows], [r["prefix_token_hit_rate"] for r in rows], "x", color=colour, ms=7,
                        mew=1.5, label=f"{who}: the pools simulated one by one")
        else:  # models drawn over each other stay apart: hollow circles, then crosses, triangles, squares
            marker = "ox^s"[k % 4]
            ax.plot(x, y, "-", color=colour, lw=0.6, alpha=0.35)
            ax.plot(x, y, marker, color=colour, ms=6 if k == 0 else 4.5, mfc="none" if marker in "o^s" else colour,
                    label=f"{who}: simulated pools ({x.size}, each an exact simulation)")
        xs_all += x[:-1].tolist() if ws.get("exact") else x.tolist()
        hybrid = sec.get("hybrid") or {}
        own = [(r["gib"], h["full_attention_prefix_token_hit_rate"]) for r in rows for h in hybrid.get("pools", [])
               if h["gpu_blocks"] == r["gpu_blocks"] and "full_attention_prefix_token_hit_rate" in h]
        if own:  # what the other groups cut: the full-attention group's own hit in the same runs
            ax.plot([g for g, _ in own], [v for _, v in own], "+", color=colour, ms=8, mew=1.2, alpha=0.8,
                    label=f"{who}: the full-attention group's own hit in the same runs (the window/state groups cut the rest)")
            top = max(top, *[v for _, v in own])
        own_inf = [h["full_attention_prefix_token_hit_rate"] for h in hybrid.get("pools", [])
                   if h["gpu_blocks"] == "inf" and "full_attention_prefix_token_hit_rate" in h]
        if own_inf:
            levels.append((f"{name}: full-attention group's own hit, infinite pool {own_inf[0]:.2%}", own_inf[0]))
            ax.axhline(own_inf[0], color=colour, lw=0.7, ls=":", alpha=0.6)
            top = max(top, own_inf[0])
        inf_rows = [r for r in sec["pools"] if r["gib"] is None and r["feasible"]]
        ceiling = ws.get("ceiling_prefix_token_hit_rate", inf_rows[0]["prefix_token_hit_rate"] if inf_rows else None)
        if ceiling is not None:
            levels.append((f"{name} ceiling {ceiling:.2%} (infinite pool)", ceiling))
            ax.axhline(ceiling, color=colour, lw=0.9, ls="--", alpha=0.7)
            top = max(top, ceiling)
        top = max([top, *y.tolist()])
        for row in ws.get("rows", []):
            if row.get("gpu_blocks") is None:  # a hybrid target its cache cannot reach
                continue
            marks.append(((f"{name}: {row['fraction_of_ceiling']:.0%} of its ceiling at pool {row['gpu_blocks']:,} "
                          f"({_gib_text(row['gib'])}{'' if ws.get('exact') else ', smallest probed'})"), row["gib"], colour))
        minimum = sec.get("min_feasible_pool")
        if minimum:
            infeasible = max(infeasible, float(minimum["gib"]))
            xs_all.append(float(minimum["gib"]))
        for budget in (report.get("budgets") or {}).get("rows", []):
            got = budget.get("engine_models", {}).get(name)
            if got:
                per_block = (sec.get("hybrid") or {}).get("bytes_per_block") or \
                    sec["engine_block_size_tokens"] * report["model"]["kv_bytes_per_token"]
                gib = got["pool"] * per_block / 2**30
                marks.append((f"GPU budget {budget['budget']}: {name} pool {got['pool']:,} ({_gib_text(gib)})"
                              + ("" if got["feasible"] else ", infeasible"), gib, "black"))
    positive = [v for v in xs_all + [m[1] for m in marks] if v > 0]
    low, high = (min(positive), max(positive)) if positive else (0.01, 1.0)
    ax.set_xscale("log")
    ax.set_xlim(low / 1.4, high * 1.4)
    if infeasible > 0:
        ax.axvspan(low / 1.4, infeasible, color="grey", alpha=0.15, lw=0,
                   label="pools too small for the trace (infeasible)")
    _percent_axis(ax, top)
    _target_lines(ax, levels, top)
    marks.sort(key=lambda m: m[1])
    for n, (_, gib, colour) in enumerate(marks):
        ax.axvline(gib, color=colour, lw=0.9, ls=":" if colour != "black" else "-", zorder=1)
        ax.annotate(f"{n + 1}", (gib, 1.0 + 0.04 * (n % 2)), xycoords=("data", "axes fraction"), fontsize=7,
                    color=colour, ha="center", va="bottom")
    if marks:
        ax.text(0.0, -0.14, "\n".join(f"{n + 1}: {label}" for n, (label, _, _) in enumerate(marks)), transform=ax.transAxes,
                fontsize=7, va="top", ha="left", bbox={"boxstyle": "round", "fc": "white", "ec": "lightgrey", "alpha": 0.9})
    first = next(iter(sections.values()))
    sched = first["schedule"]["kind"]
    page = first["engine_block_size_tokens"]
    t, m = report["trace"], report["model"]
    hybrid_first = first.get("hybrid")
    ax.set_xlabel(f"KV pool (GiB: the pool x {hybrid_first['bytes_per_block']:,} B per {page}-token block of one "
                  "KV cache group, all groups in one pool; log axis)" if hybrid_first else
                  f"KV pool (GiB = 2^30 bytes: the engine's pool x {page}-token pages x "
                  f"{m['kv_bytes_per_token']:,} B/token; log axis)")
    ax.set_ylabel("prefix token hit rate (counted requests)")
    follows = "; ".join(f"{name} follows {sec['follows']}" for name, sec in sections.items())
    dtype = f", KV dtype {kv_dtype}" if kv_dtype else ""
    ax.set_title(f"Engine models: prefix token hit rate vs KV pool: {os.path.basename(str(t['source']))}, model {m['name']}"
                 f"{dtype}\n"
                 f"{follows}\nschedule {sched}, decode {'on' if first['decode'] else 'off'}, {page}-token pages, "
                 f"{first['requests']:,} requests counted (warm-up excluded)", fontsize=8.5, pad=22 if marks else 6)
    ax.legend(fontsize=7.5, loc="lower right", framealpha=0.9)
    save_png(fig, path)
    plt.close(fig)


def _gib_text(gib: float) -> str:
    """GiB with three significant digits below 100 (``0.0391 GiB``), whole GiB above.

    >>> _gib_text(0.0390625), _gib_text(1187.76), _gib_text(0)
    ('0.0391 GiB', '1,188 GiB', '0 GiB')
    """
    return f"{gib:,.0f} GiB" if gib >= 100 else f"{gib:.3g} GiB"
