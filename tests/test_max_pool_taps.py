"""A max pool whose indices nothing reads (inference) runs in a region as the maximum over its
window's taps (passes/max_pool_taps.py): values and strides equal eager's, NCHW and channels-last,
with ties, -inf and NaN; pools it declines, and pools whose indices a backward reads, keep ATen's."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from dynamo_nvf.backend import recording
from dynamo_nvf.pool_windows import max_pool2d_values

from helpers import DEVICES, assert_pool_is_one_reduction, compile_fn, device_options, steady_state_kernels

aten = torch.ops.aten

#: (kernel, stride, padding, dilation, ceil_mode), input size; whether the taps take it
POOLS = [
    ((3, 2, 1, 1, False), 16, True),   # ResNet's stem
    ((2, 2, 0, 1, False), 16, True),
    ((3, 1, 1, 1, False), 9, True),    # stride 1: no phases
    ((5, 1, 2, 1, False), 10, True),   # YOLO's SPPF
    ((2, 2, 0, 1, True), 16, True),    # ceil_mode that does not change the size
    ((3, 2, 1, 1, True), 16, False),   # ceil_mode that does
    ((3, 2, 1, 2, False), 16, False),  # dilation
    ((3, 2, 1, 1, False), 15, False),  # a size the stride does not divide
]


class PoolBlock(nn.Module):
    def __init__(self, pool: tuple, bias: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1, bias=bias)
        self.pool = dict(zip(("kernel_size", "stride", "padding", "dilation", "ceil_mode"), pool))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.max_pool2d(torch.relu(self.conv(x)) - 0.5, **self.pool) * 2.0


def _special(x: torch.Tensor) -> torch.Tensor:
    """Ties (rounded values), -inf windows and NaN, where the taps' maximum must agree with ATen's."""
    x = x.round()
    x[0, :, :4, :4] = float("-inf")
    x[1, 0, 3, 5] = float("nan")
    return x


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("pool,size,taken", POOLS, ids=[f"{p}-{s}" for p, s, _ in POOLS])
@pytest.mark.parametrize("device", DEVICES)
def test_inference_max_pool_runs_in_a_region(device, pool, size, taken, channels_last):
    torch.manual_seed(0)
    model = PoolBlock(pool).to(device).eval()
    compiled = compile_fn(model, device_options(device))
    for step in range(2):
        x = torch.randn(2, 3, size, size, device=device)
        if step:
            x = _special(x)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        # TF32 off: the compiled graph may run the conv in another layout, whose TF32 kernel rounds
        # differently; the taps themselves must match ATen's pool exactly.
        with torch.no_grad(), recording() as rec, torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            out = compiled(x)
            expected = model(x)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
        assert out.stride() == expected.stride()
        if step == 0:
            (graph,) = rec.graph_modules
            pools = [n for n in graph.graph.nodes if n.target is aten.max_pool2d_with_indices.default]
            assert len(pools) == (0 if taken else 1), graph.code


@pytest.mark.parametrize("device", DEVICES)
def test_training_max_pool_keeps_aten(device):
    """The backward reads the indices, so ATen's forward (which writes them) stays."""
    torch.manual_seed(0)
    model = PoolBlock(POOLS[0][0]).to(device)
    compiled = compile_fn(model, device_options(device))
    x = torch.randn(2, 3, 16, 16, device=device)
    with recording() as rec:
        compiled(x).sum().backward()
    forward = next(gm for gm, p in zip(rec.graph_modules, rec.plans) if p.kind == "forward")
    assert any(n.target is aten.max_pool2d_with_indices.default for n in forward.graph.nodes)


@pytest.mark.parametrize("pool,size,taken", POOLS, ids=[f"{p}-{s}" for p, s, _ in POOLS])
def test_taps_match_aten_on_cpu(pool, size, taken):
    """The function itself, on every kind of window it takes, against ATen's kernel."""
    torch.manual_seed(0)
    for layout in (torch.contiguous_format, torch.channels_last):
        x = _special(torch.randn(2, 3, size, size)).contiguous(memory_format=layout)
        got = max_pool2d_values(x, *pool, any_device=True)
        assert (got is not None) == taken
        if got is not None:
            expected = aten.max_pool2d_with_indices.default(x, *[[v, v] for v in pool[:4]], pool[4])[0]
            torch.testing.assert_close(got, expected, equal_nan=True)
            assert got.stride() == expected.stride()


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("device", DEVICES)
def test_a_pool_whose_windows_tile_its_input_is_one_maximum(device, bias):
    """Stride = kernel, no padding (VGG's and U-Net's 2x2 pools): one amax over the phase dims, no
    slices, with -inf and NaN as ATen's; on the GPU the ReLU, the pool and the scale are one nvFuser
    kernel and no ATen pool runs. With the convolution's bias added in the region too (VGG), the split
    view is handed to the region as its inputs' views: nvFuser failed to run the reshape after the
    broadcast add (scripts/nvfuser_repros/tiled_pool_after_pointwise.py)."""
    torch.manual_seed(0)
    model = PoolBlock(POOLS[1][0], bias).to(device).eval()
    x = _special(torch.randn(4, 3, 32, 32, device=device)).to(memory_format=torch.channels_last)
    compiled = compile_fn(model, device_options(device))
    with torch.no_grad(), recording() as rec, torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        out, names = steady_state_kernels(compiled, [x]) if device == "cuda" else (compiled(x), [])
        expected = model(x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert out.stride() == expected.stride()
    assert_pool_is_one_reduction(rec.plans, "aten.amax.default", "aten.relu.default", names, device == "cuda")
