"""The layout rules of docs/architecture.md, enforced on the source (``ast``, nothing is imported).

- no import cycles between modules (function-local imports count too);
- a name starting with ``_`` is private to its file: never imported from another module, never
  read as ``module._name``;
- layers import downwards only (``LAYERS``); ``stackdist`` never imports ``kvlab``, and ``kvlab``
  never imports ``stackdist.cli`` (the command runner it shares is ``stackdist.guard``);
- nothing below ``stackdist/cli/`` knows the command line: no ``argparse``, no ``Namespace``, and
  no flag names in its strings (a ratchet: the error hints written before this rule are counted
  per module in ``FLAG_NAMES_BELOW_CLI`` and may only go down);
- no file is parsed outside ``stackdist/traces/`` (no ``open`` for reading, ``json.load``,
  ``csv.reader``, ``np.load``/``loadtxt`` elsewhere; package data via ``importlib.resources``);
- the three standalone lab files import only the standard library and each other;
- every package ``__init__`` only re-exports (imports, ``__all__``, a docstring, metadata);
- trace formats are told apart only in ``stackdist/traces/`` (the registry, ``traces/formats.py``):
  no other module compares a value with a registered format's name;
- engine models are reached through their registry (``stackdist/serving/engine_model.py``): outside
  ``stackdist/serving/`` no string literal equal to an engine model's name is compared (``==``,
  ``!=``, ``in`` literals, ``match`` cases).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("stackdist", "kvlab")
STANDALONE = {"kvlab.kvsim", "kvlab.scenario", "kvlab.summarize"}

# Lowest first: a module may import its own layer and the layers listed before it.
LAYERS = [
    {"stackdist.errors", "stackdist.version", "stackdist.lazy", "stackdist.input_names", "stackdist.output", "stackdist.guard"},
    {"stackdist.engine"},
    {"stackdist.traces"},
    {"stackdist.serving"},
    {"stackdist.planning"},
    {"stackdist.methods"},
    {"stackdist.render"},
    {"stackdist.cli", "stackdist", "stackdist.__main__"},
]


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()
# One worker parses the sources, once, when the first of these tests runs (not at collection).
pytestmark = pytest.mark.xdist_group("layout")


@functools.cache
def _trees() -> dict[str, ast.Module]:
    """Every module's syntax tree, parsed once per process."""
    return {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _package_of(module: str) -> str:
    is_package = MODULES[module].name == "__init__.py"
    return module if is_package else module.rpartition(".")[0]


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(module).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.cache
def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import in the module."""
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(_trees()[module]):
        if isinstance(node, ast.Import):
            out += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((sub, None, node.lineno) if sub in MODULES else (target, alias.name, node.lineno))
    return out


def _internal_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _name, _line in _imports(module):
            if target in MODULES and target != module:
                edges[module].add(target)
    return edges


def _layer(module: str) -> int | None:
    best = None
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (i, len(prefix))
    return None if best is None else best[0]


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the directed graph ``edges`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


def _without_self_reexports(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Drop a package's imports of its own submodules (re-exporting them is not a cycle)."""
    return {m: {n for n in targets if not n.startswith(m + ".")} for m, targets in edges.items()}


def test_no_import_cycles():
    cycle = find_cycle(_without_self_reexports(_internal_edges()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def private_uses(module: str, tree: ast.Module, imports: list[tuple[str, str | None, int]]) -> list[str]:
    """Every use in ``module`` of another module's private name: imported, or read as m._x."""
    bad = []
    for target, name, line in imports:
        last = target.rpartition(".")[2]
        if last.startswith("_") and not last.startswith("__"):
            bad.append(f"{module}:{line} imports private module {target}")
        if name and name.startswith("_") and not name.startswith("__") and target != module:
            bad.append(f"{module}:{line} imports {name} from {target}")
    imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            bad.append(f"{module}:{node.lineno} reads {node.value.id}.{node.attr}")
    return bad


def test_no_private_names_across_modules():
    bad = [use for module in MODULES for use in private_uses(module, _trees()[module], _imports(module))]
    assert not bad, "\n".join(bad)


def test_layers_import_downwards_and_stackdist_never_imports_kvlab():
    bad = []
    for module in MODULES:
        here = _layer(module)
        for target, _name, line in _imports(module):
            if module.startswith("stackdist") and target.split(".")[0] == "kvlab":
                bad.append(f"{module}:{line} imports {target}")
            there = _layer(target) if target.split(".")[0] == "stackdist" else None
            if here is not None and there is not None and there > here:
                bad.append(f"{module}:{line} (layer {here}) imports {target} (layer {there})")
    assert not bad, "\n".join(bad)


def test_standalone_lab_files_import_only_the_standard_library_and_each_other():
    names = {m.rpartition(".")[2] for m in STANDALONE}
    for module in STANDALONE:
        for target, _name, line in _imports(module):
            top = target.split(".")[0]
            ok = top in sys.stdlib_module_names or target in STANDALONE or top in names or top == "__future__"
            assert ok, f"{module}:{line} imports {target}"


def _is_lazy_reexport(node: ast.stmt) -> bool:
    """PEP 562 re-exporting: a module-level ``__getattr__`` / ``__dir__`` (defined, or made by
    :func:`stackdist.lazy.lazy_exports`), or imports under
    ``if TYPE_CHECKING:`` (the eager form, for type checkers)."""
    if isinstance(node, ast.FunctionDef):
        return node.name in ("__getattr__", "__dir__")
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):  # __getattr__, __dir__ = lazy_exports(...)
        names = [t.id for t in node.targets[0].elts if isinstance(t, ast.Name)]
        return sorted(names) == ["__dir__", "__getattr__"] and "lazy_exports" in ast.unparse(node.value)
    if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
        return not node.orelse and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body)
    return False


def test_package_inits_only_re_export():
    allowed = (ast.Import, ast.ImportFrom)
    for module, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        for node in _trees()[module].body:
            if isinstance(node, allowed) or isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue
            if _is_lazy_reexport(node):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else []
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            assert names and all(n.startswith("__") for n in names), f"{module}:{node.lineno} is not a re-export"


def engine_model_names(trees: dict[str, ast.Module]) -> set[str]:
    """The ``name`` of every class in ``stackdist.serving`` that subclasses ``EngineModel`` (from the source)."""
    names = set()
    for module, tree in trees.items():
        if not module.startswith("stackdist.serving"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("EngineModel") for b in node.bases):
                names |= {n.value.value for n in node.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                          and any(isinstance(t, ast.Name) and t.id == "name" for t in n.targets)}
    return names


def engine_name_comparisons(module: str, tree: ast.Module, names: set[str]) -> list[str]:
    """Every comparison in ``module`` of a string literal that names an engine model."""
    bad = []
    for node in ast.walk(tree):
        literals: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                literals += side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        elif isinstance(node, ast.MatchValue):
            literals.append(node.value)
        for lit in literals:
            if isinstance(lit, ast.Constant) and lit.value in names:
                bad.append(f"{module}:{lit.lineno} compares the engine model name {lit.value!r} (use the registry)")
    return bad


def test_engine_models_only_through_the_registry():
    names = engine_model_names(_trees())
    assert {"vllm", "sglang"} <= names
    bad = [use for module, tree in _trees().items() if not module.startswith("stackdist.serving")
           for use in engine_name_comparisons(module, tree, names)]
    assert not bad, "\n".join(bad)


FORMATS_MODULE = "stackdist.traces.formats"


def _format_names() -> set[str]:
    """The registered formats' names, from the registry's source: the first argument of every
    ``TraceFormat(...)`` in it."""
    return {node.args[0].value for node in ast.walk(_trees()[FORMATS_MODULE])
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "TraceFormat" and node.args
            and isinstance(node.args[0], ast.Constant)}


def format_comparisons(module: str, tree: ast.Module, names: set[str]) -> list[str]:
    """Every comparison in ``module`` of a value with a format's name (``==``, ``in`` a literal
    tuple, list or set...). ``tokens`` is also a unit: a comparison of a unit or a basis with it
    is not a format test."""
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        literals = {e.value for o in operands for e in (o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o])
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        others = " ".join(ast.unparse(o) for o in operands if not isinstance(o, (ast.Constant, ast.Tuple, ast.List, ast.Set)))
        if literals & names and not ("unit" in others or "basis" in others):
            bad.append(f"{module}:{node.lineno} compares with format {min(literals & names)!r}: {ast.unparse(node)}")
    return bad


def test_formats_are_told_apart_only_in_traces():
    names = _format_names()
    assert {"csv", "mooncake", "dynamo"} <= names
    bad = [use for module in MODULES if not module.startswith("stackdist.traces.")
           for use in format_comparisons(module, _trees()[module], names)]
    assert not bad, "\n".join(bad) + "\n(look the format up in the registry, stackdist/traces/formats.py)"


def test_the_rules_catch_what_they_forbid():
    """The checks can fail: made-up code with each forbidden thing is caught."""
    code = "from .curve import _Histogram\nfrom . import kernels as k\nk._prefix_sum(1)\nimport stackdist._io\n"
    tree = ast.parse(code)
    imports = [("stackdist.engine.curve", "_Histogram", 1), ("stackdist.engine.kernels", None, 2), ("stackdist._io", None, 4)]
    found = private_uses("stackdist.engine.tiers", tree, imports)
    assert len(found) == 3
    assert any("imports _Histogram" in f for f in found) and any("reads k._prefix_sum" in f for f in found)
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None
    assert find_cycle(_without_self_reexports({"p": {"p.x"}, "p.x": {"p"}})) is None
    assert _layer("stackdist.cli.plan") > _layer("stackdist.engine.curve") > _layer("stackdist.output.files")
    models = ast.parse("class M(engine_model.EngineModel):\n    name = 'm1'\nclass N(Other):\n    name = 'n1'\n")
    assert engine_model_names({"stackdist.serving.m": models, "stackdist.cli.x": models}) == {"m1"}
    code = ("run = a if model == 'vllm' else b\nx = m in ('engine', 'sglang')\nmatch m:\n    case 'vllm':\n        pass\n"
            "ok = m == 'engine' or m in ENGINE_MODELS\n")
    found = engine_name_comparisons("stackdist.planning.x", ast.parse(code), {"vllm", "sglang"})
    assert sorted(int(f.split(":")[1].split()[0]) for f in found) == [1, 2, 4]
    names = {"csv", "tokens", "mooncake"}
    code = ("if args.format == 'csv': pass\nok = fmt in ('mooncake', 'qwen')\nunit = budget.unit == 'tokens'\n"
            "x = 'csv' != kind\nfine = mode == 'fast'\n")
    found = format_comparisons("stackdist.cli.x", ast.parse(code), names)
    assert [f.split(" compares")[0] for f in found] == ["stackdist.cli.x:1", "stackdist.cli.x:2", "stackdist.cli.x:4"]


CLI = ("stackdist.cli", "stackdist.__main__")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# Error hints below cli/ written before the rule; each module may keep at most this many strings
# naming a flag, and the counts only go down (move the hint to the CLI when you touch the module).
FLAG_NAMES_BELOW_CLI = {
    "stackdist.guard": 2, "stackdist.input_names": 1, "stackdist.engine.scale.distributed": 2,
    "stackdist.traces.access": 2, "stackdist.traces.stream_input": 3, "stackdist.traces.counting": 4, "stackdist.traces.formats": 1,
    "stackdist.traces.hashed": 1, "stackdist.traces.logs.lmcache": 1, "stackdist.serving.routed": 1,
    "stackdist.planning.budgets": 1, "stackdist.planning.engine_plan": 3, "stackdist.planning.geometry": 5,
    "stackdist.planning.hardware": 4, "stackdist.planning.prices": 1, "stackdist.planning.routing": 4,
    "stackdist.render.plot": 3, "stackdist.render.table": 1,
}


def _below_cli(module: str) -> bool:
    return module.startswith("stackdist.") and not module.startswith(CLI)


def command_line_uses(module: str, tree: ast.Module) -> tuple[list[str], int]:
    """(uses of argparse or Namespace, count of string constants naming a flag) in ``module``."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "argparse" for a in node.names):
            bad.append(f"{module}:{node.lineno} imports argparse")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "argparse":
            bad.append(f"{module}:{node.lineno} imports from argparse")
        elif isinstance(node, ast.Name) and node.id == "Namespace" or isinstance(node, ast.Attribute) and node.attr == "Namespace":
            bad.append(f"{module}:{node.lineno} uses Namespace")
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    flags = sum(1 for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                and id(n) not in docstrings and FLAG.search(n.value))
    return bad, flags


def test_nothing_below_the_cli_knows_the_command_line():
    bad = []
    for module in MODULES:
        if not _below_cli(module):
            continue
        uses, flags = command_line_uses(module, _trees()[module])
        bad += uses
        if flags > FLAG_NAMES_BELOW_CLI.get(module, 0):
            bad.append(f"{module}: {flags} strings name a flag (at most {FLAG_NAMES_BELOW_CLI.get(module, 0)}); "
                       "say it in the CLI, or pass the name in")
    assert not bad, "\n".join(bad)


READERS = {("json", "load"), ("csv", "reader"), ("csv", "DictReader"), ("np", "load"), ("np", "loadtxt"),
           ("np", "genfromtxt"), ("np", "fromfile"), ("pickle", "load")}


def file_reads(module: str, tree: ast.Module) -> list[str]:
    """Every place ``module`` opens a file for reading or calls a file parser."""
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            modes = [n.value for n in ast.walk(mode) if isinstance(n, ast.Constant) and isinstance(n.value, str)] if mode else []
            if not modes or any(not set(m) & set("wax") for m in modes):
                bad.append(f"{module}:{node.lineno} opens a file for reading")
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in READERS:
            bad.append(f"{module}:{node.lineno} calls {f.value.id}.{f.attr}")
    return bad


def test_files_are_parsed_only_in_traces():
    bad = [use for module in MODULES if module.startswith("stackdist.") and not module.startswith("stackdist.traces")
           for use in file_reads(module, _trees()[module])]
    assert not bad, "\n".join(bad)


def test_kvlab_never_imports_the_stackdist_cli():
    bad = [f"{module}:{line} imports {target}" for module in MODULES if module.startswith("kvlab")
           for target, _name, line in _imports(module) if target.startswith(CLI)]
    assert not bad, "\n".join(bad)


def test_the_command_line_and_file_rules_catch_what_they_forbid():
    code = ("import argparse\ndef f(args: argparse.Namespace):\n    raise ValueError('use --kv-dtype')\n"
            "def g(p):\n    return open(p).read(), json.load(open(p, 'rb')), open(p, 'w'), np.load(p)\n")
    tree = ast.parse(code)
    uses, flags = command_line_uses("stackdist.planning.x", tree)
    assert len(uses) == 2 and flags == 1
    assert len(file_reads("stackdist.planning.x", tree)) == 4  # open, json.load and its open, np.load; not the write


def maths_imports(module: str, imports: list[tuple[str, str | None, int]]) -> list[str]:
    """Every import of numpy or numba in ``module`` (function-local ones too: ``_imports`` walks the whole tree)."""
    return [f"{module}:{line} imports {target}" for target, _name, line in imports if target.split(".")[0] in ("numpy", "numba")]


def test_the_cli_holds_no_maths():
    """``cli/`` parses, calls the library once and renders: it never imports numpy (nor numba)."""
    bad = [use for module in MODULES if module.startswith(CLI) for use in maths_imports(module, _imports(module))]
    assert not bad, "\n".join(bad)
    assert maths_imports("stackdist.cli.x", [("numpy", None, 2), ("stackdist.methods", "curve_of", 3)]) == \
        ["stackdist.cli.x:2 imports numpy"]
