"""GroupNorm in regions: its forward (CUDA's form on any device, so a CPU plan is the GPU plan: no
`as_strided`) and its backward are var_means, sums and pointwise ops that regions take in. One group
reduces the activation itself; several view it [N, G, C/G, H*W]. A channels-last activation's regions
compute in NHWC order (channels_last_regions). CPU tests plan as for CUDA (regions run eagerly);
`gpu` tests run real nvFuser and check that no region falls back."""

from __future__ import annotations

import copy
import re

import pytest
import torch

from dynamo_nvf.runtime.stats import STATS
from helpers import (DEVICES, assert_as_close_as_eager, assert_same_layout, check_inference, check_training, compile_fn,
                     device_options, tolerance)

ON = {"plan_cpu_as_cuda": True}
#: Sums of 16 K products in another order than ATen's: f32 gradients differ by ~1e-4.
GRAD_TOL = {"atol": 1e-4}


class PoolingBlock(torch.nn.Module):
    """A PoolFormer block's token mixer: GroupNorm, average pooling, a layer scale, a residual."""

    def __init__(self, groups: int, channels: int = 16, affine: bool = True) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(groups, channels, affine=affine)
        self.pool = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.scale = torch.nn.Parameter(torch.rand(channels, 1, 1))
        if affine:
            with torch.no_grad():
                self.norm.weight.uniform_(0.5, 1.5)
                self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return x + self.scale * (self.pool(y) - y)


def _block(groups: int, channels_last: bool = True, **kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    block = PoolingBlock(groups, **kwargs)
    return block.to(memory_format=torch.channels_last) if channels_last else block


def _input(shape=(4, 16, 32, 32), channels_last: bool = True, device: str = "cpu", dtype=torch.float32):
    x = torch.randn(shape, device=device, dtype=dtype)
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _nhwc_notes(plans, kind=None):
    return [n for p in plans if kind in (None, p.kind) for n in p.rewrites if "NHWC order" in n]


def _activation_inputs(region):
    return [t for t in region.inputs if len(t.shape) == 4 and t.shape[1] * t.shape[2] > 1 and t.shape[3] > 1]


def _regions(plans, kind=None):
    return [r for p in plans if kind in (None, p.kind) for r in p.regions]


@pytest.mark.parametrize("groups", [1, 4, 16])
def test_channels_last_regions_read_the_activation_row_major(groups):
    """One group reduces [1, 2, 3] of the activation itself, one per channel [1, 2] (no view in any
    region, forward or backward); several reduce H*W and C/G of its [N, H*W, G, C/G] view (dense in
    order [0, 3, 1, 2]): dims that are not adjacent, so as two-pass sums, over H*W, then C/G
    (strided_statistics)."""
    m = _block(groups)
    plans = check_training(m, [_input()], ON, params=list(m.parameters()), **GRAD_TOL)
    assert _nhwc_notes(plans, "forward") and _nhwc_notes(plans, "backward"), [p.rewrites for p in plans]
    assert not [n for p in plans for n in p.nodes if "as_strided" in n.op or "group_norm" in n.op]
    statistics = [r for r in _regions(plans, "forward") if "var_mean" in r.fx_code or "sum" in r.fx_code]
    assert statistics, [r.fx_code for r in _regions(plans)]
    for region in statistics:
        if groups == 1:
            assert "var_mean" in region.fx_code and "[1, 2, 3]" in region.fx_code, region.fx_code
            assert "reshape" not in region.fx_code, region.fx_code
        elif groups == 16:
            assert "var_mean" in region.fx_code and "[1, 2]" in region.fx_code, region.fx_code
            assert "reshape" not in region.fx_code, region.fx_code
        else:
            assert "var_mean" not in region.fx_code, region.fx_code
            assert re.search(r"sum\.dim_IntList\(reshape_default(_\d+)?, \[1\], True\)", region.fx_code), region.fx_code
    if groups == 4:
        notes = [n for p in plans for n in p.rewrites if "two-pass sums" in n]
        assert notes and "over [1] then [3]" in notes[0], notes
    # The pool's gradient runs on NCHW copies (passes/nchw_pool_backward.py), ATen's own, so that no
    # region reads or writes an NCHW tensor beside channels-last ones: every region reads row-major NHWC.
    def nchw(tensors):
        return any(list(t.shape) == [4, 16, 32, 32] and list(t.stride) == [16384, 1024, 32, 1] for t in tensors)
    mixed = [r for r in _regions(plans) if nchw(r.inputs) or nchw(r.outputs)]
    assert not mixed, [(t.shape, t.stride) for r in mixed for t in (*r.inputs, *r.outputs)]
    copies = [n for p in plans for n in p.nodes if n.op == "aten.clone.default" and n.region is None]
    assert len(copies) == 2, [(n.op, n.region, n.reason) for p in plans for n in p.nodes]
    for region in _regions(plans):
        for t in _activation_inputs(region):
            assert list(t.shape)[-1] in (16, 16 // groups) and list(t.stride)[-1] == 1, (t.shape, t.stride)
    if groups in (1, 16):
        assert not [r for r in _regions(plans) if "reshape" in r.fx_code or "view" in r.fx_code]


@pytest.mark.parametrize("groups", [1, 4, 16])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_nchw_training_matches_eager(groups, affine):
    m = _block(groups, channels_last=False, affine=affine)
    plans = check_training(m, [_input(channels_last=False)], ON, params=list(m.parameters()), **GRAD_TOL)
    assert not [n for p in plans for n in p.nodes if "as_strided" in n.op or "group_norm" in n.op]


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("shape", [(8, 4), (8, 4, 6), (2, 4, 3, 4, 5)], ids=["2d", "3d", "5d"])
def test_other_ranks_match_eager(shape, groups):
    """[N, C] (one group per channel has no dims of its own there: the general form), [N, C, L] and
    [N, C, D, H, W]."""
    torch.manual_seed(0)
    m = torch.nn.GroupNorm(groups, 4)
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
    plans = check_training(m, [torch.randn(shape)], ON, params=list(m.parameters()), **GRAD_TOL)
    assert not [n for p in plans for n in p.nodes if "group_norm" in n.op]


def test_inference_matches_eager_on_fresh_inputs():
    m = _block(4).eval()
    compiled = torch.compile(m, backend="nvf_bookend", options=ON)
    with torch.no_grad():
        assert _nhwc_notes(check_inference(m, [_input()], ON))
        for _ in range(2):
            x = _input()
            out, expected = compiled(x), m(x)
            assert_same_layout(out, expected)
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------------
# GPU: real nvFuser
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("channels_last", [True, False], ids=["channels_last", "nchw"])
@pytest.mark.parametrize("groups", [1, 8, 64])
@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_training_steps_match_eager_with_no_fallback(device, groups, channels_last, dtype):
    """Three training steps on nvFuser: outputs, input and parameter gradients against eager's (bf16:
    no further from an f32 reference than eager's), and every region on nvFuser (none split into
    pieces or left to eager)."""
    STATS.reset()
    torch.manual_seed(0)
    model = PoolingBlock(groups, channels=64).to(device=device, dtype=dtype)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    eager, reference = copy.deepcopy(model), copy.deepcopy(model).float()
    compiled = compile_fn(model, device_options(device))
    rtol, atol = tolerance(dtype)
    for _ in range(3):
        x = _input((8, 64, 28, 28), channels_last, device, dtype)
        # eager and the f32 reference on NCHW copies: ATen's channels_last CUDA pool gradient is wrong
        # with padding (pytorch/pytorch#188344), the NCHW one is right
        xa, xe, xr = (x.clone().requires_grad_(True), x.clone(memory_format=torch.contiguous_format).requires_grad_(True),
                      x.float().contiguous().requires_grad_(True))
        out, expected, exact = compiled(xa), eager(xe), reference(xr)
        with torch.no_grad():
            assert_same_layout(out, eager(x))
        grad = torch.randn_like(out)
        for y in (out, expected):
            y.backward(grad)
        exact.backward(grad.float())
        pairs = [(out, expected, exact), (xa.grad, xe.grad, xr.grad)]
        pairs += [(pa.grad, pe.grad, pr.grad) for pa, pe, pr in
                  zip(model.parameters(), eager.parameters(), reference.parameters())]
        for actual, eager_value, exact_value in pairs:
            if dtype == torch.float32:
                torch.testing.assert_close(actual, eager_value, rtol=rtol * 10, atol=atol * 20)
            else:
                assert_as_close_as_eager(actual, eager_value, exact_value.detach())
        for p in (*model.parameters(), *eager.parameters(), *reference.parameters()):
            p.grad = None
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0, STATS.snapshot()
