"""split_norm_backward_rows: a norm backward's column sums (weight and bias gradients) in a region of
their own, with recomputed copies of what feeds them; the row part (dx) keeps the old region."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.passes import split_reductions
from helpers import DEVICES, check_training, cuda_plans, device_options, env_with_repo

ALWAYS = 1 << 40
#: Rows wider than NARROW_NORM_COLS, where the row rules apply (narrow rows are cut at any size).
WIDE = 512


class NormBlock(nn.Module):
    """A residual add, a LayerNorm and an RMSNorm: two norm backwards, chained."""

    def __init__(self, d: int, dtype=torch.float32, device="cpu") -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d, dtype=dtype, device=device)
        self.rms = nn.RMSNorm(d, dtype=dtype, device=device)
        with torch.no_grad():
            for p in self.parameters():
                p.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return self.rms(self.ln(x + r)) * 1.5


def _backward_regions(rows_limit: int, shape=(4, 16, 64)):
    block = NormBlock(shape[-1])
    plans = cuda_plans(lambda x, r: block(x, r), shape, shape, train=True, fake=False,
                       options={"split_norm_backward_rows": rows_limit})
    return next(p for p in plans if p.kind == "backward").regions


def test_off_by_default_one_region_holds_both_reductions():
    (region,) = _backward_regions(0)
    assert region.ops.count("aten.sum.dim_IntList") >= 5  # 3 column sums + row sums


def test_column_sums_move_to_a_region_of_their_own():
    rows_region, cols_region = _backward_regions(ALWAYS)
    code = cols_region.fx_code
    # The new region ends in the three weight and bias gradients: sums over the leading dims only.
    assert code.count("sum.dim_IntList") == 3 and code.count("[0, 1]") == 3, code
    assert "var_mean" not in code and "[2], True)" not in code.split("sum.dim_IntList")[-1]
    # The old one keeps every row reduction and no column sum.
    assert "[0, 1]" not in rows_region.fx_code
    # It reads what it cannot recompute (one value per row) from the old region, nothing full-size.
    shapes = sorted(list(t.shape) for t in rows_region.outputs)
    assert shapes == [[4, 16, 1], [4, 16, 64]], rows_region.outputs  # a row sum for the new region; dx
    assert any("split from the region" in note for note in cols_region.boundary)


def test_more_rows_than_the_limit_keep_one_region():
    (region,) = _backward_regions(63)  # 4 x 16 = 64 rows
    assert len(_backward_regions(64)) == 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("how, option, regions", [
    ("cut", {"split_norm_backward_rows": ALWAYS}, 2),  # the column sums in a region of their own
    ("segmented", {"segment_norm_backward": True}, 1),  # one region, a kernel boundary before them
])
def test_split_gradients_match_eager(device, dtype, how, option, regions):
    block = NormBlock(96, dtype=dtype, device=device)
    x = torch.randn(3, 20, 96, dtype=dtype, device=device)
    r = torch.randn(3, 20, 96, dtype=dtype, device=device)
    options = device_options(device, strict=True) | option
    # bf16 weight gradients are sums over rows in another order than ATen's fused kernels (on the CPU
    # the regions run as their decomposed graph): judged against an f32 copy, as eager's are (an
    # elementwise bound against eager failed 1 of 96 by one ulp in CI).
    plans = check_training(block, [x, r], options, params=list(block.parameters()),
                           reference=copy.deepcopy(block).float())
    backward = next(p for p in plans if p.kind == "backward")
    assert len(backward.regions) == regions
    assert any("segment boundary" in n for n in backward.rewrites) == (how == "segmented")


def test_a_full_size_value_that_cannot_be_copied_refuses_the_split():
    """A column sum fed by a dropout mask: copying would draw another mask, reading it would write a
    full-size tensor; the region stays whole."""

    def f(x):
        y, mask = torch.ops.aten.native_dropout.default(x, 0.5, True)
        return y.sum(-1, keepdim=True) * y, y.sum([0])

    gm = make_fx(f)(torch.randn(8, 16))
    members = {n for n in gm.graph.nodes if n.op == "call_function"}
    (col,) = [n for n in members if split_reductions._is_column_sum(n)]
    assert split_reductions.recomputable_feeders([col], members, rows=8) is None
    (row,) = [n for n in members if split_reductions._is_row_reduction(n)]
    assert split_reductions.recomputable_feeders([row], members, rows=8) is None


def test_option_is_validated():
    from dynamo_nvf.settings import Settings

    assert Settings.from_options({"split_norm_backward_rows": -1}).split_norm_backward_rows == -1
    with pytest.raises(TypeError):
        Settings.from_options({"split_norm_backward_rows": 1.5})


@pytest.mark.parametrize("cuda_graphs, rows, split", [
    (False, 64, False),    # without graphs each region costs host time: never by default
    (True, 64, True),      # under graphs GPU time decides: few rows are cut
    (True, 2048, False),   # past AUTO_SPLIT_ROWS nvFuser's inner-outer kernel is faster
])
def test_default_cuts_few_rows_under_cuda_graphs_only(cuda_graphs, rows, split):
    from dynamo_nvf.settings import AUTO_SPLIT_ROWS, Settings

    assert Settings().split_norm_backward_rows == -1
    assert Settings(cuda_graphs=cuda_graphs).norm_backward_split_rows() == (AUTO_SPLIT_ROWS if cuda_graphs else 0)
    block = NormBlock(WIDE)
    plans = cuda_plans(lambda x, r: block(x, r), (rows // 16, 16, WIDE), (rows // 16, 16, WIDE), train=True,
                       fake=False, options={"cuda_graphs": cuda_graphs})
    backward = next(p for p in plans if p.kind == "backward")
    assert len(backward.regions) == (2 if split else 1)


def test_negative_limits_other_than_auto_are_refused():
    from dynamo_nvf.settings import Settings

    with pytest.raises(ValueError, match="split_norm_backward_rows"):
        Settings.from_options({"split_norm_backward_rows": -2})


def test_default_keeps_norm_backwards_whose_column_sums_read_no_row_reduction():
    """An RMSNorm's weight gradient reads dy and the saved activation only: the default keeps it whole
    under graphs (a cut measured no gain), an explicit row limit still cuts it."""
    norm = nn.RMSNorm(WIDE)

    def fn(x):
        return norm(x) * 1.5

    def backward_regions(options):
        plans = cuda_plans(fn, (4, 16, WIDE), train=True, fake=False, options=options)
        return next(p for p in plans if p.kind == "backward").regions

    assert len(backward_regions({"cuda_graphs": True})) == 1
    assert len(backward_regions({"cuda_graphs": True, "split_norm_backward_rows": 1024})) == 2


def test_dynamic_shapes_are_not_cut_and_do_not_recompile():
    """Comparing a symbolic row count with the limit would guard on it: a new size would recompile
    (and compile nvFuser's fusions again). Regions that read or make symbolic sizes are left whole,
    also a region of one column sum whose own output size is static (a linear layer's bias
    gradient: a [64] sum of [s0 * s1, 64])."""
    import torch._dynamo

    from dynamo_nvf.backend import recording

    lin, norm = nn.Linear(64, 64), nn.LayerNorm(64)

    def fn(x):
        return norm(x + torch.nn.functional.gelu(lin(x)))

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="nvf_bookend", options={"plan_cpu_as_cuda": True, "cuda_graphs": True},
                             dynamic=True)
    with recording() as rec:
        for rows in (2, 3, 5):
            x = torch.randn(rows, 8, 64, requires_grad=True)
            compiled(x).sum().backward()
    assert [p.kind for p in rec.plans] == ["forward", "backward"]


@pytest.mark.parametrize("options, regions, marked", [
    ({"cuda_graphs": True}, 2, False),          # under graphs: a region of their own
    ({}, 1, True),                              # without: one region, a segment boundary
    ({"segment_norm_backward": False}, 1, False),
    ({"cuda_graphs": True, "split_norm_backward_rows": 1024}, 1, False),  # an explicit row rule wins
])
def test_narrow_rows_get_their_own_column_sum_kernels_at_any_size(options, regions, marked):
    """ConvNeXt's LayerNorm over 96 channels: 6272 rows, past AUTO_SPLIT_ROWS, and no column sum that
    reads a row reduction; nvFuser's inner-outer kernel is slow for such narrow rows (NARROW_NORM_COLS)."""
    from dynamo_nvf.settings import AUTO_SPLIT_ROWS, NARROW_NORM_COLS

    norm = nn.LayerNorm(96)
    assert 96 <= NARROW_NORM_COLS and 2 * 56 * 56 > AUTO_SPLIT_ROWS

    def fn(x):
        return norm(x) * 1.5

    plans = cuda_plans(fn, (2, 56, 56, 96), train=True, fake=False, options=options)
    backward = next(p for p in plans if p.kind == "backward")
    assert len(backward.regions) == regions
    notes = [n for n in backward.rewrites if "segment boundary" in n]
    assert bool(notes) == marked
    if marked:
        assert f"at most {NARROW_NORM_COLS} columns" in notes[0] and "6272 rows" in notes[0], notes
    if regions == 2:
        assert any(f"at most {NARROW_NORM_COLS} columns: any size" in note
                   for r in backward.regions for note in r.boundary)


def test_narrow_rows_rule_holds_for_norm_backwards_only():
    """A softmax over 10 classes after a linear layer: its backward sums rows (the softmax's) and columns
    (the bias gradient) over narrow rows, but computes no norm statistic and reads none: left whole."""
    lin = nn.Linear(64, 10)

    def fn(x):
        return torch.softmax(lin(x), dim=-1) * 1.5

    for options in ({}, {"cuda_graphs": True}):
        plans = cuda_plans(fn, (8, 1024, 64), train=True, fake=False, options=options)
        backward = next(p for p in plans if p.kind == "backward")
        assert len(backward.regions) == 1 and not any("segment boundary" in n for n in backward.rewrites), \
            backward.rewrites


def test_narrow_rows_rule_holds_in_backward_graphs_only():
    """An inference region summing narrow columns next to an amax over rows stays as it is (behind a
    segment boundary nvFuser 0.2.36 failed to compile it)."""

    def fn(x):
        h = x * 1.5 + 1.0
        return h.sum(0), h.amax(-1)

    (plan,) = cuda_plans(fn, (3, 20, 48), fake=False, options={})
    assert not any("segment boundary" in n for n in plan.rewrites), plan.rewrites
    (plan,) = cuda_plans(fn, (3, 20, 48), fake=False, options={"cuda_graphs": True})
    assert len(plan.regions) == 1


# ------------------------------------------------------------------ segment_norm_backward (no graphs)


def _backward_plan(options, rows=64, width=64):
    block = NormBlock(width)
    plans = cuda_plans(lambda x, r: block(x, r), (rows // 16, 16, width), (rows // 16, 16, width), train=True,
                       fake=False, options=options)
    return next(p for p in plans if p.kind == "backward")


def test_segment_option_keeps_one_region_and_marks_its_column_sums():
    from dynamo_nvf.settings import Settings

    assert Settings().segment_norm_backward  # the default
    plain = _backward_plan({"segment_norm_backward": False})
    marked = _backward_plan({})
    (plain_region,) = plain.regions
    (region,) = marked.regions  # not cut: one region call
    assert region.ops == plain_region.ops
    (note,) = [n for n in marked.rewrites if "segment boundary" in n]
    assert note.split(" over ")[0].count("sum_") == 3 and "64 rows" in note, note  # LayerNorm weight, bias; RMSNorm weight
    assert not any("segment boundary" in n for n in plain.rewrites)
    # The boundary changes the definition, so the two never share a compiled fusion.
    assert region.fusion_key != plain_region.fusion_key


def test_segment_option_follows_the_graphs_rule():
    """Past AUTO_SPLIT_ROWS nothing is marked; under CUDA graphs the region is cut as before."""
    assert not any("segment boundary" in n
                   for n in _backward_plan({"segment_norm_backward": True}, rows=2048, width=WIDE).rewrites)
    cut = _backward_plan({"segment_norm_backward": True, "cuda_graphs": True})
    assert len(cut.regions) == 2 and not any("segment boundary" in n for n in cut.rewrites)


def test_segment_boundary_lowers_to_segment_set():
    """The lowering puts segment_set in front of a marked node only (an upcast crosses in bf16)."""
    from types import SimpleNamespace

    from dynamo_nvf.ops.context import SEGMENT_INPUTS_KEY, LoweringContext

    calls = []

    class TV:
        def __init__(self, name):
            self.name = name

    ops = SimpleNamespace(segment_set=lambda v: calls.append(v.name) or TV(f"seg({v.name})"))
    nvf = SimpleNamespace(TensorView=TV)
    ctx = LoweringContext.__new__(LoweringContext)
    ctx.nvf, ctx.fd, ctx.ops, ctx.values, ctx.raw_inputs, ctx._upcasts = nvf, None, ops, {}, {}, {}
    ctx.cast = lambda value, dtype: TV(f"f32({value.name})")
    low, up = TV("x_bf16"), TV("x_f32")
    ctx._upcasts[id(up)] = (up, low)
    assert ctx.behind_segment_boundary(up).name == "f32(seg(x_bf16))"
    assert ctx.behind_segment_boundary(TV("y")).name == "seg(y)"
    assert calls == ["x_bf16", "y"]
    assert SEGMENT_INPUTS_KEY == "nvf_segment_inputs"


_SEGMENT_KERNELS = r'''
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import dynamo_nvf
from test_split_norm_backward import NormBlock
block = NormBlock(768, dtype=torch.bfloat16, device="cuda")
out = {}
for name, options in (("plain", {"segment_norm_backward": False}), ("segmented", {})):
    torch._dynamo.reset()
    x = torch.randn(2, 256, 768, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    r = torch.randn(2, 256, 768, dtype=torch.bfloat16, device="cuda")
    report = dynamo_nvf.explain(block, x, r, options=options, profiler="nvfuser")
    (graph,) = [g for g in report.to_dict()["graphs"] if g["kind"] == "backward"]
    out[name] = [[k["scheduler"] for k in reg["kernels"] if k["name"]] for reg in graph["regions"]]
print(json.dumps(out))
'''


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_gpu_segment_boundary_gives_the_column_sums_a_kernel_of_their_own():
    """BERT-sized (512 rows x 768, bf16): one inner-outer persistent kernel plain; with the option, the
    same single region runs the column sums in a reduction kernel of their own. In a child process:
    nvFuser's profiler cannot follow torch.profiler in one process."""
    import json
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", _SEGMENT_KERNELS, here], capture_output=True, text=True,
                          timeout=300, cwd=here, env=env_with_repo())
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernels = json.loads(proc.stdout.strip().splitlines()[-1])
    (plain,) = kernels["plain"]
    (segmented,) = kernels["segmented"]
    assert any("inner_outer" in s for s in plain), kernels
    assert len(segmented) >= 2 and not any("inner_outer" in s for s in segmented), kernels
    assert any(s.startswith("reduction") or "reduction" == s for s in segmented), kernels


# ------------------------------------------------------------------ segmenter-aware planning (ask_segmenter)


class _Answers:
    """Stands in for nvFuser's answers on a CPU machine only (the GPU tests below ask the real one):
    a fixed schedulers answer, and GPU times by what a region sums: `whole_us` for the region with row
    and column sums, `cut_us` for the cut's (rows part, column part). Records what it was asked."""

    def __init__(self, answer, whole_us=100.0, cut_us=(30.0, 30.0)):
        self.answer, self.whole_us, self.cut_us = answer, whole_us, cut_us
        self.asked, self.spent_ms, self.timed = 0, 0.0, []

    def schedulers(self, region):
        self.asked += 1
        return self.answer

    def gpu_us(self, region):
        self.asked += 1
        (output,) = [n for n in region.graph.nodes if n.op == "output"]
        assert isinstance(output.args[0], (tuple, list)), output.args  # what lowering.build_fusion reads
        sums = [n for n in region.graph.nodes if n.op == "call_function" and split_reductions._is_column_sum(n)]
        rows = [n for n in region.graph.nodes if n.op == "call_function" and split_reductions._is_row_reduction(n)]
        self.timed.append((len(rows), len(sums)))
        if self.whole_us is None:
            return None
        return self.whole_us if sums and rows else self.cut_us[0] if rows else self.cut_us[1]


def _plan_with_answer(monkeypatch, answers, options, rows=2048, width=WIDE):
    import dynamo_nvf.pipeline as pipeline

    monkeypatch.setattr(pipeline, "oracle_for", lambda settings: answers if settings.ask_segmenter else None)
    return _backward_plan(options, rows=rows, width=width)


def test_segmenter_cuts_where_nvfuser_would_segment_and_the_cut_measures_faster(monkeypatch):
    """2048 rows under graphs: past AUTO_SPLIT_ROWS the row rule keeps the region whole; nvFuser
    answering that no scheduler takes it whole, and the cut timing faster, makes the cut."""
    answers = _Answers(())
    plan = _plan_with_answer(monkeypatch, answers, {"cuda_graphs": True})
    # timed: the whole region (row and column sums), the rows part, the column part (3 sums)
    assert answers.timed == [(answers.timed[0][0], 3), (answers.timed[0][0], 0), (0, 3)], answers.timed
    rows_region, cols_region = plan.regions
    assert cols_region.ops.count("aten.sum.dim_IntList") == 3 and "[0, 1]" not in rows_region.fx_code
    assert any("the cut measured faster (the cut 30.0 + 30.0 us of GPU time against 100.0 whole)" in note
               for note in cols_region.boundary), cols_region.boundary
    assert any(n.startswith("segmenter: nvFuser would segment the region of") and "2048 rows" in n
               and "get a region of their own" in n for n in plan.rewrites), plan.rewrites
    assert any(n.startswith("segmenter: 4 question(s)") for n in plan.rewrites), plan.rewrites


def test_segmenter_keeps_the_region_whole_where_the_cut_measures_slower(monkeypatch):
    answers = _Answers((), whole_us=100.0, cut_us=(60.0, 50.0))
    plan = _plan_with_answer(monkeypatch, answers, {"cuda_graphs": True})
    assert len(plan.regions) == 1
    assert any("but the cut 60.0 + 50.0 us of GPU time against 100.0 whole: kept whole" in n
               for n in plan.rewrites), plan.rewrites


def test_segmenter_counts_the_extra_region_host_time_without_graphs(monkeypatch):
    """45 + 40 us cut against 100 whole: cut under graphs; without them the extra call's 15 us of host
    time makes it 100, within the margin: whole."""
    answers = _Answers((), whole_us=100.0, cut_us=(45.0, 40.0))
    assert len(_plan_with_answer(monkeypatch, answers, {"cuda_graphs": True}).regions) == 2
    plan = _plan_with_answer(monkeypatch, _Answers((), whole_us=100.0, cut_us=(45.0, 40.0)), {})
    assert len(plan.regions) == 1 and any("+ 15 us host against 100.0 whole: kept whole" in n for n in plan.rewrites)


@pytest.mark.parametrize("options", [{}, {"segment_norm_backward": False}])
def test_segmenter_cut_without_graphs_is_a_region_too(monkeypatch, options):
    """Without graphs too, not a segment boundary (nvFuser then still cut the row part its own way)."""
    plan = _plan_with_answer(monkeypatch, _Answers(()), options)
    assert len(plan.regions) == 2
    assert not any("segment boundary" in n for n in plan.rewrites), plan.rewrites


def test_segmenter_one_kernel_schedule_keeps_the_region_whole_untimed(monkeypatch):
    answers = _Answers(("inner_outer_persistent",))
    plan = _plan_with_answer(monkeypatch, answers, {"cuda_graphs": True})
    assert answers.asked == 1 and not answers.timed and len(plan.regions) == 1
    assert any("as one inner_outer_persistent kernel: kept whole" in n and "2048 rows" in n
               for n in plan.rewrites), plan.rewrites


def test_segmenter_is_not_asked_where_the_cut_is_refused(monkeypatch):
    """Where the column sums' inputs cannot be recomputed apart there is no cut to weigh: nvFuser is
    asked nothing (each question costs compile time on the first call) and the region stays whole."""
    monkeypatch.setattr(split_reductions, "_cut_copy", lambda *args: None)
    answers = _Answers(())
    plan = _plan_with_answer(monkeypatch, answers, {"cuda_graphs": True})
    assert answers.asked == 0 and len(plan.regions) == 1
    assert any(n.startswith("segmenter: not asked about the region of") for n in plan.rewrites), plan.rewrites


@pytest.mark.parametrize("answer, whole_us", [(None, 100.0), ((), None)])
def test_segmenter_without_an_answer_keeps_the_region_whole(monkeypatch, answer, whole_us):
    plan = _plan_with_answer(monkeypatch, _Answers(answer, whole_us=whole_us), {"cuda_graphs": True})
    assert len(plan.regions) == 1
    assert any("was not measured" in n for n in plan.rewrites) == (answer == ())


@pytest.mark.parametrize("options, rows", [
    ({"cuda_graphs": True}, 64),                                   # the row rule cuts it already
    ({"cuda_graphs": True, "ask_segmenter": False}, 2048),         # off
    ({"cuda_graphs": True, "split_norm_backward_rows": 0}, 2048),  # no cut ever
    ({}, 64),                                                      # marked by segment_norm_backward
])
def test_segmenter_is_asked_only_past_the_row_rules(monkeypatch, options, rows):
    answers = _Answers(())
    plan = _plan_with_answer(monkeypatch, answers, options, rows=rows)
    assert answers.asked == 0
    assert not any(n.startswith("segmenter") for n in plan.rewrites)


def test_segmenter_is_not_asked_for_forward_graphs(monkeypatch):
    import dynamo_nvf.pipeline as pipeline

    answers = _Answers(())
    monkeypatch.setattr(pipeline, "oracle_for", lambda settings: answers)
    block = NormBlock(WIDE)
    cuda_plans(lambda x, r: block(x, r), (128, 16, WIDE), (128, 16, WIDE), fake=False, options={"cuda_graphs": True})
    assert answers.asked == 0


def test_segmenter_cut_gradients_match_eager(monkeypatch):
    import dynamo_nvf.pipeline as pipeline

    answers = _Answers(())
    monkeypatch.setattr(pipeline, "oracle_for", lambda settings: answers)
    block = NormBlock(WIDE)
    x, r = torch.randn(128, 16, WIDE), torch.randn(128, 16, WIDE)
    options = device_options("cpu", strict=True) | {"cuda_graphs": False}
    plans = check_training(block, [x, r], options, params=list(block.parameters()))
    backward = next(p for p in plans if p.kind == "backward")
    assert answers.timed and len(backward.regions) == 2


def test_no_oracle_on_a_cpu_plan_or_when_off():
    from dynamo_nvf.segmenter import oracle_for
    from dynamo_nvf.settings import Settings

    assert Settings().ask_segmenter
    assert oracle_for(Settings(plan_cpu_as_cuda=True)) is None
    assert oracle_for(Settings(ask_segmenter=False)) is None
    if not nvf_env.nvfuser_available():
        assert oracle_for(Settings()) is None


_WIDE_NORM = r'''
import json, sys, torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import dynamo_nvf
out = {}
for rows, cols in ((2048, 32768), (4096, 4096)):
    torch._dynamo.reset()
    x = torch.randn(rows, cols, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    w = torch.randn(cols, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    b = torch.randn(cols, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    fn = lambda x, w, b: F.layer_norm(x, (cols,), w, b)
    report = dynamo_nvf.explain(fn, x, w, b, options={"strict": True}, profiler="nvfuser")
    (graph,) = [g for g in report.to_dict()["graphs"] if g["kind"] == "backward"]
    kernels = [[k["scheduler"] for k in reg["kernels"] if k["name"]] for reg in graph["regions"]]
    out[f"{rows}x{cols}"] = {"kernels": kernels, "rewrites": graph["rewrites"]}
print(json.dumps(out))
'''


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_gpu_segmenter_answers_for_wide_and_narrow_norm_backwards():
    """nvFuser itself: a LayerNorm backward over [2048, 32768] bf16 has no one-kernel schedule, and the
    cut timed faster (536.7 against 362.8 us a step, H100, 2026-11-25), so its column sums get a region of
    their own (one reduction kernel; no inner-outer kernel); over [4096, 4096] nvFuser runs it as one
    inner-outer persistent kernel, and the region is left to it. In a child process: nvFuser's profiler
    cannot follow torch.profiler in one process."""
    import json
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", _WIDE_NORM, here], capture_output=True, text=True,
                          timeout=300, cwd=here, env=env_with_repo())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    wide, square = result["2048x32768"], result["4096x4096"]
    assert any("get a region of their own" in n for n in wide["rewrites"]), wide
    rows_kernels, column_kernels = wide["kernels"]
    assert column_kernels == ["reduction"] and not any("inner_outer" in s for s in rows_kernels), wide
    assert any("as one inner_outer_persistent kernel: kept whole" in n for n in square["rewrites"]), square
    (square_kernels,) = square["kernels"]
    assert any("inner_outer" in s for s in square_kernels), square


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_gpu_segmenter_cut_matches_eager(cuda_graphs):
    """The wide LayerNorm's cut, with graphs and without, on fresh inputs: gradients within bf16 bounds
    of an f32 reference, eager's strides."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    cols = 32768
    fn = lambda x, w, b: F.layer_norm(x, (cols,), w, b)  # noqa: E731
    compiled = torch.compile(fn, backend="nvf_bookend", options={"strict": True, "cuda_graphs": cuda_graphs})
    for _ in range(3):
        x = torch.randn(2048, cols, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        w = torch.randn(cols, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        b = torch.randn(cols, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        g = torch.randn(2048, cols, dtype=torch.bfloat16, device="cuda")
        if cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        compiled(x, w, b).backward(g)
        ref = [t.detach().float().requires_grad_() for t in (x, w, b)]
        F.layer_norm(ref[0], (cols,), ref[1], ref[2]).backward(g.float())
        for got, want in zip((x.grad, w.grad, b.grad), ref):
            assert got.stride() == want.grad.stride()
            torch.testing.assert_close(got.float(), want.grad, rtol=2e-2, atol=2e-2 * want.grad.abs().max().item())
