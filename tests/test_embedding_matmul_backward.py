"""`matmul_embedding_backward`: a half-precision embedding gradient over at most 3072 indices as
matmuls (a one-hot matmul for a vocabulary no larger than the indices, else each token's row sum
written into zeros at its id); values as close to an f32 reference as eager's, padding rows zero."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from dynamo_nvf.decompositions import ATEN_EMBEDDING_BACKWARD_DIRECT_MAX
from helpers import DEVICES, check_training, cuda_plans, device_options


class EmbedNorm(nn.Module):
    """Word plus position embeddings, then LayerNorm: BERT's input layer."""

    def __init__(self, vocab: int, seq: int, d: int = 16, padding_idx=None, dtype=torch.bfloat16, device=None):
        super().__init__()
        self.words = nn.Embedding(vocab, d, padding_idx=padding_idx, dtype=dtype, device=device)
        self.positions = nn.Embedding(seq, d, dtype=dtype, device=device)
        self.norm = nn.LayerNorm(d, dtype=dtype, device=device)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(self.words(ids) + self.positions(pos))


def _backward_code(options: dict, tokens: int, vocab: int = 500, dtype=torch.bfloat16) -> str:
    ids = torch.randint(0, vocab, (2, tokens // 2))
    plans = cuda_plans(EmbedNorm(vocab, tokens // 2, dtype=dtype), ids, train=True, fake=False, options=options)
    return next(p for p in plans if p.kind == "backward").code


def test_both_embeddings_become_matmuls():
    code = _backward_code({}, 64)
    assert "embedding_dense_backward" not in code, code
    # The positions (vocab 32 <= 64 tokens): one one-hot matmul. The words (vocab 500): a row-sum
    # matmul scattered in place into its fresh zeros.
    assert code.count("aten.mm.default") == 2, code
    assert code.count("aten.index_put_.default") == 1 and "aten.index_put.default" not in code, code


@pytest.mark.parametrize("options, tokens, dtype, in_aten", [
    ({"matmul_embedding_backward": False}, 64, torch.bfloat16, 2),
    ({}, 64, torch.float32, 2),   # an f32 matmul may run in TF32
    # The words' 3074 indices are too many (the positions' 1537 are not).
    ({"atomic_embedding_backward": False}, ATEN_EMBEDDING_BACKWARD_DIRECT_MAX + 2, torch.bfloat16, 1),
])
def test_aten_keeps_what_the_matmul_does_not_take(options, tokens, dtype, in_aten):
    code = _backward_code(options, tokens, dtype=dtype)
    assert code.count("aten.embedding_dense_backward") == in_aten, code
    assert code.count("aten.mm.default") == 2 - in_aten, code


def test_deterministic_algorithms_keep_aten():
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        code = _backward_code({}, 64)
    finally:
        torch.use_deterministic_algorithms(False)
    assert code.count("aten.embedding_dense_backward") == 2 and "aten.mm.default" not in code, code


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("padding_idx", [None, 3])
@pytest.mark.parametrize("vocab", [40, 500])   # the one-hot form (vocab <= 128 tokens) and the row sums
def test_gradients_match_eager(device, dtype, padding_idx, vocab):
    torch.manual_seed(0)
    model = EmbedNorm(vocab, 64, d=48, padding_idx=padding_idx, dtype=dtype, device=device)
    ids = torch.randint(0, vocab, (2, 64), device=device)
    ids[0, :7] = 3  # one id many times (the padding row, where there is one)
    ids[1, 5] = vocab - 1
    plans = check_training(model, [ids], device_options(device) | {"plan_cpu_as_cuda": device == "cpu"},
                           params=list(model.parameters()), reference=copy.deepcopy(model).float())
    backward = next(p for p in plans if p.kind == "backward")
    assert "embedding_dense_backward" not in backward.code and "aten.mm.default" in backward.code


@pytest.mark.parametrize("device", DEVICES)
def test_padding_row_and_unused_rows_are_zero(device):
    model = EmbedNorm(500, 64, d=32, padding_idx=3, device=device)
    compiled = torch.compile(model, backend="nvf_bookend", options=device_options(device) | {
        "plan_cpu_as_cuda": device == "cpu"})
    ids = torch.randint(4, 400, (2, 64), device=device)
    ids[:, :9] = 3
    compiled(ids).float().square().sum().backward()
    grad = model.words.weight.grad
    assert torch.count_nonzero(grad[3]) == 0
    assert torch.count_nonzero(grad[400:]) == 0
    used = torch.unique(ids[ids != 3])
    assert torch.count_nonzero(grad[used].float().abs().sum(1)) == used.numel()
