"""GPU: the kernel cache across processes. A second process with the first one's snapshot compiles no
kernel of its own (every kernel comes from the cache, so nothing new is written or published)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from dynamo_nvf import nvf as nvf_env

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser"),
]

SCRIPT = textwrap.dedent("""
    import sys, torch, dynamo_nvf
    from dynamo_nvf.runtime import kernel_cache as kc

    def f(x, w):
        y = torch.nn.functional.gelu(x @ w) * 2.0
        return torch.nn.functional.layer_norm(y, y.shape[-1:]) + torch.sigmoid(y).sum(-1, keepdim=True)

    x, w = torch.randn(64, 256, device="cuda"), torch.randn(256, 256, device="cuda")
    out = torch.compile(f, backend="nvf_bookend", options={"kernel_cache": True, "kernel_cache_dir": sys.argv[1]})(x, w)
    torch.testing.assert_close(out, f(x, w), rtol=1e-4, atol=1e-4)
    cache = kc._ACTIVE
    print("KERNELS", cache.start_entries, kc.entries(cache.db))
""")


def _run(root: str) -> tuple[int, int]:
    result = subprocess.run([sys.executable, "-c", SCRIPT, root], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONUNBUFFERED": "1",  # this checkout, installed or not
                                 "PYTHONPATH": os.pathsep.join(filter(None, [
                                     os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                     os.environ.get("PYTHONPATH")]))})
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("KERNELS"))
    start, end = map(int, line.split()[1:])
    return start, end


def test_second_process_compiles_no_kernel(tmp_path):
    from dynamo_nvf.runtime import kernel_cache as kc

    start, end = _run(str(tmp_path))
    assert start == 0 and end > 0
    snapshots = list(tmp_path.glob("*/snapshots/*"))
    assert len(snapshots) == 1 and kc.entries(snapshots[0] / kc.DB_DIR) == end
    again_start, again_end = _run(str(tmp_path))
    assert again_start == end and again_end == end  # all hits: nothing compiled, nothing written
    assert len(list(tmp_path.glob("*/snapshots/*"))) == 1
