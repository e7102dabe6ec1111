"""merge_duplicates: the same view of the same tensor in one region is made once. A channels-last
GroupNorm's region then takes the convolution output as one input (views_to_edges had made one view
per statistic); broadcasts inside a region and returned views stay apart.
CPU tests plan as for CUDA (regions run eagerly); the `gpu` test runs the GroupNorm block on nvFuser."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf.runtime.stats import STATS
from dynamo_nvf import nvf as nvf_env
from dynamo_nvf import recording
from helpers import assert_as_close_as_eager, check_fresh_inputs, check_inference, check_training, compile_fn, tolerance

ON = {"plan_cpu_as_cuda": True}
NOTE = "merged"


class ConvGroupNorm(torch.nn.Module):
    """A pre-activation conv block's middle: conv (no bias), GroupNorm, ReLU, conv."""

    def __init__(self, channels: int = 64, groups: int = 32) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(8, channels, 3, padding=1, bias=False)
        self.norm = torch.nn.GroupNorm(groups, channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(F.relu(self.norm(self.conv1(x))))


def _block(dtype=torch.float32, device="cpu") -> ConvGroupNorm:
    torch.manual_seed(0)
    return ConvGroupNorm().to(device=device, dtype=dtype)


def _norm_region(plan):
    return next(r for r in plan.regions if any("var_mean" in op or "sum" in op for op in r.ops))


def _activations(region) -> list:
    """The region's inputs of the activation's size (the GroupNorm's input, however it is viewed)."""
    return [t for t in region.inputs if len(t.shape) >= 3 and _numel(t.shape) >= 8 * 64 * 16 * 16]


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def test_a_group_norms_region_reads_its_input_once():
    """Inference: the region holding the GroupNorm takes the convolution output once (three views of
    it before), the merge is noted, and values, dtype and strides match eager on fresh inputs."""
    block = _block()
    make = lambda: [torch.randn(8, 8, 16, 16)]  # noqa: E731
    rtol, atol = tolerance(torch.float32)
    plans = check_inference(block, make(), ON, rtol=rtol, atol=atol)
    plan = plans[0]
    assert any(n.startswith(NOTE) for n in plan.rewrites), plan.rewrites
    region = _norm_region(plan)
    assert len(_activations(region)) == 1, [tuple(t.shape) for t in region.inputs]
    compiled = compile_fn(block, ON)
    check_fresh_inputs(compiled, block, make, rtol, atol)


def test_a_group_norm_block_trains_as_eager():
    """Training, channels-last: the forward graph's duplicate views are merged, and outputs and
    gradients are eager's."""
    block = _block().to(memory_format=torch.channels_last)
    x = torch.randn(4, 8, 16, 16).to(memory_format=torch.channels_last)
    plans = check_training(block, [x], ON, params=list(block.parameters()), atol=1e-4, rtol=1e-4)
    forward = next(p for p in plans if p.kind == "forward")
    assert any(n.startswith(NOTE) for n in forward.rewrites), forward.rewrites


def test_a_broadcast_inside_a_region_is_not_merged():
    """Two equal broadcasts of one input, one written out and one reduced through a permute: merged,
    they would make the pattern passes/known_bugs.py keeps from nvFuser (one expand both written and
    reduced through a permute). Only the views at the region's edge merge; both expands stay."""
    n, c, h, w = 4, 16, 8, 8

    def fn(x, y, z):
        out = x[:, :, None, None].expand(n, c, h, w) * y
        s = (x[:, :, None, None].expand(n, c, h, w).permute(0, 2, 3, 1) * z).sum(dim=(0, 1, 2))
        return out, out + s[None, :, None, None], s

    plans = check_inference(fn, [torch.randn(n, c), torch.randn(n, c, h, w), torch.randn(n, h, w, c)], ON,
                            rtol=1e-5, atol=1e-5)
    expands = [op for p in plans for r in p.regions for op in r.ops if op == "aten.expand.default"]
    assert len(expands) == 2, [r.ops for p in plans for r in p.regions]


def test_views_the_graph_returns_stay_apart():
    """Two equal views the graph returns are two tensors, as in eager (aot_autograd does not rebuild
    them when a third output is computed from the same view)."""
    def fn(x):
        y = x * 2
        return y.view(4, -1).sin(), y.view(4, -1), y.view(4, -1)

    compiled = compile_fn(fn, ON)
    _, a, b = compiled(torch.randn(4, 8))
    assert a is not b
    assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_a_group_norm_block_runs_whole_on_nvfuser(dtype):
    """On nvFuser, channels-last: the GroupNorm region reads its one input, every region runs (no
    fallback, no pieces), and outputs and gradients are as close to an f64 reference as eager's."""
    make = lambda: torch.randn(8, 8, 28, 28, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)  # noqa: E731
    model = _block(dtype, "cuda").to(memory_format=torch.channels_last)
    eager = _block(dtype, "cuda").to(memory_format=torch.channels_last)
    reference = _block(torch.float64, "cuda").to(memory_format=torch.channels_last)
    STATS.reset()
    compiled = compile_fn(model)
    with recording() as rec:
        for _ in range(2):
            x = make()
            xa, xe, xr = (x.clone().requires_grad_(True), x.clone().requires_grad_(True),
                          x.double().requires_grad_(True))
            out, expected, exact = compiled(xa), eager(xe), reference(xr)
            assert out.stride() == expected.stride()
            grad = torch.randn_like(out)
            for y in (out, expected):
                y.backward(grad)
            exact.backward(grad.double())
            pairs = [(out, expected, exact), (xa.grad, xe.grad, xr.grad)]
            pairs += [(pa.grad, pe.grad, pr.grad) for pa, pe, pr in
                      zip(model.parameters(), eager.parameters(), reference.parameters())]
            for got, want, ref in pairs:
                assert_as_close_as_eager(got.detach(), want.detach(), ref.detach())
            for m in (model, eager, reference):
                m.zero_grad()
    assert STATS.fallbacks == 0 and STATS.split_regions == 0 and STATS.nvfuser_calls > 0, STATS
    forward = next(p for p in rec.plans if p.kind == "forward")
    assert len(_activations(_norm_region(forward))) == 1, [tuple(t.shape) for t in _norm_region(forward).inputs]
