"""On the GPU: a region nvFuser 0.2.36 fails to compile whole (a bf16 cross-entropy over a 50257-word
vocabulary, scripts/nvfuser_repros/cross_entropy_vectorized_reduction.py) runs as pieces, every piece
on nvFuser, with eager's loss and logits gradient. Should nvFuser compile the whole region, it runs
whole and the test still holds; it fails where any region or piece runs in eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import recording

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser"),
]

ROWS, VOCAB = 2048, 50257


def _cross_entropy(logits, labels):
    return F.cross_entropy(logits.float(), labels)


def test_cross_entropy_region_nvfuser_fails_runs_as_pieces_on_nvfuser():
    torch._dynamo.reset()
    compiled = torch.compile(_cross_entropy, backend="nvf_bookend")
    with recording() as rec:
        for _ in range(2):  # fresh inputs each call: the pieces' fusions are reused
            logits = torch.randn(ROWS, VOCAB, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            labels = torch.randint(0, VOCAB, (ROWS,), device="cuda")
            reference = logits.detach().clone().requires_grad_(True)
            loss = compiled(logits, labels)
            loss.backward()
            expected = _cross_entropy(reference, labels)
            expected.backward()
            torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(logits.grad, reference.grad, rtol=1.6e-2, atol=1e-5)
    regions = [r for plan in rec.plans for r in plan.regions]
    assert regions
    for region in regions:
        assert region.executor in ("nvfuser", "pieces"), (region.name, region.executor, region.executor_reason)
        for piece in region.pieces:
            assert piece.executor == "nvfuser" and not piece.calls_eager, (piece.name, piece.executor_reason)
