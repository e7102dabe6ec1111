"""segment_chained_reductions: where a region normalises a reduction's result (ConvNeXt's head: a
LayerNorm of the mean over H and W), the mean's users read it through nvFuser's segment_set, so the
mean ends a kernel of its own. A softmax (its max broadcast back), a loss's sums (a sum of per-row
sums, no norm), backward graphs and the option off get no boundary. Values and strides match eager;
on the GPU the head is the mean's kernel and the norm's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.runtime.stats import STATS

from helpers import assert_same, check_inference, check_training, compile_fn, tolerance
from test_memory_order_reductions import _head_inputs, head

PLAN = {"plan_cpu_as_cuda": True}


def _boundaries(plan):
    return [n for n in plan.rewrites if "reduces its result again" in n]


def test_the_head_mean_ends_a_kernel_before_the_norm():
    (plan,) = check_inference(head, _head_inputs(), PLAN)
    (note,) = _boundaries(plan)
    assert note.startswith("segment boundary: ") and " read mean" in note and "(var_mean" in note, note


def test_option_off_leaves_the_head_to_nvfuser():
    (plan,) = check_inference(head, _head_inputs(), {**PLAN, "segment_chained_reductions": False})
    assert not _boundaries(plan)


def test_a_softmax_and_a_sum_of_row_sums_get_no_boundary():
    def softmax_then_sum(x):
        return torch.softmax(x, -1), (x * 2.0).sum(-1).sum()

    (plan,) = check_inference(softmax_then_sum, [torch.randn(8, 16)], PLAN)
    assert not _boundaries(plan), plan.rewrites


def test_a_row_major_pooled_norm_gets_the_boundary_too():
    def pooled_norm(x, w, b):
        return F.layer_norm(x.mean(1), (x.shape[-1],), w, b)

    (plan,) = check_inference(pooled_norm, [torch.randn(2, 10, 16), torch.randn(16), torch.randn(16)], PLAN)
    assert len(_boundaries(plan)) == 1, plan.rewrites


def test_training_marks_the_forward_only():
    torch.manual_seed(0)
    plans = check_training(head, _head_inputs(), PLAN)
    assert {p.kind: bool(_boundaries(p)) for p in plans} == {"forward": True, "backward": False}


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_gpu_head_is_two_nvfuser_kernels_and_matches_eager():
    dtype = torch.bfloat16
    inputs = _head_inputs("cuda", dtype, c=192, h=28)
    compiled = compile_fn(head, {"strict": True})
    with torch.no_grad():
        for _ in range(2):
            got = compiled(*inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            compiled(*inputs)
            torch.cuda.synchronize()
        assert_same(got, head(*inputs), *tolerance(dtype))
        fresh = _head_inputs("cuda", dtype, c=192, h=28)
        assert_same(compiled(*fresh), head(*fresh), *tolerance(dtype))
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert sum("nvfuser" in n for n in names) == 2, names
    assert STATS.fallbacks == 0, STATS.snapshot()
