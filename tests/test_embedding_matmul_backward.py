"""`matmul_embedding_backward`: a half-precision embedding gradient over at most 3072 indices as
matmuls (a one-hot matmul for a vocabulary no larger than the indices, else each token's row sum
written into zeros at its id); values as close to an f32 reference as eager's, padding rows zero."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from dynamo_nvf.decompositions import ATEN_EMBEDDING_BACKWARD_DIRECT_MAX, ROW_SUMS_MIN_INDICES
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


def _backward_code(options: dict, tokens: int, vocab: int = 5000, dtype=torch.bfloat16) -> str:
    ids = torch.randint(0, vocab, (2, tokens // 2))
    plans = cuda_plans(EmbedNorm(vocab, tokens // 2, dtype=dtype), ids, train=True, fake=False, options=options)
    return next(p for p in plans if p.kind == "backward").code


TOKENS = 2 * ROW_SUMS_MIN_INDICES


def test_both_embeddings_become_matmuls():
    code = _backward_code({}, TOKENS)
    assert "embedding_dense_backward" not in code, code
    # The positions (vocab TOKENS / 2): one one-hot matmul. The words (vocab 5000): a row-sum matmul
    # scattered in place into its fresh zeros, as 8-byte words.
    assert code.count("aten.mm.default") == 2, code
    assert code.count("aten.index_put_.default") == 1 and "aten.index_put.default" not in code, code
    assert "torch.int64" in code, code


def test_few_indices_over_a_large_vocabulary_keep_aten():
    code = _backward_code({}, ROW_SUMS_MIN_INDICES - 2)
    # The words' gradient stays ATen's; the positions' (vocab at most the indices) is a matmul.
    assert code.count("aten.embedding_dense_backward") == 1 and code.count("aten.mm.default") == 1, code


@pytest.mark.parametrize("options, tokens, dtype, in_aten", [
    ({"matmul_embedding_backward": False}, TOKENS, torch.bfloat16, 2),
    ({}, TOKENS, torch.float32, 2),   # an f32 matmul may run in TF32
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
        code = _backward_code({}, TOKENS)
    finally:
        torch.use_deterministic_algorithms(False)
    assert code.count("aten.embedding_dense_backward") == 2 and "aten.mm.default" not in code, code


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("padding_idx", [None, 3])
@pytest.mark.parametrize("vocab", [40, 500])   # the one-hot form (vocab <= TOKENS) and the row sums
@pytest.mark.parametrize("d", [48, 18])   # rows of 8-byte words, and of 36 bytes
def test_gradients_match_eager(device, dtype, padding_idx, vocab, d):
    torch.manual_seed(0)
    model = EmbedNorm(vocab, TOKENS // 2, d=d, padding_idx=padding_idx, dtype=dtype, device=device)
    ids = torch.randint(0, vocab, (2, TOKENS // 2), device=device)
    ids[0, :7] = 3  # one id many times (the padding row, where there is one)
    ids[1, 5] = vocab - 1
    plans = check_training(model, [ids], device_options(device) | {"plan_cpu_as_cuda": device == "cpu"},
                           params=list(model.parameters()), reference=copy.deepcopy(model).float())
    backward = next(p for p in plans if p.kind == "backward")
    assert "embedding_dense_backward" not in backward.code and "aten.mm.default" in backward.code


@pytest.mark.parametrize("device", DEVICES)
def test_padding_row_and_unused_rows_are_zero(device):
    model = EmbedNorm(500, TOKENS // 2, d=32, padding_idx=3, device=device)
    compiled = torch.compile(model, backend="nvf_bookend", options=device_options(device) | {
        "plan_cpu_as_cuda": device == "cpu"})
    ids = torch.randint(4, 400, (2, TOKENS // 2), device=device)
    ids[:, :9] = 3
    compiled(ids).float().square().sum().backward()
    grad = model.words.weight.grad
    assert torch.count_nonzero(grad[3]) == 0
    assert torch.count_nonzero(grad[400:]) == 0
    used = torch.unique(ids[ids != 3])
    assert torch.count_nonzero(grad[used].float().abs().sum(1)) == used.numel()
