"""fast_math: regions that compute an exponential or a logarithm, and no op that fast math makes less
accurate than inductor's (sine, cosine, tanh, power), are compiled with nvFuser's fast math; explain()
says which and why. On the GPU their results match eager's within the dtype's tolerance, in one kernel."""

from __future__ import annotations

import pytest
import torch

import dynamo_nvf
from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.ops.fast_math import region_fast_math
from helpers import DEVICES, check_inference, cuda_plans, device_options


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


def rope_angles(t: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    angles = t[:, None] * inv_freq[None, :]
    return torch.cos(angles) * torch.exp(-angles * 1e-3)


def test_decisions_by_ops():
    on, why = region_fast_math(["aten.sigmoid.default", "aten.mul.Tensor"], "auto")
    assert on and "aten.sigmoid" in why
    on, why = region_fast_math(["aten.exp.default", "aten.sin.default"], "auto")
    assert not on and "aten.sin" in why
    on, why = region_fast_math(["aten.add.Tensor", "aten.mul.Tensor"], "auto")
    assert not on and "no exponential" in why
    assert region_fast_math(["aten.add.Tensor"], "on")[0]
    assert not region_fast_math(["aten.pow.Tensor_Scalar", "aten.exp.default"], "on")[0]
    assert not region_fast_math(["aten.exp.default"], "off")[0]


def test_swiglu_region_is_planned_with_fast_math():
    plans = cuda_plans(swiglu, (4, 8), (4, 8))
    (region,) = [r for p in plans for r in p.regions]
    assert region.fast_math and region.math.startswith("fast math for "), region.math


def test_a_region_with_cosine_stays_precise():
    plans = cuda_plans(rope_angles, (16,), (8,), fake=False)
    (region,) = [r for p in plans for r in p.regions]
    assert not region.fast_math and "aten.cos" in region.math, region.math


def test_option_off():
    plans = cuda_plans(swiglu, (4, 8), (4, 8), options={"fast_math": "off"})
    (region,) = [r for p in plans for r in p.regions]
    assert not region.fast_math and region.math == "fast_math is off"


def test_explain_says_which_math():
    report = dynamo_nvf.explain(swiglu, torch.randn(4, 8), torch.randn(4, 8), options={"plan_cpu_as_cuda": True})
    assert "math: fast math for aten." in str(report)
    assert "math: fast math for aten." in report._repr_html_()


def test_unknown_mode_is_refused():
    compiled = torch.compile(swiglu, backend="nvf_bookend", options={"fast_math": "yes"})
    with pytest.raises(Exception, match="fast_math must be"):
        compiled(torch.randn(4, 8), torch.randn(4, 8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("device", DEVICES)
def test_fast_math_regions_match_eager(device, dtype):
    """SwiGLU, softmax over wide logits and a log-sum-exp: fresh inputs, the dtype's tolerance."""
    def f(gate, up, logits):
        return swiglu(gate, up), torch.softmax(logits * 4.0, -1), torch.logsumexp(logits * 4.0, -1)

    opts = device_options(device, strict=True)
    for seed in (0, 1):
        torch.manual_seed(seed)
        inputs = [torch.randn(64, 256, device=device, dtype=dtype) for _ in range(3)]
        plans = check_inference(f, inputs, opts)
        assert all(r.fast_math for p in plans for r in p.regions), [(r.ops, r.math) for p in plans for r in p.regions]


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_swiglu_with_fast_math_is_one_kernel_and_as_close_as_precise():
    from test_gpu_backend import nvfuser_kernels

    gate, up = (torch.randn(256, 1376, device="cuda") * 4 for _ in range(2))
    fast = torch.compile(swiglu, backend="nvf_bookend", options={"strict": True})
    precise = torch.compile(lambda g, u: swiglu(g, u), backend="nvf_bookend", options={"strict": True, "fast_math": "off"})
    fast(gate, up), precise(gate, up)
    assert len(nvfuser_kernels(fast, gate, up)) == 1
    want = swiglu(gate.double(), up.double())
    err_fast = (fast(gate, up).double() - want).abs().max().item()
    err_precise = (precise(gate, up).double() - want).abs().max().item()
    torch.testing.assert_close(fast(gate, up), swiglu(gate, up))
    assert err_fast <= 8 * max(err_precise, 1e-6), (err_fast, err_precise)
