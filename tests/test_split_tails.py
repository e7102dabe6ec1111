"""split_row_tails: a loss's mean over tokens (sums over per-row values) in a region of its own, one
kernel, instead of three kernels after the row kernel in the loss's region."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import recording
from helpers import DEVICES, check_training, compile_fn, cuda_plans, device_options

ROWS, VOCAB = 64, 512
FULL_SUMS = ("aten.sum.default", "aten.mean.default")


def _loss(logits, target):
    return F.cross_entropy(logits.float(), target, ignore_index=-100)


def _inputs(device, dtype=torch.float32):
    logits = torch.randn(ROWS, VOCAB, device=device, dtype=dtype)
    target = torch.randint(0, VOCAB, (ROWS,), device=device)
    target[::5] = -100
    return logits, target


def _forward_plan(options):
    plans = cuda_plans(_loss, (ROWS, VOCAB), torch.randint(0, VOCAB, (ROWS,)), train=True, fake=False,
                       options=options)
    return next(p for p in plans if p.kind == "forward")


def test_the_mean_over_tokens_leaves_the_row_region():
    plan = _forward_plan({})
    rows, tail = plan.regions
    assert "aten.amax.default" in rows.ops and not any(op in FULL_SUMS for op in rows.ops), rows.ops
    assert [op for op in tail.ops if op in FULL_SUMS] == ["aten.sum.default", "aten.sum.default"], tail.ops
    assert "aten.div.Tensor" in tail.ops and "aten.amax.default" not in tail.ops
    # The loss's sum reads the valid-token mask the count sums (one producer: nvFuser's one kernel),
    # and the tail makes its own zero for the mask instead of reading a 0-dim tensor.
    assert "aten.where.self" in tail.ops and "aten.scalar_tensor.default" in tail.ops, tail.ops
    # The tail reads one value per row from the row region: nothing the size of the logits.
    assert sorted(t.dtype for t in tail.inputs) == ["bool", "float32"], tail.inputs
    assert all(t.shape in ([ROWS], [ROWS, 1]) for t in tail.inputs), tail.inputs
    assert any(note.startswith("split_row_tails: ") for note in plan.rewrites), plan.rewrites


def test_off_keeps_one_region():
    plan = _forward_plan({"split_row_tails": False})
    (region,) = plan.regions
    assert region.ops.count("aten.sum.default") == 2 and "aten.amax.default" in region.ops


def test_a_sum_whose_result_is_broadcast_back_is_not_a_tail():
    """The total scales every element afterwards: the region needs it, so nothing moves."""
    def f(x):
        return x * x.amax(-1).sum()

    plans = cuda_plans(f, (ROWS, VOCAB), fake=False)
    (plan,) = plans
    assert len(plan.regions) == 1 and not any("split_row_tails" in n for n in plan.rewrites)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_loss_and_gradient_match_eager(device, dtype):
    torch.manual_seed(0)
    logits, target = _inputs(device, dtype)
    plans = check_training(_loss, [logits, target], device_options(device, strict=True))
    forward = next(p for p in plans if p.kind == "forward")
    assert len(forward.regions) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_the_loss_takes_two_fewer_kernels():
    """A training step's loss forward: the row kernel and one tail kernel, not the row kernel and
    three (nvFuser 0.2.36 on the region whole); the backward is the same either way."""
    torch.manual_seed(0)
    logits, target = _inputs("cuda", torch.bfloat16)
    counts = {}
    for split in (False, True):
        compiled = compile_fn(_loss, {"split_row_tails": split, "strict": True})
        x = logits.clone().requires_grad_()

        def step():
            x.grad = None
            loss = compiled(x, target)
            loss.backward()
            return loss

        for _ in range(2):
            step()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            loss = step()
            torch.cuda.synchronize()
        counts[split] = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                            and "nvfuser" in e.name)
        ref = logits.clone().requires_grad_()
        want = _loss(ref, target)
        want.backward()
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x.grad, ref.grad, rtol=1e-2, atol=1e-4)
    assert counts[False] - counts[True] == 2, counts
