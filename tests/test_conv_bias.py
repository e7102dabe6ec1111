"""Convolution biases peeled off into the region that follows (as inductor does on GPUs): the
convolution runs without its bias, the add joins the next region, and the bias gradient is a
region's reduction rather than part of the convolution's backward."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dynamo_nvf.backend import recording
from helpers import DEVICES, assert_same, clone_inputs, compile_fn, device_options, tolerance

aten = torch.ops.aten


class ConvNormAct(nn.Module):
    def __init__(self, transposed: bool = False) -> None:
        super().__init__()
        conv = nn.ConvTranspose2d if transposed else nn.Conv2d
        self.conv = conv(4, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.norm(self.conv(x)))


def _calls(gm: torch.fx.GraphModule, target) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is target]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_conv_bias_joins_the_next_region(device, transposed):
    torch.manual_seed(0)
    model = ConvNormAct(transposed).to(device)
    reference = ConvNormAct(transposed).to(device)
    reference.load_state_dict(model.state_dict())
    compiled = compile_fn(model, device_options(device, strict=True))
    x = torch.randn(2, 4, 10, 10, device=device)
    (x_c,), (x_e,) = clone_inputs([x], requires_grad=True), clone_inputs([x], requires_grad=True)
    with recording() as rec:
        out = compiled(x_c)
        expected = reference(x_e)
        assert_same(out, expected)
        grad = torch.randn_like(expected)
        out.backward(grad)
        expected.backward(grad)
    r, a = tolerance(torch.float32)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=r * 10, atol=a * 10)
    torch.testing.assert_close(x_c.grad, x_e.grad, rtol=r * 10, atol=a * 10)

    forward_gm, backward_gm = rec.graph_modules
    forward, backward = rec.plans
    (conv,) = _calls(forward_gm, aten.convolution.default)
    assert conv.args[2] is None  # no bias: the add opens the norm's region
    assert forward.regions[0].ops[0] == "aten.add.Tensor", forward.regions[0].ops
    (conv_bwd,) = _calls(backward_gm, aten.convolution_backward.default)
    assert list(conv_bwd.args[-1]) == [True, True, False]  # no bias gradient from cuDNN
    # The bias gradient: a sum over batch and space ([0, 2, 3]) in a backward region.
    assert any(op == "aten.sum.dim_IntList" for reg in backward.regions for op in reg.ops)


def test_conv_bias_kept_on_cpu_without_planning_as_cuda():
    """On the CPU, with nothing to fuse the add into, the convolution keeps its bias."""
    torch.manual_seed(0)
    model = ConvNormAct()
    with recording() as rec:
        compile_fn(model, {"strict": True})(torch.randn(2, 4, 10, 10))
    (conv,) = _calls(rec.graph_modules[0], aten.convolution.default)
    assert conv.args[2] is not None


def test_conv_without_input_channels_keeps_a_zero_bias_gradient():
    """No input channels: the output has no channels either and the bias gradient is ATen's zeros
    of the bias' size, not a sum over an empty channel dim."""
    torch.manual_seed(0)
    x = torch.randn(2, 0, 5, 5, requires_grad=True)
    w = torch.randn(6, 0, 3, 3, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    fn = lambda x, w, b: torch.nn.functional.conv2d(x, w, b, padding=1) * 2.0  # noqa: E731
    out = compile_fn(fn, {"plan_cpu_as_cuda": True, "strict": True})(x, w, b)
    assert_same(out, fn(x.detach(), w.detach(), b.detach()))
    out.sum().backward()
    torch.testing.assert_close(b.grad, torch.zeros(6))
