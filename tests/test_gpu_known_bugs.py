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
