"""strided_statistics: a region's var_mean over dims that are not adjacent becomes two-pass sums
(the reduced dims' outer run, then the rest), with var_mean's correction, keepdim, values and
strides; a var_mean over one run of dims stays as it is. CPU plans as for CUDA (regions run
eagerly); the GPU test runs real nvFuser on the shape whose Welford failed to launch."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf.runtime.stats import STATS
from helpers import DEVICES, check_fresh_inputs, check_inference, compile_fn, device_options

ON = {"plan_cpu_as_cuda": True}


def _statistics(dims, correction, keepdim):
    def fn(x):
        var, mean = torch.var_mean(x * 2.0, dim=dims, correction=correction, keepdim=keepdim)
        return var + 1.0, mean * 3.0
    return fn


def _notes(plans):
    return [n for p in plans for n in p.rewrites if "two-pass sums" in n]


def _region_code(plans):
    return "\n".join(r.fx_code for p in plans for r in p.regions)


@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("keepdim", [True, False])
@pytest.mark.parametrize("dims", [[1, 3], [1, 2, 4], [3, 1]])
def test_dims_apart_are_two_pass_sums(dims, correction, keepdim):
    fn = _statistics(dims, correction, keepdim)
    shape = (4, 6, 5, 8) if len(dims) == 2 else (2, 4, 6, 5, 8)
    plans = check_inference(fn, [torch.randn(shape)], ON)
    notes = _notes(plans)
    assert len(notes) == 1, [p.rewrites for p in plans]
    assert "var_mean" not in _region_code(plans) and "sum.dim_IntList" in _region_code(plans)
    assert "over [1, 2] then [4]" in notes[0] if len(dims) == 3 else "over [1] then [3]" in notes[0], notes
    check_fresh_inputs(compile_fn(fn, ON), fn, lambda: [torch.randn(shape)])


def test_a_far_off_mean_keeps_the_variance():
    """Two passes (mean, then squared deviations) keep a small variance under a large mean, as
    Welford does; E[x^2] - E[x]^2 in float32 would lose it."""
    fn = _statistics([1, 3], 0, True)
    x = 1000.0 + 1e-2 * torch.randn(4, 6, 5, 8)
    assert _notes(check_inference(fn, [x], ON, rtol=1e-4, atol=1e-6))


@pytest.mark.parametrize("dims", [[1, 2], [2, 3], [0, 1, 2, 3], [0, 2, 3]])
def test_one_run_of_dims_or_the_batch_dim_keeps_var_mean(dims):
    """One run of dims, and BatchNorm's NCHW statistics over [0, 2, 3], keep their var_mean."""
    plans = check_inference(_statistics(dims, 0, True), [torch.randn(4, 6, 5, 8)], ON)
    assert not _notes(plans) and "var_mean" in _region_code(plans)


@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_group_norm_with_many_channels_per_group_runs_on_nvfuser(device):
    """GroupNorm(32) over a channels-last [8, 128, 56, 56] bf16 activation: its Welford over
    [N, H*W, G, C/G]'s dims [1, 3] failed to launch (scripts/nvfuser_repros/
    group_norm_strided_welford_launch.py) and the region ran in eager; as two-pass sums it runs on
    nvFuser and matches eager's f32 result."""
    STATS.reset()
    torch.manual_seed(0)
    norm = torch.nn.GroupNorm(32, 128).to(device=device, dtype=torch.bfloat16)

    def fn(x):
        return torch.relu(norm(x))

    compiled = compile_fn(fn, device_options(device))
    for _ in range(2):
        x = torch.randn(8, 128, 56, 56, device=device, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        with torch.no_grad():
            out = compiled(x)
            expected = torch.relu(torch.nn.functional.group_norm(x.float(), 32, norm.weight.float(), norm.bias.float()))
        assert out.stride() == fn(x).stride()
        torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=2e-2)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0, STATS.snapshot()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_half_inputs_sum_in_float32(dtype):
    """Sums of a few thousand f16 values of 100 pass f16's largest value (65504): the sums run in
    float32, as var_mean accumulates, and the results come back in the input's dtype."""
    fn = _statistics([1, 3], 1, True)
    x = (100 + torch.randn(8, 64, 32, 32)).to(dtype)
    plans = check_inference(fn, [x], ON)
    assert _notes(plans) and "torch.float32" in _region_code(plans)
    var, mean = compile_fn(fn, ON)(x)
    assert var.dtype == dtype and torch.isfinite(var).all() and torch.isfinite(mean).all()


def test_the_sums_recompute_their_source_from_the_region_inputs():
    """Statistics of a value the region computes (a residual add, as BiT's) read their own copy of it,
    recomputed from the region's inputs, so nvFuser's segments need not keep it between them."""

    def fn(a, b):
        x = (a + b).float()
        var, mean = torch.var_mean(x, dim=[1, 3], correction=0, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5)

    a, b = torch.randn(4, 6, 5, 8), torch.randn(4, 6, 5, 8)
    plans = check_inference(fn, [a, b], ON)
    code = _region_code(plans)
    assert _notes(plans) and code.count("aten.add.Tensor(") == 4, code  # the source three times, plus eps
    check_fresh_inputs(compile_fn(fn, ON), fn, lambda: [torch.randn(4, 6, 5, 8), torch.randn(4, 6, 5, 8)])
