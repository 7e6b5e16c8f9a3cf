"""Build the lab's result folder from the simulators and the measured TTFT file.

``python -m kvlab run-lab --out DIR`` writes these files into DIR, every number computed by
the code (never typed in):

- ``cyclic.json``: the default scenario with passes fwd,fwd (:func:`kvlab.scenario.run_scenario`).
- ``baseline.json``: passes fwd,fwd,rev.
- ``cliff.json``: second-pass hits (gpu + cpu) of fwd,fwd at each of :data:`CLIFF_GPU_CAPACITIES`.
- ``offload.json``: GPU 21520 + CPU 56000, passes fwd,fwd,rev.
- ``cpu_cliff.json``: second-pass misses of fwd,fwd with GPU 21520 at each of :data:`CPU_CLIFF_CAPACITIES`.
- ``measured.json``: :func:`kvlab.summarize.summarize` of the measured file.
- ``ttft.jsonl``: a byte copy of the measured file used, so the folder is self-contained.

Each file is written with the project's one atomic writer, ``stackdist.output.write_atomic``.

Capacity keys in the cliff files are strings (JSON object keys).

The cliff files come from the stack-distance engine: ``cliff.json`` from one replay's hit curve
(second-pass window, all six GPU capacities at once) and ``cpu_cliff.json`` from one two-tier
curve at GPU 21520 (second-pass window, all seven CPU capacities at once). Each is verified
against direct ``scenario`` simulation at every capacity, and so are the per-pass counts of
``cyclic.json``, ``baseline.json`` and ``offload.json``; any mismatch raises
:class:`LabMismatchError` (never a silent fallback).
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .scenario import (
    DEFAULT_DOCS,
    DEFAULT_GPU,
    DEFAULT_TOKENS,
    PassResult,
    run_scenario,
    scenario_trace,
)
from .summarize import Summary, SummaryError, summarize

if TYPE_CHECKING:
    from stackdist.engine import HitCurve

__all__ = [
    "CLIFF_GPU_CAPACITIES",
    "CPU_CLIFF_CAPACITIES",
    "DEFAULT_MEASURED",
    "LAB_DESCRIPTIONS",
    "LAB_FILES",
    "MANIFEST",
    "LabMismatchError",
    "build_lab",
    "cliff_direct",
    "cliff_from_curve",
    "cpu_cliff_direct",
    "cpu_cliff_from_curve",
    "manifest",
    "run_lab",
    "run_lab_command",
    "scenario_from_curves",
    "write_lab",
]

#: GPU capacities (tokens) of cliff.json; 50110 = 10 documents of 5011 tokens.
CLIFF_GPU_CAPACITIES: tuple[int, ...] = (21520, 30000, 40000, 45000, 50109, 50110)
#: CPU capacities (tokens) of cpu_cliff.json, with the GPU at 21520.
CPU_CLIFF_CAPACITIES: tuple[int, ...] = (0, 20000, 30000, 40000, 50109, 50110, 56000)
#: CPU capacity of offload.json.
OFFLOAD_CPU = 56000
CYCLIC_PASSES: tuple[str, ...] = ("fwd", "fwd")
BASELINE_PASSES: tuple[str, ...] = ("fwd", "fwd", "rev")
#: The bundled H200 measurements (package data: ``kvlab/data`` links to the checkout's ``data/``).
DATA = Path(__file__).resolve().parent / "data"
DEFAULT_MEASURED = DATA / "ttft.jsonl"
#: The files run-lab writes, in this order.
LAB_FILES: tuple[str, ...] = (
    "cyclic.json", "baseline.json", "cliff.json", "offload.json", "cpu_cliff.json", "measured.json", "ttft.jsonl",
)


def _second_pass(gpu: int, cpu: int, docs: int, tokens: int) -> PassResult:
    """Return the second pass of a fwd,fwd scenario."""
    return run_scenario(gpu=gpu, cpu=cpu, docs=docs, tokens=tokens, passes=CYCLIC_PASSES)["passes"][1]


def cliff_direct(
    capacities: Sequence[int] = CLIFF_GPU_CAPACITIES, docs: int = DEFAULT_DOCS, tokens: int = DEFAULT_TOKENS
) -> dict[str, int]:
    """Second-pass hits (gpu + cpu) of fwd,fwd per GPU capacity (no CPU tier), by direct simulation.

    Complexity: O(len(capacities) * docs).

    >>> cliff_direct([2, 3], docs=3, tokens=1)
    {'2': 0, '3': 3}
    """
    result = {}
    for capacity in capacities:
        second = _second_pass(capacity, 0, docs, tokens)
        result[str(capacity)] = second["gpu_hits"] + second["cpu_hits"]
    return result


def cpu_cliff_direct(
    capacities: Sequence[int] = CPU_CLIFF_CAPACITIES,
    gpu: int = DEFAULT_GPU,
    docs: int = DEFAULT_DOCS,
    tokens: int = DEFAULT_TOKENS,
) -> dict[str, int]:
    """Second-pass misses of fwd,fwd per CPU capacity with a fixed GPU tier, by direct simulation.

    Complexity: O(len(capacities) * docs).

    >>> cpu_cliff_direct([0, 3], gpu=1, docs=3, tokens=1)
    {'0': 3, '3': 0}
    """
    return {str(capacity): _second_pass(gpu, capacity, docs, tokens)["misses"] for capacity in capacities}


class LabMismatchError(AssertionError):
    """The engine's curve and direct simulation disagree: a bug, never papered over."""


def _second_pass_curve(docs: int, tokens: int) -> HitCurve:
    """The fwd,fwd trace as a stack-distance hit curve over the second pass."""
    from stackdist import hit_curve

    keys = scenario_trace(docs, CYCLIC_PASSES)
    return hit_curve(keys, [tokens] * len(keys), window=(docs, 2 * docs))


def cliff_from_curve(
    capacities: Sequence[int] = CLIFF_GPU_CAPACITIES, docs: int = DEFAULT_DOCS, tokens: int = DEFAULT_TOKENS
) -> dict[str, int]:
    """Second-pass hits of fwd,fwd at every GPU capacity, read off one replay's curve.

    >>> cliff_from_curve([2, 3], docs=3, tokens=1)
    {'2': 0, '3': 3}
    """
    hits = _second_pass_curve(docs, tokens).hits_at(list(capacities))
    return {str(c): int(h) for c, h in zip(capacities, hits)}


def cpu_cliff_from_curve(
    capacities: Sequence[int] = CPU_CLIFF_CAPACITIES,
    gpu: int = DEFAULT_GPU,
    docs: int = DEFAULT_DOCS,
    tokens: int = DEFAULT_TOKENS,
) -> dict[str, int]:
    """Second-pass misses of fwd,fwd at every CPU capacity, from one two-tier curve at ``gpu``.

    >>> cpu_cliff_from_curve([0, 3], gpu=1, docs=3, tokens=1)
    {'0': 3, '3': 0}
    """
    from stackdist.engine.tiers import inclusive_tiers

    tier = inclusive_tiers(gpu_capacities=[gpu], curve=_second_pass_curve(docs, tokens))[0]
    return {str(c): int(m) for c, m in zip(capacities, tier.misses_at(list(capacities)))}


def scenario_from_curves(
    gpu: int = DEFAULT_GPU, cpu: int = 0, docs: int = DEFAULT_DOCS, tokens: int = DEFAULT_TOKENS,
    passes: Sequence[str] = BASELINE_PASSES,
) -> dict[str, object]:
    """The same object as :func:`kvlab.scenario.run_scenario`, computed by the engine."""
    from stackdist.engine.tiers import OUTCOMES, inclusive_tiers

    keys = scenario_trace(docs, passes)
    tier = inclusive_tiers(keys, [tokens] * len(keys), [gpu])[0]
    outcome = tier.outcomes(cpu)
    result = []
    for p, order in enumerate(passes):
        part = outcome[p * docs : (p + 1) * docs]
        read = keys[p * docs : (p + 1) * docs]
        counts = {name: int((part == code).sum()) for code, name in enumerate(OUTCOMES)}
        result.append({
            "order": order,
            "gpu_hits": counts["gpu"],
            "cpu_hits": counts["cpu"],
            "misses": counts["miss"],
            "hit_docs": [k for k, o in zip(read, part.tolist()) if o != 2],
        })
    return {"passes": result}


def _verified(name: str, derived: object, direct: object) -> object:
    if derived != direct:
        raise LabMismatchError(f"{name}: the engine's curve gives {derived} but direct simulation gives {direct}")
    return derived


def load_measured(path: Path) -> tuple[bytes, Summary]:
    """Read the measured file once; return its bytes and their summary (SummaryError if bad)."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise SummaryError(f"{path}: cannot read the input file: {error.strerror or error}") from None
    return data, summarize(io.BytesIO(data), name=str(path))  # split into lines exactly as a file is


def _json_bytes(value: object) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode("utf-8")


def build_lab(measured: Path = DEFAULT_MEASURED) -> dict[str, bytes]:
    """Compute every lab file in memory; return file name -> content, in :data:`LAB_FILES` order."""
    measured_bytes, measured_summary = load_measured(measured)
    runs: dict[str, dict[str, Any]] = {
        "cyclic.json": {"passes": CYCLIC_PASSES},
        "baseline.json": {"passes": BASELINE_PASSES},
        "offload.json": {"gpu": DEFAULT_GPU, "cpu": OFFLOAD_CPU, "passes": BASELINE_PASSES},
    }
    values = {name: _verified(name, run_scenario(**kw), scenario_from_curves(**kw)) for name, kw in runs.items()}
    values["cliff.json"] = _verified("cliff.json", cliff_from_curve(), cliff_direct())
    values["cpu_cliff.json"] = _verified("cpu_cliff.json", cpu_cliff_from_curve(), cpu_cliff_direct())
    values["measured.json"] = measured_summary
    values = {name: values[name] for name in LAB_FILES if name in values}
    files = {name: _json_bytes(value) for name, value in values.items()}
    files["ttft.jsonl"] = measured_bytes
    assert tuple(files) == LAB_FILES
    return files


MANIFEST = "manifest.json"
"""Written beside the seven result files, whose formats the lab's spec fixes (no key may be added)."""

LAB_DESCRIPTIONS: dict[str, str] = {
    "cyclic.json": "scenario --passes fwd,fwd: GPU 21,520 tokens, ten 5011-token documents read twice in order",
    "baseline.json": "scenario --passes fwd,fwd,rev: the same cache, a third pass in reverse order",
    "cliff.json": "second-pass hits (documents) at GPU capacities 21,520 ... 50,110 tokens",
    "offload.json": "scenario GPU 21,520 + CPU 56,000 tokens (inclusive CPU tier), passes fwd,fwd,rev",
    "cpu_cliff.json": "second-pass misses (documents) at GPU 21,520 and CPU capacities 0 ... 56,000 tokens",
    "measured.json": "summarize of the measured TTFT file: medians, means and baseline/lmcache ratios per pass",
    "ttft.jsonl": "a byte-for-byte copy of the measured TTFT input",
}


def manifest(files: dict[str, bytes]) -> bytes:
    """``manifest.json``: schema version, tool version, and each result file's description and
    SHA-256 (the result files themselves keep the lab's fixed formats). O(total bytes)."""
    import hashlib

    from stackdist.output import tool_header  # on use, as write_lab's writer

    return _json_bytes({
        **tool_header("kvlab-lab-manifest"),
        "files": {name: {"description": LAB_DESCRIPTIONS.get(name, ""), "bytes": len(data),
                         "sha256": hashlib.sha256(data).hexdigest()} for name, data in files.items()},
    })


def write_lab(out_dir: Path, files: dict[str, bytes]) -> list[Path]:
    """Write every file and :data:`MANIFEST` into ``out_dir`` (created if needed) as one unit;
    return the result files' paths.

    A failure (a full disk, Ctrl-C) leaves ``out_dir`` with its old results, never a mix of new
    and old files (:func:`stackdist.output.write_files_atomic`).
    """
    from stackdist.output import (
        write_files_atomic,  # on use: the other kvlab commands do not load stackdist
    )

    return write_files_atomic(out_dir, {**files, MANIFEST: manifest(files)})[:len(files)]


def run_lab(out_dir: Path, measured: Path = DEFAULT_MEASURED) -> list[Path]:
    """Compute all files first, then write them into ``out_dir``; return the written paths.

    Raises SummaryError (bad measured file) before writing anything, or OSError if the
    folder or a file cannot be written.
    """
    return write_lab(out_dir, build_lab(measured))


def human_summary(files: dict[str, bytes]) -> list[str]:
    """Return a few readable lines describing the lab results (for stderr)."""
    data = {name: json.loads(content) for name, content in files.items() if name.endswith(".json")}
    cyclic2 = data["cyclic.json"]["passes"][1]
    rev = data["baseline.json"]["passes"][2]
    offload = data["offload.json"]["passes"]
    ratios = ", ".join(f"{name} {ratio['p50']}" for name, ratio in data["measured.json"]["ratio"].items())
    return [
        (f"cyclic  GPU {DEFAULT_GPU}, fwd,fwd: pass 2 hits {cyclic2['gpu_hits'] + cyclic2['cpu_hits']}"
        f"/{DEFAULT_DOCS} (LRU thrashes)"),
        f"baseline fwd,fwd,rev: rev pass hits docs {rev['hit_docs']}",
        "cliff   pass-2 hits by GPU tokens: " + ", ".join(f"{k}: {v}" for k, v in data["cliff.json"].items()),
        (f"offload GPU {DEFAULT_GPU} + CPU {OFFLOAD_CPU}: pass 2 cpu hits {offload[1]['cpu_hits']}, "
        f"rev pass gpu {offload[2]['gpu_hits']} / cpu {offload[2]['cpu_hits']}"),
        "cpu_cliff pass-2 misses by CPU tokens: " + ", ".join(f"{k}: {v}" for k, v in data["cpu_cliff.json"].items()),
        f"measured p50 TTFT ratio baseline/lmcache: {ratios or '(no pass in both configs)'}",
    ]


def run_lab_command(out_dir: Path, measured: Path = DEFAULT_MEASURED, prog: str = "kvlab run-lab") -> int:
    """CLI body: write the lab, print the folder and the files (stdout) and a summary (stderr).

    Returns 0, or 1 (with a message on stderr) for an unreadable/malformed measured file or a
    folder/file that cannot be written.
    """
    try:
        files = build_lab(measured)
    except (SummaryError, LabMismatchError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 1
    try:
        written = write_lab(out_dir, files)
    except OSError as error:
        print(f"{prog}: error: cannot write the lab files into {out_dir}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(out_dir)
    for path in written:
        print(path)
    for text in human_summary(files):
        print(f"{prog}: {text}", file=sys.stderr)
    return 0
