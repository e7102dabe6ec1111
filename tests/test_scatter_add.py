"""The gradient of a gather from a small table, an accumulating scatter of rows (`index_put(...,
accumulate=True)` for `table[:, ..., index]`, `embedding_dense_backward` for an embedding), lowers
to a masked sum and joins the backward's regions: relative position bias tables (Swin, BEiT, LeViT),
token-type and bucket embeddings. A table too large for the masked sum (a word embedding) stays in
ATen and says why. CPU tests plan as for CUDA (regions run eagerly); `gpu` tests run nvFuser."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.runtime.stats import STATS
from helpers import check_training, tolerance

ON = {"plan_cpu_as_cuda": True}
CUDA = pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")


class WindowBias(torch.nn.Module):
    """Swin's windowed attention scores plus a relative position bias `table[index.view(-1)]`."""

    def __init__(self, window: int = 4, heads: int = 3) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("index", rel[..., 0] * (2 * window - 1) + rel[..., 1])
        self.n, self.heads = window * window, heads

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        bias = self.table[self.index.view(-1)].view(self.n, self.n, -1).permute(2, 0, 1)
        return torch.softmax(scores + bias.unsqueeze(0), -1)


class LeViTBias(torch.nn.Module):
    """LeViT's `biases[:, index]` in training (no cache): the index on the table's second dim."""

    def __init__(self, n: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.biases = torch.nn.Parameter(torch.randn(heads, n) * 0.02)
        self.register_buffer("index", torch.randint(0, n, (n, n)))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores + self.biases[:, self.index], -1)


class TypedEmbeddings(torch.nn.Module):
    """Word and token-type embeddings summed and normalized (BERT's), the word table large."""

    def __init__(self, vocab: int = 30000, dim: int = 64) -> None:
        super().__init__()
        self.word = torch.nn.Embedding(vocab, dim)
        self.types = torch.nn.Embedding(2, dim, padding_idx=0)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        return self.norm(self.word(ids) + self.types(types))


def _backward_left(plans) -> dict[str, str]:
    return {n.op: n.reason for p in plans if p.kind == "backward" for n in p.nodes
            if n.region is None and ("index_put" in n.op or "embedding_dense_backward" in n.op)}


@pytest.mark.parametrize("module", [WindowBias, LeViTBias], ids=["swin", "levit"])
def test_a_bias_tables_gradient_joins_the_backward_region(module):
    torch.manual_seed(0)
    model = module()
    scores = torch.randn(8, model.heads if hasattr(model, "heads") else 4, 16, 16)
    plans = check_training(model, [scores], ON, params=list(model.parameters()))
    assert not _backward_left(plans), _backward_left(plans)
    assert any("aten.index_put.default" in r.ops for p in plans if p.kind == "backward" for r in p.regions)


def test_a_small_embeddings_gradient_joins_a_region_and_a_word_embeddings_stays():
    torch.manual_seed(0)
    model = TypedEmbeddings()
    inputs = [torch.randint(0, 30000, (4, 32)), torch.randint(0, 2, (4, 32))]
    plans = check_training(model, inputs, ON, params=list(model.parameters()), rtol=1e-5, atol=1e-5)
    left = [n for p in plans if p.kind == "backward" for n in p.nodes
            if n.region is None and n.op == "aten.embedding_dense_backward.default"]
    assert len(left) == 1 and "masked sum" in left[0].reason, [(n.op, n.reason) for n in left]
    regions = [op for p in plans if p.kind == "backward" for r in p.regions for op in r.ops]
    assert regions.count("aten.embedding_dense_backward.default") == 1, regions


def test_index_put_without_accumulate_and_frequency_scaled_gradients_stay_in_aten():
    def put(table, index, values):
        return torch.ops.aten.index_put.default(table * 2, [index], values, False) + 1

    def scaled(ids, weight):
        return torch.nn.functional.embedding(ids, weight, scale_grad_by_freq=True) * 2

    from helpers import check_inference
    plans = check_inference(put, [torch.randn(6, 3), torch.tensor([0, 2, 5]), torch.randn(3, 3)], ON)
    reasons = [n.reason for p in plans for n in p.nodes if n.op == "aten.index_put.default"]
    assert reasons and "without accumulate" in reasons[0], reasons
    weight = torch.randn(10, 4)
    plans = check_training(scaled, [torch.randint(0, 10, (3, 5)), weight], ON)
    assert "scaled by frequency" in _backward_left(plans).get("aten.embedding_dense_backward.default", ""), \
        _backward_left(plans)


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("module", [WindowBias, LeViTBias, TypedEmbeddings], ids=["swin", "levit", "embeddings"])
def test_gpu_table_gradients_match_eager(module, dtype):
    torch.manual_seed(0)
    model = module().to(device="cuda", dtype=dtype)
    if module is TypedEmbeddings:
        inputs = [torch.randint(0, 30000, (8, 64), device="cuda"), torch.randint(0, 2, (8, 64), device="cuda")]
    else:
        heads = model.heads if hasattr(model, "heads") else 4
        inputs = [torch.randn(16, heads, 16, 16, device="cuda", dtype=dtype)]
    reference = module().to("cuda")
    reference.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    STATS.reset()
    rtol, atol = tolerance(dtype)
    plans = check_training(model, inputs, {}, params=list(model.parameters()), reference=reference, rtol=rtol, atol=atol)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
    left = _backward_left(plans)
    assert list(left) == (["aten.embedding_dense_backward.default"] if module is TypedEmbeddings else []), left
