"""The bookend pass on the seeds' programs: the plans a GPU gets, computed on the CPU."""

from __future__ import annotations

import pytest
import torch

import programs
from helpers import assert_same, check_inference, compile_fn, cuda_plans

GELU_OPS = ["aten.mul.Tensor", "aten.mul.Tensor", "aten.erf.default", "aten.add.Tensor", "aten.mul.Tensor"]


def only_plan(plans):
    assert len(plans) == 1
    return plans[0]


def test_seed000_gelu_trims_both_views():
    plan = only_plan(cuda_plans(programs.seed000_gelu, (8192, 3072)))
    assert len(plan.regions) == 1
    region = plan.regions[0]
    assert region.ops == GELU_OPS
    assert [(d.node, d.op, d.action) for d in region.leading] == [("view", "aten.view.default", "trimmed")]
    assert [(d.node, d.op, d.action) for d in region.trailing] == [("view_1", "aten.view.default", "trimmed")]
    assert [t.shape for t in region.inputs] == [[64, 128, 3072]]
    assert [t.shape for t in region.outputs] == [[64, 128, 3072]]
    eager = {n.name: n.reason for n in plan.eager_nodes}
    assert eager["view"].startswith("trimmed (leading)") and eager["view_1"].startswith("trimmed (trailing)")


def test_seed000_gelu_with_view_output_does_not_output_a_view_of_its_input():
    plan = only_plan(cuda_plans(programs.seed000_gelu_with_view_output, (8192, 3072)))
    region = only_plan([plan]).regions[0]
    assert region.ops == GELU_OPS
    assert [t.name for t in region.outputs] == ["mul_2"]
    assert [t.name for t in region.inputs] == ["view"]


def test_seed000_gelu_with_view_output_returns_a_real_alias():
    x = torch.randn(256, 48)
    compiled = compile_fn(programs.seed000_gelu_with_view_output, {"plan_cpu_as_cuda": True})
    out, view = compiled(x)
    assert view.data_ptr() == x.data_ptr() and view._base is x
    assert_same((out, view), programs.seed000_gelu_with_view_output(x))


def test_seed000_transpose_keeps_the_copy_and_trims_views_and_permute():
    for options in ({}, {"min_region_size": 1}):
        plan = only_plan(cuda_plans(programs.seed000_transpose, (768, 128, 64), options=options, fake=False))
        assert len(plan.regions) <= 1
        for region in plan.regions:
            assert region.ops == ["aten.clone.default"]
            assert [d.op for d in region.leading] == ["aten.view.default", "aten.permute.default"]
            assert {d.op for d in region.trailing} == {"aten.view.default"}
    # A lone copy is kept as a region only when it transposes (nvFuser's transpose scheduler beats
    # eager's copy); a plain contiguous copy alone goes back to eager.
    plan = only_plan(cuda_plans(programs.seed000_transpose, (768, 128, 64), fake=False))
    assert [r.ops for r in plan.regions] == [["aten.clone.default"]]
    plain = only_plan(cuda_plans(lambda x: x.view(-1).clone(), (64, 32), fake=False))
    assert plain.regions == []
    clone = next(n for n in plain.nodes if n.op == "aten.clone.default")
    assert clone.reason.startswith("single-op policy")


def test_metadata_only_program_never_reaches_nvfuser():
    plan = only_plan(cuda_plans(programs.metadata_only, (64, 32)))
    assert plan.regions == []
    assert all(n.region is None for n in plan.nodes)
    reasons = {n.reason for n in plan.nodes}
    assert any(r.startswith("metadata-only") or r.startswith("trimmed") for r in reasons), reasons


def test_metadata_only_program_returns_views_of_its_input():
    x = torch.randn(64, 32)
    compiled = compile_fn(programs.metadata_only, {"plan_cpu_as_cuda": True})
    out = compiled(x)
    expected = programs.metadata_only(x)
    assert out.data_ptr() == x.data_ptr() and out.stride() == expected.stride()
    assert_same(out, expected)


def _views(x, y):
    """Several outputs, offsets into both inputs, a broadcast and a split."""
    a = x[2:, 1:].t().unsqueeze(0)
    b = y.view(4, 2, 8).permute(2, 0, 1)[1]
    c = x[3].expand(5, 32)
    d = y.split(3, dim=1)[2]
    return a, b, c, d


@pytest.mark.parametrize("grad", [False, True])
def test_views_only_graph_replays_each_output_as_one_view(grad):
    """Inference: each output is one as_strided of its input (no view chain, no aot wrapper);
    training goes through aot_autograd as before. Either way: same storage, offsets, strides and
    values as eager on fresh inputs after the compile, and in training the same gradients."""
    compiled = compile_fn(_views, {"plan_cpu_as_cuda": True})
    for _ in range(2):
        x, y = torch.randn(64, 32, requires_grad=grad), torch.randn(8, 8, requires_grad=grad)
        with torch.set_grad_enabled(grad):
            actual, expected = compiled(x, y), _views(x, y)
        for a, e, base in zip(actual, expected, (x, y, x, y)):
            assert a.untyped_storage().data_ptr() == e.untyped_storage().data_ptr()
            assert (a.shape, a.stride(), a.storage_offset()) == (e.shape, e.stride(), e.storage_offset())
            assert torch.equal(a, e) and a._base is base
        if grad:
            weights = [torch.randn_like(e) for e in expected]
            got = torch.autograd.grad([(a * w).sum() for a, w in zip(actual, weights)], [x, y])
            want = torch.autograd.grad([(e * w).sum() for e, w in zip(expected, weights)], [x, y])
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)


def test_views_are_not_replayed_after_a_planning_failure(monkeypatch):
    """A failed plan knows nothing of the graph's ops; a copying 'view' (an index with a tensor) must
    then run as it is."""
    from dynamo_nvf import backend

    def broken(*args, **kwargs):
        raise RuntimeError("arranged planning failure")

    monkeypatch.setattr(backend, "plan_graph", broken)
    fn = lambda x, i: (x[i], x.t().reshape(-1))  # noqa: E731
    x, i = torch.randn(5, 3), torch.tensor([0, 2, 4])
    with pytest.warns(RuntimeWarning, match="arranged planning failure"), torch.no_grad():
        actual = compile_fn(fn, {"plan_cpu_as_cuda": True})(x, i)
    for a, e in zip(actual, fn(x, i)):
        assert torch.equal(a, e)


def test_views_only_inference_graph_is_replayed_not_run():
    from dynamo_nvf.runtime.views import view_specs
    from dynamo_nvf.backend import recording

    captured = []

    def spy(gm, example_inputs):
        captured.append(gm)
        return torch._dynamo.lookup_backend("nvf_bookend")(gm, example_inputs, options={"plan_cpu_as_cuda": True})

    torch._dynamo.reset()
    compiled = torch.compile(_views, backend=spy)
    with torch.no_grad(), recording() as rec:
        compiled(torch.randn(64, 32), torch.randn(8, 8))
    specs, as_tuple = view_specs(captured[0], rec.plans)
    assert as_tuple and [s.input_index for s in specs] == [0, 1, 0, 1]
    assert specs[0].offset_delta == 2 * 32 + 1 and specs[2].stride == (0, 1)


def test_bookend_false_sends_a_metadata_only_region_untrimmed():
    """bookend=False turns the whole pass off: the views go to nvFuser as they would without it."""
    plan = only_plan(cuda_plans(programs.metadata_only, (64, 32), options={"bookend": False}))
    (region,) = plan.regions
    assert region.ops == ["aten.view.default", "aten.permute.default", "aten.unsqueeze.default",
                          "aten.transpose.int"]
    assert region.compute_ops == []
    x = torch.randn(64, 32)
    check_inference(programs.metadata_only, [x], {"plan_cpu_as_cuda": True, "bookend": False})


def test_lone_view_has_no_region():
    plan = only_plan(cuda_plans(lambda x: x.view(64, 128, 3072), (8192, 3072)))
    assert plan.regions == []


def test_bookend_false_keeps_views_inside():
    plan = only_plan(cuda_plans(programs.seed000_gelu, (8192, 3072), options={"bookend": False}))
    region = plan.regions[0]
    assert region.ops == ["aten.view.default"] + GELU_OPS + ["aten.view.default"]
    assert region.leading == [] and region.trailing == []


SEQUENTIAL = {
    # views kept -> (region ops, leading trimmed, trailing trimmed)
    "ABC": (["aten.add.Tensor", "aten.view.default", "aten.mul.Tensor"], 1, 1),
    "BC": (["aten.add.Tensor", "aten.mul.Tensor"], 1, 1),
    "AC": (["aten.add.Tensor", "aten.mul.Tensor"], 1, 1),
    "AB": (["aten.add.Tensor", "aten.view.default", "aten.mul.Tensor"], 1, 0),
    "A": (["aten.add.Tensor", "aten.mul.Tensor"], 1, 0),
    "B": (["aten.add.Tensor", "aten.mul.Tensor"], 1, 0),
    "C": (["aten.add.Tensor", "aten.mul.Tensor"], 0, 1),
    "": (["aten.add.Tensor", "aten.mul.Tensor"], 0, 0),
}


@pytest.mark.parametrize("views", list(SEQUENTIAL))
def test_seed000_sequential_study(views):
    """Seed 000's view-add-view-mul-view study.

    The plan trims the boundary views A and C and keeps the interior view B where it merges dims
    (after A). nvFuser itself segmented view+add | view | mul+view with all three views, but the
    A+C-removed fusion (add+view+mul) in one segment: that is exactly what the trimmed region hands
    it. Without A, B splits x's rows: views_to_region_edges moves it above the add onto x, and the
    bookend pass trims it as a leading view.
    """
    ops, leading, trailing = SEQUENTIAL[views]
    plan = only_plan(cuda_plans(lambda x: programs.seed000_sequential(x, views), (8192, 3072)))
    assert len(plan.regions) == 1
    region = plan.regions[0]
    assert region.ops == ops
    assert len(region.leading) == leading and len(region.trailing) == trailing
    x = torch.randn(256, 16)
    check_inference(lambda t: programs.seed000_sequential(t, views), [x], {"plan_cpu_as_cuda": True})


def test_interior_reshape_chain_collapses():
    # ops of two tensors on both sides, the first view a merge: views_to_region_edges moves none
    def fn(x, w, b):
        y = x * w
        z = y.view(32, 16).view(4, 8, 16).view(8, 64)
        return z + b

    plan = only_plan(cuda_plans(fn, (4, 8, 16), (4, 8, 16), (8, 64), options={"min_region_size": 1}))
    region = plan.regions[0]
    assert region.ops.count("aten.view.default") == 1
    assert sum(d.action == "collapsed" for d in region.kept) == 2
    inputs = [torch.randn(4, 8, 16), torch.randn(4, 8, 16), torch.randn(8, 64)]
    check_inference(fn, inputs, {"plan_cpu_as_cuda": True, "min_region_size": 1})


def test_reshape_that_copies_stays_inside():
    def fn(x):
        return (x * 2).t().reshape(-1) + 1  # the transpose makes the reshape a copy

    plan = only_plan(cuda_plans(fn, (16, 32), options={"min_region_size": 1}, fake=False))
    ops = [op for r in plan.regions for op in r.ops]
    assert "aten.t.default" in ops or "aten.permute.default" in ops or "aten.clone.default" in ops
    check_inference(fn, [torch.randn(16, 32)], {"plan_cpu_as_cuda": True, "min_region_size": 1})


def test_leading_expand_stays_inside():
    def fn(x, b):
        return x * b.unsqueeze(0).expand(x.shape[0], -1) + 1

    plan = only_plan(cuda_plans(fn, (32, 16), (16,)))
    region = plan.regions[0]
    assert "aten.expand.default" in region.ops
    assert any(d.op == "aten.expand.default" and d.action == "kept" for d in region.kept)


def test_trailing_metadata_also_used_inside_is_duplicated_out():
    def fn(x, w):
        y = x * w  # an op of two tensors: views_to_region_edges moves the view across no op
        v = y.view(-1)
        return v * 2, v

    plan = only_plan(cuda_plans(fn, (8, 16), (8, 16), options={"min_region_size": 1}))
    region = plan.regions[0]
    assert [d.action for d in region.trailing] == ["duplicated"]
    assert all("view" not in t.name for t in region.outputs)
    check_inference(fn, [torch.randn(8, 16), torch.randn(8, 16)], {"plan_cpu_as_cuda": True, "min_region_size": 1})


def test_seed001_sum_joins_the_pointwise_region():
    """Seed 001: the sum over dims 0 and 1 (its own input) would run alone; it joins the region of the
    pointwise chain instead, as in the seed's fusion, which nvFuser splits into two kernels."""
    plan = only_plan(cuda_plans(programs.seed001_bias_gelu_backward, 1.0, 2.0, 3.0, 4.0,
                                (16, 512, 64), (16, 512, 64), (16, 512, 64)))
    (region,) = plan.regions
    assert "aten.sum.dim_IntList" in region.ops and "aten.tanh.default" in region.ops
    assert [(d.node, d.action) for d in region.kept] == [("sum_1", "merged")]
    assert plan.eager_nodes == []
    assert [t.name for t in region.outputs] == ["sum_1", "add_3"]


def test_orphans_merge_only_without_a_cycle():
    w = torch.randn(16, 16)

    def fn(x):
        a = torch.exp(x) * 2
        b = a @ w  # eager
        return torch.sigmoid(b)  # alone, and after the mm: joining the exp region needs a cycle

    plan = only_plan(cuda_plans(fn, (16, 16), fake=False))
    (region,) = plan.regions
    assert "aten.sigmoid.default" not in region.ops
    reasons = {n.op: n.reason for n in plan.eager_nodes}
    assert reasons["aten.sigmoid.default"].startswith("single-op policy")
    check_inference(fn, [torch.randn(16, 16)], {"plan_cpu_as_cuda": True})


def test_reshape_of_expanded_tensor_stays_eager_and_its_reduction_is_fused():
    def fn(s, x):
        e = s.expand(4, 8, 16)
        return e.reshape(32, 16).t().sum(0) + x.sum(), e.sum(dim=(0, 1))

    plan = only_plan(cuda_plans(fn, (), (4,), options={"bookend": False}, fake=False))
    reasons = {n.name: n.reason for n in plan.eager_nodes}
    assert "reshape of an expanded" in reasons["view"]
    assert not any("reduction of an expanded" in r for r in reasons.values())
    fused = {op for region in plan.regions for op in region.ops}
    assert "aten.sum.dim_IntList" in fused  # e.sum(dim=(0, 1)) reads the expand inside the region
    check_inference(fn, [torch.randn(()), torch.randn(4)], {"plan_cpu_as_cuda": True, "bookend": False})


def test_views_only_graph_keeps_calls_that_return_their_input():
    """`flatten` of a 1-D tensor and `contiguous` of a contiguous one return the input object itself
    in eager; the compiled program must too (no as_strided replay for them)."""
    def fn(x):
        return x.flatten(), x.contiguous(), x.view(2, -1)

    x = torch.randn(8)
    with torch.no_grad():
        out = compile_fn(fn, {"plan_cpu_as_cuda": True})(x)
    assert out[0] is x and out[1] is x and out[2] is not x
    assert out[2]._base is x and out[2].stride() == (4, 1)


def test_untrimmed_metadata_only_region_with_symbolic_views_stays_eager(monkeypatch):
    """aot_autograd rebuilds an input-aliasing output with as_strided from the region's output when a
    view step is symbolic; nvFuser's outputs are fresh tensors (emulated here by a clone), so such a
    region must not be sent even with bookend=False."""
    from dynamo_nvf.runtime.region import RegionRuntime

    eager = RegionRuntime._run_eager

    def fresh_outputs(self, args):
        out = eager(self, args)
        return [o.clone() for o in out] if isinstance(out, (list, tuple)) else out.clone()

    monkeypatch.setattr(RegionRuntime, "_run_eager", fresh_outputs)
    fn = lambda x, n: x[n].unsqueeze(0)  # noqa: E731
    compiled = compile_fn(fn, {"plan_cpu_as_cuda": True, "bookend": False})
    x = torch.randn(3, 4)
    for n in (1, 2, 0):  # the second call recompiles with n symbolic
        out = compiled(x, n)
        assert torch.equal(out, fn(x, n)) and out.storage_offset() == fn(x, n).storage_offset()


def test_many_lone_ops_join_the_regions_beside_them():
    """An optimizer-like graph of 600 one-op regions beside 150 chains: each orphan tries at most
    MERGE_CANDIDATES regions (best first) from an index kept up to date, rather than re-reading the
    whole graph per orphan, which took tens of seconds at this size."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.passes.bookend import bookend_regions
    from dynamo_nvf.passes.partition import partition_regions, regions_of
    from dynamo_nvf.settings import Settings

    def fn(*xs):
        return [x.sin() for x in xs] + [(x * 2 + 1).cos() for x in xs[:150]]

    gm = make_fx(fn, tracing_mode="fake")(*[torch.randn(8) for _ in range(600)])
    settings = Settings(plan_cpu_as_cuda=True)
    regions = regions_of(bookend_regions(partition_regions(gm, settings), settings))
    assert sum(len(ns) for ns in regions.values()) == 600 + 3 * 150  # every op fused somewhere
    assert len(regions) == 150  # the orphans joined the chains; none was left alone
    # the 150 sins of the chains' own inputs join their chain (shared input first)
    for ns in regions.values():
        chain_inputs = {n.args[0] for n in ns if n.target is torch.ops.aten.mul.Tensor}
        assert any(n.target is torch.ops.aten.sin.default and n.args[0] in chain_inputs for n in ns)


def test_a_lone_copy_of_an_expanded_tensor_is_no_region():
    """GQA's repeat_kv (expand, then a reshape that copies) must not become a one-op region: it is no
    transpose, eager's copy kernel does it as well, and nvFuser would only add its host cost."""
    def repeat_kv(x):
        b, h, s, d = x.shape
        return x[:, :, None, :, :].expand(b, h, 4, s, d).reshape(b, h * 4, s, d)

    plan = only_plan(cuda_plans(repeat_kv, (2, 2, 8, 16), fake=False))
    assert plan.regions == []
    assert any("single-op policy" in n.reason for n in plan.nodes)
