"""sink_permutes: a permute inside a region that pointwise ops carry to the region's output moves below
them, so the region reads and writes row-major tensors (ConvNeXt's residual add of a channels-last
input and the MLP's permuted NHWC output); where the permute cannot reach the output, where an
operand would not be row-major, in backward graphs or with the option off, the region keeps it.
Values and output strides match eager."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf import nvf as nvf_env
from helpers import (DEVICES, assert_same, assert_same_layout, check_fresh_inputs, check_inference, check_training,
                     compile_fn, device_options, steady_state_kernels, tolerance)

PLAN = {"plan_cpu_as_cuda": True}
#: On the GPU, at the sizes where channels_last_regions takes the whole region into NHWC order (on by
#: default), it is off: this pass serves the regions that one declines.
GPU = {"strict": True, "channels_last_regions": False}


def residual(x, y, b, gamma):
    """ConvNeXt's residual: x (NCHW, channels-last) + layer scale * the MLP's NHWC output, permuted."""
    n, c, h, w = x.shape
    z = gamma * (y + b).view(n, h, w, c)
    return x + z.permute(0, 3, 1, 2)


def _inputs(device="cpu", dtype=torch.float32, c=8, h=5, channels_last=True):
    x = torch.randn(2, c, h, h, device=device, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    return [x, torch.randn(2 * h * h, c, device=device, dtype=dtype), torch.randn(c, device=device, dtype=dtype),
            torch.rand(c, device=device, dtype=dtype)]


def _notes(plan):
    return [n for n in plan.rewrites if "onto the region's output" in n]


@pytest.mark.parametrize("device", DEVICES)
def test_residual_region_computes_in_memory_order(device):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    c, h = (96, 56) if device == "cuda" else (8, 5)
    inputs = _inputs(device, dtype, c, h)
    rtol, atol = tolerance(dtype)
    (plan,) = check_inference(residual, inputs, device_options(device, **GPU), rtol=rtol, atol=atol)
    assert _notes(plan) == ["permute permute: moved below add_1 onto the region's output, so the region reads "
                            "and writes row-major tensors"], plan.rewrites
    (region,) = plan.regions
    assert "aten.permute.default" not in region.ops, region.ops
    for t in (*region.inputs, *region.outputs):  # every tensor the fusion touches is row-major
        expected = [1]
        for size in reversed(t.shape[1:]):
            expected.insert(0, expected[0] * size)
        assert list(t.stride) == expected, (t.shape, t.stride)
    (out,) = region.outputs
    assert list(out.shape) == [2, h, h, c]  # NHWC; the permute back to NCHW is a trimmed view
    compiled = compile_fn(residual, device_options(device, **GPU))
    check_fresh_inputs(compiled, residual, lambda: _inputs(device, dtype, c, h), *tolerance(dtype))


def test_a_chain_of_pointwise_ops_is_crossed():
    def f(x, y, b, gamma):
        return (residual(x, y, b, gamma) * 2.0).relu()

    (plan,) = check_inference(f, _inputs(), PLAN)
    assert len(_notes(plan)) == 1 and "add_1, mul_1, relu" in _notes(plan)[0], plan.rewrites
    (region,) = plan.regions
    assert "aten.permute.default" not in region.ops, region.ops


def test_an_nchw_residual_keeps_the_permute():
    """x NCHW-contiguous: its NHWC view is strided, and the eager result is NCHW; nothing to gain."""
    (plan,) = check_inference(residual, _inputs(channels_last=False), PLAN)
    assert not _notes(plan), plan.rewrites
    (region,) = plan.regions
    assert "aten.permute.default" in region.ops


def test_a_permute_that_ends_in_a_reduction_stays():
    def f(x, y, b, gamma):
        return residual(x, y, b, gamma).sum((2, 3))

    plans = check_inference(f, _inputs(), {**PLAN, "memory_order_reductions": False})
    assert not any(_notes(p) for p in plans), [p.rewrites for p in plans]


def test_a_value_read_twice_in_the_region_keeps_the_permute():
    def f(x, y, b, gamma):
        n, c, h, w = x.shape
        z = (gamma * (y + b).view(n, h, w, c)).permute(0, 3, 1, 2)
        return x + z, z * 3.0

    plans = check_inference(f, _inputs(), PLAN)
    assert not any(_notes(p) for p in plans), [p.rewrites for p in plans]


def test_a_copy_into_a_memory_format_stops_the_sink():
    """clone(memory_format=channels_last) does not commute with a permute: the permute stays."""
    def f(x, y, b, gamma):
        return torch.clone(residual(x, y, b, gamma), memory_format=torch.channels_last)

    (plan,) = check_inference(f, _inputs(), PLAN)
    assert not _notes(plan), plan.rewrites
    compiled = compile_fn(f, PLAN)
    fresh = _inputs()
    with torch.no_grad():
        assert_same_layout(compiled(*fresh), f(*fresh))


def test_a_scalar_tensor_operand_keeps_the_dtype():
    """A 0-d f32 tensor times a bf16 tensor stays bf16 (ranked up to [1, 1, 1, 1], it would promote)."""
    def f(x, y, s):
        n, c, h, w = x.shape
        return x + (y * 2).view(n, h, w, c).permute(0, 3, 1, 2) * s

    x, y = _inputs(dtype=torch.bfloat16)[:2]
    inputs = [x, y, torch.tensor(3.0)]
    (plan,) = check_inference(f, inputs, PLAN, rtol=2e-2, atol=2e-2)
    assert _notes(plan), plan.rewrites
    compiled = compile_fn(f, PLAN)
    with torch.no_grad():
        got, want = compiled(*inputs), f(*inputs)
    assert got.dtype == want.dtype == torch.bfloat16
    assert_same_layout(got, want)


def test_option_off_keeps_the_permute():
    (plan,) = check_inference(residual, _inputs(), {**PLAN, "sink_permutes": False})
    assert not _notes(plan)
    (region,) = plan.regions
    assert "aten.permute.default" in region.ops


def test_training_gradients_match_and_only_forward_graphs_sink():
    torch.manual_seed(0)
    plans = check_training(residual, _inputs(), PLAN)
    sunk = {p.kind: bool(_notes(p)) for p in plans}
    assert sunk == {"forward": True, "backward": False}, sunk


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_residual_runs_as_one_nvfuser_kernel():
    dtype = torch.float32
    inputs = _inputs("cuda", dtype, c=96, h=56)
    compiled = compile_fn(residual, {"strict": True})
    out, names = steady_state_kernels(compiled, inputs)
    with torch.no_grad():
        want = residual(*inputs)
    assert_same(out, want, *tolerance(dtype))
    assert_same_layout(out, want)
    assert sum("nvfuser" in n for n in names) == 1, names
    assert not any("at::native" in n for n in names), names
