"""An embedding whose gathered rows leave their region (saved for the backward) runs in ATen.

nvFuser 0.2.36 faulted (illegal memory access, a dead CUDA context) on the forward region of a
BERT-style training step at 16 x 256 tokens, where the region wrote the gathered word and position
rows for the backward; with ATen's embedding it ran (H100, 2026-11-23, scripts/fallback_repro.py).
Inference, where the rows stay inside the region, keeps the fused gather.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from dynamo_nvf.backend import recording
from dynamo_nvf.passes.partition import GATHER_OUTPUT_REASON
from helpers import DEVICES, assert_as_close_as_eager, assert_same, compile_fn, device_options


class Embeddings(nn.Module):
    """BERT's input layer: word plus position embeddings, then LayerNorm."""

    def __init__(self, vocab: int, seq: int, d: int, dtype: torch.dtype, device: str) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, d, dtype=dtype, device=device)
        self.position = nn.Embedding(seq, d, dtype=dtype, device=device)
        self.norm = nn.LayerNorm(d, dtype=dtype, device=device)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(self.word(ids) + self.position(positions))


def _run(device: str, train: bool, batch: int, seq: int, d: int, dtype=torch.float32, **options):
    torch.manual_seed(0)
    model = Embeddings(512, seq, d, dtype, device)
    ids = torch.randint(0, 512, (batch, seq), device=device)
    reference = copy.deepcopy(model).float()
    compiled = compile_fn(model, {**device_options(device, strict=True), **options})
    with torch.set_grad_enabled(train), recording() as rec:
        out = compiled(ids)
        ref = model(ids)
        assert_same(out, ref)
        if train:
            g = torch.randn_like(ref)
            got = torch.autograd.grad(out, list(model.parameters()), g)
            want = torch.autograd.grad(ref, list(model.parameters()), g)
            exact = torch.autograd.grad(reference(ids), list(reference.parameters()), g.float())
            for a, b, r in zip(got, want, exact):
                if dtype == torch.float32:
                    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
                else:  # bf16 sums over 4096 rows: judged against an f32 reference, as eager is
                    assert_as_close_as_eager(a, b, r)
    return rec.plans


def _embedding_nodes(plan):
    return [n for n in plan.nodes if n.op == "aten.embedding.default"]


def test_training_keeps_saved_gathers_in_aten_with_the_reason():
    # With the LayerNorm decomposed in the joint graph, min-cut saves the gathered rows.
    plans = _run("cpu", True, 2, 16, 32, torch.bfloat16)
    forward = next(p for p in plans if p.kind == "forward")
    nodes = _embedding_nodes(forward)
    assert nodes and all(n.region is None and n.reason == GATHER_OUTPUT_REASON for n in nodes), nodes
    assert forward.regions and "aten.var_mean.correction" in forward.regions[0].ops


def test_inference_keeps_the_fused_gather():
    (plan,) = _run("cpu", False, 2, 16, 32, torch.bfloat16)
    nodes = _embedding_nodes(plan)
    assert nodes and all(n.region is not None for n in nodes), nodes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_training_step_runs_and_matches_eager(device, dtype):
    """The faulting size (16 x 256 tokens, d 768) on the GPU; a small one on the CPU."""
    big = device == "cuda"
    _run(device, True, 16 if big else 2, 256 if big else 16, 768 if big else 32, dtype)
    if big:
        torch.cuda.synchronize()
