"""The gradient of `table[:, ..., index]` from a small table, an accumulating scatter of rows
(`index_put(zeros, [None, ..., index], grad, accumulate=True)`), lowers to a masked sum and joins the
backward's regions: relative position bias tables (Swin, LeViT). A table too large for the masked
sum stays in ATen and says why. CPU tests plan as for CUDA (regions run eagerly); `gpu` tests run
nvFuser."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.runtime.stats import STATS
from dynamo_nvf.backend import recording
from helpers import check_inference, check_training, compile_fn, tolerance

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


def _backward_left(plans) -> dict[str, str]:
    return {n.op: n.reason for p in plans if p.kind == "backward" for n in p.nodes
            if n.region is None and "index_put" in n.op}


@pytest.mark.parametrize("module", [WindowBias, LeViTBias], ids=["swin", "levit"])
def test_a_bias_tables_gradient_joins_the_backward_region(module):
    torch.manual_seed(0)
    model = module()
    scores = torch.randn(8, model.heads if hasattr(model, "heads") else 4, 16, 16)
    plans = check_training(model, [scores], ON, params=list(model.parameters()))
    assert not _backward_left(plans), _backward_left(plans)
    assert any("aten.index_put.default" in r.ops for p in plans if p.kind == "backward" for r in p.regions)


def test_a_table_too_large_for_the_masked_sum_stays_with_its_reason():
    """16 heads over 4096 positions into a table of 2048 rows: 134 M terms, past the cap."""
    table = torch.nn.Parameter(torch.randn(2048, 16))
    index = torch.randint(0, 2048, (4096,))
    plans = check_training(lambda x: torch.softmax(x + table[index], -1), [torch.randn(4096, 16)], ON,
                           params=[table])
    left = _backward_left(plans)  # left to ATen, the put runs in place on its fresh zeros (index_put_)
    assert len(left) == 1 and "masked sum" in next(iter(left.values())), left


def test_a_dynamic_table_stays_without_specializing_its_size():
    """A table of dynamic size: its gradient stays in ATen, and asking does not pin the size (which
    Dynamo reports as a constraint violation under mark_dynamic)."""
    def f(x, index):
        return (x[index] * 2).sum()

    compiled = compile_fn(f, ON)
    with recording() as rec:
        for rows in (6, 7, 9):
            x = torch.randn(rows, 3, requires_grad=True)
            torch._dynamo.mark_dynamic(x, 0)
            index = torch.randint(0, rows, (4,))
            compiled(x, index).backward()
            eager = x.detach().clone().requires_grad_(True)
            f(eager, index).backward()
            torch.testing.assert_close(x.grad, eager.grad)
    left = _backward_left(rec.plans)  # index_put_: run in place on its fresh zeros
    assert left and all("symbolic size" in why for why in left.values()), left


def test_index_put_without_accumulate_or_into_booleans_stays_in_aten():
    def put(table, index, values):
        return torch.ops.aten.index_put.default(table * 2, [index], values, False) + 1

    plans = check_inference(put, [torch.randn(6, 3), torch.tensor([0, 2, 5]), torch.randn(3, 3)], ON)
    reasons = [n.reason for p in plans for n in p.nodes if n.op == "aten.index_put.default"]
    assert reasons and "without accumulate" in reasons[0], reasons
    flags = [torch.zeros(6, dtype=torch.bool), torch.tensor([0, 2, 2]), torch.ones(3, dtype=torch.bool)]
    plans = check_inference(lambda t, i, v: torch.ops.aten.index_put.default(t, [i], v, True) | t, flags, ON)
    reasons = [n.reason for p in plans for n in p.nodes if n.op == "aten.index_put.default"]
    assert reasons and "boolean table" in reasons[0], reasons


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("module", [WindowBias, LeViTBias], ids=["swin", "levit"])
def test_gpu_bias_table_gradients_match_eager(module, dtype):
    torch.manual_seed(0)
    model = module().to(device="cuda", dtype=dtype)
    heads = model.heads if hasattr(model, "heads") else 4
    inputs = [torch.randn(16, heads, 16, 16, device="cuda", dtype=dtype)]
    reference = module().to("cuda")
    reference.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    STATS.reset()
    rtol, atol = tolerance(dtype)
    plans = check_training(model, inputs, {}, params=list(model.parameters()), reference=reference, rtol=rtol, atol=atol)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
    assert not _backward_left(plans), _backward_left(plans)


@pytest.mark.gpu
@CUDA
def test_gpu_gradient_of_a_summed_gather_from_expanded_values():
    """`(table[:, index] * 2).sum()`: the scattered values are the sum's expanded gradient, a broadcast
    inside the fusion; the table's gradient counts each row's hits, as eager's."""
    torch.manual_seed(0)
    table = torch.randn(4, 16, device="cuda", requires_grad=True)
    index = torch.randint(-16, 16, (16, 16), device="cuda")
    STATS.reset()
    plans = check_training(lambda t: (t[:, index] * 2).sum(), [table], {})
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
    assert not _backward_left(plans), _backward_left(plans)
