"""PEP 562 re-exports: a package ``__init__`` that names its public API without importing it.

A package whose modules compile numba kernels costs numba's import (about 0.3 s) to import
eagerly; the numba-free paths (``--help``, ``--version``, usage errors) must not pay it. Each name
imports its home module on first use and is then kept in the package, so ``from package import
name``, ``package.name``, ``package.submodule`` and ``dir(package)`` behave as if imported eagerly.

>>> import types
>>> pkg = types.ModuleType("pkg")
>>> pkg.__getattr__, pkg.__dir__ = lazy_exports("json", {"decoder": ("JSONDecoder",)})
>>> pkg.__getattr__("JSONDecoder").__name__
'JSONDecoder'
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: dict[str, tuple[str, ...]]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose public names live in the
    submodules ``homes`` maps them to (``{"curve": ("HitCurve", ...)}``). O(1) per lookup."""
    home_of = {name: module for module, names in homes.items() for name in names}

    def getattr_(name: str) -> Any:
        module = home_of.get(name)
        if module is not None:
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
        elif not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(home_of))

    return getattr_, dir_
