"""Cross-entropy with `fuse_cross_entropy`: nll_loss's forward and backward become class masks
(`arange(C) == target`) that join the log-softmax's regions, and min-cut recomputes the
log-probabilities in the backward instead of saving them; values and gradients equal eager's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf.backend import recording
from helpers import DEVICES, clone_inputs, compile_fn, device_options, tolerance


def _targets(rows: int, classes: int, ignore_index: int, device: str) -> torch.Tensor:
    target = torch.randint(0, classes, (rows,), device=device)
    target[::5] = ignore_index  # some rows ignored (in range or not, per ignore_index)
    return target


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [-100, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_matches_eager(device, dtype, ignore_index, reduction):
    rows, classes = 37, 53

    def loss_fn(logits, target):
        return F.cross_entropy(logits.float() * 1.5, target, ignore_index=ignore_index, reduction=reduction)

    compiled = compile_fn(loss_fn, device_options(device, strict=True) | {"fuse_cross_entropy": True})
    logits = torch.randn(rows, classes, device=device, dtype=dtype)
    target = _targets(rows, classes, ignore_index, device)
    (got_in,), (want_in,) = clone_inputs([logits], True), clone_inputs([logits], True)
    with recording() as rec:
        got = compiled(got_in, target)
    want = loss_fn(want_in, target)
    r, a = tolerance(torch.float32)
    torch.testing.assert_close(got, want, rtol=r * 10, atol=a * 10)
    grad = torch.randn_like(want)
    got.backward(grad)
    want.backward(grad)
    r, a = tolerance(dtype)
    torch.testing.assert_close(got_in.grad, want_in.grad, rtol=r, atol=a)

    ops = [n.op for p in rec.plans for n in p.nodes]
    assert not any("nll_loss" in op for op in ops), ops
    forward = next(p for p in rec.plans if p.kind == "forward")
    # The forward writes no (rows, classes) tensor: the log-probabilities are recomputed.
    assert all(list(t.shape) != [rows, classes] for reg in forward.regions for t in reg.outputs)


def test_turned_off_and_weighted_loss_keeps_aten():
    """With the option off, and for a class-weighted loss (not decomposed), ATen's nll_loss runs."""
    logits, target = torch.randn(8, 5, requires_grad=True), torch.randint(0, 5, (8,))
    weight = torch.rand(5)
    for options, fn in (({"fuse_cross_entropy": False}, lambda x, t: F.cross_entropy(x, t)),
                        ({}, lambda x, t: F.cross_entropy(x, t, weight=weight))):
        with recording() as rec:
            loss = compile_fn(fn, {"plan_cpu_as_cuda": True, **options})(logits, target)
            loss.backward()
        ops = [n.op for p in rec.plans for n in p.nodes]
        assert "aten.nll_loss_forward.default" in ops and "aten.nll_loss_backward.default" in ops
        torch.testing.assert_close(loss, fn(logits.detach(), target))


def test_uint8_targets_with_an_in_range_ignore_index():
    """The ignored-row marker is int64: a uint8 target would wrap -1 to 255, a real class here.
    (Dynamo's own tracing refuses uint8 targets, so the decomposition is checked directly.)"""
    from dynamo_nvf.decompositions import _nll_loss_backward_as_mask, _nll_loss_forward_as_masked_sum

    torch.manual_seed(0)
    logp = torch.randn(4, 300).log_softmax(1)
    target = torch.tensor([255, 3, 255, 200], dtype=torch.uint8)
    aten = torch.ops.aten
    for reduction in (0, 1, 2):
        want, want_weight = aten.nll_loss_forward.default(logp, target, None, reduction, 255)
        got, got_weight = _nll_loss_forward_as_masked_sum(logp, target, None, reduction, 255, any_device=True)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_weight, want_weight)
        grad_out = torch.randn(4) if reduction == 0 else torch.randn(())
        torch.testing.assert_close(
            _nll_loss_backward_as_mask(grad_out, logp, target, None, reduction, 255, want_weight, any_device=True),
            aten.nll_loss_backward.default(grad_out, logp, target, None, reduction, 255, want_weight))


def _mean_loss(logits, target):
    return F.cross_entropy(logits.float(), target, ignore_index=-100)


def test_the_mean_sums_the_losses_masked_by_the_mask_it_counts():
    """Both sums of the mean read one valid-token mask (nvFuser 0.2.36 then joins them, and the
    division, in one kernel): the loss's sum reads where(mask, losses, 0), the count sums the mask."""
    logits, target = torch.randn(16, 9, requires_grad=True), _targets(16, 9, -100, "cpu")
    with recording() as rec:
        compile_fn(_mean_loss, {"plan_cpu_as_cuda": True})(logits, target)
    forward = next(p for p in rec.plans if p.kind == "forward")
    code = "\n".join(r.fx_code for r in forward.regions)
    lines = {line.split(" = ")[0].strip(): line for line in code.splitlines() if " = torch.ops.aten." in line}
    sums = [line for line in lines.values() if "aten.sum.default(" in line]
    assert len(sums) == 2, code
    read = [line.split("aten.sum.default(")[1].split(")")[0] for line in sums]
    masked = next(lines[name] for name in read if "where.self" in lines.get(name, ""))
    mask = masked.split("aten.where.self(")[1].split(",")[0]
    assert mask in read and "aten.ne.Scalar" in lines[mask], code


@pytest.mark.parametrize("device", DEVICES)
def test_an_ignored_tokens_loss_is_positive_zero_as_eagers(device):
    """reduction="none": ATen writes +0.0 for an ignored token; the class-mask sum's negation would
    be -0.0 (equal under ==, not under signbit or 1/x)."""
    logits = torch.randn(10, 7, device=device)
    target = _targets(10, 7, -100, device)

    def fn(x, t):
        return F.cross_entropy(x, t, ignore_index=-100, reduction="none")

    got = compile_fn(fn, device_options(device, strict=True))(logits, target)
    want = fn(logits, target)
    torch.testing.assert_close(got, want)
    assert torch.equal(torch.signbit(got), torch.signbit(want)), (got, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_training_loss_forward_takes_two_nvfuser_kernels():
    """An LM head's loss (bf16 logits from a linear layer, as the perf models compute them): the row
    kernel (log-sum-exp, the target's value) and one kernel for the count, the sum and the division;
    read apart, the two sums made nvFuser 0.2.36 split the tail into three (4 in all)."""
    from dynamo_nvf import nvf as nvf_env

    if not nvf_env.nvfuser_available():
        pytest.skip("needs nvFuser")
    torch.manual_seed(0)
    head = torch.nn.Linear(64, 8192, bias=False, device="cuda", dtype=torch.bfloat16)
    hidden = torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)
    target = _targets(256, 8192, -100, "cuda")

    def step(h, t):
        return _mean_loss(head(h), t)

    compiled = compile_fn(step, {"strict": True})
    for _ in range(5):  # past direct launch's one checking call, which runs the kernels twice
        compiled(hidden, target).backward()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        loss = compiled(hidden, target)
        torch.cuda.synchronize()
    kernels = [e.name.split("(")[0] for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA and "nvfuser" in e.name]
    assert len(kernels) == 2, kernels
    with torch.no_grad():
        torch.testing.assert_close(loss, step(hidden, target), rtol=1e-5, atol=1e-5)
