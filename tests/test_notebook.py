"""examples/explain.ipynb runs, top to bottom, in a fresh kernel (on the CPU here), so it never rots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the test extra: pip install -e '.[test]'")
nbclient = pytest.importorskip("nbclient", reason="needs the test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "explain.ipynb"


def _outputs(cell) -> list[dict]:
    return list(cell.get("outputs", []))


def test_example_notebook_runs(monkeypatch):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not _outputs(c) for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    # The kernel imports this checkout's dynamo_nvf, whatever is installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=300,
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError on any error, with the cell and its traceback

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in _outputs(c)]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "gradients match eager" in text
    assert "def forward(self" in text and "torch.ops.aten." in text  # a region's FX code
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert len(html) == 1 and html[0].count("<svg") == 2  # the report: forward and backward graphs
    svgs = [o["data"]["image/svg+xml"] for o in outputs if "image/svg+xml" in o.get("data", {})]
    assert len(svgs) == 2 and all('class="node region"' in s and "trimmed" in s for s in svgs)
