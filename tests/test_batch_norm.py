"""BatchNorm in regions: training and evaluation forwards and the backward are decomposed into
var_mean / rsqrt / pointwise ops that regions take in, and running statistics are updated as eager
updates them. CPU tests plan as for CUDA (regions run eagerly); `gpu` tests run real nvFuser."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn

from dynamo_nvf.backend import recording
from dynamo_nvf.runtime.stats import STATS

from helpers import (DEVICES, WRITE_BACK, assert_as_close_as_eager, assert_same, assert_same_layout, compile_fn,
                     device_options, tolerance)

aten = torch.ops.aten


def _eager_ops(plans: list[Any]) -> list[tuple[str, str, str]]:
    """(plan kind, op, reason) of every node left to PyTorch that computes (not trimmed views)."""
    return [(p.kind, n.op, n.reason) for p in plans for n in p.nodes
            if n.region is None and "trimmed" not in (n.reason or "") and "policy" not in (n.reason or "")]


def _all_ops(plans: list[Any]) -> list[str]:
    return [n.op for p in plans for n in p.nodes]


class ConvBnBlock(nn.Module):
    """A ResNet basic block: conv-BN-ReLU-conv-BN-add-ReLU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


#: name -> (module factory, input shape, channels-last input)
BN_CASES: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], bool]] = {
    "bn1d_nc": (lambda: nn.BatchNorm1d(16), (32, 16), False),
    "bn1d_ncl": (lambda: nn.BatchNorm1d(8), (4, 8, 12), False),
    "bn2d": (lambda: nn.BatchNorm2d(8), (4, 8, 6, 5), False),
    "bn2d_channels_last": (lambda: nn.BatchNorm2d(8), (4, 8, 6, 5), True),
    "bn3d": (lambda: nn.BatchNorm3d(4), (2, 4, 3, 5, 6), False),
    "bn2d_no_affine": (lambda: nn.BatchNorm2d(8, affine=False), (4, 8, 6, 5), False),
    "bn2d_no_running_stats": (lambda: nn.BatchNorm2d(8, track_running_stats=False), (4, 8, 6, 5), False),
    "bn2d_momentum": (lambda: nn.BatchNorm2d(8, momentum=0.3, eps=1e-3), (4, 8, 6, 5), False),
}


def _bn_relu(case: str, device: str, dtype: torch.dtype) -> tuple[nn.Module, tuple[int, ...], bool]:
    make, shape, channels_last = BN_CASES[case]
    torch.manual_seed(0)
    bn = make()
    if bn.affine:
        with torch.no_grad():  # not the identity's ones and zeros
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    return nn.Sequential(bn, nn.ReLU()).to(device=device, dtype=dtype), shape, channels_last


def _input(shape: tuple[int, ...], channels_last: bool, device: str, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(shape, device=device, dtype=torch.float32).mul_(2).add_(0.5).to(dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    return x


def _train_steps(model: nn.Module, compiled: Callable[..., Any], shape: tuple[int, ...], channels_last: bool,
                 device: str, dtype: torch.dtype, steps: int = 3) -> list[Any]:
    """`steps` training steps of `compiled` (a compile of `model`) and of an eager copy on the same
    fresh inputs; compares outputs, input gradients, parameter gradients and buffers after each step.
    Returns the recorded plans."""
    eager = copy.deepcopy(model)
    plans: list[Any] = []
    rtol, atol = tolerance(dtype)
    for _ in range(steps):
        x = _input(shape, channels_last, device, dtype)
        xa, xe = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        with recording() as rec:
            out = compiled(xa)
            expected = eager(xe)
            assert_same(out, expected, rtol=rtol, atol=atol)
            grad = torch.randn_like(expected)
            out.backward(grad)
            expected.backward(grad)
        plans += rec.plans
        assert_same(xa.grad, xe.grad, rtol=rtol * 10, atol=atol * 10)
        for (name, pa), (_, pe) in zip(model.named_parameters(), eager.named_parameters()):
            torch.testing.assert_close(pa.grad, pe.grad, rtol=rtol * 10, atol=atol * 10, msg=name)
        for (name, ba), (_, be) in zip(model.named_buffers(), eager.named_buffers()):
            if be.dtype == torch.int64:
                assert torch.equal(ba, be), (name, ba, be)
            else:
                torch.testing.assert_close(ba, be, rtol=rtol, atol=atol, msg=name)
        for p in (*model.parameters(), *eager.parameters()):
            p.grad = None
    return plans


@pytest.mark.parametrize("case", sorted(BN_CASES))
def test_batch_norm_training_lands_in_regions_and_updates_running_stats_as_eager(case):
    model, shape, channels_last = _bn_relu(case, "cpu", torch.float32)
    model.train()
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    plans = _train_steps(model, compiled, shape, channels_last, "cpu", torch.float32)
    assert {p.kind for p in plans} == {"forward", "backward"}
    assert not [op for op in _all_ops(plans) if "batch_norm" in op]
    eager = [e for e in _eager_ops(plans) if e[1] not in WRITE_BACK]  # buffers written back
    assert not eager, eager
    forward_ops = [op for p in plans if p.kind == "forward" for r in p.regions for op in r.ops]
    assert "aten.var_mean.correction" in forward_ops and "aten.relu.default" in forward_ops
    if model[0].track_running_stats:
        assert model[0].num_batches_tracked.item() == 3


@pytest.mark.parametrize("case", ["bn1d_ncl", "bn2d", "bn2d_channels_last", "bn3d", "bn2d_no_affine"])
def test_batch_norm_evaluation_lands_in_regions_and_matches_eager(case):
    model, shape, channels_last = _bn_relu(case, "cpu", torch.float32)
    with torch.no_grad():  # running statistics that are not the initial zeros and ones
        model[0].running_mean.uniform_(-1, 1)
        model[0].running_var.uniform_(0.5, 2)
    model.eval()
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    for _ in range(2):
        x = _input(shape, channels_last, "cpu", torch.float32)
        with torch.no_grad(), recording() as rec:
            assert_same(compiled(x), model(x))
    assert not [op for op in _all_ops(rec.plans) if "batch_norm" in op]
    assert not _eager_ops(rec.plans), _eager_ops(rec.plans)


def test_batch_norm_evaluation_backward_lands_in_regions():
    """A frozen BN (eval mode, trainable affine): the backward without batch statistics."""
    model, shape, _ = _bn_relu("bn2d", "cpu", torch.float32)
    model.eval()
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    plans = _train_steps(model, compiled, shape, False, "cpu", torch.float32, steps=1)
    assert "backward" in {p.kind for p in plans}
    assert not [op for op in _all_ops(plans) if "batch_norm" in op]


ENTRY_POINTS: dict[str, Callable[..., Any]] = {
    "native_train": lambda x, w, b, rm, rv: aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)[0],
    "native_eval": lambda x, w, b, rm, rv: aten.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)[0],
    "cudnn_train": lambda x, w, b, rm, rv: aten.cudnn_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)[0],
    "cudnn_eval": lambda x, w, b, rm, rv: aten.cudnn_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)[0],
    "with_update": lambda x, w, b, rm, rv: aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5)[0],
    "no_update": lambda x, w, b, rm, rv: aten._batch_norm_no_update(x, w, b, rm, rv, 0.1, 1e-5)[0],
    "legit_no_stats": lambda x, w, b, rm, rv: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)[0],
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_every_batch_norm_entry_point_decomposes_and_updates_stats_as_aten(name):
    """The forms a CUDA graph may hold (cuDNN's, torch.export's with/no-update) decompose, and
    compute what ATen's native_batch_norm computes, running statistics included."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.decompositions import decomposition_table

    fn = ENTRY_POINTS[name]
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 5, 5), torch.rand(3) + 0.5, torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    gm = make_fx(fn, decomposition_table=decomposition_table(plan_cpu_as_cuda=True))(x, w, b, rm.clone(), rv.clone())
    assert not [n.target for n in gm.graph.nodes if n.op == "call_function" and "batch_norm" in str(n.target)]
    training = "eval" not in name and "no_update" not in name
    stats = None if name == "legit_no_stats" else (rm.clone(), rv.clone())
    expected = aten.native_batch_norm(x, w, b, *(stats or (None, None)), training, 0.1, 1e-5)[0]
    got_stats = (rm.clone(), rv.clone())
    torch.testing.assert_close(gm(x, w, b, *got_stats), expected)
    if stats is not None:
        torch.testing.assert_close(got_stats, stats)


def _two_stage_notes(plans: list[Any]) -> list[str]:
    return [n for p in plans for n in p.rewrites if n.startswith("var_mean") and "in two stages" in n]


def _two_stage_sum_notes(plans: list[Any]) -> list[str]:
    return [n for p in plans if p.kind == "backward" for n in p.rewrites if "N and H first" in n]


#: 2**23 elements, 64 channels: statistics in two stages (passes/two_stage_statistics.py).
LARGE_SHAPE = (8, 64, 128, 128)


def _bn_silu(device: str, dtype: torch.dtype) -> nn.Module:
    """BatchNorm + SiLU: over 8M values a ReLU's mask flips where the two orders of summation put a
    normalised value on either side of zero, and its gradient with it; SiLU's is continuous."""
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(LARGE_SHAPE[1])
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return nn.Sequential(bn, nn.SiLU()).to(device=device, dtype=dtype)


def _large_steps(device: str, dtype: torch.dtype, options: dict[str, Any], steps: int = 2) -> list[Any]:
    """`steps` training steps of _bn_silu compiled and eager on fresh inputs: outputs (their layout, and
    their values) and gradients against an f64 copy's as eager's are (sums over 131072 rows in another order differ by
    more than an elementwise tolerance near zero), running statistics. Returns the recorded plans."""
    model = _bn_silu(device, dtype)
    eager, reference = copy.deepcopy(model), copy.deepcopy(model).double()
    compiled = compile_fn(model, options)
    plans: list[Any] = []
    for _ in range(steps):
        x = _input(LARGE_SHAPE, True, device, dtype)
        grad = torch.randn_like(x)
        xs = [x.clone().requires_grad_(True), x.clone().requires_grad_(True), x.double().requires_grad_(True)]
        with recording() as rec:
            out = compiled(xs[0])
            expected, exact = eager(xs[1]), reference(xs[2])
            assert_same_layout(out, expected)
            assert_as_close_as_eager(out, expected, exact)
            for y, g in ((out, grad), (expected, grad), (exact, grad.double())):
                y.backward(g)
        plans += rec.plans
        assert_as_close_as_eager(xs[0].grad, xs[1].grad, xs[2].grad)
        for (name, pa), (_, pe), (_, px) in zip(model.named_parameters(), eager.named_parameters(),
                                                 reference.named_parameters()):
            assert_as_close_as_eager(pa.grad, pe.grad, px.grad)
        for (name, ba), (_, be) in zip(model.named_buffers(), eager.named_buffers()):
            torch.testing.assert_close(ba, be, rtol=1e-4, atol=1e-5, check_dtype=False, msg=name)
        for p in (*model.parameters(), *eager.parameters(), *reference.parameters()):
            p.grad = None
    return plans


def test_large_channels_last_statistics_reduce_row_blocks_of_a_trimmed_view():
    """[8, 64, 128, 128] channels-last: the forward region reads the activation a second time as a
    [2048, 64, 64] row-major view (trimmed, zero-copy), reduces it over its rows to 64 partials per
    channel and combines them; values, gradients and running statistics are eager's (_large_steps)."""
    plans = _large_steps("cpu", torch.float32, {"plan_cpu_as_cuda": True})
    assert _two_stage_notes(plans), [p.rewrites for p in plans]
    forward = [r for p in plans if p.kind == "forward" for r in p.regions]
    assert forward and all(any(tuple(t.shape) == (2048, 64, 64) and tuple(t.stride) == (4096, 64, 1)
                                   for t in r.inputs) for r in forward), [r.inputs for r in forward]
    assert all("var_mean.correction(_to_copy_default" not in r.fx_code or ", [0], correction = 0" in r.fx_code
               for r in forward)
    assert all("[0, 1, 2], correction" not in r.fx_code for r in forward), forward[0].fx_code


def test_large_channels_last_backward_sums_reduce_n_and_h_first():
    """The same BatchNorm's backward: its two sums over N, H and W (the bias and weight gradients) of
    [8, 128, 128, 64] row-major values reduce N and H first (8192-wide rows), then W; gradients are
    eager's (_large_steps)."""
    plans = _large_steps("cpu", torch.float32, {"plan_cpu_as_cuda": True}, steps=1)
    assert len(_two_stage_sum_notes(plans)) == 2, [p.rewrites for p in plans]
    backward = [r.fx_code for p in plans if p.kind == "backward" for r in p.regions]
    assert backward and not any("[0, 1, 2], False" in code for code in backward), backward
    assert sum(code.count("sum.dim_IntList") for code in backward) == 4, backward
    assert any(", [0, 1], False)" in code and ", [0], False)" in code for code in backward), backward


@pytest.mark.parametrize("shape, channels_last", [
    ((8, 64, 128, 128), False),   # NCHW: the statistics are not over row-major rows
    ((8, 16, 32, 32), True),      # fewer rows than MIN_ROWS
    ((8, 96, 128, 128), True),    # not a power-of-two channel count
    ((1, 64, 363, 363), True),    # 131769 rows: odd, no row block divides them
])
def test_statistics_stay_one_reduction_outside_the_measured_range(shape, channels_last):
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm2d(shape[1]), nn.ReLU())
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    x = _input(shape, channels_last, "cpu", torch.float32).requires_grad_(True)
    with recording() as rec:
        compiled(x).sum().backward()
    assert not _two_stage_notes(rec.plans) and not _two_stage_sum_notes(rec.plans), [p.rewrites for p in rec.plans]


@pytest.mark.parametrize("keepdim, dtype, x_dtype", [(True, None, torch.float32),
                                                     (False, torch.float32, torch.bfloat16)])
def test_sums_over_n_h_and_w_split_with_keepdim_and_dtype(keepdim, dtype, x_dtype):
    """A sum over the leading three dims of a row-major [N, H, W, C] value accumulating in f32, with
    keepdim or a dtype: N and H first, then W; values and shapes are the one sum's."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x * 2 + 1).sum([0, 1, 2], keepdim=keepdim, dtype=dtype) * 3

    x = torch.randn(8, 128, 128, 64, dtype=x_dtype)
    compiled = compile_fn(fn, {"plan_cpu_as_cuda": True})
    with torch.no_grad(), recording() as rec:
        out = compiled(x)
    (plan,) = rec.plans
    assert [n for n in plan.rewrites if "N and H first" in n], plan.rewrites
    (region,) = plan.regions
    assert ", [0, 1, 2]" not in region.fx_code and ", [0, 1]" in region.fx_code, region.fx_code
    assert_same_layout(out, fn(x))
    assert_as_close_as_eager(out, fn(x), fn(x.double()))


def test_a_half_precision_sum_stays_one_reduction():
    """A sum accumulating in f16 would round its first stage's partial sums (a piece's output, an
    eager region's tensor): +-102400 partials overflow f16 where the one sum gives 0."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x * 1).sum([0, 1, 2])

    x = torch.full((8, 128, 128, 64), 100.0, dtype=torch.float16)
    x[:, :, 1::2] = -100.0
    compiled = compile_fn(fn, {"plan_cpu_as_cuda": True})
    with torch.no_grad(), recording() as rec:
        out = compiled(x)
    assert not [n for p in rec.plans for n in p.rewrites if "N and H first" in n], rec.plans[0].rewrites
    torch.testing.assert_close(out, fn(x))


def test_a_layer_norms_column_sums_are_left_to_split_norm_backward():
    """LayerNorm over the channels of a row-major [N, H, W, C] value: its backward region reduces rows
    (the last dim) too; its weight-gradient sum is split_norm_backward's to place (a segment boundary
    before its column sums), not split here."""
    torch.manual_seed(0)
    ln = nn.LayerNorm(32)
    x = torch.randn(8, 128, 128, 32, requires_grad=True)
    compiled = compile_fn(ln, {"plan_cpu_as_cuda": True})
    with recording() as rec:
        out = compiled(x)
        out.backward(torch.randn_like(out))
    (backward,) = [p for p in rec.plans if p.kind == "backward"]
    assert any(n.startswith("segment boundary: column sums") for n in backward.rewrites), backward.rewrites
    rows = [r for r in backward.regions if ", [3], True)" in r.fx_code]
    assert rows and not any(", [0, 1], " in r.fx_code for r in rows), [r.fx_code for r in rows]


def test_statistics_without_keepdim_split_too():
    """A hand-written BatchNorm: `var_mean` over N, H and W without keepdim, then broadcast back."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        var, mean = torch.var_mean(x, [0, 2, 3], correction=0)
        return (x - mean[:, None, None]) * torch.rsqrt(var[:, None, None] + 1e-5)

    x = _input(LARGE_SHAPE, True, "cpu", torch.float32)
    compiled = compile_fn(fn, {"plan_cpu_as_cuda": True})
    with torch.no_grad(), recording() as rec:
        out = compiled(x)
    assert _two_stage_notes(rec.plans), [p.rewrites for p in rec.plans]
    assert_same_layout(out, fn(x))
    assert_as_close_as_eager(out, fn(x), fn(x.double()))


def test_without_bookend_the_statistics_stay_one_reduction():
    """Without the bookend pass nothing trims the [M / k, k, C] view: the split would put a reshape
    inside nvFuser's kernel, so it is not made."""
    model = _bn_silu("cpu", torch.float32)
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True, "bookend": False})
    x = _input(LARGE_SHAPE, True, "cpu", torch.float32).requires_grad_(True)
    with recording() as rec:
        compiled(x).sum().backward()
    assert not _two_stage_notes(rec.plans), [p.rewrites for p in rec.plans]
    assert all("view" not in r.fx_code for p in rec.plans for r in p.regions)


def test_row_blocks_divide_the_rows_and_the_rule_keeps_to_the_measured_range():
    from dynamo_nvf.passes.two_stage_statistics import rows_per_block, splits

    assert rows_per_block(131072, 64) == 64
    assert rows_per_block(200704, 256) == 16
    assert rows_per_block(200704, 24) == 128  # the largest power of two up to 4096 // 24
    assert rows_per_block(3 * 7 * 32, 64) == 32
    assert rows_per_block(131769, 64) == 1
    # ResNet-50 at batch 64: the 112 x 112 and 56 x 56 statistics split, the 28 x 28 ones do not
    assert splits(64 * 112 * 112, 64) and splits(64 * 56 * 56, 256) and splits(64 * 56 * 56, 512)
    assert not splits(64 * 28 * 28, 256) and not splits(128 * 28 * 28, 128)
    assert not splits(64 * 112 * 112, 96) and not splits(64 * 112 * 112, 8) and not splits(64 * 56 * 56, 1024)


def test_resnet_block_training_has_no_batch_norm_op_left():
    torch.manual_seed(0)
    model = ConvBnBlock(8)
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    plans = _train_steps(model, compiled, (2, 8, 6, 6), False, "cpu", torch.float32, steps=2)
    assert not [op for op in _all_ops(plans) if "batch_norm" in op]
    left = {op for _, op, _ in _eager_ops(plans)}
    assert left <= {"aten.convolution.default", "aten.convolution_backward.default", "operator.getitem",
                    *WRITE_BACK}, left


# --------------------------------------------------------------------------------------------------
# GPU: real nvFuser
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", ["bn1d_nc", "bn2d", "bn2d_channels_last", "bn3d", "bn2d_no_affine",
                                  "bn2d_no_running_stats"])
@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_batch_norm_training_matches_eager(device, case, dtype):
    STATS.reset()
    model, shape, channels_last = _bn_relu(case, device, dtype)
    model.train()
    compiled = compile_fn(model, device_options(device))
    plans = _train_steps(model, compiled, shape, channels_last, device, dtype)
    assert not [op for op in _all_ops(plans) if "batch_norm" in op]
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0, STATS.snapshot()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_two_stage_statistics_match_eager_on_nvfuser(device, dtype):
    STATS.reset()
    plans = _large_steps(device, dtype, device_options(device), steps=3)
    assert _two_stage_notes(plans) and _two_stage_sum_notes(plans), [p.rewrites for p in plans]
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0, STATS.snapshot()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", ["bn2d", "bn2d_channels_last", "bn3d"])
@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_batch_norm_evaluation_matches_eager(device, case, dtype):
    STATS.reset()
    model, shape, channels_last = _bn_relu(case, device, dtype)
    with torch.no_grad():
        model[0].running_mean.uniform_(-1, 1)
        model[0].running_var.uniform_(0.5, 2)
    model.eval()
    compiled = compile_fn(model, device_options(device))
    rtol, atol = tolerance(dtype)
    for _ in range(2):
        x = _input(shape, channels_last, device, dtype)
        with torch.no_grad():
            assert_same(compiled(x), model(x), rtol=rtol, atol=atol)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0, STATS.snapshot()


def _kernel_names(step: Callable[[], Any]) -> list[str]:
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def _batch_norm_kernels(names: list[str]) -> list[str]:
    """ATen's batch-norm kernels (`batch_norm_collect_statistics_kernel`, ...) and cuDNN's
    (`cudnn::bn_fw_tr_1C11_kernel_NCHW`, `bn_bw_...`, `nhwcBatchNorm...`)."""
    return [n for n in names if any(part in n.lower() for part in ("batch_norm", "batchnorm", "bn_fw", "bn_bw"))]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_resnet_block_training_step_runs_no_aten_batch_norm_kernel(device, channels_last):
    torch.manual_seed(0)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = ConvBnBlock(32).to(device, memory_format=memory_format)
    reference = copy.deepcopy(model)
    compiled = compile_fn(model, device_options(device))
    x = torch.randn(8, 32, 16, 16, device=device).to(memory_format=memory_format)

    def step(m: Callable[..., Any]) -> torch.Tensor:
        inp = x.clone().requires_grad_(True)
        out = m(inp)
        out.sum().backward()
        return out

    for _ in range(3):  # compile, then steady state; buffers advance in step with eager's
        out, expected = step(compiled), step(reference)
    assert_same(out, expected, rtol=1e-4, atol=1e-4)
    for (name, ba), (_, be) in zip(model.named_buffers(), reference.named_buffers()):
        torch.testing.assert_close(ba, be, rtol=1e-5, atol=1e-5, msg=name)
    eager_names = _kernel_names(lambda: step(reference))
    assert _batch_norm_kernels(eager_names), eager_names  # the pattern names eager's kernels
    names = _kernel_names(lambda: step(compiled))
    assert not _batch_norm_kernels(names), names
    assert any("nvfuser" in n.lower() or "CudaCodeGen" in n for n in names), names
