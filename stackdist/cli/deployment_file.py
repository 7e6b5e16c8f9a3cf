"""``stackdist plan --deployment FILE.toml``: a deployment saved as a TOML file instead of flags.

The file has sections (``[model]``, ``[hardware]``, ``[engine]``, ``[router]``, ``[tiers]``,
``[prices]``, ``[targets]``) whose keys map one to one to ``plan``'s flags (:data:`KEYS`, the
table in ``docs/deployment.md`` is generated from it). The file is turned into flag tokens and
put *before* the command line's own, and every flag the command line gives (even one equal to its
default) drops the file's key for it: flags override the file. Relative paths in the file resolve
against the file's folder. Every value is then checked by the flag's own parser, one key at a time,
so a bad value names the file, the key and the flag.

Errors: an unknown section or key is a usage error (exit 2) naming it, the file and the closest
known name; a value of the wrong TOML type names the key, the file and the type expected (exit 2);
a missing, unreadable or malformed file names the file (and line) and exits 1.

The plan's JSON echoes the resolved deployment (file, then flags) as ``resolved_deployment``
(:func:`resolved_deployment`, the same sections and keys), and ``--write-deployment OUT.toml``
writes that block back as a deployment file (:func:`dumps_toml`): a run can be reproduced from it.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from stackdist.errors import EXIT_DATA, EXIT_USAGE, TraceFormatError, UsageError

from .args import InputPath, OutputPath, duration, fraction

__all__ = ["KEYS", "SECTIONS", "Key", "add_deployment_arguments", "apply_deployment", "deployment_table",
           "dumps_toml", "resolved_deployment", "with_deployment"]

SCHEDULES = ("serial", "model", "scheduler", "recorded")
"""``--schedule``'s named values; anything else is a CSV path (resolved against the file's folder)."""

# kind: (what the TOML value must be, in an error message; the JSON Schema of the echoed value)
_NUMBER = {"oneOf": [{"type": "number"}, {"const": "inf"}]}
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "str": ("a string", {"type": "string"}),
    "path": ("a string (a path; relative to the file's folder)", {"type": "string"}),
    "schedule": (f"a string ({', '.join(SCHEDULES)} or a CSV path)", {"type": "string"}),
    "int": ("an integer", {"type": "integer"}),
    "float": ("a number", {"type": "number"}),
    "float_or_inf": ("a number or \"inf\"", _NUMBER),
    "bool": ("true or false", {"type": "boolean"}),
    "toggle": ("true or false", {"type": "boolean"}),
    "strings": ("an array of strings", {"type": "array", "items": {"type": "string"}}),
    "numbers": ("an array of numbers", {"type": "array", "items": {"type": "number"}}),
    "pair": ("an array of two numbers", {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}),
    "sizes": ("an array of integers (or \"inf\")", {"type": "array", "items": {"oneOf": [{"type": "integer"},
                                                                                         {"const": "inf"}]}}),
    "workers": ("an integer or a string (\"one\", \"recorded\")", {"oneOf": [{"type": "integer"}, {"type": "string"}]}),
    "repeat": ("an array of strings (the flag once per item)", {"type": "array", "items": {"type": "string"}}),
    "table": ("a table of numbers by tier (hbm, dram, ssd)",
              {"type": "object", "propertyNames": {"enum": ["hbm", "dram", "ssd"]},
               "additionalProperties": {"type": "number"}}),
    "weights": ("a table of numbers by scorer (prefix, kv-cache, queue)",
                {"type": "object", "propertyNames": {"enum": ["prefix", "kv-cache", "queue"]},
                 "additionalProperties": {"type": "number"}}),
    "ttft": ("a table of seconds by percentile (p50, p90, p99)",
             {"type": "object", "propertyNames": {"enum": ["p50", "p90", "p99"]},
              "additionalProperties": {"type": "number"}}),
}


TABLE_KEYS = {"table": ("hbm", "dram", "ssd"), "weights": ("prefix", "kv-cache", "queue"), "ttft": ("p50", "p90", "p99")}
"""The keys each table kind allows."""


@dataclass(frozen=True)
class Key:
    """One key of a deployment file: its section, name, the flag it stands for, its kind
    (:data:`KINDS`), unit and meaning."""

    section: str
    name: str
    flag: str
    kind: str
    unit: str
    meaning: str

    @property
    def dest(self) -> str:
        """The flag's argparse destination.

        >>> Key("engine", "block_size", "--engine-block-size", "int", "tokens", "").dest
        'engine_block_size'
        """
        return self.flag.lstrip("-").replace("-", "_")


KEYS: tuple[Key, ...] = (
    Key("model", "name", "--model", "str", "", "a bundled model or its Hugging Face repo id"),
    Key("model", "config", "--model-config", "path", "", "a Hugging Face config.json (instead of name)"),
    Key("model", "kv_dtype", "--kv-dtype", "str", "", "KV-cache element type (auto, bf16, fp8, ...)"),
    Key("model", "weights_gib", "--weights", "float", "GiB", "weights per replica"),
    Key("hardware", "gpu", "--gpu", "str", "", "GPU of each replica (gpus.json)"),
    Key("hardware", "gpus_per_replica", "--gpus-per-replica", "int", "GPUs", "tensor-parallel size"),
    Key("hardware", "gpus", "--gpus", "int", "GPUs", "GPUs in all (replicas = gpus / gpus_per_replica)"),
    Key("hardware", "gpu_memory_utilization", "--gpu-memory-utilization", "float", "fraction",
        "vLLM's --gpu-memory-utilization"),
    Key("hardware", "activation_gib", "--activation-gib", "float", "GiB", "activation peak per GPU"),
    Key("hardware", "non_torch_gib", "--non-torch-gib", "float", "GiB", "memory outside torch per GPU"),
    Key("hardware", "cudagraph_gib", "--cudagraph-gib", "float", "GiB", "CUDA-graph memory per GPU"),
    Key("hardware", "prefill_efficiency", "--prefill-efficiency", "float", "fraction",
        "TTFT: fraction of the dense peak FLOP/s prefill reaches"),
    Key("hardware", "load_gbps", "--load-gbps", "float", "GB/s", "TTFT: bandwidth of loads from the tier below HBM"),
    Key("hardware", "ttft_overhead_ms", "--ttft-overhead-ms", "float", "ms", "TTFT: fixed time per request"),
    Key("hardware", "ttft_calibration", "--ttft-calibration", "path", "", "TTFT: measured JSON-lines file to fit"),
    Key("engine", "semantics", "--semantics", "strings", "", "semantics and engine models (engine, per-access, vllm, "
        "sglang)"),
    Key("engine", "gpu_blocks", "--gpu-blocks", "sizes", "engine units", "pool sizes in the engine's own count"),
    Key("engine", "block_size", "--engine-block-size", "int", "tokens", "the engine's KV block (page) size"),
    Key("engine", "decode", "--decode", "toggle", "", "generated tokens are cached (absent: when the trace has "
        "output lengths)"),
    Key("engine", "decode_reuse", "--decode-reuse", "bool", "", "a session's next request reuses decoded KV"),
    Key("engine", "schedule", "--schedule", "schedule", "", "when requests run"),
    Key("engine", "step_time", "--step-time", "pair", "s, s/token", "scheduler step time [fixed, per token]"),
    Key("engine", "max_num_seqs", "--max-num-seqs", "int", "requests", "vLLM's max_num_seqs"),
    Key("engine", "max_num_batched_tokens", "--max-num-batched-tokens", "int", "tokens",
        "vLLM's max_num_batched_tokens"),
    Key("engine", "async_scheduling", "--async-scheduling", "bool", "", "vLLM's async scheduling"),
    Key("engine", "prefill_tokens_per_s", "--prefill-tokens-per-s", "float", "tokens/s", "service model: prefill speed"),
    Key("engine", "decode_tokens_per_s", "--decode-tokens-per-s", "float", "tokens/s",
        "service model: decode speed per request"),
    Key("router", "workers", "--workers", "workers", "workers", "one, recorded or K workers"),
    Key("router", "policy", "--router", "str", "", "how requests are spread over the workers"),
    Key("router", "cache_threshold", "--router-cache-threshold", "float", "fraction",
        "sglang-cache-aware: cache_threshold"),
    Key("router", "overlap_weight", "--router-overlap-weight", "float_or_inf", "", "kv-aware: overlap_score_weight"),
    Key("router", "temperature", "--router-temperature", "float", "", "kv-aware: Dynamo's router_temperature"),
    Key("router", "weights", "--router-weights", "weights", "", "llm-d: the scorer weights"),
    Key("router", "table_blocks", "--router-table-blocks", "int", "4-byte blocks",
        "aibrix-prefix-cache: the router's prefix table"),
    Key("router", "seed", "--seed", "int", "", "the routers' random draws (and the sampling hash seed)"),
    Key("router", "max_replicas", "--max-replicas", "int", "replicas", "the deployment search's most replicas"),
    Key("tiers", "offload", "--offload", "repeat", "model unit, tokens or bytes",
        "offload tiers, MODEL:tier=SIZE,... (one per item)"),
    Key("tiers", "shared_blocks", "--shared-blocks", "sizes", "blocks", "a tier shared by all workers"),
    Key("prices", "gpu_usd_per_hour", "--gpu-price", "float", "US$/GPU-hour", "the GPU's price"),
    Key("prices", "usd_per_gb", "--prices", "table", "US$/GB (1e9 bytes)", "purchase prices: hbm, dram, ssd"),
    Key("targets", "hit_rates", "--targets", "numbers", "fraction", "prefix token hit-rate targets"),
    Key("targets", "tier_targets", "--tier-targets", "numbers", "fraction", "HBM, +DRAM, +SSD targets"),
    Key("targets", "coverage", "--coverage", "float", "fraction", "request coverage target"),
    Key("targets", "capacity", "--capacity", "strings", "GiB, TiB, tokens, blocks", "budgets answered (e.g. \"80GiB\")"),
    Key("targets", "ttft", "--ttft-target", "ttft", "s", "TTFT targets by percentile, e.g. { p99 = 2 }"),
)
"""Every key of a deployment file, in the file's (and the echo's) order."""

SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(k.section for k in KEYS))
_BY_NAME = {(k.section, k.name): k for k in KEYS}
_EXCLUSIVE = ({"model", "model_config"},)
"""Destinations that exclude each other: the command line giving one drops the file's other."""


def add_deployment_arguments(p: argparse.ArgumentParser) -> None:
    """``--deployment FILE.toml`` and ``--write-deployment OUT.toml`` on ``plan``'s parser."""
    p.add_argument("--deployment", type=InputPath, metavar="FILE.toml",
                   help="read the deployment (model, hardware, engine, router, tiers, prices, targets) from a TOML "
                   "file; flags given on the command line override it (keys: docs/deployment.md)")
    p.add_argument("--write-deployment", type=OutputPath, metavar="OUT.toml",
                   help="write the resolved deployment (file, then flags) as a deployment file")


# ------------------------------------------------------------------ the file to flags

def _fail(code: int, message: str) -> NoReturn:
    print(f"stackdist plan: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def with_deployment(build: Any, argv: Sequence[str], args: argparse.Namespace) -> argparse.Namespace:
    """``args`` re-parsed with ``--deployment``'s file under the command line's flags
    (``build(command)`` makes the parser); a bad file exits (1: unreadable or malformed, 2: an
    unknown key or a bad value) with one line."""
    try:
        return apply_deployment(build, list(argv), args.deployment)
    except UsageError as exc:
        _fail(EXIT_USAGE, str(exc))
    except TraceFormatError as exc:
        _fail(EXIT_DATA, str(exc))


def apply_deployment(build: Any, argv: list[str], path: str) -> argparse.Namespace:
    """The namespace of ``argv`` (``["plan", ...]``) with the file's keys as flags before it,
    except those whose flag ``argv`` gives. ``build(command)`` makes the parser. O(file + argv)."""
    from stackdist.traces.side_inputs import read_toml

    data = read_toml(path, "deployment file")
    tokens = file_tokens(data, path)
    given = _given(build, argv)
    for dests in _EXCLUSIVE:
        if dests & given:
            given |= dests
    kept = [t for key, t in tokens if key.dest not in given]
    _check_values(build, argv, path, [(k, t) for k, t in tokens if k.dest not in given])
    return build(argv[0]).parse_args([argv[0], *(token for group in kept for token in group), *argv[1:]])


def _plan_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The subcommand's own parser inside the top-level one."""
    for action in parser._actions:  # argparse keeps the subparsers among the actions, by name
        if isinstance(action.choices, dict) and command in action.choices:
            return action.choices[command]  # type: ignore[no-any-return]
    raise LookupError(command)


def _given(build: Any, argv: list[str]) -> set[str]:
    """The destinations ``argv`` sets itself (argparse with every default suppressed): a flag
    given equal to its default is given."""
    parser = build(argv[0])
    for action in _plan_parser(parser, argv[0])._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv)))


class _Refused(Exception):
    pass


def _check_values(build: Any, argv: list[str], path: str, tokens: list[tuple[Key, list[str]]]) -> None:
    """Each key's flag tokens parsed alone by the flag's own parser: a refused value is a usage
    error naming the file and the key (not only the flag the user did not type)."""
    parser = build(argv[0])
    sub = _plan_parser(parser, argv[0])

    def refuse(message: str) -> NoReturn:
        raise _Refused(message)

    sub.error = refuse  # type: ignore[method-assign]
    for key, group in tokens:
        try:
            parser.parse_args([argv[0], *group, "-"])
        except _Refused as exc:
            raise UsageError(f"{path}: [{key.section}] {key.name} (for {key.flag}): {exc}") from None


def file_tokens(data: dict[str, Any], path: str) -> list[tuple[Key, list[str]]]:
    """The file's keys as flag tokens, in :data:`KEYS` order; an unknown section or key, or a
    value of the wrong type, is a :class:`UsageError` naming the file and the key. O(keys).

    >>> [t for _, t in file_tokens({"hardware": {"gpu": "h200", "gpus": 8}, "targets": {"ttft": {"p99": 2}}}, "d.toml")]
    [['--gpu=h200'], ['--gpus=8'], ['--ttft-target=p99=2']]
    >>> file_tokens({"hardware": {"gpus_per_replcia": 2}}, "d.toml")
    Traceback (most recent call last):
    ...
    stackdist.errors.UsageError: d.toml: unknown key [hardware] gpus_per_replcia; did you mean gpus_per_replica?
    """
    folder = os.path.dirname(os.path.abspath(path))
    for section, table in data.items():
        if section not in SECTIONS:
            raise UsageError(f"{path}: unknown section [{section}]{_closest(section, SECTIONS)}; the sections: "
                             f"{', '.join(SECTIONS)}")
        if not isinstance(table, dict):
            raise UsageError(f"{path}: {section} must be a table ([{section}]); got {_toml_type(table)}")
        names = [k.name for k in KEYS if k.section == section]
        for name in table:
            if (section, name) not in _BY_NAME:
                elsewhere = [f"[{k.section}] {k.name}" for k in KEYS if k.name == name]
                hint = f"; it is in {elsewhere[0]}" if elsewhere else _closest(name, names)
                raise UsageError(f"{path}: unknown key [{section}] {name}{hint}")
    if {"name", "config"} <= set(data.get("model", {})):
        raise UsageError(f"{path}: [model] has both name and config; give one (as --model or --model-config)")
    out = []
    for key in KEYS:
        if key.name in data.get(key.section, {}):
            value = data[key.section][key.name]
            if not _is_kind(value, key.kind):
                raise UsageError(f"{path}: [{key.section}] {key.name} must be {KINDS[key.kind][0]}; got "
                                 f"{_toml_type(value)} ({value!r})")
            out.append((key, _tokens(key, value, folder)))
    return out


def _closest(name: str, names: Sequence[str]) -> str:
    near = difflib.get_close_matches(name, list(names), n=1)
    return f"; did you mean {near[0]}?" if near else ""


def _toml_type(value: Any) -> str:
    """The TOML type of a parsed value, for messages.

    >>> _toml_type(True), _toml_type(2), _toml_type([1]), _toml_type({})
    ('a boolean', 'an integer', 'an array', 'a table')
    """
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
                       (list, "an array"), (dict, "a table")):
        if isinstance(value, kind):
            return name
    return f"a {type(value).__name__} (a date or time)"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_kind(value: Any, kind: str) -> bool:
    """Whether a parsed TOML ``value`` fits ``kind``.

    >>> _is_kind(8, "int"), _is_kind(True, "int"), _is_kind("inf", "float_or_inf"), _is_kind([1, "inf"], "sizes")
    (True, False, True, True)
    """
    if kind in ("str", "path", "schedule"):
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return _is_number(value)
    if kind == "float_or_inf":
        return _is_number(value) or value == "inf"
    if kind in ("bool", "toggle"):
        return isinstance(value, bool)
    if kind in ("strings", "repeat"):
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "numbers":
        return isinstance(value, list) and all(_is_number(v) for v in value)
    if kind == "pair":
        return isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value)
    if kind == "sizes":
        return isinstance(value, list) and all(v == "inf" or (isinstance(v, int) and not isinstance(v, bool))
                                               for v in value)
    if kind == "workers":
        return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    if kind in TABLE_KEYS:
        return isinstance(value, dict) and all(_is_number(v) and k in TABLE_KEYS[kind] for k, v in value.items())
    raise AssertionError(kind)


def _number(value: Any) -> str:
    return str(value) if isinstance(value, (int, str)) else repr(float(value))


def _tokens(key: Key, value: Any, folder: str) -> list[str]:
    """The flag tokens of one checked value (``--flag=value`` so a value may start with ``-``)."""
    flag, kind = key.flag, key.kind
    if kind == "bool":
        return [flag] if value else []
    if kind == "toggle":
        return [flag if value else "--no-" + flag[2:]]
    if kind == "path" or (kind == "schedule" and value not in SCHEDULES and value != "-"):
        value = os.path.join(folder, os.path.expanduser(value))
    if kind in ("str", "path", "schedule", "workers"):
        return [f"{flag}={value}"]
    if kind in ("float", "float_or_inf"):
        return [f"{flag}={_number(value)}"]
    if kind == "int":
        return [f"{flag}={value}"]
    if kind == "repeat":
        return [f"{flag}={v}" for v in value]
    if kind == "ttft":
        return [f"{flag}={k}={_number(v)}" for k, v in value.items()]
    if kind in ("table", "weights"):
        return [f"{flag}=" + ",".join(f"{k}={_number(v)}" for k, v in value.items())]
    return [f"{flag}=" + ",".join(_number(v) if kind != "strings" else v for v in value)]


# ------------------------------------------------------------------ flags to the echo

def resolved_deployment(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The deployment the run used (the file, then the flags), by section and key as a file
    writes it; unset flags are absent. O(keys).

    >>> ns = argparse.Namespace(gpu="h200", gpus=8, targets="0.9,0.99", router_overlap_weight=float("inf"))
    >>> resolved_deployment(ns)
    {'hardware': {'gpu': 'h200', 'gpus': 8}, 'router': {'overlap_weight': 'inf'}, 'targets': {'hit_rates': [0.9, 0.99]}}
    """
    out: dict[str, dict[str, Any]] = {}
    for key in KEYS:
        value = _echo(key, getattr(args, key.dest, None))
        if value is not None:
            out.setdefault(key.section, {})[key.name] = value
    return out


def _float(text: Any) -> float | str:
    value = float(text)
    return "inf" if math.isinf(value) and value > 0 else value


def _echo(key: Key, value: Any) -> Any:
    """A flag's parsed value as the file's value (None: not set)."""
    kind = key.kind
    if value is None or (kind in ("repeat", "ttft") and not value):
        return None
    if kind in ("str", "path", "schedule"):
        return str(value)
    if kind == "int":
        return int(value)
    if kind in ("float", "float_or_inf"):
        return _float(value)
    if kind in ("bool", "toggle"):
        return bool(value)
    if kind == "workers":
        return int(value) if str(value).isdigit() else str(value)
    if kind == "repeat":
        return [str(v) for v in value]
    if kind == "strings":
        return [str(v).strip() for v in (value.split(",") if isinstance(value, str) else value)]
    if kind == "numbers" and key.unit == "fraction":  # 0.9 or 90% (cli/args.py: fraction)
        return [fraction(v, key.flag) for v in str(value).split(",") if v.strip()]
    if kind in ("numbers", "pair"):
        return [float(v) for v in str(value).split(",")]
    if kind == "sizes":
        return [int(v) if v.strip().isdigit() else v.strip() for v in str(value).split(",")]
    pairs = [part.partition("=") for part in (value if kind == "ttft" else str(value).split(","))]
    if kind == "ttft":  # seconds, or a duration with its unit (p99=500ms)
        return {k.strip(): float(v) if _numeric_text(v) else duration(v, key.flag) for k, _, v in pairs}
    return {k.strip(): float(v) for k, _, v in pairs}


def _numeric_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------ the echo as TOML

def dumps_toml(deployment: dict[str, dict[str, Any]]) -> str:
    """A deployment (as :func:`resolved_deployment` gives it) as a TOML file. O(keys).

    >>> print(dumps_toml({"hardware": {"gpu": "h200", "gpus": 8}, "prices": {"usd_per_gb": {"dram": 3.0}}}), end="")
    # stackdist plan --deployment: keys and flags in docs/deployment.md
    <BLANKLINE>
    [hardware]
    gpu = "h200"
    gpus = 8
    <BLANKLINE>
    [prices]
    usd_per_gb = { dram = 3.0 }
    """
    import json

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's
        if isinstance(v, float):
            return "inf" if math.isinf(v) else repr(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, list):
            return "[" + ", ".join(map(value, v)) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(f"cannot write {type(v).__name__} as TOML")

    lines = ["# stackdist plan --deployment: keys and flags in docs/deployment.md"]
    for section, table in deployment.items():
        lines += ["", f"[{section}]", *(f"{k} = {value(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


def deployment_table() -> str:
    """The Markdown table of every key (docs/deployment.md holds it; a test keeps them equal)."""
    rows = ["| key | flag | TOML type | unit | meaning |", "|---|---|---|---|---|"]
    rows += [f"| `[{k.section}] {k.name}` | `{k.flag}` | {KINDS[k.kind][0]} | {k.unit} | {k.meaning} |" for k in KEYS]
    return "\n".join(rows) + "\n"


def deployment_json_schema(defs: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of the ``resolved_deployment`` block (from :data:`KEYS`): a reference to
    ``ResolvedDeployment`` in ``defs``, whose sections are ``Deployment<Section>`` there. O(keys)."""
    names = {section: f"Deployment{section.capitalize()}" for section in SECTIONS}
    for key in KEYS:
        section = defs.setdefault(names[key.section], {
            "type": "object", "description": f"[{key.section}] of a deployment file", "properties": {},
            "required": [], "additionalProperties": False})
        prop = {**KINDS[key.kind][1], "description": f"{key.flag}: {key.meaning}"}
        section["properties"][key.name] = {**prop, "x-unit": key.unit} if key.unit else prop
    defs["ResolvedDeployment"] = {
        "type": "object", "description": "the deployment as resolved (file, then flags), as a --deployment file holds "
        "it; absent keys were not set", "properties": {s: {"$ref": f"#/$defs/{n}"} for s, n in names.items()},
        "required": [], "additionalProperties": False}
    return {"$ref": "#/$defs/ResolvedDeployment"}


def echo_deployment(args: argparse.Namespace, report: Any) -> None:
    """``plan``'s hook: the report's ``deployment_file`` and ``resolved_deployment``, and the
    ``--write-deployment`` file (atomically)."""
    from stackdist.output import write_atomic

    report["deployment_file"] = None if args.deployment is None else str(args.deployment)
    report["resolved_deployment"] = resolved_deployment(args)
    if args.write_deployment is not None:
        write_atomic(args.write_deployment, dumps_toml(report["resolved_deployment"]))
