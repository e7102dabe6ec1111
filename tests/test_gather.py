"""aten.gather lowers to nvFuser's gather: HF BERT-style embeddings (the token-type buffer gathered by
the position ids, three embeddings summed, a LayerNorm) become one region with no ATen gather or
embedding; a gather by an expanded index stays in ATen and says why. CPU tests plan as for CUDA
(regions run eagerly); `gpu` tests run real nvFuser against eager."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.runtime.stats import STATS
from helpers import check_fresh_inputs, check_inference, check_training, compile_fn, tolerance

ON = {"plan_cpu_as_cuda": True}
CUDA = pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")


class Embeddings(torch.nn.Module):
    """transformers' BertEmbeddings, inference: word + token type + position, then LayerNorm."""

    def __init__(self, vocab: int = 100, positions: int = 64, dim: int = 32) -> None:
        super().__init__()
        self.word = torch.nn.Embedding(vocab, dim)
        self.position = torch.nn.Embedding(positions, dim)
        self.token_type = torch.nn.Embedding(2, dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.register_buffer("position_ids", torch.arange(positions).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, positions, dtype=torch.long), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, length = ids.shape
        position_ids = self.position_ids[:, :length]
        types = torch.gather(self.token_type_ids.expand(position_ids.shape[0], -1), 1, position_ids)
        types = types.expand(batch, length)
        return self.norm(self.word(ids) + self.token_type(types) + self.position(position_ids))


class RobertaEmbeddings(Embeddings):
    """transformers' RobertaEmbeddings, inference: position ids from the input ids' padding mask (a
    cumsum), the token-type buffer expanded to the batch and gathered by them."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = ids.ne(1).int()
        position_ids = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + 1
        types = torch.gather(self.token_type_ids.expand(ids.shape[0], -1), 1, position_ids)
        return self.norm(self.word(ids) + self.token_type(types) + self.position(position_ids))


def _left_to_aten(plans) -> list[str]:
    return [n.op for p in plans for n in p.nodes if n.region is None and "trimmed" not in (n.reason or "")]


@pytest.mark.parametrize("module", [Embeddings, RobertaEmbeddings], ids=["bert", "roberta"])
def test_embeddings_are_one_region(module):
    """Token types gathered from the buffer (RoBERTa's expanded to the batch, `[1, P]` to `[B, P]`,
    and gathered by position ids the graph computes from the input ids), three embeddings summed, a
    LayerNorm: one region, no gather and no embedding left in ATen."""
    torch.manual_seed(0)
    model = module().eval()
    make = lambda: [torch.randint(0, 100, (4, 48))]  # noqa: E731
    plans = check_inference(model, make(), ON, rtol=1e-5, atol=1e-5)
    left = _left_to_aten(plans)
    assert not any("gather" in op or "embedding" in op for op in left), left
    assert len(plans[0].regions) == 1, [r.ops for r in plans[0].regions]
    check_fresh_inputs(compile_fn(model, ON), model, make, 1e-5, 1e-5)


def test_a_gather_by_an_expanded_index_or_a_smaller_one_stays_in_aten():
    """Of four gathers, the ones from a computed tensor and from an expanded one (a broadcast in the
    fusion) join a region; the one by an expanded index and the one whose index is smaller than its
    source off the gathered dim (nvFuser 0.2.36 would run ATen's gather for it anyway) stay in ATen
    and say why."""
    def fn(x, index, small, row):
        wide = x.expand(4, -1)
        return (torch.gather(wide * 1, 1, index) + torch.gather(wide, 1, index)
                + torch.gather(wide * 2, 1, small).sum(0, keepdim=True) + torch.gather(wide * 3, 1, row.expand(4, -1)))

    inputs = [torch.randn(1, 8), torch.randint(0, 8, (4, 5)), torch.randint(0, 8, (2, 5)), torch.randint(0, 8, (1, 5))]
    plans = check_inference(fn, inputs, ON)
    reasons = sorted(n.reason for p in plans for n in p.nodes if n.op == "aten.gather.default")
    assert len(reasons) == 4 and reasons[:2] == ["", ""], reasons  # "" : in a region
    assert "expanded" in reasons[2] + reasons[3] and "smaller" in reasons[2] + reasons[3], reasons


def test_roberta_style_embeddings_train_as_eager():
    """Training: outputs and parameter gradients as eager's, the gather in the forward's region."""
    torch.manual_seed(0)
    model = RobertaEmbeddings().train()
    plans = check_training(model, [torch.randint(0, 100, (4, 48))], ON, params=list(model.parameters()),
                           rtol=1e-5, atol=1e-5)
    assert not any("gather" in op for op in _left_to_aten(plans)), _left_to_aten(plans)


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("module", [Embeddings, RobertaEmbeddings], ids=["bert", "roberta"])
def test_gpu_embeddings_run_on_nvfuser(module, dtype):
    torch.manual_seed(0)
    model = module().to(device="cuda", dtype=dtype).eval()
    STATS.reset()
    rtol, atol = tolerance(dtype)
    check_fresh_inputs(compile_fn(model), model, lambda: [torch.randint(0, 100, (8, 48), device="cuda")], rtol, atol,
                       calls=3)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gpu_gather_along_each_dim_matches_eager(dim):
    """A gather (the index as large as the source off `dim`) between pointwise ops, on nvFuser."""
    src_shape = [6, 7, 8]
    index_shape = [5 if d == dim % 3 else s for d, s in enumerate(src_shape)]

    def fn(x, index):
        return torch.gather(x * 2, dim, index) + 1

    def make():
        index = torch.randint(0, src_shape[dim], index_shape, device="cuda")
        return [torch.randn(src_shape, device="cuda"), index]

    STATS.reset()
    check_fresh_inputs(compile_fn(fn), fn, make, *tolerance(torch.float32), calls=3)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("scale", [1, None], ids=["value-broadcast-in-the-region", "expanded-input"])
def test_gpu_gather_from_a_broadcast_source(scale):
    """The source a broadcast inside the fusion: dense in eager (`x.expand(4, -1) * 1`), or a stride-0
    expand of a graph input. On nvFuser, no fallback, no pieces, values as eager's on fresh inputs."""
    def fn(x, index):
        wide = x.expand(4, -1)
        return torch.gather(wide if scale is None else wide * scale, 1, index) + 1

    def make():
        return [torch.randn(1, 8, device="cuda"), torch.randint(0, 8, (4, 5), device="cuda")]

    STATS.reset()
    check_fresh_inputs(compile_fn(fn), fn, make, *tolerance(torch.float32), calls=3)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
