"""Ops models run between regions, now in them: roll (slices and cat), _safe_softmax (a masked
softmax), any/all, and torch's decompositions of the cheap ones; and the reason explain() gives
for an op left to ATen. CPU tests plan as for CUDA; `gpu` tests run real nvFuser."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf.backend import recording
from dynamo_nvf.runtime.stats import STATS

from helpers import (DEVICES, WRITE_BACK, assert_same, check_inference, check_training, compile_fn, device_options,
                     tolerance)

aten = torch.ops.aten


def _eager_ops(plans: list[Any]) -> list[tuple[str, str, str]]:
    """(plan kind, op, reason) of every computing node left to PyTorch (not views the bookend
    pass trims, not nodes a region-size policy leaves)."""
    return [(p.kind, n.op, n.reason) for p in plans for n in p.nodes
            if n.region is None and not any(ok in (n.reason or "") for ok in ("trimmed", "policy", "runs as a view"))]


def _all_ops(plans: list[Any]) -> list[str]:
    return [n.op for p in plans for n in p.nodes]


def _masked(x: torch.Tensor) -> torch.Tensor:
    """`x` with -inf where it exceeds 1 and whole rows of -inf where its first column is negative."""
    x = x.masked_fill(x > 1, float("-inf"))
    return x.masked_fill(x[..., :1] < 0, float("-inf"))


def swin_shift(x: torch.Tensor) -> torch.Tensor:
    """Swin's shifted windows on [B, H, W, C]: roll by -3 over H and W, partition into 4x4 windows."""
    b, h, w, c = x.shape
    shifted = torch.roll(x * 2, shifts=(-3, -3), dims=(1, 2))
    windows = shifted.view(b, h // 4, 4, w // 4, 4, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 16, c)
    return windows + 1


#: name -> (function, input shapes). Every one lands whole in regions, forward and backward.
CASES: dict[str, tuple[Callable[..., Any], tuple[tuple[int, ...], ...]]] = {
    "roll_one_dim": (lambda x: torch.roll(x * 2, 3, 1) + 1, ((4, 10),)),
    "roll_negative_shift": (lambda x: torch.roll(x * 2, -13, -1) + 1, ((4, 10),)),
    "roll_flattened": (lambda x: torch.roll(x * 2, 7) + 1, ((4, 10),)),
    "roll_whole_turn": (lambda x: torch.roll(x * 2, 10, 1) + 1, ((4, 10),)),
    "roll_swin": (swin_shift, ((2, 8, 8, 6),)),
    "safe_softmax": (lambda x: aten._safe_softmax(_masked(x), -1) * 2, ((6, 12),)),
    "safe_softmax_dim1": (lambda x: aten._safe_softmax(_masked(x.transpose(1, 2)), 1) + 1, ((2, 5, 7),)),
    "isneginf": (lambda x: torch.where(torch.isneginf(_masked(x)), 0.0, x) * 2, ((6, 12),)),
    "mish": (lambda x: F.mish(x) * 2, ((6, 12),)),
    "std_mean": (lambda x: torch.std_mean(x, -1)[0] * 2 + torch.std_mean(x, -1)[1], ((6, 12),)),
    "prelu": (lambda x, w: F.prelu(x, w) * 2, ((4, 3, 5), (3,))),
    "tril_triu": (lambda x: torch.tril(x) * 2 + torch.triu(x, 1), ((6, 6),)),
    "smooth_l1": (lambda x, y: F.smooth_l1_loss(x * 2, y), ((6, 12), (6, 12))),
    "logsigmoid": (lambda x: F.logsigmoid(x * 2) + 1, ((6, 12),)),
    "bce_with_logits": (lambda x, y: F.binary_cross_entropy_with_logits(x * 2, torch.sigmoid(y)), ((6, 12), (6, 12))),
    "pixel_shuffle": (lambda x: F.pixel_unshuffle(F.pixel_shuffle(x * 2, 2) + 1, 2), ((2, 8, 3, 5),)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_lands_in_regions_forward_and_backward(case):
    fn, shapes = CASES[case]
    inputs = [torch.randn(s) for s in shapes]
    plans = check_training(fn, inputs, {"plan_cpu_as_cuda": True})
    assert {p.kind for p in plans} == {"forward", "backward"}
    assert not _eager_ops(plans), _eager_ops(plans)
    assert not [op for op in _all_ops(plans) if any(name in op for name in (
        "roll", "_safe_softmax", "isneginf", "mish", "std_mean", "prelu", "tril", "triu", "smooth_l1",
        "log_sigmoid", "binary_cross_entropy", "pixel_"))]


def test_one_element_slice_broadcast_later_runs_as_a_view():
    """`x[..., :1] < 0` against the full row: nvFuser cannot compile the slice's extent-1 dim
    broadcast (scripts/nvfuser_repros/size_one_slice_broadcast.py), so the slice stays a PyTorch view
    between two regions; a one-element slice that a cat joins (roll by one) stays in its region."""
    (plan,) = check_inference(_masked, [torch.randn(6, 12)], {"plan_cpu_as_cuda": True})
    (slice_node,) = [n for n in plan.nodes if n.op == "aten.slice.Tensor"]
    assert slice_node.region is None and "one-element slice" in slice_node.reason
    assert len(plan.regions) == 2
    (plan,) = check_inference(lambda x: torch.roll(x * 2, 1, 1) + 1, [torch.randn(5, 7)], {"plan_cpu_as_cuda": True})
    assert len(plan.regions) == 1 and "aten.cat.default" in plan.regions[0].ops
    assert not [n for n in plan.nodes if "one-element slice" in (n.reason or "")]


def test_roll_is_a_cat_of_slices_in_one_region():
    (plan,) = check_inference(lambda x: torch.roll(x * 2, (1, -2), (0, 1)) + 1, [torch.randn(5, 7)],
                              {"plan_cpu_as_cuda": True})
    assert len(plan.regions) == 1
    ops = plan.regions[0].ops
    assert ops.count("aten.cat.default") == 2 and "aten.mul.Tensor" in ops and "aten.add.Tensor" in ops


def test_safe_softmax_gives_zeros_for_rows_of_only_minus_infinity():
    fn = lambda x: aten._safe_softmax(_masked(x), -1)  # noqa: E731
    x = torch.randn(8, 16)
    x[::2, 0] = -1.0  # every other row all -inf
    (plan,) = check_inference(fn, [x], {"plan_cpu_as_cuda": True})
    out = compile_fn(fn, {"plan_cpu_as_cuda": True})(x)
    assert torch.equal(out[::2], torch.zeros_like(out[::2]))
    assert not torch.isnan(out).any()
    assert [op for r in plan.regions for op in r.ops].count("aten.amax.default") == 1


def test_safe_softmax_in_half_precision_matches_eager():
    fn = lambda x: aten._safe_softmax(_masked(x), -1)  # noqa: E731
    check_inference(fn, [torch.randn(8, 16).to(torch.bfloat16)], {"plan_cpu_as_cuda": True})
    check_inference(lambda x: aten._safe_softmax(_masked(x), -1, torch.float32),
                    [torch.randn(8, 16).to(torch.bfloat16)], {"plan_cpu_as_cuda": True})


ANY_ALL: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "any_dim_bool": lambda x: (x > 0.5).any(-1) & (x < 2).all(-1),
    "all_dims_keepdim": lambda x: torch.where((x > -2).all(dim=(0, 2), keepdim=True), x, 0.0) * 2,
    "any_all_of_floats": lambda x: torch.stack([(x * 0).any(1), x.all(1), torch.nan_to_num(x).any(1)]) | (x[:, 0] > 0),
    "any_everything": lambda x: torch.where(torch.isnan(x).any(), 1.0, 2.0) * x,
}


@pytest.mark.parametrize("case", sorted(ANY_ALL))
def test_any_and_all_are_lowered_and_match_eager(case):
    fn = ANY_ALL[case]
    x = torch.randn(4, 6, 5)
    x[1, 2, :] = float("nan")  # NaN is true, as in ATen
    x[2, :, 3] = 0.0
    (plan,) = check_inference(fn, [x], {"plan_cpu_as_cuda": True, "min_region_size": 1})
    region = [op for r in plan.regions for op in r.ops]
    assert any(op.startswith(("aten.any.", "aten.all.")) for op in region), region
    assert not [n for n in plan.nodes if n.op.startswith(("aten.any.", "aten.all.")) and n.region is None]


def test_ops_left_to_aten_say_why():
    def fn(x, w):
        y = F.conv2d(x, w, padding=1)
        z = F.max_pool2d(y * 2, 2, dilation=2)  # dilated: not taken as taps (passes/max_pool_taps.py)
        return torch.cumprod(z + 1, -1)

    with recording() as rec:
        compile_fn(fn, {"plan_cpu_as_cuda": True})(torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3))
    reasons = {n.op: n.reason for p in rec.plans for n in p.nodes if n.region is None}
    assert reasons["aten.convolution.default"].startswith("convolution: runs in ATen (cuDNN)")
    assert reasons["aten.max_pool2d_with_indices.default"].endswith("(a sliding-window op (pooling))")
    assert reasons["aten.cumprod.default"] == "unsupported op: aten.cumprod.default has no nvFuser lowering (a scan along a dim)"


def test_embedding_gradient_says_why():
    """An embedding's weight gradient is an accumulating scatter of rows, which nvfuser_direct does not
    bind: it stays in ATen and explain() says so."""
    emb = torch.nn.Embedding(50, 8)
    with recording() as rec:
        out = compile_fn(lambda i: emb(i) * 2, {"plan_cpu_as_cuda": True})(torch.randint(0, 50, (4, 6)))
        out.sum().backward()
    reasons = {n.op: n.reason for p in rec.plans for n in p.nodes if n.region is None}
    assert "accumulating scatter" in reasons["aten.embedding_dense_backward.default"], reasons


def test_batch_norm_running_stats_write_back_says_why():
    bn = torch.nn.BatchNorm1d(4)
    with recording() as rec:
        out = compile_fn(bn, {"plan_cpu_as_cuda": True})(torch.randn(8, 4, requires_grad=True))
        out.sum().backward()
    # running mean and variance in one foreach copy, batches tracked in one foreach add
    writes = sorted((n.op, n.reason) for p in rec.plans for n in p.nodes if n.op in WRITE_BACK)
    assert [op for op, _ in writes] == ["aten._foreach_add_.Scalar", "aten._foreach_copy_.default"], writes
    assert all("buffer updates in one launch" in reason for _, reason in writes), writes


# --------------------------------------------------------------------------------------------------
# GPU: real nvFuser, values and strides against eager
# --------------------------------------------------------------------------------------------------

CUDA = [d for d in DEVICES if d.id == "cuda"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("device", CUDA)
def test_gpu_op_matches_eager_forward_and_backward(device, case, dtype):
    STATS.reset()
    fn, shapes = CASES[case]
    inputs = [torch.randn(s, device=device).to(dtype) for s in shapes]
    check_training(fn, inputs, device_options(device, strict=True))
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0, STATS.snapshot()


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("device", CUDA)
def test_gpu_roll_of_a_4d_tensor_keeps_eagers_strides(device, channels_last):
    fn = lambda x: torch.roll(x * 2, shifts=(2, -1), dims=(2, 3))  # noqa: E731
    x = torch.randn(2, 8, 6, 10, device=device)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    compiled = compile_fn(fn, device_options(device))
    with torch.no_grad():
        assert_same(compiled(x), fn(x))  # values, dtype, shape and strides


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("device", CUDA)
def test_gpu_safe_softmax_of_fully_masked_rows(device, dtype):
    fn = lambda x: aten._safe_softmax(_masked(x), -1)  # noqa: E731
    x = torch.randn(4, 8, 32, 32, device=device).to(dtype)
    x[:, :, ::3, 0] = -1.0
    compiled = compile_fn(fn, device_options(device))
    rtol, atol = tolerance(dtype)
    with torch.no_grad():
        out = compiled(x)
        assert_same(out, fn(x), rtol=rtol, atol=atol)
    assert torch.equal(out[:, :, ::3], torch.zeros_like(out[:, :, ::3]))
