"""An average pool runs in a region as the mean over its window's taps, and its gradient as the taps
run backwards (passes/avg_pool_taps.py): values, gradients and strides equal eager's, NCHW and
channels-last, with and without `count_include_pad`, with `divisor_override`; pools it declines keep
ATen's kernels."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from dynamo_nvf.backend import recording
from dynamo_nvf.pool_windows import avg_pool2d_grad, avg_pool2d_values

from helpers import (DEVICES, assert_as_close_as_eager, assert_pool_is_one_reduction, compile_fn, device_options,
                     steady_state_kernels)

aten = torch.ops.aten

#: (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override), input size; taken
POOLS = [
    ((3, 1, 1, False, False, None), 14, True),  # PoolFormer's token mixer
    ((3, 1, 1, False, True, None), 14, True),
    ((2, 2, 0, False, True, None), 16, True),   # ResNet-D's shortcut pool
    ((3, 2, 1, False, False, None), 16, True),
    ((3, 2, 1, False, True, 5), 16, True),      # divisor_override
    ((5, 1, 2, False, False, None), 10, True),
    ((2, 2, 0, True, True, None), 16, True),    # ceil_mode that does not change the size
    ((3, 2, 1, True, False, None), 16, False),  # ceil_mode that does
    ((3, 2, 1, False, True, None), 15, False),  # a size the stride does not divide
]
IDS = [f"{p}-{s}" for p, s, _ in POOLS]


class PoolMixer(nn.Module):
    """PoolFormer's token mixer, after a 1x1 convolution: pool(x) - x."""

    def __init__(self, pool: tuple) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1, bias=False)
        self.pool = dict(zip(("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                              "divisor_override"), pool))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        pooled = nn.functional.avg_pool2d(y, **self.pool)
        return pooled - y if pooled.shape == y.shape else pooled * 2.0


def _pools(gm) -> list:
    return [n for n in gm.graph.nodes if n.target is aten.avg_pool2d.default]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("pool,size,taken", POOLS, ids=IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_inference_avg_pool_runs_in_a_region(device, pool, size, taken, channels_last):
    torch.manual_seed(0)
    model = PoolMixer(pool).to(device).eval()
    compiled = compile_fn(model, {**device_options(device), "avg_pool_taps": True})
    for _ in range(2):
        x = torch.randn(2, 3, size, size, device=device)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        with torch.no_grad(), recording() as rec, torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            out = compiled(x)
            expected = model(x)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
        assert out.stride() == expected.stride()
        for gm in rec.graph_modules:
            assert len(_pools(gm)) == (0 if taken else 1), gm.code


def _step_matches_eager(model: nn.Module, compiled, x: torch.Tensor) -> None:
    """One compiled training step against eager: the output's values and strides, and the parameter
    gradients' strides, as eager's on `x`; the gradients' values as eager's on an NCHW copy of `x`
    (eager's channels_last CUDA pool gradient is wrong with padding, pytorch/pytorch#188344; the NCHW
    one is right)."""
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        out = compiled(x)
        out.square().sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        expected = model(x)
        expected.square().sum().backward()
        strides = [p.grad.stride() for p in model.parameters()]
        model.zero_grad()
        model(x.contiguous()).square().sum().backward()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert out.stride() == expected.stride()
    for g, p, stride in zip(got, model.parameters(), strides):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-4)
        assert g.stride() == stride


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("pool,size,taken", POOLS, ids=IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_training_runs_the_pool_and_its_gradient_as_taps(device, pool, size, taken, channels_last):
    torch.manual_seed(0)
    model = PoolMixer(pool).to(device)
    compiled = compile_fn(model, {**device_options(device), "avg_pool_taps": True})
    x = torch.randn(2, 3, size, size, device=device)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    with recording() as rec:
        _step_matches_eager(model, compiled, x)
    kinds = {p.kind: gm for gm, p in zip(rec.graph_modules, rec.plans)}
    grads = [n for n in kinds["backward"].graph.nodes if n.target is aten.avg_pool2d_backward.default]
    assert len(_pools(kinds["forward"])) == len(grads) == (0 if taken else 1), kinds["backward"].code


#: Non-square geometries (kernel, stride, padding per axis), input [N, C, H, W]: H and W mixed up fail.
UNEVEN = [
    (((3, 2), (2, 1), (1, 0), False, True, None), (2, 3, 12, 10)),
    (((2, 3), (1, 3), (0, 1), False, False, None), (1, 1, 9, 12)),
    (((3, 3), (3, 3), (1, 1), False, False, None), (3, 1, 3, 3)),  # the input as large as the window
    (((1, 5), (1, 1), (0, 2), False, False, 7), (1, 4, 5, 8)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=["f32", "f64", "bf16", "f16"])
@pytest.mark.parametrize("pool,shape", [((*[[v, v] for v in p[:3]], *p[3:]), (2, 3, n, n)) for p, n, t in POOLS if t]
                         + [((*[list(v) for v in p[:3]], *p[3:]), shape) for p, shape in UNEVEN]
                         + [(([1, 1], [2, 2], [0, 0], False, True, None), (2, 3, 16, 16))],
                         ids=[f"{p}-{n}" for p, n, t in POOLS if t] + [f"uneven-{i}" for i in range(len(UNEVEN))]
                         + ["1x1-stride-2"])
def test_taps_match_aten_on_cpu(pool, shape, dtype):
    """The functions themselves against ATen's kernels: every geometry the tests take, non-square ones
    (kernel, stride, padding and input differ between H and W), batch or channels of one, an input as
    large as its window; a 1x1 window of stride 2 leaves phases no tap reads."""
    torch.manual_seed(0)
    for layout in (torch.contiguous_format, torch.channels_last):
        x = torch.randn(shape, dtype=torch.float64).to(dtype).contiguous(memory_format=layout)
        got = avg_pool2d_values(x, *pool, any_device=True)
        assert got is not None
        expected = aten.avg_pool2d.default(x, *pool)
        exact = aten.avg_pool2d.default(x.double(), *pool)
        _close(got, expected, exact)
        grad = torch.randn_like(expected)
        got = avg_pool2d_grad(grad, x, *pool, any_device=True)
        expected = aten.avg_pool2d_backward.default(grad, x, *pool)
        exact = aten.avg_pool2d_backward.default(grad.double(), x.double(), *pool)
        _close(got, expected, exact)


@pytest.mark.parametrize("pool,size,taken", [p for p in POOLS if not p[2]], ids=[i for i, p in zip(IDS, POOLS) if not p[2]])
def test_declined_geometries(pool, size, taken):
    x = torch.randn(2, 3, size, size)
    geometry = [*[[v, v] for v in pool[:3]], *pool[3:]]
    assert avg_pool2d_values(x, *geometry, any_device=True) is None
    grad = torch.randn_like(aten.avg_pool2d.default(x, *geometry))  # the size ATen's gradient takes
    assert aten.avg_pool2d_backward.default(grad, x, *geometry).shape == x.shape
    assert avg_pool2d_grad(grad, x, *geometry, any_device=True) is None


def _close(got: torch.Tensor, expected: torch.Tensor, exact: torch.Tensor) -> None:
    """f32 and f64 within rounding of ATen's; half precision judged against the f64 result as ATen's own
    is (ATen's CPU kernels sum some windows in half precision, the taps sum in f32 and round once)."""
    assert got.stride() == expected.stride() and got.dtype == expected.dtype
    if got.dtype in (torch.bfloat16, torch.float16):
        assert_as_close_as_eager(got, expected, exact)
    else:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("option,inference,training", [
    (None, 0, 1), (True, 0, 0), (False, 1, 1)], ids=["default", "on", "off"])
def test_by_default_pools_are_taps_in_inference_only(option, inference, training):
    """avg_pool_taps=None takes pools into regions in inference graphs only (docs/options.md: a
    PoolFormer training region with the taps' gradient fails nvFuser's compile); True everywhere,
    False nowhere. Counts the ATen pools left per graph (forward and backward for training)."""
    torch.manual_seed(0)
    options = {"plan_cpu_as_cuda": True} if option is None else {"plan_cpu_as_cuda": True, "avg_pool_taps": option}
    model = PoolMixer(POOLS[0][0]).eval()
    compiled = compile_fn(model, options)
    with torch.no_grad(), recording() as rec:
        compiled(torch.randn(2, 3, 14, 14))
    assert [len(_pools(gm)) for gm in rec.graph_modules] == [inference]
    model = PoolMixer(POOLS[0][0]).train()
    compiled = compile_fn(model, options)
    with recording() as rec:
        compiled(torch.randn(2, 3, 14, 14)).sum().backward()
    grads = [n for gm in rec.graph_modules for n in gm.graph.nodes if n.target is aten.avg_pool2d_backward.default]
    assert [len(_pools(gm)) for gm in rec.graph_modules][0] == training and len(grads) == training
    left = [n for p in rec.plans for n in p.eager_nodes if n.op == "aten.avg_pool2d.default"]
    assert all("avg_pool_taps" in n.reason for n in left), [n.reason for n in left]  # explain() says why


def _nchw_gradients(gm) -> list:
    """The backward graph's ATen avg_pool2d_backward nodes of NCHW tensors (nchw_avg_pool_backward; its
    copies may join the regions around it)."""
    return [n for n in gm.graph.nodes if n.target is aten.avg_pool2d_backward.default
            and n.args[1].target is aten.empty_like.default and n.args[0].meta["val"].is_contiguous()
            and n.meta["val"].is_contiguous()]


@pytest.mark.parametrize("pool,size,options", [
    ((3, 2, 1, True, False, None), 16, {"avg_pool_taps": True}),  # a geometry the taps decline
    ((3, 1, 1, False, False, None), 14, {"avg_pool_taps": False}),
    ((2, 2, 0, False, True, None), 16, {"avg_pool_taps": False}),  # no padding: ATen's kernel is right
], ids=["declined", "taps-off", "unpadded"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_a_padded_channels_last_pool_gradient_left_to_aten_runs_nchw(pool, size, options, channels_last):
    """ATen's channels_last CUDA kernel for avg_pool2d_backward is wrong with padding
    (pytorch/pytorch#188344): where the gradient stays in ATen, its inputs go NCHW and its output back."""
    torch.manual_seed(0)
    model = PoolMixer(pool)
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True, **options})
    x = torch.randn(2, 3, size, size)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    with recording() as rec:
        _step_matches_eager(model, compiled, x)
    backward = next(gm for gm, p in zip(rec.graph_modules, rec.plans) if p.kind == "backward")
    grads = [n for n in backward.graph.nodes if n.target is aten.avg_pool2d_backward.default]
    padded = channels_last and pool[2] > 0
    assert len(grads) == 1 and len(_nchw_gradients(backward)) == int(padded), backward.code


class Transition(nn.Module):
    """DenseNet's transition and the next block's first norm: conv 1x1, a 2x2 stride-2 pool, then
    BatchNorm and ReLU of the pooled features, which are kept too (the block concatenates them)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(16, 32, 1, bias=False)
        self.norm = nn.BatchNorm2d(32)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pooled = nn.functional.avg_pool2d(self.conv(x), 2, 2)
        return pooled, torch.relu(self.norm(pooled))


@pytest.mark.parametrize("device", DEVICES)
def test_a_pool_whose_windows_tile_its_input_is_one_sum(device):
    """Stride = kernel, no padding: one sum over the phase dims, no slices; on the GPU the pool, the
    norm and the ReLU are one nvFuser kernel and no ATen pool runs."""
    torch.manual_seed(0)
    model = Transition().to(device).eval()
    x = torch.randn(4, 16, 28, 28, device=device).to(memory_format=torch.channels_last)
    compiled = compile_fn(model, device_options(device))
    with torch.no_grad(), recording() as rec, torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        out, names = steady_state_kernels(compiled, [x]) if device == "cuda" else (compiled(x), [])
        expected = model(x)
    for got, want in zip(out, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert got.stride() == want.stride()
    assert_pool_is_one_reduction(rec.plans, "aten.sum.dim_IntList", "aten.relu.default", names, device == "cuda")
