"""Every script under scripts/ takes `--help` (argparse) and has its line in docs/scripts.md; the
nvFuser reproducers under scripts/nvfuser_repros/ import nothing of this repository (an upstream
report must run with torch and nvfuser_direct alone) and say what, expected, actual and versions.
Read with `ast`, so no script runs here (most need a GPU)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "scripts").rglob("*.py"))
REPROS = sorted((ROOT / "scripts" / "nvfuser_repros").glob("*.py"))
DOC = (ROOT / "docs" / "scripts.md").read_text()


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." if node.level else (node.module or "").split(".")[0])
    return names


def test_there_are_scripts_and_repros():
    assert len(SCRIPTS) > len(REPROS) >= 3


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_script_has_help_and_a_line_in_the_docs(path):
    tree = _tree(path)
    parsers = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
               and getattr(n.func, "attr", getattr(n.func, "id", None)) == "ArgumentParser"]
    assert parsers, f"{path.name}: no argparse.ArgumentParser (every script takes --help)"
    assert ast.get_docstring(tree), f"{path.name}: no module docstring"
    assert f"`{path.name}" in DOC or f"scripts/{path.name}" in DOC, f"{path.name} is not in docs/scripts.md"


@pytest.mark.parametrize("path", REPROS, ids=lambda p: p.name)
def test_repro_is_standalone_and_reads_as_a_bug_report(path):
    tree = _tree(path)
    imported = _imported(tree)
    assert "nvfuser_direct" in imported
    local = imported & {"dynamo_nvf", "perf", "scripts", "tests", "helpers", "."}
    assert not local, f"{path.name} imports {sorted(local)}: a reproducer runs with torch and nvfuser_direct alone"
    # subprocess: a crash reproducer runs each variant in a child, so that one crash does not end the report
    # (os, re, shutil: one that finds compute-sanitizer, runs the child under it and reads its summary).
    allowed = {"__future__", "argparse", "collections", "os", "re", "shutil", "statistics", "subprocess", "sys",
               "time", "typing", "torch", "nvfuser_direct"}
    assert imported <= allowed, f"{path.name} imports {sorted(imported - allowed)}"
    doc = ast.get_docstring(tree) or ""
    for part in ("**What:**", "**Expected:**", "**Actual", "**Versions:**", "nvfuser_direct 0.2.36"):
        assert part in doc, f"{path.name}: the docstring has no {part}"
    assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
