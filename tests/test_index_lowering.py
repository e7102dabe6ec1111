"""`aten.index` by one integer tensor of a parameter or input table lowers to nvFuser's index_select:
relative position biases (Swin's and BEiT's `table[index.view(-1)]`, LeViT's `biases[:, index]`)
join the region around them instead of running ATen's gather between regions. Indexes by several
tensors or a mask, of a computed table, or whose rows leave the region stay in ATen and say why.
CPU tests plan as for CUDA (regions run eagerly); `gpu` tests run nvFuser against eager."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.passes.partition import GATHER_OUTPUT_REASON
from dynamo_nvf.runtime.stats import STATS
from helpers import check_fresh_inputs, check_inference, check_training, compile_fn, tolerance

ON = {"plan_cpu_as_cuda": True}
CUDA = pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
INDEX = "aten.index.Tensor"


class RelativePositionBias(torch.nn.Module):
    """Swin's windowed attention bias: a table of (2W-1)^2 x heads read by a [W^2, W^2] index buffer,
    added to the attention scores."""

    def __init__(self, window: int = 7, heads: int = 4) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn((2 * window - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
        self.register_buffer("index", rel[..., 0] * (2 * window - 1) + rel[..., 1], persistent=False)
        self.tokens = window * window

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        bias = self.table[self.index.view(-1)].view(self.tokens, self.tokens, -1).permute(2, 0, 1).contiguous()
        return (scores + bias.unsqueeze(0)).softmax(-1)


class AttentionBiases(torch.nn.Module):
    """LeViT's: per-head biases [heads, offsets] read by an [N, N] index buffer along dim 1."""

    def __init__(self, tokens: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.biases = torch.nn.Parameter(torch.randn(heads, tokens))
        i = torch.arange(tokens)
        self.register_buffer("index", (i[:, None] - i[None, :]).abs(), persistent=False)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return (scores * 0.25 + self.biases[:, self.index]).softmax(-1)


def _index_nodes(plans) -> list:
    return [n for p in plans for n in p.nodes if n.op == INDEX]


@pytest.mark.parametrize("module, shape", [(RelativePositionBias, (2, 4, 49, 49)), (AttentionBiases, (2, 4, 16, 16))])
def test_a_bias_table_read_by_an_index_buffer_joins_the_softmax_region(module, shape):
    torch.manual_seed(0)
    model = module().eval()
    make = lambda: [torch.randn(shape)]  # noqa: E731
    plans = check_inference(model, make(), ON)
    nodes = _index_nodes(plans)
    assert nodes and all(n.region is not None for n in nodes), [(n.op, n.reason) for n in nodes]
    (plan,) = plans
    assert len(plan.regions) == 1 and INDEX in plan.regions[0].ops, [r.ops for r in plan.regions]
    check_fresh_inputs(compile_fn(model, ON), model, make)


def test_a_bias_table_trains_as_eager():
    """Training: the forward gathers in its region, the table's gradient (an index_put with
    accumulation) stays in ATen; outputs and gradients as eager's."""
    torch.manual_seed(0)
    model = RelativePositionBias()
    plans = check_training(model, [torch.randn(2, 4, 49, 49)], ON, params=list(model.parameters()))
    forward = next(p for p in plans if p.kind == "forward")
    assert all(n.region is not None for n in forward.nodes if n.op == INDEX)


def test_negative_and_int32_indices_read_as_eager():
    def fn(table, index):
        return table[index] * 2

    index = torch.tensor([[-1, 0, 3], [2, -4, 1]], dtype=torch.int32)
    plans = check_inference(fn, [torch.randn(5, 3), index], ON)
    assert all(n.region is not None for n in _index_nodes(plans))


@pytest.mark.parametrize("case", ["two_tensors", "computed", "expanded_index", "rows_returned"])
def test_an_index_nvfuser_cannot_take_stays_in_aten(case):
    """By two index tensors, of a table the graph computes, by an expanded index (its flattening
    reshape lost extents in nvFuser 0.2.36), and one whose rows leave the region (index_select's output written out faulted nvFuser 0.2.36) stay, saying why.
    (A boolean mask's index has a data-dependent size: Dynamo breaks the graph there.)"""
    def fn(table, index):
        if case == "two_tensors":
            return table[index, index] * 2
        if case == "computed":
            return (table * 2)[index] + 1
        if case == "expanded_index":
            return table[index[None, :].expand(4, -1)] * 2
        rows = table[index]
        return rows, rows * 2

    inputs = [torch.randn(6, 6), torch.tensor([0, 5, 2])]
    plans = check_inference(fn, inputs, ON)
    reasons = [n.reason for n in _index_nodes(plans)]
    assert reasons and all(reasons), reasons
    if case == "rows_returned":
        assert reasons == [GATHER_OUTPUT_REASON], reasons


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("module, shape", [(RelativePositionBias, (8, 4, 49, 49)), (AttentionBiases, (8, 4, 16, 16))],
                         ids=["swin", "levit"])
def test_gpu_a_bias_table_gathers_on_nvfuser(module, shape, dtype):
    """One region on nvFuser with the gather in it: no fallback, no pieces, values and strides as
    eager's on fresh inputs."""
    torch.manual_seed(0)
    model = module().to(device="cuda", dtype=dtype).eval()
    STATS.reset()
    check_fresh_inputs(compile_fn(model), model, lambda: [torch.randn(shape, device="cuda", dtype=dtype)],
                       *tolerance(dtype), calls=3)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()


@pytest.mark.gpu
@CUDA
def test_gpu_negative_and_int32_indices_read_as_eager():
    def fn(table, index):
        return table[:, index] * 2

    def make():
        return [torch.randn(3, 7, device="cuda"), torch.randint(-7, 7, (4, 5), device="cuda", dtype=torch.int32)]

    STATS.reset()
    check_fresh_inputs(compile_fn(fn), fn, make, *tolerance(torch.float32), calls=3)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
