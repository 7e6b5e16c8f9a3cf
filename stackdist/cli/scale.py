"""Scale flags shared by ``curve``, ``tiers`` and ``plan``: SHARDS sampling, exact replay on Dask,
and streamed input (several files, a glob, ``-``, ``.gz``/``.zst``). No maths here: the engine's
:mod:`~stackdist.engine.scale.sampling` and :mod:`~stackdist.engine.scale.distributed` do the work.

A sampled answer is reported with its error bar: the same answer under ``--sample-seeds``
independent hash seeds (``--seed``, ``--seed + 1``, ...), as min, max and standard deviation; the
JSON says ``"sampled": true`` with the rate.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stackdist.errors import UsageError, require_data
from stackdist.output import write_json

from .args import (
    access_window,
    bounded_int,
    finite_float,
    fraction_list,
    warmup_accesses,
)
from .common import tool_header

__all__ = [
    "SCALE_COMMANDS",
    "add_scale_arguments",
    "is_sampled",
    "run_dask_tiers",
    "sample_file",
    "sampled_from_files",
    "scaled_runner",
    "seeds_of",
]

SCALE_COMMANDS = ("curve", "tiers", "plan")


def add_scale_arguments(p: argparse.ArgumentParser) -> None:
    """The sampling and distributed-replay flags on one subcommand. O(1).

    >>> p = argparse.ArgumentParser(); add_scale_arguments(p); p.parse_args(["--sample-rate", "0.1"]).sample_seeds
    3
    """
    g = p.add_argument_group("scale: sampling (approximate, with error bars) and distributed replay (exact)")
    g.add_argument("--sample-rate", type=finite_float("--sample-rate", 0, 1, lo_open=True), metavar="R",
                   help="SHARDS: keep the keys whose hash falls under R (0 < R <= 1), scale distances by 1/R")
    g.add_argument("--sample-size", type=bounded_int("--sample-size", 1), metavar="S",
                   help="SHARDS fixed size: keep at most S keys (lowering the threshold as needed); bounded memory")
    g.add_argument("--sample-seeds", type=bounded_int("--sample-seeds", 1, 64), default=3, metavar="K",
                   help="hash seeds for the error bars (default 3; the first seed gives the answer)")
    g.add_argument("--seed", type=bounded_int("--seed", 0), default=0, help="the first hash seed (default 0)")
    g.add_argument("--dask", metavar="local[:N]|tcp://HOST:PORT",
                   help="exact replay of time chunks on a Dask cluster (needs the 'dask' extra)")


def is_sampled(args: argparse.Namespace) -> bool:
    """True when ``--sample-rate`` or ``--sample-size`` is given. O(1).

    >>> is_sampled(argparse.Namespace(sample_rate=None, sample_size=5)), is_sampled(argparse.Namespace())
    (True, False)
    """
    return getattr(args, "sample_rate", None) is not None or getattr(args, "sample_size", None) is not None


def seeds_of(args: argparse.Namespace) -> list[int]:
    """The hash seeds of a sampled run: ``--seed`` and the next ``--sample-seeds - 1``. O(K).

    >>> seeds_of(argparse.Namespace(seed=4, sample_seeds=3))
    [4, 5, 6]
    """
    return [args.seed + i for i in range(args.sample_seeds)]


def scaled_runner(args: argparse.Namespace) -> Callable[[argparse.Namespace], int] | None:
    """The runner for ``args`` when a scale flag or a streamed input asks for one, else None. O(1).

    >>> scaled_runner(argparse.Namespace(command="curve", trace="t.csv", sample_rate=None, sample_size=None, dask=None))
    """
    if args.command not in ("curve", "tiers"):
        return None
    if not (is_sampled(args) or getattr(args, "dask", None)):
        return None  # exact in one process, a streamed input too (load_curve reads it)
    if args.command == "tiers":
        if getattr(args, "dask", None):
            if is_sampled(args):
                raise UsageError("tiers: --dask is exact; it takes no --sample-rate/--sample-size.")
            return run_dask_tiers
        return run_scaled_tiers
    return run_scaled_curve


def _iter_keys(trace: str, fmt: str | None) -> Any:
    from stackdist.traces.formats import REQUEST_FORMATS
    from stackdist.traces.stream_input import iter_access_chunks, iter_block_id_chunks

    if fmt in REQUEST_FORMATS:
        return ((ids, None) for ids in iter_block_id_chunks(trace, fmt))
    return iter_access_chunks(trace, fmt)


def _counted_range(args: argparse.Namespace, n: int) -> tuple[int, int]:
    from stackdist.engine import parse_window

    start, stop = parse_window(access_window(args.window, "--window"), n)
    start = min(stop, start + warmup_accesses(getattr(args, "warmup", None), stop - start, "--warmup"))
    return start, stop


def _needs_length(args: argparse.Namespace) -> bool:
    window = access_window(args.window, "--window")
    warm = (getattr(args, "warmup", None) or "").strip()
    return bool(window and any(v is not None and v < 0 for v in window)) or warm.endswith("%")


def require_sample(kept: Sequence[int], total: int, args: argparse.Namespace, unit: str = "accesses",
                   seeds: Sequence[int] | None = None) -> None:
    """Exit 1 (no answer) when a seed's sample kept nothing (``kept[i]`` of ``total`` for the
    i-th of ``seeds``, default all of the run's): an empty sample says nothing about the trace
    (its estimate would be a hit rate of 0 at every size). O(seeds)."""
    for seed, count in zip(seeds_of(args) if seeds is None else seeds, kept):
        flag = f"--sample-rate {args.sample_rate:g}" if args.sample_size is None else f"--sample-size {args.sample_size}"
        require_data(count, args.trace, f"{flag} (seed {seed}) kept none of the {total:,} {unit}: raise the rate or "
                     "the size, or drop sampling for the exact answer")


def _sampled_curves(args: argparse.Namespace) -> list[Any]:
    """One SHARDS curve per seed, the trace read once in chunks (bounded memory unless the
    window or warm-up counts from the end). Plain integer files at a fixed rate take the
    numba-free native path (:mod:`.native_sample`): the same curves."""
    from .native_sample import native_curves

    curves = native_curves(args, seeds_of(args))
    if curves is not None:
        return curves
    from stackdist.engine.scale.sampling import ShardsSampler, feed_all
    from stackdist.traces.stream_input import joined_sizes, read_keys

    samplers = [ShardsSampler(args.sample_rate, args.sample_size, s) for s in seeds_of(args)]
    if args.dask:
        return _sampled_on_workers(args, samplers)
    if _needs_length(args):
        keys, sizes = read_keys(args.trace, args.format)
        chunks: Any = [(keys, sizes)]
        start, stop = _counted_range(args, keys.shape[0])
    else:
        chunks = _iter_keys(args.trace, args.format)
        start, stop = _counted_range(args, 2**62)
    pos, first = 0, None
    for keys, sizes in chunks:
        n = keys.shape[0]
        first = (keys, sizes) if first is None and n else first
        if n and first is not None:
            joined_sizes([first, (keys, sizes)], args.trace)  # a size column in some inputs only is an error
        counted = slice(min(max(start - pos, 0), n), min(max(stop - pos, 0), n))
        feed_all(samplers, keys, sizes, counted)
        pos += n
    require_data(pos, args.trace, "the trace has no accesses")
    require_data(samplers[0].n_accesses, args.trace, "no accesses are counted (--window, --warmup)")
    require_sample([s.n_sampled_accesses for s in samplers], samplers[0].n_accesses, args)
    return [s.curve() for s in samplers]


def sample_file(path: str, fmt: str | None, rate: float, seeds: list[int]) -> tuple[list[Any], int, int]:
    """A worker's job for one input file: read it, keep each seed's sampled accesses. Returns
    ([(keys, sizes) per seed], accesses, total size)."""
    from stackdist.engine.scale.sampling import sample_mask
    from stackdist.traces.stream_input import read_keys

    keys, sizes = read_keys(path, fmt)
    out = []
    for seed in seeds:
        mask = sample_mask(keys, rate, seed)
        out.append((keys[mask], None if sizes is None else sizes[mask]))
    return out, int(keys.shape[0]), int(keys.shape[0] if sizes is None else sizes.sum())


def sampled_from_files(files: list[str], fmt: str | None, samplers: list[Any], mapper: Any) -> list[Any]:
    """Fixed-rate samples of several files: the workers read and filter (``mapper``), the
    samplers here replay the sampled accesses in file order. Equal to one process's samples."""
    seeds = [s.seed for s in samplers]
    results = mapper(functools.partial(sample_file, fmt=fmt, rate=samplers[0].rate, seeds=seeds), files)
    for per_seed, n, total in results:
        for sampler, (keys, sizes) in zip(samplers, per_seed):
            sampler.feed(keys, sizes, distances=False)
            kept = int(keys.shape[0])
            sampler.add_unsampled(n - kept, total - (kept if sizes is None else int(sizes.sum())))
    return [s.curve() for s in samplers]


def _sampled_on_workers(args: argparse.Namespace, samplers: list[Any]) -> list[Any]:
    from stackdist.engine.scale.distributed import close, connect, dask_map
    from stackdist.traces.stream_input import expand_inputs

    if args.sample_size is not None or args.window or getattr(args, "warmup", None):
        raise UsageError("--dask with sampling takes --sample-rate only (no --sample-size, --window or --warmup).")
    client = connect(args.dask)
    try:
        curves = sampled_from_files(expand_inputs(args.trace), args.format, samplers, dask_map(client))
    finally:
        close(client)
    require_data(curves[0].n_accesses, args.trace, "the trace has no accesses")
    require_sample([c.n_sampled_accesses for c in curves], curves[0].n_accesses, args)
    return curves


def run_dask_tiers(args: argparse.Namespace) -> int:
    """``tiers --dask``: the exact curve and every GPU-miss stream replayed in time chunks on the
    cluster (:func:`~stackdist.engine.scale.distributed.distributed_inclusive_tiers`); the same
    grid, hit for hit, as one process."""
    from stackdist.engine.scale.distributed import (
        close,
        connect,
        dask_map,
        distributed_inclusive_tiers,
    )

    from .tiers import run_tiers

    def replay(args: argparse.Namespace, gpus: list[int]) -> tuple[Any, Any, dict[str, Any]]:
        client = connect(args.dask)
        try:
            curve, info = _dask_curve(args, client)
            tiers = distributed_inclusive_tiers(curve, gpus, dask_map(client), max(2, int(info["workers"])))
        finally:
            close(client)
        return curve, tiers, {"dask": info}

    return run_tiers(args, replay)


def _dask_curve(args: argparse.Namespace, client: Any = None) -> tuple[Any, dict[str, Any]]:
    """The exact curve from time chunks replayed on the cluster of ``--dask`` (or ``client``)."""
    from stackdist.engine import HitCurve, dense_keys
    from stackdist.engine.scale.distributed import (
        close,
        connect,
        dask_map,
        merge_chunks,
        split_even,
    )
    from stackdist.traces.stream_input import expand_inputs, joined_sizes, read_keys

    own = client is None
    client = connect(args.dask) if own else client
    try:
        workers = max(1, len(client.nthreads()))
        files = expand_inputs(args.trace)
        if len(files) > 1 and not _needs_positions(args):  # unit-size files: histograms only, O(distinct) here
            parts = dask_map(client)(functools.partial(_read_and_histogram, fmt=args.format), files)
            if all(part[0] is not None for part in parts):
                return _histogram_curve(args, parts, workers)
        if len(files) > 1:  # one chunk per file: the workers parse them too
            results = dask_map(client)(functools.partial(_read_and_summarize, fmt=args.format), files)
            summaries = [r[0] for r in results]
            keys = np.concatenate([r[1] for r in results])
            sizes = joined_sizes([(r[1], r[2]) for r in results], args.trace)
        else:
            from stackdist.engine.scale.distributed import chunk_summary

            keys, sizes = read_keys(args.trace, args.format)
            parts = [(keys[a:b], None if sizes is None else sizes[a:b]) for a, b in split_even(keys.shape[0], workers)]
            summaries = dask_map(client)(chunk_summary, parts)
        distances = merge_chunks(summaries)
    finally:
        if own:
            close(client)
    require_data(int(keys.shape[0]), args.trace, "the trace has no accesses")
    start, stop = _counted_range(args, keys.shape[0])
    merged = int(sum(s.keys.shape[0] for s in summaries))
    info = {"scheduler": args.dask, "workers": workers, "chunks": len(summaries), "merge_accesses": merged,
            "merge_share": merged / max(int(keys.shape[0]), 1)}
    return HitCurve(dense_keys(keys), sizes, distances, (start, stop)), info


def _needs_positions(args: argparse.Namespace) -> bool:
    """A window or warm-up counts accesses by position: the merge then needs every distance."""
    return bool(args.window or getattr(args, "warmup", None))


def _read_and_histogram(path: str, fmt: str | None) -> tuple[Any, int]:
    """A worker's job for one unit-size input file: read it, replay it alone, return its
    summary and distance histogram (:func:`~stackdist.engine.scale.distributed.chunk_histogram`),
    O(its distinct keys), and its length; ``(None, length)`` for a file with sizes."""
    from stackdist.engine.scale.distributed import chunk_histogram
    from stackdist.traces.stream_input import read_keys

    keys, sizes = read_keys(path, fmt)
    if sizes is not None:
        return None, int(keys.shape[0])
    return chunk_histogram(keys), int(keys.shape[0])


def _histogram_curve(args: argparse.Namespace, parts: list[Any], workers: int) -> tuple[Any, dict[str, Any]]:
    """The exact curve of unit-size files from the workers' histograms, merged here. O(merged accesses)."""
    from stackdist.engine import HitCurve
    from stackdist.engine.histogram import Histogram
    from stackdist.engine.scale.distributed import merge_histograms

    n = sum(length for _, length in parts)
    require_data(n, args.trace, "the trace has no accesses")
    values, counts, _cold = merge_histograms([part for part, _ in parts])
    cum = np.cumsum(counts)
    merged = int(sum(part[0].keys.shape[0] for part, _ in parts))
    info = {"scheduler": args.dask, "workers": workers, "chunks": len(parts), "merge_accesses": merged,
            "merge_share": merged / n, "merged": "histograms"}
    return HitCurve.from_histogram(Histogram(values, cum, cum.copy()), n), info


def _read_and_summarize(path: str, fmt: str | None) -> tuple[Any, np.ndarray, np.ndarray | None]:
    """A worker's job for one input file: read it, replay it alone."""
    from stackdist.engine.scale.distributed import chunk_summary
    from stackdist.traces.stream_input import read_keys

    keys, sizes = read_keys(path, fmt)
    return chunk_summary((keys, sizes)), keys, sizes


def _capacities(curve: Any, args: argparse.Namespace) -> np.ndarray:
    from .args import int_list

    if getattr(args, "capacities", None):
        return np.array(int_list(args.capacities, "--capacities"), np.int64)
    return curve.default_capacities(args.points)


def _sampled_report(args: argparse.Namespace, curves: list[Any], targets: list[float]) -> dict[str, Any]:
    from stackdist.engine.scale.estimate import spread

    main = curves[0]
    caps = _capacities(main, args)
    sample = main.sample(caps)
    rates = np.array([c.hit_rate_at(caps) for c in curves])
    sample.update({"hit_rate_min": rates.min(0).tolist(), "hit_rate_max": rates.max(0).tolist(),
                   "hit_rate_std": rates.std(0).tolist()})

    def answers(fn: Callable[[Any, float], Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        got = {f"{t:g}": [fn(c, t) for c in curves] for t in targets}
        return {k: v[0] for k, v in got.items()}, {k: spread(v) for k, v in got.items()}

    by_rate, by_rate_spread = answers(lambda c, t: c.min_capacity_for(hit_rate=t))
    by_ceiling, by_ceiling_spread = answers(lambda c, t: c.min_capacity_for(hits=t * c.ceiling_hits))
    return {**tool_header("curve"), "trace": args.trace, "sampled": True, "sample_rate": main.rate,
            "sample_size": args.sample_size, "seeds": seeds_of(args), "summary": main.summary(),
            "min_capacity_for_hit_rate": by_rate, "min_capacity_for_hit_rate_spread": by_rate_spread,
            "min_capacity_for_fraction_of_ceiling": by_ceiling,
            "min_capacity_for_fraction_of_ceiling_spread": by_ceiling_spread,
            "ceiling_hit_rate_spread": spread([c.ceiling_hit_rate for c in curves]), "curve": sample}


def _exact_report(args: argparse.Namespace, curve: Any, targets: list[float], info: dict[str, Any] | None) -> dict[str, Any]:
    from .curve import curve_report

    report = curve_report(args, curve, targets, curve.sample(_capacities(curve, args)))
    if info is not None:
        report["dask"] = info
    return report


def run_scaled_curve(args: argparse.Namespace) -> int:
    """``curve`` with a scale flag: sampled (with error bars) or exact on Dask."""
    targets = fraction_list(args.targets, "--targets")
    if getattr(args, "csv", False):
        raise UsageError("--csv is not available with --sample-* or --dask; use the JSON output.")
    if is_sampled(args):
        curves = _sampled_curves(args)
        report = _sampled_report(args, curves, targets)
        if args.plot:
            from stackdist.render.plot import plot_sampled_curve

            plot_sampled_curve(args.plot, curves, targets, source=args.trace, fmt=args.format)
    else:
        curve, info = _dask_curve(args)
        report = _exact_report(args, curve, targets, info)
        if args.plot:
            from stackdist.render.plot import plot_hit_curve

            plot_hit_curve(args.plot, curve, targets, source=args.trace, window=args.window, warmup=args.warmup,
                           fmt=args.format)
    write_json(args.output, report)
    return 0


def run_scaled_tiers(args: argparse.Namespace) -> int:
    """``tiers`` with ``--sample-*``: each seed's sampled sub-trace replayed exactly at the
    capacities times R, hits divided by R (SHARDS_adj: the missing weight counts as GPU hits);
    the first seed is the answer, the spread beside it."""
    from stackdist.engine import HitCurve
    from stackdist.engine.scale.sampling import sample_keys
    from stackdist.engine.tiers import exclusive_grid, inclusive_grid, inclusive_tiers
    from stackdist.traces.stream_input import read_keys

    from .args import int_list

    gpus = [v for text in args.gpu for v in int_list(text, "--gpu")]
    keys, sizes = read_keys(args.trace, args.format)
    require_data(int(keys.shape[0]), args.trace, "the trace has no accesses")
    start, stop = _counted_range(args, keys.shape[0])
    grids: list[dict[str, Any]] = []
    cpu_caps: np.ndarray | None = None if args.cpu is None else np.array(int_list(args.cpu, "--cpu"), np.int64)
    rate = 1.0
    seeds = seeds_of(args)
    for seed in seeds:
        mask, rate = sample_keys(keys, args.sample_rate, args.sample_size, seed)
        require_sample([int(mask[start:stop].sum())], stop - start, args, seeds=[seed])
        counted = np.zeros(keys.shape[0], bool)
        counted[start:stop] = True
        sub_counted = np.flatnonzero(counted[mask])
        window = (int(sub_counted[0]), int(sub_counted[-1]) + 1) if sub_counted.size else (0, 0)
        sub = HitCurve.from_trace(keys[mask], None if sizes is None else sizes[mask], window)
        if cpu_caps is None:
            cpu_caps = (sub.default_capacities(args.cpu_points) / rate).round().astype(np.int64)
        scaled_gpus = [round(g * rate) for g in gpus]
        scaled_cpu = np.round(cpu_caps * rate).astype(np.int64)
        grid = {"inclusive": inclusive_grid(inclusive_tiers(gpu_capacities=scaled_gpus, curve=sub), scaled_cpu)}
        if args.exclusive:
            grid["exclusive"] = exclusive_grid(sub, scaled_gpus, scaled_cpu)
        delta = (stop - start) - sub_counted.size / rate  # SHARDS_adj: the missing weight hits the top bucket
        top = (np.array(scaled_gpus) >= 1)[:, None]
        grids.append({kind: {"gpu_hits": np.clip(g["gpu_hits"] / rate + np.where(top, delta, 0.0), 0, stop - start),
                             "cpu_hits": g["cpu_hits"] / rate} for kind, g in grid.items()})
    assert cpu_caps is not None
    n = stop - start
    result: dict[str, Any] = {**tool_header("tiers"), "trace": args.trace, "sampled": is_sampled(args), "sample_rate": rate,
                              "sample_size": args.sample_size, "seeds": seeds, "accesses": n}
    for kind in grids[0]:
        gpu = np.array([g[kind]["gpu_hits"] for g in grids])
        cpu = np.array([g[kind]["cpu_hits"] for g in grids])
        result[kind] = {"gpu_capacity": gpus, "cpu_capacity": cpu_caps.tolist(), "gpu_hits": gpu[0].tolist(),
                        "cpu_hits": cpu[0].tolist(), "misses": (n - gpu[0] - cpu[0]).tolist(),
                        "hit_rate_min": ((gpu + cpu).min(0) / max(n, 1)).tolist(),
                        "hit_rate_max": ((gpu + cpu).max(0) / max(n, 1)).tolist()}
    if args.plot:  # the first seed's estimate at the reported grid
        from stackdist.render.plot import plot_tiers

        plot_tiers(args.plot, {**result, "summary": {"accesses": n}}, source=args.trace, fmt=args.format,
                   note=f"SHARDS-sampled at rate {rate:.3g}: estimates")
    write_json(args.output, result)
    return 0
