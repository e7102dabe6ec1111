"""unflatten_reductions: a region's reduction of a flattening view reduces the unflattened tensor, so
that the region's reductions agree (nvFuser segments a region whose reductions read a reshape)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from dynamo_nvf.passes.unflatten_reductions import merge_groups
from helpers import DEVICES, check_inference, check_training, cuda_plans, device_options


@pytest.mark.parametrize("src, dst, groups", [
    ((2, 256, 768), (512, 768), [[0, 1], [2]]),
    ((1, 256, 8192), (256, 8192), [[0, 1], [2]]),
    ((2, 256, 1), (512,), [[0, 1, 2]]),
    ((512, 1), (512, 1), [[0], [1]]),
    ((512, 768), (1, 512, 768), [[], [0], [1]]),
    ((4, 6), (24,), [[0, 1]]),
    ((24,), (4, 6), None),          # a split, not a merge
    ((4, 6), (6, 4), None),
    ((2, 3, 4), (2, 12), [[0], [1, 2]]),
])
def test_merge_groups(src, dst, groups):
    assert merge_groups(src, dst) == groups


def _reduction_inputs(region) -> list[str]:
    """The FX code lines of a region's sums."""
    return [line.strip() for line in region.fx_code.splitlines() if "sum" in line or "amax" in line]


class BiasGeluNorm(nn.Module):
    """A linear layer's bias gradient is a sum over the flattened rows, next to a LayerNorm backward."""

    def __init__(self, d: int, dtype=torch.float32, device="cpu") -> None:
        super().__init__()
        self.lin = nn.Linear(d, d, dtype=dtype, device=device)
        self.ln = nn.LayerNorm(d, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x + torch.nn.functional.gelu(self.lin(x)))


#: The pass is on by default; the tests name it explicitly so that they keep testing it if that changes.
ON = {"unflatten_reductions": True}


def _backward_region_with_row_sums(options):
    block = BiasGeluNorm(64)
    plans = cuda_plans(block, (4, 16, 64), train=True, fake=False, options=options)
    backward = next(p for p in plans if p.kind == "backward")
    return [r for r in backward.regions if "[2], True" in r.fx_code]


def test_bias_gradient_sum_reads_the_unflattened_tensor():
    (region,) = _backward_region_with_row_sums(ON)
    sums = _reduction_inputs(region)
    # Every column sum reduces the [4, 16, 64] tensor over [0, 1]; no sum reads a [64, 64] view.
    assert sums and not any("[0]" in s and "[0, 1]" not in s for s in sums), sums
    assert "view" not in "\n".join(s for s in region.fx_code.splitlines() if "sum" in s)
    assert sum("[0, 1]" in s for s in sums) == 3, sums  # LayerNorm weight, bias, and the linear's bias


def test_off_keeps_the_flattened_sum():
    (region,) = _backward_region_with_row_sums({"unflatten_reductions": False})
    assert any("[0], True" in s for s in _reduction_inputs(region)), region.fx_code


def test_reductions_that_agree_on_the_view_are_left_alone():
    def softmax_rows(x):
        v = x.view(-1, x.shape[-1]) * 2.0
        return v - v.amax(1, keepdim=True) - v.exp().sum(1, keepdim=True).log()

    plans = cuda_plans(softmax_rows, (4, 16, 64), options=ON)
    (region,) = plans[0].regions
    code = region.fx_code
    assert "amax.default(mul, [1], True)" in code.replace("amax.default(mul_1", "amax.default(mul"), code


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("keepdim", [True, False])
def test_inference_matches_eager(device, keepdim):
    def fn(x):
        h = x * 1.5 + 1.0
        flat = h.view(-1, h.shape[-1])
        return flat.sum(0, keepdim=keepdim), h.sum(-1), flat.mean(0), h.amax(-1)

    x = torch.randn(3, 20, 48, device=device)
    plans = check_inference(fn, [x], {**device_options(device, strict=True), **ON})
    (region,) = plans[0].regions
    assert "view" not in "\n".join(s for s in region.fx_code.splitlines() if "sum" in s or "mean" in s)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_matches_eager(device, dtype):
    block = BiasGeluNorm(96, dtype=dtype, device=device)
    x = torch.randn(3, 20, 96, dtype=dtype, device=device)
    plans = check_training(block, [x], {**device_options(device, strict=True), **ON}, params=list(block.parameters()),
                           reference=copy.deepcopy(block).float())
    backward = next(p for p in plans if p.kind == "backward")
    assert any("[0, 1]" in r.fx_code for r in backward.regions)


@pytest.mark.parametrize("options, unflattened", [
    ({}, True),                                                   # on by default
    ({"cuda_graphs": True}, True),
    ({"unflatten_reductions": False}, False),
    ({"cuda_graphs": True, "unflatten_reductions": False}, False),
])
def test_on_by_default_off_when_asked(options, unflattened):
    block = BiasGeluNorm(64)
    plans = cuda_plans(block, (4, 16, 64), train=True, fake=False, options=options)
    backward = next(p for p in plans if p.kind == "backward")
    sums = [s for r in backward.regions for s in _reduction_inputs(r)]
    flat = any("[0], True" in s for s in sums)
    assert flat is not unflattened, sums


def test_option_takes_a_bool():
    from dynamo_nvf.settings import Settings

    assert not Settings.from_options({"unflatten_reductions": False}).unflattens()
    assert Settings.from_options({}).unflattens()
    with pytest.raises(TypeError):
        Settings.from_options({"unflatten_reductions": 1})


def test_dynamic_shapes_are_left_alone_and_match_eager():
    """Symbolic sizes cannot be compared without guards: the pass skips them (a set of shapes with
    SymInts raised 'unhashable type' and stopped compilation)."""
    import torch._dynamo

    def fn(x):
        h = x * 2
        return h.view(-1, h.shape[-1]).sum(0), h.sum(-1)

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="nvf_bookend", options={"plan_cpu_as_cuda": True, "strict": True, **ON},
                             dynamic=True)
    for shape in ((3, 4, 5), (3, 6, 5), (2, 7, 5)):
        x = torch.randn(shape)
        for actual, expected in zip(compiled(x), fn(x)):
            torch.testing.assert_close(actual, expected)
