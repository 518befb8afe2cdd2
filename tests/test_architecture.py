"""The layout of harness/ as a contract: each sub-package is a layer, and a layer imports only layers below it.

    core < measurement < backends < deploy < analysis < collect < run < report < cli

Every import counts, those inside functions too (a lazy import is still a dependency). The asv suite
(benchmarks/) may import only harness.core and harness.run: asv imports it in processes that must not touch
CUDA, and run.suite imports nothing heavy until called. docs/architecture.md explains the order.

Inside the layers, modules are cut by concern: no import cycle between two modules (lazy and TYPE_CHECKING imports
count), no two modules of one base name, no private name (a leading underscore) used from another module, and no
run-time import (importlib) of the asv suite.

A module is at most 400 lines: larger, it is split by concern; a small concern stays a small module.
Package files (__init__.py, __main__.py) are exempt; any other exception is listed in SIZE_EXCEPTIONS with a reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "measurement", "backends", "deploy", "analysis", "collect", "run", "report", "cli")
# Modules left at the top of harness/, with the layer they belong to and why they are not inside it.
TOP_LEVEL = {
    "harness": "core",  # the package itself: __version__ only
    # asv.conf.json names the plugin ".harness.asvplugin" (in a checkout and in the wheel's shipped copy), so
    # its import name is part of the asv configuration users hold; it serves `convbench bench` (run layer)
    "harness.asvplugin": "run",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "harness").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Absolute names of the harness modules (or names inside them) ``path`` imports, anywhere in the file."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:  # `from . import x` imports the module x when there is one
                sub = f"{module}.{a.name}"
                found.add(sub if sub in MODULES else module)
    return {m for m in found if m == "harness" or m.startswith("harness.")}


def layer(module: str) -> str:
    while module not in MODULES and "." in module:
        module = module.rpartition(".")[0]  # a name inside a module: the module's layer
    if module in TOP_LEVEL:
        return TOP_LEVEL[module]
    parts = module.split(".")
    assert len(parts) >= 2 and parts[1] in LAYERS, f"{module} is in no layer: put it in a sub-package"
    return parts[1]


def test_every_module_is_in_a_layer():
    for name in MODULES:
        assert layer(name) in LAYERS, name


def test_no_layer_imports_a_layer_above_it():
    upward = []
    for name, path in MODULES.items():
        mine = LAYERS.index(layer(name))
        for target in _imports(name, path):
            if LAYERS.index(layer(target)) > mine:
                upward.append(f"{name} ({layer(name)}) imports {target} ({layer(target)})")
    assert not upward, "\n".join(upward)


def test_no_import_cycle_between_sub_packages():
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges.setdefault(layer(name), set()).update(layer(t) for t in _imports(name, path) if layer(t) != layer(name))

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in edges.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = [pkg for pkg in edges if reaches(pkg, pkg, {pkg})]
    assert not cycles, cycles


def test_the_asv_suite_imports_only_the_core_and_the_run_layer():
    wrong = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for module in names:
                if module.split(".")[0] == "harness" and layer(module) not in ("core", "run"):
                    wrong.append(f"{path.name}: {module}")
                if module == "harness":
                    wrong.append(f"{path.name}: import harness (name the layer)")
    assert not wrong, wrong


def test_the_core_imports_neither_torch_nor_another_layer():
    heavy = {"torch", "onnxruntime", "onnx", "numpy", "jinja2", "docker", "pynvml", "sqlite3", "asv"}
    for name, path in MODULES.items():
        if layer(name) != "core" or name == "harness":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert not roots & heavy, f"{name} imports {roots & heavy}"


def test_the_library_does_not_import_the_asv_suite():
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("benchmarks"):
                raise AssertionError(f"{name} imports {node.module}")
            if isinstance(node, ast.Import) and any(a.name.startswith("benchmarks") for a in node.names):
                raise AssertionError(f"{name} imports the asv suite")


MODULE_LINES = 400  # a ceiling only: a module is cut by its concern, and a small concern is a small module
# Modules over MODULE_LINES, each with the reason it stays so; a module that comes back within range is removed.
SIZE_EXCEPTIONS: dict[str, str] = {}  # none since report/model.py was split (judging.py, reading.py)


def test_no_module_is_over_400_lines():
    high = MODULE_LINES
    wrong, stale = [], []
    for name, path in MODULES.items():
        if path.name in ("__init__.py", "__main__.py"):
            continue
        n = len(path.read_text().splitlines())
        inside = n <= high
        if name in SIZE_EXCEPTIONS:
            if inside:
                stale.append(f"{name} ({n} lines) is within {high}: drop it from SIZE_EXCEPTIONS")
        elif not inside:
            wrong.append(f"{name}: {n} lines, over {high}")
    stale += [f"{name} is in SIZE_EXCEPTIONS but no module" for name in SIZE_EXCEPTIONS if name not in MODULES]
    assert not wrong and not stale, "\n".join(wrong + stale)


# ---- modules cut by concern -------------------------------------------------------------------------------------

def _module_graph() -> dict[str, set[str]]:
    """Each harness module and the harness modules it imports by name, lazily or under TYPE_CHECKING too (a
    package's __init__ is imported only where it is named, not for every submodule it holds)."""
    return {name: {t for t in _imports(name, path) if t in MODULES and t != name} for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle_through_three_modules():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    cycles = _cycles(_module_graph())
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_no_two_modules_share_a_base_name():
    by_base: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        if path.name not in ("__init__.py", "__main__.py"):
            by_base.setdefault(path.stem, []).append(name)
    same = {base: names for base, names in by_base.items() if len(names) > 1}
    assert not same, same


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_imports(name: str, path: Path) -> list[str]:
    """Private names ``path`` takes from another harness module: imported by name, or read as an attribute of a
    harness module it imported."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    modules: dict[str, str] = {}  # local name -> harness module it is bound to
    wrong = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                module = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not module.startswith("harness"):
                continue
            for a in node.names:
                if f"{module}.{a.name}" in MODULES:
                    modules[a.asname or a.name] = f"{module}.{a.name}"
                elif _private(a.name) and module != name:
                    wrong.append(f"{name}: from {module} import {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES and a.asname:
                    modules[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr) \
                and modules.get(node.value.id, name) != name:
            wrong.append(f"{name}: {modules[node.value.id]}.{node.attr}")
    return wrong




def test_no_private_name_is_imported_across_modules():
    """A name another module needs is public (no leading underscore): a private one is the module's own."""
    found = {w for name, path in MODULES.items() for w in _private_imports(name, path)}
    assert not found, "\n".join(sorted(found))


# Modules that import by name at run time (importlib), each with what it imports; none may load the asv suite.
IMPORTLIB_USERS = {
    "harness.cli": "the command families of COMMAND_MODULES (a build may leave one out)",
    "harness.run.runners": "a slice runner named 'harness.module:Name' (the pool's worker process)",
}


def _uses_importlib(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in ("importlib", "runpy") for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("importlib", "runpy"):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__" and \
                not (node.args and isinstance(node.args[0], ast.Constant)):  # __import__("torchvision") is plain
            return True
    return False


def _names_the_suite(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value.startswith(("benchmarks", "bench_")) or node.value.rstrip("./") == "benchmarks"):
            return True
    return False


def test_no_importlib_of_the_asv_suite():
    """The library learns nothing by importing the asv suite (asv imports it, in processes of its own); a run-time
    import is only where IMPORTLIB_USERS says why, and never of the suite."""
    users = {name for name, path in MODULES.items() if _uses_importlib(path)}
    assert users <= set(IMPORTLIB_USERS), users - set(IMPORTLIB_USERS)
    loaders = {name for name in users if _names_the_suite(MODULES[name])}
    assert not loaders, loaders


def test_the_suite_detector_sees_a_run_time_import_of_the_suite(tmp_path):
    loader = tmp_path / "loader.py"
    loader.write_text('import importlib\n\n\ndef load(stem):\n    return importlib.import_module(f"benchmarks.{stem}")\n')
    plain = tmp_path / "plain.py"
    plain.write_text('import json\nprint(__import__("json").dumps(1))\n')
    assert _uses_importlib(loader) and _names_the_suite(loader)
    assert not _uses_importlib(plain) and not _names_the_suite(plain)
