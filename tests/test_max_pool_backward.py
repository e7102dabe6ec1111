"""A max pool's backward reads its input's sizes, not its input: the forward does not save the
activation it pools (ResNet's stem output), and gradients match eager's, channels-last too."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from dynamo_nvf.backend import recording

from helpers import DEVICES, compile_fn, device_options

aten = torch.ops.aten


class Stem(nn.Module):
    """ResNet's stem: conv-BN-ReLU, a 3x3 max pool of stride 2, then a convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.after = nn.Conv2d(8, 8, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.after(nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 3, 2, 1))


def _saved_shapes(backward: torch.fx.GraphModule) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """Shape and dtype of each tensor the backward graph takes (saved tensors and tangents)."""
    return [(tuple(n.meta["val"].shape), n.meta["val"].dtype) for n in backward.graph.find_nodes(op="placeholder")
            if isinstance(n.meta.get("val"), torch.Tensor)]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("device", DEVICES)
def test_max_pool_backward_does_not_save_the_pooled_activation(device, channels_last):
    torch.manual_seed(0)
    model = Stem().to(device)
    eager = Stem().to(device)
    eager.load_state_dict(model.state_dict())
    compiled = compile_fn(model, device_options(device))
    graphs = []
    for _ in range(2):
        x = torch.randn(2, 3, 16, 16, device=device)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        xa, xe = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        with recording() as rec:
            out = compiled(xa)
            expected = eager(xe)
            grad = torch.randn_like(expected)
            out.backward(grad)
            expected.backward(grad)
        graphs += [gm for gm, p in zip(rec.graph_modules, rec.plans) if p.kind == "backward"]
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(xa.grad, xe.grad, rtol=1e-4, atol=1e-4)
        for (name, pa), (_, pe) in zip(model.named_parameters(), eager.named_parameters()):
            torch.testing.assert_close(pa.grad, pe.grad, rtol=1e-4, atol=1e-4, msg=name)
            pa.grad = pe.grad = None
    assert len(graphs) == 1
    backward = graphs[0]
    pools = [n for n in backward.graph.nodes if n.target is aten.max_pool2d_with_indices_backward.default]
    assert len(pools) == 1
    sizes = pools[0].args[1]
    assert sizes.op == "call_function" and sizes.target is aten.empty_strided.default, sizes.format_node()
    # the pool's input, [2, 8, 16, 16], is saved once (the convolution's output, for the BatchNorm
    # backward), not also as the ReLU's output
    pooled_input = [s for s in _saved_shapes(backward) if s[0] == (2, 8, 16, 16)]
    assert len(pooled_input) == 1, _saved_shapes(backward)


@pytest.mark.parametrize("device", DEVICES)
def test_a_max_pool_window_of_only_minus_infinity_gets_eager_gradients(device):
    """Where every value of a window is -inf, the gradient goes where eager's kernel sends it."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        return nn.functional.max_pool2d(x * 2, 3, 2, 1)

    compiled = compile_fn(fn, device_options(device))
    x = torch.randn(2, 4, 12, 12, device=device)
    x[:, :, 4:9, 4:9] = float("-inf")  # the window of output (3, 3) reads rows and columns 5-7 only
    x = x.to(memory_format=torch.channels_last)
    xa, xe = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out, expected = compiled(xa), fn(xe)
    grad = torch.randn_like(expected)
    out.backward(grad)
    expected.backward(grad)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(xa.grad, xe.grad, rtol=0, atol=0)
