"""Regions nvFuser is known to compute wrongly are cut in two, or else stay in eager
(passes/known_bugs.py), on the CPU plan."""

from typing import Any

import pytest
import torch

import dynamo_nvf
from dynamo_nvf.passes.known_bugs import EXPAND_PERMUTE_REDUCTION, EXPAND_PERMUTE_SPLIT
from perf.workloads import REGISTRY


def _plans(name: str, options: dict):
    torch._dynamo.reset()
    inst = REGISTRY[name].instantiate("cpu", tiny=True)
    with dynamo_nvf.recording() as recorder:
        inst.call(torch.compile(inst.fn, backend="nvf_bookend", options={"plan_cpu_as_cuda": True, **options}))
    return recorder.plans


def _kept_eager(plans) -> list[str]:
    return [n.name for p in plans for n in p.eager_nodes if n.reason == EXPAND_PERMUTE_REDUCTION]


def _writes_only_sums(region) -> bool:
    """Every output of the region is a per-channel sum (one dim above 1), not a broadcast."""
    return all(sum(1 for d in o.shape if d != 1) <= 1 for o in region.outputs)


def _sums_before_the_broadcast(region) -> bool:
    """The region's sums all come before its expand: none reduces a permute of the broadcast."""
    ops = region.ops
    sums = [i for i, op in enumerate(ops) if op == "aten.sum.dim_IntList"]
    return "aten.expand.default" in ops and all(i < ops.index("aten.expand.default") for i in sums)


@pytest.mark.parametrize("options", [{}, {"unflatten_reductions": False}, {"cuda_graphs": True},
                                     {"unpermute_reductions": 1, "split_norm_backward_rows": 1 << 40}])
def test_convnext_head_backward_is_cut_in_two(options):
    """The head backward spreads the pooled gradient (expand), keeps it, and sums its permute: the
    sums run in a region of their own, the rest in another, and nothing stays in eager for it."""
    plans = _plans("convnext_train_bf16_small", options)
    backward = next(p for p in plans if p.kind == "backward")
    assert not _kept_eager([backward])
    cut = [r for r in backward.regions if any(EXPAND_PERMUTE_SPLIT in b for b in r.boundary)]
    assert len(cut) == 1, [r.boundary for r in backward.regions]
    # The part cut off computes the layer-scale sums, the broadcast again from the [N, C] gradient
    # included, and writes nothing but the sums.
    (sums,) = cut
    assert sums.compute_ops.count("aten.sum.dim_IntList") == 2 and "aten.expand.default" in sums.ops, sums.ops
    assert _writes_only_sums(sums), [o.shape for o in sums.outputs]
    # The part that writes the broadcast: the head's LayerNorm backward up to the layer-scale product,
    # with no sum after the broadcast.
    (writer,) = [r for r in backward.regions if r is not sums and "aten.expand.default" in r.ops
                 and "aten.clone.default" in r.ops]
    assert _sums_before_the_broadcast(writer), writer.ops


@pytest.mark.parametrize("name", ["llama_train_bf16_small", "gpt_train_bf16_small", "bert_train_bf16_small",
                                  "vit_train_bf16_small"])
def test_transformers_are_untouched(name):
    assert not _kept_eager(_plans(name, {}))


def test_pattern_needs_an_output_of_the_broadcast():
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.passes.known_bugs import expand_permute_reduction

    def writes_it(x, y):
        e = x[:, :, None].expand(2, 3, 4) / 4
        return e, (e.permute(0, 2, 1) * y).sum([0, 1])

    def only_sums(x, y):
        e = x[:, :, None].expand(2, 3, 4) / 4
        return (e.permute(0, 2, 1) * y).sum([0, 1])

    args = (torch.randn(2, 3), torch.randn(2, 4, 3))
    for fn, found in ((writes_it, True), (only_sums, False)):
        gm = make_fx(fn)(*args)
        members = [n for n in gm.graph.nodes if n.op == "call_function"]
        assert (expand_permute_reduction(members) is not None) is found


def _plan_of(fn, options=None):
    from helpers import cuda_plans

    return cuda_plans(fn, (2, 3), (2, 4, 3), options=options or {}, fake=False)


def _flagged(fn, options=None) -> bool:
    """The pattern was found: the region was cut in two, or (where no cut clears it) kept eager."""
    plans = _plan_of(fn, options)
    return bool(_kept_eager(plans)) or any(EXPAND_PERMUTE_SPLIT in b for p in plans for r in p.regions
                                          for b in r.boundary)


def test_planned_programs_through_plan_graph():
    def writes_it(x, y):
        e = (x * 2)[:, :, None].expand(2, 3, 4) / 4
        return e, (e.permute(0, 2, 1) * y).sum([0, 1])

    def writes_only_the_view(x, y):
        e = (x * 2)[:, :, None].expand(2, 3, 4)
        return e, (e.permute(0, 2, 1) * y).sum([0, 1])

    def through_transpose(x, y):
        e = (x * 2)[:, :, None].expand(2, 3, 4) / 4
        return e, (e.transpose(1, 2) * y).sum([0, 1])

    assert _flagged(writes_it)
    assert not _flagged(writes_only_the_view)  # a trimmed alias: the sum alone runs, and that was right
    assert _flagged(through_transpose)
    # The check runs before unpermute_reductions could remove the permute it looks for.
    assert _flagged(writes_it, options={"unpermute_reductions": 1})


def test_cut_leaves_neither_part_with_the_pattern_and_matches_eager():
    from helpers import check_training

    def writes_it(x, y):
        e = (x * 2)[:, :, None].expand(2, 3, 4) / 4
        return e * 3, (e.permute(0, 2, 1) * y).sum([0, 1])

    plans = _plan_of(writes_it, {"min_region_size": 1})
    (plan,) = plans
    assert not _kept_eager(plans)
    sums = [r for r in plan.regions if "aten.sum.dim_IntList" in r.ops]
    writers = [r for r in plan.regions if "aten.sum.dim_IntList" not in r.ops]
    assert len(sums) == 1 and len(writers) == 1 and "aten.expand.default" in writers[0].ops
    assert _writes_only_sums(sums[0]), [o.shape for o in sums[0].outputs]
    check_training(writes_it, [torch.randn(2, 3), torch.randn(2, 4, 3)], {"plan_cpu_as_cuda": True, "min_region_size": 1})


def test_a_cut_whose_copies_bring_the_pattern_back_stays_eager():
    """Copies of a second broadcast, whose permute the cut-off part also reduces and whose product it
    writes, would make that part the very fusion nvFuser gets wrong: the region stays in eager."""
    from helpers import check_training

    def two_broadcasts(x, x2, y):
        e = (x * 2)[:, :, None].expand(2, 3, 4) / 4
        e2 = (x2 * 2)[:, :, None].expand(2, 3, 4) / 4
        r = (e.permute(0, 2, 1) * y).sum([0, 1])
        r2 = (e2.permute(0, 2, 1) * r).sum([0, 1])
        return e * 3, e2 + 1, r2, e2 * r[:, None]

    from helpers import cuda_plans

    plans = cuda_plans(two_broadcasts, (2, 3), (2, 3), (2, 4, 3), options={"min_region_size": 1}, fake=False)
    assert _kept_eager(plans)
    assert not any("aten.expand.default" in r.ops for p in plans for r in p.regions), \
        [r.ops for p in plans for r in p.regions]
    check_training(two_broadcasts, [torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 4, 3)],
                   {"plan_cpu_as_cuda": True, "min_region_size": 1})


def _grouped_key_rope(k, cos, sin):
    """The key gradient of grouped-query attention summed over each key head's query heads, then RoPE
    (`rotate_half` slices and concatenates; joined with the `cos` term): the shape of the region a
    LLaMA-style step under DDP hands the backend."""
    b, h, s, d = k.shape
    kv = k.view(b, 2, h // 2, s, d).sum(2)
    half = d // 2
    rotated = torch.cat([-kv[..., half:], kv[..., :half]], dim=-1)
    return kv * cos + rotated * sin


def _rope_inputs(dtype=torch.bfloat16, device="cpu"):
    return (torch.randn(1, 8, 16, 8, dtype=dtype, device=device), torch.randn(16, 8, dtype=dtype, device=device),
            torch.randn(16, 8, dtype=dtype, device=device))


def test_reduction_resize_join_pattern():
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.passes.known_bugs import reduction_resize_join

    def sums_then_slices_alone(k):
        kv = k.view(1, 2, 4, 16, 8).sum(2)
        return kv[..., 4:] * 2  # resized, joined with nothing else the sum feeds

    def slices_then_join_without_reduction(k, cos, sin):
        half = k.shape[-1] // 2
        return k * cos + torch.cat([-k[..., half:], k[..., :half]], dim=-1) * sin

    args = _rope_inputs()
    for fn, inputs, found in ((_grouped_key_rope, args, True), (sums_then_slices_alone, args[:1], False),
                              (slices_then_join_without_reduction, args, False),
                              (_grouped_key_rope, _rope_inputs(torch.float32), False)):  # no bf16 rounding
        gm = make_fx(fn)(*inputs)
        members = [n for n in gm.graph.nodes if n.op == "call_function"]
        assert (reduction_resize_join(members) is not None) is found, fn.__name__


def test_a_select_of_a_computed_value_counts_as_a_resize_in_the_crash_pattern():
    """A select of a value the region computes lowers as a unit slice (ops/lowerings.py), so the
    pattern counts it (conservatively: the crash was reproduced with slices, pads and cats); a select
    of an input, which stays nvFuser's select, it does not."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.passes.known_bugs import reduction_resize_join

    def rows_minus_first(x):
        y = x.sum(2, keepdim=True).to(torch.bfloat16) * x
        return y - y[:, 0].unsqueeze(1)

    def input_row(x):
        return x.sum(2, keepdim=True).to(torch.bfloat16) * x - x[:, 0].unsqueeze(1)

    x = torch.randn(2, 4, 8, dtype=torch.bfloat16)
    for fn, found in ((rows_minus_first, True), (input_row, False)):
        gm = make_fx(fn)(x)
        members = [n for n in gm.graph.nodes if n.op == "call_function"]
        assert (reduction_resize_join(members) is not None) is found, fn.__name__


def test_reduction_resize_join_is_cut_after_the_reduction_and_matches_eager():
    from dynamo_nvf.passes.known_bugs import REDUCTION_RESIZE_JOIN
    from helpers import check_training, cuda_plans

    plans = cuda_plans(_grouped_key_rope, (1, 8, 16, 8), (16, 8), (16, 8), options={"min_region_size": 1},
                       fake=False, dtype=torch.bfloat16)
    (plan,) = plans
    assert not [n for n in plan.eager_nodes if n.reason == REDUCTION_RESIZE_JOIN]
    cut = [r for r in plan.regions if any(REDUCTION_RESIZE_JOIN in b for b in r.boundary)]
    assert len(cut) == 1, [r.boundary for r in plan.regions]
    # The sum runs in one region, the RoPE after it in another, and no region has a resize after a sum.
    (sums,) = [r for r in plan.regions if "aten.sum.dim_IntList" in r.ops]
    assert "aten.cat.default" not in sums.ops and "aten.cat.default" in cut[0].ops, (sums.ops, cut[0].ops)
    check_training(_grouped_key_rope, list(_rope_inputs()), {"plan_cpu_as_cuda": True, "min_region_size": 1})


def _norm_roll_join(x):
    """A bf16 LayerNorm computed through var_mean (a reduction with two outputs), rounded, rolled
    (slices and a cat) and joined with the mean: Swin's shifted-window step has this region."""
    xf = x.float()
    var, mean = torch.var_mean(xf, -1, keepdim=True, correction=0)
    normed = ((xf - mean) * torch.rsqrt(var + 1e-5)).to(torch.bfloat16)
    return torch.roll(normed, 3, 1) + mean.to(torch.bfloat16)


def test_cut_after_a_two_output_reduction_keeps_its_getitems():
    """The cut after var_mean leaves both getitems with it: a region takes and returns tensors, never
    the reduction's tuple (nvFuser regions with a tuple input or output failed to build)."""
    from dynamo_nvf.passes.known_bugs import REDUCTION_RESIZE_JOIN
    from helpers import check_inference, cuda_plans

    (plan,) = cuda_plans(_norm_roll_join, (4, 16, 8), options={"min_region_size": 1}, fake=False, dtype=torch.bfloat16)
    assert [r for r in plan.regions if any(REDUCTION_RESIZE_JOIN in b for b in r.boundary)]
    (reducing,) = [r for r in plan.regions if "aten.var_mean.correction" in r.ops]
    assert reducing.ops.count("operator.getitem") == 2 and "aten.cat.default" not in reducing.ops, reducing.ops
    assert not [r for r in plan.regions if "operator.getitem" in r.ops and "aten.var_mean.correction" not in r.ops]
    check_inference(_norm_roll_join, [torch.randn(4, 16, 8, dtype=torch.bfloat16)],
                    {"plan_cpu_as_cuda": True, "min_region_size": 1})


def _statistics_and_pool(x, running_mean, squeezed: bool = True, pool_dims=(2, 3)):
    """BatchNorm's training forward (statistics over N, H, W and the running mean updated from them)
    and a squeeze-excitation pool of its ReLU output after it."""
    var, mean = torch.var_mean(x, [0, 2, 3], correction=0, keepdim=True)
    y = torch.relu((x - mean) * torch.rsqrt(var + 1e-5))
    stats = mean.squeeze((0, 2, 3)) * 0.1 + running_mean * 0.9 if squeezed else mean * 0.1
    return stats, y, y.mean(pool_dims, keepdim=True)


def test_statistics_beside_partial_reduction_pattern():
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.passes.known_bugs import statistics_beside_partial_reduction

    args = (torch.randn(4, 8, 6, 5), torch.randn(8))
    cases = (({}, "mean"), ({"squeezed": False}, None),  # the statistics written keepdim: not the pattern
             ({"pool_dims": (0, 2, 3)}, None))  # the same dims reduced again
    for kwargs, found in cases:
        gm = make_fx(lambda x, r: _statistics_and_pool(x, r, **kwargs))(*args)
        members = [n for n in gm.graph.nodes if n.op == "call_function"]
        second = statistics_beside_partial_reduction(members)
        assert (second.target.__name__.split(".")[0] if second is not None else None) == found, kwargs


class _BnSqueezeExcite(torch.nn.Module):
    """BatchNorm, ReLU and a squeeze-excitation gate: regnety's and EfficientNet's block."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(x))
        return y * torch.sigmoid(y.mean((2, 3), keepdim=True))


def _trained_forward(model_class: type) -> tuple[list, Any]:
    """Training steps of a fresh `model_class()` compiled for a CPU plan as for CUDA, checked against
    eager (outputs, gradients, buffers): every plan, and the forward's."""
    from helpers import compile_fn
    from test_batch_norm import _train_steps

    torch.manual_seed(0)
    model = model_class()
    plans = _train_steps(model, compile_fn(model, {"plan_cpu_as_cuda": True}), (4, 8, 6, 5), False, "cpu",
                         torch.float32)
    return plans, next(p for p in plans if p.kind == "forward")


def test_batch_norm_statistics_and_a_pool_after_them_run_in_two_regions_and_match_eager():
    """The pool, and what only it needs, move to a region of their own that reads the statistics; nothing
    stays in eager, and outputs, gradients and running statistics match eager's."""
    from dynamo_nvf.passes.known_bugs import STATISTICS_BESIDE_PARTIAL_REDUCTION

    plans, forward = _trained_forward(_BnSqueezeExcite)
    cut = [r for r in forward.regions if any(STATISTICS_BESIDE_PARTIAL_REDUCTION in b for b in r.boundary)]
    assert len(cut) == 1, [r.boundary for r in forward.regions]
    assert "aten.mean.dim" in cut[0].ops and "aten.var_mean.correction" not in cut[0].ops, cut[0].ops
    (stats,) = [r for r in forward.regions if "aten.var_mean.correction" in r.ops]
    assert "aten.mean.dim" not in stats.ops, stats.ops
    assert not [n for p in plans for n in p.eager_nodes if n.reason == STATISTICS_BESIDE_PARTIAL_REDUCTION]


class _BnSqueezeExciteConv(_BnSqueezeExcite):
    """As regnety's block: the pooled vector goes through a 1x1 convolution (ATen), so the pool is a
    region of one reduction after the cut, which the bookend pass would otherwise merge back."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__(channels)
        self.fc = torch.nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(x))
        return y * torch.sigmoid(self.fc(y.mean((2, 3), keepdim=True)))


def test_a_pool_cut_from_batch_norm_statistics_is_not_merged_back():
    _, forward = _trained_forward(_BnSqueezeExciteConv)
    (stats,) = [r for r in forward.regions if "aten.var_mean.correction" in r.ops]
    assert "aten.mean.dim" not in stats.ops, stats.ops


def _sums_and_pool(x, w):
    """Statistics by a sum over N, H and W written squeezed, and a pool of the normalised tensor that
    a convolution (ATen) reads: after the cut the pool is a region of one reduction."""
    s = x.sum((0, 2, 3), keepdim=True)
    y = torch.relu(x - s / 120)
    return s.squeeze((0, 2, 3)) * 0.1, y, torch.nn.functional.conv2d(y.mean((2, 3), keepdim=True), w)


def test_a_small_region_is_not_merged_into_a_known_bug_pattern():
    from dynamo_nvf.passes.known_bugs import STATISTICS_BESIDE_PARTIAL_REDUCTION
    from helpers import check_training, cuda_plans

    (plan,) = cuda_plans(_sums_and_pool, (4, 8, 6, 5), (8, 8, 1, 1), options={"min_region_size": 2}, fake=False)
    assert not [r for r in plan.regions if "aten.mean.dim" in r.ops and "aten.sum.dim_IntList" in r.ops], \
        [r.ops for r in plan.regions]
    assert not [n for n in plan.eager_nodes if n.reason == STATISTICS_BESIDE_PARTIAL_REDUCTION]
    check_training(_sums_and_pool, [torch.randn(4, 8, 6, 5), torch.randn(8, 8, 1, 1)], {"plan_cpu_as_cuda": True})


def _pool_reads_the_variance(x, rm):
    var, mean = torch.var_mean(x, [0, 2, 3], correction=0, keepdim=True)
    y = torch.relu(x - mean)
    stats = mean.squeeze((0, 2, 3)) * 0.1 + rm * 0.9
    return stats, y, y.mean((2, 3), keepdim=True) * torch.rsqrt(var + 1e-5)


def _pool_rotated_and_joined(x, rm):
    var, mean = torch.var_mean(x, [0, 2, 3], correction=0, keepdim=True)
    y = torch.relu((x - mean) * torch.rsqrt(var + 1e-5))
    p = y.mean((2, 3))
    return mean.squeeze((0, 2, 3)) * 0.1 + rm * 0.9, y, torch.cat([-p[:, 4:], p[:, :4]], dim=1) * p


def _one_region(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.passes.partition import REGION_KEY

    gm = make_fx(fn)(*args)
    for n in gm.graph.nodes:
        if n.op == "call_function":
            n.meta[REGION_KEY] = 0
    return gm


def test_the_cut_off_pool_reads_tensors_and_is_checked_for_the_other_patterns():
    """A getitem of var_mean stays with it when the part cut off reads it (a region takes tensors,
    not tuples), and a part cut off with another known pattern (a pool rotated and joined, bf16: the
    resize crash) is cut again, so no region has any pattern."""
    import operator

    from dynamo_nvf.passes.known_bugs import keep_known_bugs_eager, known_bug
    from dynamo_nvf.passes.partition import REGION_KEY, regions_of

    gm = keep_known_bugs_eager(_one_region(_pool_reads_the_variance, torch.randn(4, 8, 6, 5), torch.randn(8)))
    for node in gm.graph.nodes:
        if node.target is operator.getitem:
            assert node.meta.get(REGION_KEY) == node.args[0].meta.get(REGION_KEY), node.name
    gm = keep_known_bugs_eager(_one_region(_pool_rotated_and_joined, torch.randn(4, 8, 6, 5, dtype=torch.bfloat16),
                                           torch.randn(8, dtype=torch.bfloat16)))
    assert len(regions_of(gm)) >= 2 and not [known_bug(ns) for ns in regions_of(gm).values() if known_bug(ns)]


class _BnChannelAttention(torch.nn.Module):
    """BatchNorm, then CBAM-style channel attention: a mean and a max pool side by side."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(x))
        return y * torch.sigmoid(y.mean((2, 3), keepdim=True) + y.amax((2, 3), keepdim=True))


def test_two_pools_side_by_side_are_cut_off_together_and_nothing_stays_eager():
    from dynamo_nvf.passes.known_bugs import STATISTICS_BESIDE_PARTIAL_REDUCTION

    _, forward = _trained_forward(_BnChannelAttention)
    assert not [n for n in forward.nodes if n.reason == STATISTICS_BESIDE_PARTIAL_REDUCTION]
    (norm,) = [r for r in forward.regions if "aten.var_mean.correction" in r.ops]
    assert "aten.mean.dim" not in norm.ops and "aten.amax.default" not in norm.ops, norm.ops
