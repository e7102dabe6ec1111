"""No import circle anywhere in the repository: dynamo_nvf/, perf/, scripts/ and tests/.

A circle works only by the order modules happen to be imported in (a lazy import inside a function
hides it until that function runs), so the module graph is read statically: every import statement,
at module level, inside functions and under TYPE_CHECKING. A function-level import counts because
it closes the circle as soon as that function runs, whatever imported first.

Modules: the packages `dynamo_nvf` and `perf` by their dotted names; the files under `scripts/` and
`tests/` as top-level modules of their own directory (that directory is on sys.path when they run:
`python scripts/x.py`, and tests/conftest.py adds tests/), written `tests:helpers` here. An import in
a script or test resolves to a module of its own directory first, then to the packages.

An import `from dynamo_nvf.a import b` is an edge to `dynamo_nvf.a.b` when that is a module, else to
`dynamo_nvf.a`. Python also runs the `__init__` of every parent package first; those implicit imports
are not edges (else every module would close a circle through `dynamo_nvf/__init__.py`, which imports
the public API). A submodule that imports the package itself (`from dynamo_nvf import explain`) is an
edge to `dynamo_nvf` and so a circle. Imports by a string (`importlib`, `python -m`, subprocesses)
are not edges.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional

import pytest

PACKAGES = ("dynamo_nvf", "perf")
SCRIPT_DIRS = ("scripts", "tests")
ROOT = Path(__file__).resolve().parent.parent


def _dotted(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_files(root: Path, packages: tuple[str, ...], script_dirs: tuple[str, ...]) -> dict[str, tuple[Path, str]]:
    """Module name -> (file, the script directory it belongs to, or "" for a package module)."""
    modules: dict[str, tuple[Path, str]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            modules[_dotted(path, root)] = (path, "")
    for folder in script_dirs:
        for path in sorted((root / folder).rglob("*.py")):
            modules[f"{folder}:{_dotted(path, root / folder)}"] = (path, folder)
    return modules


def _absolute(module: str, node: ast.ImportFrom, modules: dict[str, tuple[Path, str]]) -> str:
    """The absolute module named by a (possibly relative) `from ... import`."""
    if node.level == 0:
        return node.module or ""
    path, folder = modules[module]
    base = module.split(":")[-1].split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    name = ".".join(base + ([node.module] if node.module else []))
    return f"{folder}:{name}" if folder else name


def _resolve(name: str, folder: str, modules: dict[str, tuple[Path, str]]) -> Optional[str]:
    """The repository module an absolute import name means from a file of `folder` ("" for a package)."""
    if ":" in name:  # already resolved (a relative import inside a script directory)
        return name if name in modules else None
    if folder and f"{folder}:{name}" in modules:
        return f"{folder}:{name}"
    if name in modules and not modules[name][1]:
        return name
    return None


def _imports(module: str, modules: dict[str, tuple[Path, str]]) -> set[str]:
    """Modules of the repository that `module` imports anywhere in its source."""
    path, folder = modules[module]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [_resolve(alias.name, folder, modules) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node, modules)
            targets = [_resolve(f"{source}.{alias.name}", folder, modules) or _resolve(source, folder, modules)
                       for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t is not None)
    found.discard(module)
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES,
                 script_dirs: tuple[str, ...] = SCRIPT_DIRS) -> dict[str, set[str]]:
    """Each module of the repository (under `root`) -> the repository's modules it imports."""
    modules = _module_files(root, packages, script_dirs)
    return {name: _imports(name, modules) for name in modules}


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


def test_no_import_circle_in_the_repository():
    graph = import_graph()
    for module in ("dynamo_nvf.backend", "dynamo_nvf.ops.registry", "perf.report", "tests:helpers",
                   "scripts:nvf_trace"):
        assert module in graph, module
    assert "tests:helpers" in graph["tests:test_distributed_cpu"]
    assert "perf.models" in graph["perf.distributed"] and "dynamo_nvf" in graph["scripts:block_kernels"]
    cycles = find_cycles(graph)
    assert cycles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_two_former_circles_are_gone():
    graph = import_graph()
    assert "dynamo_nvf.reporting" not in graph["dynamo_nvf.backend"]
    assert "dynamo_nvf.lowering" not in graph["dynamo_nvf.ops.registry"]
    assert "perf.report" not in graph["perf.acceptance"]


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
    assert find_cycles(import_graph(tmp_path, ("pkg",), ())) == expected


@pytest.mark.parametrize("source, expected", [
    # Two test files importing each other by their top-level names.
    ({"tests/a.py": "import b\n", "tests/b.py": "def f():\n    from a import g\n"}, [["tests:a", "tests:b"]]),
    # A script's own directory first: `import helpers` in scripts/ is scripts/helpers.py, not tests/'s.
    ({"tests/helpers.py": "import pkg.a\n", "scripts/helpers.py": "", "scripts/run.py": "import helpers\n",
      "pkg/a.py": "from pkg import b\n", "pkg/b.py": ""}, []),
    # A package module importing a script module's name reaches nothing (scripts are not on its path).
    ({"scripts/tool.py": "import pkg.a\n", "pkg/a.py": "import tool\n"}, []),
    # A circle through a package and a test's helper.
    ({"tests/helpers.py": "from pkg.a import f\n", "tests/test_x.py": "import helpers\n",
      "pkg/a.py": "import pkg.b\n", "pkg/b.py": "import pkg.a\n"}, [["pkg.a", "pkg.b"]]),
])
def test_the_checker_sees_scripts_and_tests(tmp_path, source, expected):
    files = {"pkg/__init__.py": "", **source}
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in ("scripts", "tests"):
        (tmp_path / folder).mkdir(exist_ok=True)
    assert find_cycles(import_graph(tmp_path, ("pkg",), ("scripts", "tests"))) == expected
