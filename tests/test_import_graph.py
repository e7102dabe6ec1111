"""The modules of dynamo_nvf import each other without a circle.

A circle works only by the order modules happen to be imported in (a lazy import inside a function
hides it until that function runs), so the module graph is read statically: every import statement,
at module level, inside functions and under TYPE_CHECKING.

An import `from dynamo_nvf.a import b` is an edge to `dynamo_nvf.a.b` when that is a module, else to
`dynamo_nvf.a`. Python also runs the `__init__` of every parent package first; those implicit imports
are not edges (else every module would close a circle through `dynamo_nvf/__init__.py`, which imports
the public API). A submodule that imports the package itself (`from dynamo_nvf import explain`) is an
edge to `dynamo_nvf` and so a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "dynamo_nvf"
ROOT = Path(__file__).resolve().parent.parent


def _module_files(root: Path, package: str) -> dict[str, Path]:
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _absolute(module: str, node: ast.ImportFrom, modules: dict[str, Path]) -> str:
    """The absolute module named by a (possibly relative) `from ... import`."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module, modules):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of the package that `module` imports anywhere in its source."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node, modules)
            names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                     for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in modules)
    found.discard(module)
    return found


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """Each module of `package` (under `root`) -> the modules of the package it imports."""
    modules = _module_files(root, package)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def test_no_import_circle_in_the_package():
    graph = import_graph()
    assert "dynamo_nvf.backend" in graph and "dynamo_nvf.ops.registry" in graph
    cycles = find_cycles(graph)
    assert cycles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_two_former_circles_are_gone():
    graph = import_graph()
    assert "dynamo_nvf.reporting" not in graph["dynamo_nvf.backend"]
    assert "dynamo_nvf.lowering" not in graph["dynamo_nvf.ops.registry"]


@pytest.mark.parametrize("source, expected", [
    # A lazy import inside a function, and one under TYPE_CHECKING, both close a circle.
    ({"a.py": "def f():\n    from pkg import b\n", "b.py": "import pkg.a\n"}, [["pkg.a", "pkg.b"]]),
    ({"a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import X\n",
      "b.py": "from pkg.a import Y\n"}, [["pkg.a", "pkg.b"]]),
    # A submodule importing a name of the package itself closes a circle through __init__.
    ({"__init__.py": "from pkg.a import f\n", "a.py": "from pkg import g\n"}, [["pkg", "pkg.a"]]),
    # Relative imports; a parent package's __init__ is not an edge of its submodules.
    ({"__init__.py": "from pkg.sub.c import f\n", "sub/__init__.py": "", "sub/c.py": "from . import d\n",
      "sub/d.py": "from ..a import x\n", "a.py": "y = 1\n"}, []),
    ({"sub/__init__.py": "", "sub/c.py": "from .d import f\n", "sub/d.py": "from .c import g\n"},
     [["pkg.sub.c", "pkg.sub.d"]]),
])
def test_the_checker_sees_circles(tmp_path, source, expected):
    files = {"__init__.py": "", **source}
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert find_cycles(import_graph(tmp_path, "pkg")) == expected
