"""examples/explain.ipynb runs, top to bottom, in a fresh kernel, so it never rots: on the CPU in the
CPU suite, and with nvFuser's segments on a GPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dynamo_nvf import nvf as nvf_env

nbformat = pytest.importorskip("nbformat", reason="needs the test extra: pip install -e '.[test]'")
nbclient = pytest.importorskip("nbclient", reason="needs the test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "explain.ipynb"


def _execute(monkeypatch) -> list[dict]:
    """Runs the notebook in a fresh python3 kernel; returns every output of its code cells."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit it without outputs"
    # The kernel imports this checkout's dynamo_nvf, whatever is installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=300,
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError on any error, with the cell and its traceback
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _stream(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream")


def test_example_notebook_runs(monkeypatch):
    outputs = _execute(monkeypatch)
    text = _stream(outputs)
    assert "gradients match eager" in text
    assert "def forward(self" in text and "torch.ops.aten." in text  # a region's FX code
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert len(html) == 1 and html[0].count("<svg") == 2  # the report: forward and backward graphs
    svgs = [o["data"]["image/svg+xml"] for o in outputs if "image/svg+xml" in o.get("data", {})]
    assert len(svgs) == 2 and all('class="node region"' in s and "trimmed" in s for s in svgs)


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_example_notebook_shows_segments_on_the_gpu(monkeypatch):
    outputs = _execute(monkeypatch)
    text = _stream(outputs)
    assert "device: cuda" in text and "gradients match eager" in text
    assert "segment(s)" in text and "segment 0:" in text, text[-3000:]
    svgs = [o["data"]["image/svg+xml"] for o in outputs if "image/svg+xml" in o.get("data", {})]
    assert all('class="segments"' in s for s in svgs)
