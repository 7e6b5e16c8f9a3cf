"""JSON Schemas (draft 2020-12) derived from the typed results: TypedDicts, dataclasses and the
``typing`` forms they use; and a field reference (type, unit, meaning) from the same source.

- A TypedDict becomes an object whose ``properties`` are its keys (``required``: its required keys,
  ``additionalProperties: false``), kept once under ``$defs`` by name; a dataclass the same from its
  fields. ``X | None`` is ``anyOf`` with null, ``list[X]`` / ``tuple[X, ...]`` an array,
  ``dict[str, X]`` an object of X, ``Literal`` an ``enum``, ``Any`` anything.
- A field's meaning (``description``) is its trailing ``# comment`` in the class's source (the
  object's is the class's docstring); its unit (``x-unit``, an annotation JSON Schema allows) comes
  from its name (:func:`unit_of`: the project names numbers by their unit, ``_gib``, ``_s``,
  ``_ms``, ``_usd``, ``_rate``, ``_tokens`` ...).

Nothing here knows a report: :mod:`stackdist.cli.schemas` names the outputs and their root types.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import types
import typing
from typing import Any

__all__ = ["DRAFT", "field_rows", "json_schema", "output_schema", "reference_markdown", "unit_of"]

_SCALARS: dict[Any, dict[str, Any]] = {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"},
                                       bool: {"type": "boolean"}, type(None): {"type": "null"}}

_UNITS = (  # (pattern on the field name, unit); the first that matches
    (r"percentage_points$", "percentage points"),
    (r"usd_per_million", "US$ per million tokens"),
    (r"usd_per_gpu_hour$", "US$ per GPU-hour"),
    (r"usd_per_gb_hour", "US$ per GB-hour"),
    (r"usd_per_gb|per_gb_usd", "US$ per GB (1e9 bytes)"),
    (r"usd_per_hour$", "US$ per hour"),
    (r"(^|_)usd($|_)|cost_usd", "US$"),
    (r"tokens_per_s$", "tokens per second"),
    (r"bytes_per_s$", "bytes per second"),
    (r"(hit_rate|_rate|^rate|fraction|_share$|^share|utilization|efficiency|^target$|^coverage$)", "fraction (0 to 1)"),
    (r"(^|_)gib($|_)", "GiB (2**30 bytes)"),
    (r"(^|_)mib($|_)", "MiB (2**20 bytes)"),
    (r"bytes", "bytes"),
    (r"gbps$", "GB/s"),
    (r"_ms$|^ms$", "milliseconds"),
    (r"(_s|^s)$|seconds", "seconds"),
    (r"tokens_per_hour", "tokens per hour"),
    (r"tokens", "tokens"),
    (r"blocks|pages|^pool|capacity", "blocks (or the pool's own unit)"),
    (r"requests", "requests"),
    (r"accesses|hits$|misses", "accesses"),
    (r"replicas", "replicas"),
    (r"gpus", "GPUs"),
    (r"workers?$", "workers"),
)


def unit_of(name: str) -> str:
    """The unit a field's name says (empty when it names none).

    >>> unit_of("kv_gib"), unit_of("p99_ms"), unit_of("prefix_token_hit_rate"), unit_of("usd_per_hour"), unit_of("gpu")
    ('GiB (2**30 bytes)', 'milliseconds', 'fraction (0 to 1)', 'US$ per hour', '')
    """
    for pattern, unit in _UNITS:
        if re.search(pattern, name):
            return unit
    return ""


@functools.cache
def _comments(cls: type) -> dict[str, str]:
    """The trailing ``# comment`` of each ``name: type`` line in the source of ``cls`` and its
    TypedDict bases (empty when the source is not available)."""
    out: dict[str, str] = {}
    for base in (*getattr(cls, "__orig_bases__", ()), cls):
        if not isinstance(base, type) or base in (dict, object):
            continue
        try:
            source = inspect.getsource(base)
        except (OSError, TypeError):
            continue
        for found in re.finditer(r"^\s+(\w+): [^#\n]+#\s*(.+)$", source, re.MULTILINE):
            out[found.group(1)] = found.group(2).strip()
    return out


def _doc(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    generic = ("A simple typed namespace", "dict() ->", "Initialize self", cls.__name__ + "(")
    return "" if doc.startswith(generic) else " ".join(doc.split())


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and typing.is_typeddict(tp)


def _fields(cls: type) -> tuple[dict[str, Any], set[str]]:
    """(name -> type, the required names) of a TypedDict or a dataclass."""
    hints = typing.get_type_hints(cls)
    if _is_typeddict(cls):
        return hints, set(cls.__required_keys__)  # type: ignore[attr-defined]
    names = [f.name for f in dataclasses.fields(cls)]
    return {n: hints[n] for n in names}, set(names)


def json_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of ``tp``; the objects it names are added to ``defs`` (by class name) and
    referenced. O(size of the type tree).

    >>> class Row(typing.TypedDict):
    ...     gib: float  # the KV cache
    ...     name: str | None
    >>> defs = {}
    >>> json_schema(list[Row], defs)
    {'type': 'array', 'items': {'$ref': '#/$defs/Row'}}
    >>> defs["Row"]["properties"]["name"], defs["Row"]["required"]
    ({'anyOf': [{'type': 'string'}, {'type': 'null'}]}, ['gib', 'name'])
    """
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    if tp is Any or tp is object:
        return {}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [json_schema(a, defs) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        item = args[0] if args and (origin is not tuple or len(args) == 2 and args[1] is Ellipsis) else Any
        return {"type": "array", "items": json_schema(item, defs)} if item is not Any else {"type": "array"}
    if origin is dict or tp is dict:
        value = args[1] if len(args) == 2 else Any
        return {"type": "object"} if value is Any else {"type": "object", "additionalProperties": json_schema(value, defs)}
    if _is_typeddict(tp) or dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # recursion guard; filled below
            hints, required = _fields(tp)
            comments = _comments(tp)
            props = {}
            for key, hint in hints.items():
                prop = json_schema(hint, defs)
                if comments.get(key):
                    prop["description"] = comments[key]
                if unit_of(key) and "$ref" not in prop:
                    prop["x-unit"] = unit_of(key)
                props[key] = prop
            body: dict[str, Any] = {"type": "object"}
            if _doc(tp):
                body["description"] = _doc(tp)
            body.update(properties=props, required=[k for k in hints if k in required], additionalProperties=False)
            defs[name] = body
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema for {tp!r}")


def _type_text(schema: dict[str, Any]) -> str:
    """A schema in a few words, for the field reference.

    >>> _type_text({"anyOf": [{"type": "integer"}, {"type": "null"}]})
    'integer or null'
    """
    if "$ref" in schema:
        return f"object ({schema['$ref'].rsplit('/', 1)[-1]})"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(_type_text(s) for s in schema.get("anyOf", schema.get("oneOf", [])))
    if "enum" in schema:
        return " | ".join(map(repr, schema["enum"]))
    if "const" in schema:
        return f"{schema['const']!r}"
    kind = schema.get("type", "any")
    if kind == "array" and "items" in schema:
        return f"array of {_type_text(schema['items'])}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type_text(schema['additionalProperties'])}"
    return str(kind)


def field_rows(defs: dict[str, Any], root: str) -> list[tuple[str, str, str, str, str]]:
    """(object, field, type, unit, meaning) for every field of ``root`` and the objects it
    reaches, in the order first reached. O(fields)."""
    rows: list[tuple[str, str, str, str, str]] = []
    seen: list[str] = [root]
    i = 0
    while i < len(seen):
        name = seen[i]
        i += 1
        for key, prop in defs[name].get("properties", {}).items():
            rows.append((name, key, _type_text(prop), prop.get("x-unit", ""), prop.get("description", "")))
            for ref in re.findall(r"#/\$defs/(\w+)", repr(prop)):
                if ref not in seen:
                    seen.append(ref)
    return rows


DRAFT = "https://json-schema.org/draft/2020-12/schema"


def output_schema(name: str, title: str, root: Any, version: int, kind: str | None = None,
                  patch: Any = None) -> dict[str, Any]:
    """The published schema of one JSON output: ``$id`` ``urn:stackdist:schema:<name>:v<version>``,
    its ``schema_version`` (and ``kind``) fixed and required, the root type's fields;
    ``patch(properties, defs)`` may replace fields the types leave loose. O(size of the types).

    >>> class R(typing.TypedDict, total=False):
    ...     schema_version: int
    >>> s = output_schema("r", "an output", R, 3)
    >>> s["$id"], s["$defs"]["R"]["properties"]["schema_version"]["const"], s["$defs"]["R"]["required"]
    ('urn:stackdist:schema:r:v3', 3, ['schema_version'])
    """
    defs: dict[str, Any] = {}
    ref = json_schema(root, defs)
    top = defs[ref["$ref"].rsplit("/", 1)[-1]]
    props = top["properties"]
    props["schema_version"] = {"const": version, "description": "the shape of this JSON (stackdist/version.py)"}
    if "schema_version" not in top["required"]:  # every output carries it
        top["required"].insert(0, "schema_version")
    if kind is not None:
        props["kind"] = {"const": kind, "description": "what this JSON is"}
        if "kind" not in top["required"]:
            top["required"].insert(1, "kind")
    if patch is not None:
        patch(props, defs)
    return {"$schema": DRAFT, "$id": f"urn:stackdist:schema:{name}:v{version}", "title": title, **ref, "$defs": defs}


def reference_markdown(schemas: dict[str, dict[str, Any]], preamble: list[str]) -> str:
    """A field reference: per output (``schemas`` by output name), every object it reaches with
    each field's type, unit and meaning, as Markdown. O(fields)."""
    lines = [*preamble, ""]
    for name, schema in schemas.items():
        root = schema["$ref"].rsplit("/", 1)[-1]
        lines += [f"## {name}", "", f"{schema['title']}. Schema: `schemas/{name}.schema.json` (`{schema['$id']}`).", ""]
        current = None
        for obj, field, kind, unit, meaning in field_rows(schema["$defs"], root):
            if obj != current:
                doc = schema["$defs"][obj].get("description", "")
                lines += ([""] if current else []) + [f"### {name}: `{obj}`", *([doc, ""] if doc else [""]),
                                                    "| field | type | unit | meaning |", "|---|---|---|---|"]
                current = obj
            lines.append(f"| `{field}` | {kind} | {unit} | {meaning.replace('|', chr(92) + '|')} |")
        lines.append("")
    return "\n".join(lines)
