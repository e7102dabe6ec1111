"""memory_order_reductions: a region's sum/mean/amax/amin of a channels-last tensor over dims whose
innermost logical one is not innermost in memory (ConvNeXt's head: a mean over H and W) reduces a
permute of the tensor into memory order instead; the result is the same tensor, laid out as eager
lays it out (keepdim honoured). Row-major inputs, reductions whose kept dims would come out in another
order, backward graphs and the option off are left alone.
Values and output strides match eager; on the GPU the head is one nvFuser reduction kernel plus the
norm's, and matches eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf.passes.memory_order_reductions import misread_order

from helpers import (DEVICES, assert_same, check_fresh_inputs, check_inference, check_training, compile_fn,
                     device_options, tolerance)

PLAN = {"plan_cpu_as_cuda": True}
#: On the GPU, at the sizes where channels_last_regions takes the whole region into NHWC order (on by
#: default), it is off: this pass serves the regions that one declines.
GPU = {"strict": True, "channels_last_regions": False}


def head(x, gamma, y, w, b):
    """ConvNeXt's head: the last residual add (channels-last x, NHWC y), mean over H and W, LayerNorm."""
    z = x + (gamma * y).permute(0, 3, 1, 2)
    return F.layer_norm(z.mean((2, 3)), (z.shape[1],), w, b, 1e-6)


def _head_inputs(device="cpu", dtype=torch.float32, c=16, h=6):
    x = torch.randn(2, c, h, h, device=device, dtype=dtype).to(memory_format=torch.channels_last)
    return [x, torch.rand(c, device=device, dtype=dtype), torch.randn(2, h, h, c, device=device, dtype=dtype),
            torch.rand(c, device=device, dtype=dtype) + 0.5, torch.randn(c, device=device, dtype=dtype)]


def _reductions(region, op="aten.mean.dim"):
    return [line for line in region.fx_code.splitlines() if op in line]


def test_misread_order_compares_the_innermost_dims():
    # channels-last [N, C, H, W]: memory order [0, 2, 3, 1]
    assert misread_order([2, 8, 5, 5], [0, 2, 3, 1], [2, 3])  # W reduced, C kept
    assert misread_order([2, 8, 5, 5], [0, 2, 3, 1], [1])  # W kept, C reduced
    assert not misread_order([2, 8, 5, 5], [0, 2, 3, 1], [1, 3])  # both reduced
    assert not misread_order([2, 8, 5, 5], [0, 2, 3, 1], [0])  # both kept
    assert not misread_order([2, 8, 1, 1], [0, 2, 3, 1], [2, 3])  # the reduced dims are size 1


@pytest.mark.parametrize("device", DEVICES)
def test_head_mean_reads_memory_order(device):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    inputs = _head_inputs(device, dtype, c=192 if device == "cuda" else 16, h=28 if device == "cuda" else 6)
    plans = check_inference(head, inputs, device_options(device, **GPU))
    (plan,) = plans
    notes = [n for n in plan.rewrites if "memory order" in n]
    assert notes == ["mean mean: reduces its input permuted [0, 2, 3, 1] into memory order, so nvFuser "
                     "schedules the outer reduction the memory holds"], plan.rewrites
    (region,) = [r for r in plan.regions if _reductions(r)]
    (mean,) = _reductions(region)
    assert "[1, 2]" in mean, region.fx_code  # H and W of the NHWC view
    x_inputs = [t for t in region.inputs if len(t.shape) == 4]
    assert x_inputs and all(list(t.shape[1:3]) == list(inputs[0].shape[2:]) for t in x_inputs), region.inputs
    compiled = compile_fn(head, device_options(device, **GPU))
    c, h = inputs[0].shape[1], inputs[0].shape[2]
    check_fresh_inputs(compiled, head, lambda: _head_inputs(device, dtype, c=c, h=h), *tolerance(dtype))


def test_option_off_keeps_the_logical_reduction():
    (plan,) = check_inference(head, _head_inputs(), {**PLAN, "memory_order_reductions": False})
    assert not any("memory order" in n for n in plan.rewrites)
    (region,) = [r for r in plan.regions if _reductions(r)]
    assert "[2, 3]" in _reductions(region)[0]


def test_row_major_input_is_left_alone():
    def f(x):
        return x.sum((2, 3)) * 2.0

    (plan,) = check_inference(f, [torch.randn(2, 8, 5, 5)], PLAN)
    assert not any("memory order" in n for n in plan.rewrites), plan.rewrites


def test_a_reduction_whose_kept_dims_would_reorder_is_left_alone():
    """A sum over W alone of a channels-last tensor: its NHWC view keeps [N, H, C]; putting C back
    before H would give the result other strides than eager's, so the pass leaves it."""
    def f(x):
        return (x * 2.0).sum(3) + 1.0

    x = torch.randn(2, 8, 5, 3).to(memory_format=torch.channels_last)
    (plan,) = check_inference(f, [x], PLAN)
    assert not any("memory order" in n for n in plan.rewrites), plan.rewrites


def test_keepdim_puts_the_reduced_dims_back():
    def f(x):
        return (x * 2.0).mean((2, 3), keepdim=True) + x

    x = torch.randn(2, 8, 5, 3).to(memory_format=torch.channels_last)
    (plan,) = check_inference(f, [x], PLAN)
    assert any("permuted [0, 2, 3, 1]" in n for n in plan.rewrites), plan.rewrites
    compiled = compile_fn(f, PLAN)
    fresh = torch.randn(2, 8, 5, 3).to(memory_format=torch.channels_last)
    assert_same(compiled(fresh), f(fresh))


def test_amax_over_channels_of_a_channels_last_tensor():
    """The reverse case: C (innermost in memory) reduced, W (innermost logically) kept."""
    def f(x):
        return (x - 1.0).amax(1)

    x = torch.randn(2, 8, 5, 5).to(memory_format=torch.channels_last)
    (plan,) = check_inference(f, [x], PLAN)
    assert any(n.startswith("amax ") and "inner reduction" in n for n in plan.rewrites), plan.rewrites


def test_training_rewrites_the_forward_only():
    torch.manual_seed(0)
    plans = check_training(head, _head_inputs(), PLAN)
    rewritten = {p.kind: any("memory order" in n for n in p.rewrites) for p in plans}
    assert rewritten == {"forward": True, "backward": False}, rewritten


def test_a_broadcast_of_rewritten_reductions_read_through_a_view_keeps_eager_values():
    """Two keepdim reductions of a channels-last tensor, broadcast together and squeezed outside the
    region: the rewrite moves the reductions' size-1 dims, so the region's eager run (the CPU, or a
    fallback after an nvFuser error) lays the product out otherwise than the traced graph; the
    runtime gives it the traced strides, which the squeeze outside reads through a reinterpret."""

    def fn(x):
        x = x * 2
        s = x.sum((2, 3), keepdim=True) * x[:, :, :, :1].sum(1, keepdim=True)
        return s.squeeze(3)

    compiled = torch.compile(fn, backend="nvf_bookend", options={"plan_cpu_as_cuda": True})
    for _ in range(2):
        x = torch.randn(8, 16, 32, 32).to(memory_format=torch.channels_last)
        out, expected = compiled(x), fn(x)
        assert out.stride() == expected.stride()
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-3)
