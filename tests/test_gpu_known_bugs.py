"""On the GPU: regions nvFuser is known to crash on reach it cut so that it compiles them
(passes/known_bugs.py). Each program runs in a subprocess, so a crash fails the test, not the suite."""

from __future__ import annotations

import textwrap

import pytest

from dynamo_nvf import nvf as nvf_env
from helpers import assert_child_prints_ok

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser"),
]

GROUPED_KEY_ROPE = textwrap.dedent("""
    import torch
    import dynamo_nvf
    from dynamo_nvf import STATS
    from dynamo_nvf.passes.known_bugs import REDUCTION_RESIZE_JOIN

    def grouped_key_rope(k, cos, sin):
        b, h, s, d = k.shape
        kv = k.view(b, 2, h // 2, s, d).sum(2)
        half = d // 2
        return kv * cos + torch.cat([-kv[..., half:], kv[..., :half]], dim=-1) * sin

    compiled = torch.compile(grouped_key_rope, backend="nvf_bookend", options={"strict": True})
    with dynamo_nvf.recording() as rec:
        for _ in range(3):  # fresh inputs each call
            args = (torch.randn(1, 8, 256, 64, device="cuda", dtype=torch.bfloat16),
                    torch.randn(256, 64, device="cuda", dtype=torch.bfloat16),
                    torch.randn(256, 64, device="cuda", dtype=torch.bfloat16))
            out = compiled(*args)
            ref = grouped_key_rope(*(a.double() for a in args))
            torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())
            assert out.stride() == grouped_key_rope(*args).stride()
    cut = [r for p in rec.plans for r in p.regions if any(REDUCTION_RESIZE_JOIN in b for b in r.boundary)]
    assert len(cut) == 1, [r.boundary for p in rec.plans for r in p.regions]
    assert all(r.executor == "nvfuser" for p in rec.plans for r in p.regions), \\
        [(r.executor, r.executor_reason) for p in rec.plans for r in p.regions]
    print("ok")
""")


def test_grouped_key_rope_is_cut_and_runs_on_nvfuser():
    assert_child_prints_ok(GROUPED_KEY_ROPE, timeout=300)


BATCH_NORM_SQUEEZE_EXCITE = textwrap.dedent("""
    import os
    import torch
    import dynamo_nvf
    from dynamo_nvf.passes.known_bugs import STATISTICS_BESIDE_PARTIAL_REDUCTION

    if os.environ.get("KNOWN_BUG_GUARD_OFF"):  # shows the memcheck errors the guard prevents
        import dynamo_nvf.passes.known_bugs as known_bugs
        known_bugs.statistics_beside_partial_reduction = lambda members: None

    class Block(torch.nn.Module):  # regnety's: conv, BatchNorm, ReLU, squeeze-excitation
        def __init__(self, c):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)
            self.fc = torch.nn.Conv2d(c, c, 1)
        def forward(self, x):
            y = torch.relu(self.bn(self.conv(x)))
            return y * torch.sigmoid(self.fc(y.mean((2, 3), keepdim=True)))

    torch.manual_seed(0)
    model = Block(48).cuda().to(torch.bfloat16).to(memory_format=torch.channels_last)
    eager = Block(48).cuda().to(torch.bfloat16).to(memory_format=torch.channels_last)
    eager.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="nvf_bookend")
    with dynamo_nvf.recording() as rec:
        for _ in range(2):
            x = torch.randn(64, 48, 56, 56, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
            out, ref = compiled(x), eager(x)
            out.float().square().mean().backward()
            ref.float().square().mean().backward()
            torch.testing.assert_close(out, ref, rtol=2e-2, atol=5e-2)
    torch.cuda.synchronize()
    torch.testing.assert_close(model.bn.running_mean, eager.bn.running_mean, rtol=2e-2, atol=1e-2)
    torch.testing.assert_close(model.bn.running_var, eager.bn.running_var, rtol=2e-2, atol=1e-2)
    forward = [p for p in rec.plans if p.kind == "forward"]
    assert forward and not [r for p in forward for r in p.regions
                            if "aten.var_mean.correction" in r.ops and "aten.mean.dim" in r.ops]
    print("ok")
""")


def _sanitizer() -> str:
    import os
    import shutil

    return shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda-13.0/bin/compute-sanitizer")
         if os.path.exists(p)), "")


@pytest.mark.skipif(not _sanitizer(), reason="needs compute-sanitizer")
def test_batch_norm_with_a_pool_after_it_writes_nothing_out_of_bounds():
    """A BatchNorm training forward whose output a squeeze-excitation block pools: nvFuser 0.2.36 wrote
    past the running statistics in regnety's fusion of both; memcheck (each tensor its own allocation)
    finds no invalid access now, and values and running statistics match eager. With the cut turned off
    (KNOWN_BUG_GUARD_OFF=1) this block's fused region failed nvFuser's compile instead (an expr_sort
    assert, H100, 2026-11-26) and the plan check fails."""
    import subprocess
    import sys

    from helpers import REPO, env_with_repo

    proc = subprocess.run([_sanitizer(), "--tool", "memcheck", "--print-limit", "3", sys.executable, "-c",
                           BATCH_NORM_SQUEEZE_EXCITE], cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**env_with_repo(), "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    assert proc.returncode == 0 and "ok" in proc.stdout.splitlines(), f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "ERROR SUMMARY: 0 errors" in proc.stdout, proc.stdout[-3000:]
