"""On the GPU: with static_resize_sizes, an f32 attention block with RoPE trains on nvFuser, its RoPE
backward regions (pads of the rotated halves) defined with concrete sizes, with no region falling back
to eager, at three sequence lengths (the second and third through a dynamic-shape graph, so each
length needs its own definition). The program runs in a subprocess, so a crash fails the test, not
the suite."""

from __future__ import annotations

import textwrap

import pytest

from dynamo_nvf import nvf as nvf_env
from helpers import assert_child_prints_ok

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser"),
]

ROPE_ATTENTION_TRAINING = textwrap.dedent("""
    import copy
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import dynamo_nvf
    from dynamo_nvf import STATS

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    HEADS, HEAD_DIM = 2, 64
    DIM = HEADS * HEAD_DIM

    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat([-x[..., half:], x[..., :half]], dim=-1)

    def rope_tables(seq):
        inv = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2, device="cuda").float() / HEAD_DIM))
        angles = torch.outer(torch.arange(seq, device="cuda").float(), inv)
        emb = torch.cat([angles, angles], dim=-1)
        return emb.cos(), emb.sin()

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(DIM)
            self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
            self.out = nn.Linear(DIM, DIM, bias=False)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm(x)).view(b, s, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return x + self.out(o.transpose(1, 2).reshape(b, s, DIM))

    model = Attention().cuda()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="nvf_bookend", options={"static_resize_sizes": True})
    STATS.reset()
    with dynamo_nvf.recording() as rec:
        for seq in (256, 128, 192):
            cos, sin = rope_tables(seq)
            x = torch.randn(1, seq, DIM, device="cuda", requires_grad=True)
            x_eager = x.detach().clone().requires_grad_()
            grad = torch.randn(1, seq, DIM, device="cuda")
            out = compiled(x, cos, sin)
            out.backward(grad)
            expected = eager(x_eager, cos, sin)
            expected.backward(grad)
            torch.testing.assert_close(out, expected, rtol=2e-4, atol=2e-4)
            torch.testing.assert_close(x.grad, x_eager.grad, rtol=2e-4, atol=2e-4)
            for (name, p), q in zip(model.named_parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=2e-4, atol=2e-4, msg=lambda m: f"{name}: {m}")
            model.zero_grad(set_to_none=True)
            eager.zero_grad(set_to_none=True)
    regions = [r for p in rec.plans for r in p.regions]
    concrete = [r for r in regions if r.static_sizes]
    assert any("aten.constant_pad_nd.default" in r.ops for r in concrete), [r.ops for r in regions]
    assert all(r.calls_nvfuser > 0 for r in concrete), [(r.name, r.calls_nvfuser) for r in concrete]
    assert STATS.fallbacks == 0 and all(r.executor == "nvfuser" and r.calls_eager == 0 for r in regions), \\
        [(r.name, r.executor, r.executor_reason) for r in regions if r.executor != "nvfuser" or r.calls_eager]
    print("ok")
""")


def test_rope_attention_trains_on_nvfuser_with_concrete_sizes():
    assert_child_prints_ok(ROPE_ATTENTION_TRAINING, timeout=600)
