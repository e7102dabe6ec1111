"""`atomic_embedding_backward`: an embedding's gradient over more than 3072 indices (where ATen sorts
them) is an `index_add` into f32 zeros, as inductor computes it; values equal eager's."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from dynamo_nvf.decompositions import ATEN_EMBEDDING_BACKWARD_DIRECT_MAX
from helpers import DEVICES, check_training, cuda_plans, device_options


class EmbedNorm(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 16, padding_idx=None, dtype=torch.float32, device=None):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=padding_idx, dtype=dtype, device=device)
        self.norm = nn.LayerNorm(d, dtype=dtype, device=device)

    def forward(self, ids):
        return self.norm(self.embed(ids) * 2.0)


def _backward_code(options: dict, tokens: int) -> str:
    ids = torch.randint(0, 50, (1, tokens))  # not a shape: cuda_plans passes it as it is
    plans = cuda_plans(EmbedNorm(), ids, train=True, fake=False, options=options)
    backward = next(p for p in plans if p.kind == "backward")
    return backward.code


MANY = ATEN_EMBEDDING_BACKWARD_DIRECT_MAX + 1


@pytest.mark.parametrize("options, tokens, atomic", [
    ({}, MANY, True),
    ({}, ATEN_EMBEDDING_BACKWARD_DIRECT_MAX, False),   # ATen's direct kernel: one launch
    ({"atomic_embedding_backward": False}, MANY, False),
    ({"atomic_embedding_backward_min_indices": 1}, 16, True),   # the threshold as an option
    ({"atomic_embedding_backward_min_indices": 17}, 16, False),
])
def test_many_indices_accumulate_with_index_add(options, tokens, atomic):
    code = _backward_code(options, tokens)
    assert ("index_add" in code) is atomic, code
    assert ("embedding_dense_backward" in code) is not atomic, code
    # Into its own fresh zeros, in place: no copy of the whole [vocab, d] buffer first.
    assert ("aten.index_add_.default" in code) is atomic, code


def test_deterministic_algorithms_keep_aten():
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        code = _backward_code({}, MANY)
    finally:
        torch.use_deterministic_algorithms(False)
    assert "embedding_dense_backward" in code and "index_add" not in code, code


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_gradients_match_eager(device, dtype, padding_idx):
    model = EmbedNorm(padding_idx=padding_idx, dtype=dtype, device=device)
    ids = torch.randint(0, 50, (2, MANY // 2 + 1), device=device)
    ids[0, :7] = 3  # the padding row, several times
    plans = check_training(model, [ids], device_options(device) | {"plan_cpu_as_cuda": device == "cpu"},
                           params=list(model.parameters()), reference=copy.deepcopy(model).float())
    backward = next(p for p in plans if p.kind == "backward")
    assert "aten.index_add_.default" in backward.code
