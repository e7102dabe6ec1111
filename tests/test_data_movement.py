"""`fuse_data_movement`: a unit-step slice's or a select's gradient becomes a zero pad inside the
backward region (ATen's slice_backward and select_backward are a zeros kernel plus a copy), and a
stack (an unbind's gradient) a cat; values and gradients equal eager's."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf.backend import recording
from helpers import DEVICES, check_training, compile_fn, device_options

OPTIONS = {"fuse_data_movement": True}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE's rotation: the two halves of the last dim, swapped, one negated."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


SLICES = {
    "rope": lambda x, c, s: x * c + _rotate_half(x) * s,
    "negative_bounds": lambda x, c, s: (x[:, -3:-1] * c[:, :2]).sin() + (x[1:, :] * s[1:, :]).cos().sum(),
    "end_past_size": lambda x, c, s: (x[:, 2:100] * 2.0).exp() + c[:, 2:].sum() * s[:, :6],
}


def _backward_plans(fn, device: str) -> list:
    """The backward plans of `fn` on three (6, 8) inputs, trained with the option and checked
    against eager (values and gradients)."""
    torch.manual_seed(0)
    x, c, s = (torch.randn(6, 8, device=device) for _ in range(3))
    plans = check_training(fn, [x, c, s], device_options(device, strict=True) | OPTIONS)
    return [p for p in plans if p.kind == "backward"]


@pytest.mark.parametrize("name", list(SLICES))
@pytest.mark.parametrize("device", DEVICES)
def test_slice_gradients_become_pads_in_a_region(device, name):
    backward = _backward_plans(SLICES[name], device)
    ops = [n.op for p in backward for n in p.nodes]
    assert "aten.slice_backward.default" not in ops, ops
    assert any("aten.constant_pad_nd.default" in r.ops for p in backward for r in p.regions), ops


def test_strided_slices_and_the_option_off_keep_slice_backward():
    """With the option off, or for a step-2 slice (not a pad), ATen's slice_backward runs."""
    torch.manual_seed(0)
    x = torch.randn(6, 8)
    for options, fn in (({"fuse_data_movement": False}, SLICES["rope"]), (OPTIONS, lambda x, c, s: (x[:, ::2] * 2.0).exp() * c[:, :4])):
        plans = check_training(fn, [x, x.clone(), x.clone()], {"plan_cpu_as_cuda": True} | options)
        ops = [n.op for p in plans if p.kind == "backward" for n in p.nodes]
        assert "aten.slice_backward.default" in ops, ops


SELECTS = {
    "class_token": lambda x, c, s: (x[:, 0] * c[:, 1]).tanh() + x[:, -1] * s[:, 2],
    "qkv_unbind": lambda x, c, s: sum((t * w).sigmoid() for t, w in zip(
        (x * c + s).view(6, 2, 4).unbind(1), (c[:, :4], s[:, :4]))),
}


@pytest.mark.parametrize("name", list(SELECTS))
@pytest.mark.parametrize("device", DEVICES)
def test_select_gradients_and_stacks_join_a_region(device, name):
    backward = _backward_plans(SELECTS[name], device)
    eager_ops = [n.op for p in backward for n in p.nodes if n.region is None]
    assert not any(op in eager_ops for op in ("aten.select_backward.default", "aten.stack.default")), eager_ops
    region_ops = [op for p in backward for r in p.regions for op in r.ops]
    assert "aten.constant_pad_nd.default" in region_ops or "aten.cat.default" in region_ops, region_ops


def test_a_channels_last_gradient_keeps_aten_and_eager_strides():
    """A pad of a channels-last gradient would be channels-last; ATen's slice_backward gives a
    contiguous gradient, so the slice keeps it (and the input's gradient has eager's strides)."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 4, 4).to(memory_format=torch.channels_last).requires_grad_()
    fn = lambda x: (x[:, :4] * 2.0).sin()  # noqa: E731
    with recording() as rec:
        out = compile_fn(fn, {"plan_cpu_as_cuda": True, "strict": True} | OPTIONS)(x)
        out.backward(torch.ones_like(out))
    x_eager = x.detach().clone().requires_grad_()
    fn(x_eager).backward(torch.ones_like(out))
    torch.testing.assert_close(x.grad, x_eager.grad)
    assert x.grad.stride() == x_eager.grad.stride(), (x.grad.stride(), x_eager.grad.stride())
