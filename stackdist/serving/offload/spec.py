"""An offload specification as the user writes it: ``MODEL:tier=SIZE[/SIZE...],key=value``.

``vllm-native:cpu=128blocks,policy=arc``, ``lmcache:cpu=64chunks,disk=1024chunks``,
``lmcache:cpu=40GiB/80GiB/160GiB``. A size is a number and a unit: the model's own unit
(``blocks`` / ``chunks`` / ``pages``, as :attr:`~.base.OffloadModel.unit` says), ``tokens`` (whole
units of those tokens, rounded down), bytes (``B, KB, MB, GB, TB`` in powers of 1000, ``KiB, MiB,
GiB, TiB`` in powers of 1024: whole units of the model's KV bytes, as the engine converts them,
:meth:`~.base.OffloadModel.units_for_bytes`), or ``inf`` (a tier that never evicts). ``/``
separates a ladder of sizes; the configurations are every combination of the tiers' ladders.

>>> s = parse_offload("vllm-native:cpu=32/128blocks,policy=arc")
>>> s.model, s.sizes, s.options
('vllm-native', (('cpu', ((32.0, 'units'), (128.0, 'units'))),), (('policy', 'arc'),))
>>> [c.label for c in resolve_offload(s, 2**10, 16)]
['cpu32', 'cpu128']
>>> [c.size("cpu") for c in resolve_offload(parse_offload("vllm-native:cpu=1MiB"), 2**10, 16)]
[64]
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from .base import OFFLOAD_MODELS, OffloadModel, TierConfig, offload_model

__all__ = ["OffloadSpec", "describe_sizes", "parse_offload", "resolve_offload"]

_BYTES = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)")


@dataclass(frozen=True)
class OffloadSpec:
    """A parsed specification: the model, each tier's ladder of ``(value, kind)`` sizes (kind
    ``units`` / ``tokens`` / ``bytes`` / ``inf``) and the options (defaults filled in)."""

    model: str
    sizes: tuple[tuple[str, tuple[tuple[float, str], ...]], ...]
    options: tuple[tuple[str, str], ...]
    text: str = ""


def _size(text: str, model: OffloadModel, tier: str) -> tuple[float, str]:
    word = text.strip()
    if word.lower() in ("inf", "infinite", "unlimited"):
        return (math.inf, "inf")
    match = _SIZE.fullmatch(word)
    units = (model.unit, model.unit.rstrip("s"))
    if match:
        value, unit = float(match.group(1)), match.group(2).lower()
        if unit in units or (unit == "" and value == 0):
            if value == int(value):
                return (value, "units")
        elif unit in ("tokens", "token"):
            return (value, "token")
        elif unit in _BYTES:
            return (value * _BYTES[unit], "byte")
    raise ValueError(f"{model.name}: {tier}={text!r} is not a size; write a whole number of {model.unit} "
                     f"(e.g. {tier}=1024{model.unit}), tokens (e.g. 2000000tokens), bytes (e.g. 64GiB: "
                     "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB) or inf; several sizes separated by '/'")


def parse_offload(text: str) -> OffloadSpec:
    """Parse ``MODEL:tier=SIZE[/SIZE...][,tier=...][,key=value...]``; ValueError saying what is
    wrong and what is allowed. O(len(text)).

    >>> parse_offload("vllm-native:cpu=8blocks").options
    (('policy', 'lru'),)
    >>> parse_offload("lmcache:cpu=8chunks,disk=32chunks").options
    (('chunk', '256'),)
    >>> parse_offload("vllm-native:dram=8blocks")
    Traceback (most recent call last):
    ValueError: vllm-native: unknown key 'dram'; its tiers are cpu (sizes in blocks) and its options policy=lru|arc
    """
    name, colon, rest = text.strip().partition(":")
    model = OFFLOAD_MODELS.get(name.strip())
    if model is None:
        raise ValueError(f"{text!r} must start with an offload model, one of {', '.join(OFFLOAD_MODELS)} "
                         "(e.g. vllm-native:cpu=1024blocks)")
    sizes: dict[str, tuple[tuple[float, str], ...]] = {}
    options = dict(model.defaults)
    opts = " and its options " + ", ".join(f"{k}={'|'.join(v) if v else 'N'}" for k, v in model.options.items()) \
        if model.options else ""
    for part in filter(None, (p.strip() for p in rest.split(","))) if colon else ():
        key, eq, value = (x.strip() for x in part.partition("="))
        if not eq or not value:
            raise ValueError(f"{model.name}: {part!r} must be key=value")
        if key in model.tiers:
            items = [v.strip() for v in value.split("/")]
            unit = ""
            for n, item in enumerate(reversed(items)):  # 32/128blocks: a bare number takes the next unit
                bare = _SIZE.fullmatch(item)
                if bare and not bare.group(2) and unit:
                    items[len(items) - 1 - n] = item + unit
                elif bare:
                    unit = bare.group(2)
            sizes[key] = tuple(_size(v, model, key) for v in items)
        elif key in model.options:
            allowed = model.options[key]
            if (allowed and value not in allowed) or (not allowed and not (value.isdigit() and int(value) > 0)):
                raise ValueError(f"{model.name}: {key} must be {'|'.join(allowed) if allowed else 'a positive integer'}; "
                                 f"got {value!r}")
            options[key] = value
        else:
            raise ValueError(f"{model.name}: unknown key {key!r}; its tiers are {' and '.join(model.tiers)} "
                             f"(sizes in {model.unit}){opts}")
    if model.tiers[0] not in sizes:
        raise ValueError(f"{model.name}: give the {model.tiers[0]} tier's size, e.g. "
                         f"{model.name}:{model.tiers[0]}=1024{model.unit}")
    ordered = tuple((t, sizes[t]) for t in model.tiers if t in sizes)
    return OffloadSpec(model.name, ordered, tuple(sorted(options.items())), text.strip())


def resolve_offload(spec: OffloadSpec, bytes_per_token: int, page_tokens: int) -> list[TierConfig]:
    """The spec's configurations in the model's units: every combination of the tiers' ladders,
    tokens and bytes converted (rounded down) with the model's KV ``bytes_per_token``. O(configs).

    >>> [c.sizes for c in resolve_offload(parse_offload("vllm-native:cpu=1/2blocks/inf"), 1, 16)]
    [(('cpu', 1),), (('cpu', 2),), (('cpu', None),)]
    >>> [c.sizes for c in resolve_offload(parse_offload("lmcache:cpu=1/2chunks,disk=inf"), 1, 16)]
    [(('cpu', 1), ('disk', None)), (('cpu', 2), ('disk', None))]
    """
    model = offload_model(spec.model)
    options = dict(spec.options)
    chunk = model.chunk_tokens(options, page_tokens)
    ladders = []
    for tier, ladder in spec.sizes:
        units: list[int | None] = []
        for value, kind in ladder:
            if kind == "inf":
                n: int | None = None
            elif kind == "units":
                n = int(value)
            elif kind == "token":
                n = int(value) // chunk
            else:
                n = model.units_for_bytes(int(value), bytes_per_token, options, page_tokens)
            if n is not None and not 0 <= n < 2**31:
                raise ValueError(f"{model.name}: a {tier} tier of {n:,} {model.unit} is too large (at most {2**31 - 1:,})")
            if n not in units:
                units.append(n)
        ladders.append([(tier, n) for n in units])
    return [TierConfig(tuple(combo), spec.options) for combo in itertools.product(*ladders)]


def describe_sizes(config: TierConfig, model: OffloadModel, bytes_per_token: int, page_tokens: int) -> dict[str, object]:
    """Each tier's size in units, tokens and GiB (the model's KV bytes per token), for reports.

    >>> describe_sizes(TierConfig((("cpu", 4),)), offload_model("vllm-native"), 2**20, 16)["cpu"]
    {'blocks': 4, 'tokens': 64, 'gib': 0.0625}
    """
    chunk = model.chunk_tokens(dict(config.options), page_tokens)
    out: dict[str, object] = {}
    for tier, n in config.sizes:
        out[tier] = {model.unit: "inf" if n is None else n, "tokens": None if n is None else n * chunk,
                     "gib": None if n is None else n * chunk * bytes_per_token / 2**30}
    return out
