"""JSON as the project writes it: numpy values converted, short lists on one line, strict.

>>> print(dumps_json({"a": [1, 2]}), end="")
{
  "a": [1, 2]
}
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from stackdist.version import SCHEMA_VERSION, __version__

__all__ = ["dumps_json", "json_default", "tool_header"]


def json_default(value: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars and arrays and paths."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def dumps_json(data: Any) -> str:
    """Indented JSON with lists of scalars kept on one line, numpy values converted, and a
    trailing newline.

    >>> print(dumps_json({"a": [1, 2], "b": {"c": np.int64(3)}}), end="")
    {
      "a": [1, 2],
      "b": {
        "c": 3
      }
    }
    """
    return _format(json.loads(json.dumps(data, default=json_default, allow_nan=False)), 0) + "\n"


def _format(value: Any, level: int) -> str:
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {_format(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = [f"{inner}{_format(v, level + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value)


def tool_header(kind: str) -> dict[str, Any]:
    """The first keys of every JSON the commands write: what it is, its schema, the tool.

    >>> list(tool_header("curve"))
    ['schema_version', 'kind', 'tool']
    """
    return {"schema_version": SCHEMA_VERSION, "kind": kind, "tool": {"name": "stackdist", "version": __version__}}
