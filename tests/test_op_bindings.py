"""The code that runs a compiled graph calls the eager ops between regions through torch's Python
bindings (`torch.convolution`, `torch.permute`, `x.view`), not their op overloads, on both of lean
views' paths; the recorded graph keeps the aten ops; values and strides are eager's."""

from __future__ import annotations

import torch

from dynamo_nvf import recording
from dynamo_nvf.runtime.lean_forward import LeanForward, compiled_forward
from helpers import check_fresh_inputs, compile_fn, tolerance

ON = {"plan_cpu_as_cuda": True}


def _block() -> torch.nn.Module:
    """Convolutions around a GroupNorm that computes in NHWC order: its input is a permute of the
    first convolution's output, made between the regions."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(8, 64, 3, padding=1, bias=False), torch.nn.GroupNorm(32, 64),
                               torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1)).eval()


def _make():
    return [torch.randn(2, 8, 32, 32)]


def test_the_running_code_calls_the_bindings():
    block = _block()
    compiled = compile_fn(block, ON)
    with torch.no_grad(), recording() as rec:
        compiled(*_make())
    (gm,) = rec.graph_modules
    assert "torch.ops.aten.convolution.default(" in gm.code  # the recorded graph: aten ops
    forward = compiled_forward(gm, lean_views=True)
    codes = [forward.raw.code, forward.checked.code] if isinstance(forward, LeanForward) else [forward.code]
    for code in codes:
        assert "torch.convolution(" in code and "torch.permute(" in code and ".reshape(" in code, code
        assert "torch.ops.aten" not in code, code
    check_fresh_inputs(compiled, block, _make, *tolerance(torch.float32))
