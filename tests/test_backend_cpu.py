"""The backend on a machine without a GPU: registration, options, partition structure, and
numerical match with eager through the rewritten graph (regions planned as for CUDA, run eagerly)."""

from __future__ import annotations

import logging
import operator
import subprocess
import sys
from importlib.metadata import entry_points

import pytest
import torch
import torch._dynamo

import dynamo_nvf
import programs
from dynamo_nvf import Settings
from dynamo_nvf.ops.metadata import METADATA_OPS
from dynamo_nvf.ops.registry import LOWERINGS, op_name, unsupported_reason
from dynamo_nvf.runtime.stats import STATS
from helpers import check_inference, check_training, compile_fn, cuda_plans, region_ops

PLAN = {"plan_cpu_as_cuda": True}


# -- registration and options ----------------------------------------------------------------------


def test_entry_point_registers_the_backend():
    names = {ep.name: ep.value for ep in entry_points(group="torch_dynamo_backends")}
    assert names.get("nvf_bookend") == "dynamo_nvf.backend:nvf_bookend"
    assert "nvf_bookend" in torch._dynamo.list_backends()


def test_backend_by_name_without_importing_the_package():
    code = (
        "import torch, sys\n"
        "f = torch.compile(lambda x: torch.sigmoid(x) * 2, backend='nvf_bookend')\n"
        "x = torch.randn(4, 4)\n"
        "assert torch.allclose(f(x), torch.sigmoid(x) * 2)\n"
        "assert 'dynamo_nvf' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_options_map_onto_settings():
    s = Settings.from_options({"bookend": False, "max_region_io": 16, "strict": True})
    assert (s.bookend, s.max_region_io, s.strict) == (False, 16, True)
    assert Settings.from_options(None) == Settings()
    with pytest.raises(ValueError, match="unknown nvf_bookend option"):
        Settings.from_options({"bookends": True})
    with pytest.raises(TypeError):
        Settings.from_options({"bookend": "yes"})
    with pytest.raises(ValueError):
        Settings.from_options({"min_region_size": 0})


def test_unknown_option_fails_the_compile():
    f = compile_fn(lambda x: x + 1, {"no_such_option": 1})
    with pytest.raises(Exception, match="unknown nvf_bookend option"):
        f(torch.randn(2))


def test_logs_unavailability_and_one_line_per_graph(caplog):
    with caplog.at_level(logging.INFO, logger="dynamo_nvf"):
        check_inference(programs.seed000_gelu, [torch.randn(128, 16)], PLAN)
    lines = [r.getMessage() for r in caplog.records if "inference graph" in r.getMessage()]
    assert len(lines) == 1 and "1 region(s)" in lines[0]


# -- single sources of truth ------------------------------------------------------------------------


def test_every_metadata_op_has_a_lowering():
    assert set(METADATA_OPS) <= set(LOWERINGS)


def test_op_names_are_overload_strings():
    assert op_name(torch.ops.aten.mul.Tensor) == "aten.mul.Tensor"
    assert op_name(operator.getitem) == "operator.getitem"


# -- capability checks ------------------------------------------------------------------------------


def _reasons(fn, *inputs, options=None):
    plans = check_inference(fn, inputs, options)
    return {n.name: n.reason for p in plans for n in p.nodes if n.region is None}


def test_cpu_tensors_stay_eager_with_a_device_reason():
    reasons = _reasons(lambda x: torch.sigmoid(x) * 2, torch.randn(4, 4))
    assert reasons and all(r.startswith("device: cpu") for r in reasons.values())


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int8, torch.uint8, torch.int16])
def test_unmapped_dtypes_stay_eager(dtype):
    x = (torch.randn(4, 4) * 4).to(dtype)
    reasons = _reasons(lambda t: t * 2 + 1, x, options=PLAN)
    assert reasons and all(r.startswith("dtype:") for r in reasons.values()), reasons


def test_rank_above_eight_stays_eager():
    x = torch.randn(*([2] * 9))
    reasons = _reasons(lambda t: torch.exp(t) * 2, x, options=PLAN)
    assert reasons and all(r.startswith("rank: 9") for r in reasons.values())


def test_matmul_is_left_to_aten_and_pointwise_around_it_fused():
    plans = check_inference(programs.MLPGelu(16, 32), [torch.randn(4, 16)], PLAN)
    ops = [op for r in region_ops(plans) for op in r]
    assert "aten.erf.default" in ops and not any("mm" in op for op in ops)
    reasons = {n.op: n.reason for p in plans for n in p.nodes if n.region is None}
    assert reasons["aten.addmm.default"] == "matmul: runs in ATen (cuBLAS)"


def test_cycle_through_eager_code_splits_regions():
    w = torch.randn(16, 16)

    def fn(x):
        a = torch.exp(x)
        b = a @ w  # eager
        return torch.sigmoid(a) + b

    plan = cuda_plans(fn, (16, 16), options={"min_region_size": 1}, fake=False)[0]
    by_node = {n.name: n.region for n in plan.nodes}
    assert by_node["exp"] is not None and by_node["add"] is not None
    # exp feeds mm which feeds add: exp and add in one region would need a cycle.
    assert by_node["exp"] != by_node["add"]
    check_inference(fn, [torch.randn(16, 16)], {**PLAN, "min_region_size": 1})


def test_max_region_io_caps_regions():
    def fn(*xs):
        acc = xs[0] * 1.0
        for x in xs[1:]:
            acc = acc + torch.sin(x)
        return acc

    inputs = [torch.randn(8) for _ in range(12)]
    plans = check_inference(fn, inputs, {**PLAN, "max_region_io": 6})
    regions = [r for p in plans for r in p.regions]
    assert len(regions) > 1
    assert all(len(r.inputs) + len(r.outputs) <= 6 for r in regions)
    assert any("IO limit" in b for r in regions for b in r.boundary)
    uncapped = check_inference(fn, inputs, PLAN)
    assert len([r for p in uncapped for r in p.regions]) == 1


def test_capability_check_errors_become_reasons():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.ops.aten.exp.default, (x,))
    x.meta["val"] = object()  # nonsense metadata must not crash planning
    node.meta["val"] = torch.empty(2)
    reason = unsupported_reason(node, Settings(plan_cpu_as_cuda=True))
    assert reason is not None


# -- numerics through the rewritten graph -----------------------------------------------------------

MODELS = {
    "mlp_gelu": lambda: (programs.MLPGelu(32, 64), (4, 8, 32)),
    "layernorm_block": lambda: (programs.LayerNormBlock(32), (4, 8, 32)),
    "softmax_attention": lambda: (programs.SoftmaxAttention(32, 4), (2, 8, 32)),
    "transformer_block": lambda: (programs.TransformerBlock(32, 4), (2, 8, 32)),
}
#: softmax_attention keeps its explicit softmax chain here, to test that chain's regions; its rewrite
#: into SDPA (which leaves it no region) is tested in test_attention.py.
MODEL_OPTIONS = {
    "softmax_attention": {**PLAN, "fuse_attention": False},
}


@pytest.mark.parametrize("name", list(MODELS))
def test_models_inference_match_eager(name):
    model, shape = MODELS[name]()
    plans = check_inference(model, [torch.randn(*shape)], MODEL_OPTIONS.get(name, PLAN))
    assert [p.kind for p in plans] == ["inference"]
    assert any(p.regions for p in plans)


@pytest.mark.parametrize("name", list(MODELS))
def test_models_training_gradients_match_eager(name):
    model, shape = MODELS[name]()
    plans = check_training(model, [torch.randn(*shape)], MODEL_OPTIONS.get(name, PLAN),
                           params=list(model.parameters()))
    kinds = {p.kind for p in plans}
    assert kinds == {"forward", "backward"}
    assert all(p.regions for p in plans)


def test_layernorm_is_decomposed_into_fused_ops():
    plans = check_inference(programs.LayerNormBlock(32), [torch.randn(4, 8, 32)], PLAN)
    ops = [op for r in region_ops(plans) for op in r]
    assert "aten.var_mean.correction" in ops and "aten.rsqrt.default" in ops
    assert not any("layer_norm" in op for op in ops)


def test_gelu_between_linears_is_decomposed_into_a_region():
    """A transformer MLP's GELU, alone between two bf16 linears (they keep their biases): decomposed
    into its erf form and run as a region, not as ATen's gelu."""
    fc1, fc2 = torch.nn.Linear(32, 128), torch.nn.Linear(128, 32)
    mlp = torch.nn.Sequential(fc1, torch.nn.GELU(), fc2).to(torch.bfloat16).requires_grad_(False)
    (plan,) = cuda_plans(lambda x: mlp(x), (4, 8, 32), dtype=torch.bfloat16, fake=False)
    (region,) = plan.regions
    assert "aten.erf.default" in region.ops
    assert not [n for n in plan.eager_nodes if n.op == "aten.gelu.default"]


def test_softmax_backward_is_decomposed():
    plans = check_training(lambda x: torch.softmax(x * 2, -1), [torch.randn(8, 16)], PLAN)
    bw = [r for p in plans if p.kind == "backward" for r in p.regions]
    assert bw and not any("softmax" in op for r in bw for op in r.ops)


def test_regions_run_eagerly_without_nvfuser_and_count_it():
    STATS.reset()
    check_inference(programs.seed000_gelu, [torch.randn(128, 16)], PLAN)
    assert STATS.eager_calls >= 1 and STATS.nvfuser_calls == 0


def test_output_strides_match_eager_for_permuted_inputs():
    x = torch.randn(16, 32).t()
    check_inference(lambda t: (t * 2).clone() + 1, [x], {**PLAN, "min_region_size": 1})
    check_inference(lambda t: (t * 2).contiguous() + 1, [x], {**PLAN, "min_region_size": 1})


def test_inference_mode_gets_no_backward():
    model = programs.MLPGelu(16, 32)
    compiled = compile_fn(model, PLAN)
    with torch.inference_mode(), dynamo_nvf.recording() as rec:
        out = compiled(torch.randn(4, 16))
    assert not out.requires_grad
    assert [p.kind for p in rec.plans] == ["inference"]


def test_output_validation_rejects_wrong_shapes_and_dtypes():
    from dynamo_nvf.runtime.region import _validate_outputs

    expected = [(torch.float32, [1024]), (torch.bfloat16, [None, 8])]
    _validate_outputs([torch.empty(1024), torch.empty(3, 8, dtype=torch.bfloat16)], expected)
    with pytest.raises(RuntimeError, match=r"output 0 is torch.float32\[1\]"):
        _validate_outputs([torch.empty(1), torch.empty(3, 8, dtype=torch.bfloat16)], expected)
    with pytest.raises(RuntimeError, match="output 1"):
        _validate_outputs([torch.empty(1024), torch.empty(3, 8)], expected)
    with pytest.raises(RuntimeError, match="returned 1 outputs"):
        _validate_outputs([torch.empty(1024)], expected)


def test_scheduler_read_from_kernel_names():
    from dynamo_nvf.runtime.region import _scheduler_from_kernel_name

    assert _scheduler_from_kernel_name("nvfuser_reduction_f0_c1_r0_g0") == "reduction"
    assert _scheduler_from_kernel_name("nvfuser_inner_persistent_f0_c1_r0_g1") == "inner_persistent"
    assert _scheduler_from_kernel_name("") == ""


def test_two_regions_that_would_feed_each_other_are_not_built():
    """A -> eager -> B and B -> eager -> A: each region is convex, fusing both needs a cycle."""

    def f(x, y):
        a0 = x.sin()
        b0 = y.exp()
        e1 = a0.cos().cumsum(0)
        e2 = b0.tan().cumsum(0)
        return b0 * e1, a0 * e2

    for options in ({**PLAN, "min_region_size": 1, "strict": True}, {**PLAN, "strict": True}):
        check_inference(f, [torch.randn(8, 4), torch.randn(8, 4)], options)
        check_training(f, [torch.randn(8, 4), torch.randn(8, 4)], options)


def test_planning_failure_leaves_the_graph_intact(monkeypatch):
    from dynamo_nvf import pipeline

    def broken(gm, kind, graph_id):
        raise RuntimeError("arranged planning failure")

    monkeypatch.setattr(pipeline, "fuse_regions", broken)
    fn = lambda x: torch.sigmoid(x) * 2 + x.sum(0)  # noqa: E731
    with pytest.warns(RuntimeWarning, match="arranged planning failure"):
        check_training(fn, [torch.randn(8, 4)], PLAN)


def test_getitem_of_an_eager_op_stays_eager():
    def fn(x, w):
        v, m = torch.var_mean(x, 1, keepdim=True, correction=0.5)  # a correction nvFuser lacks
        return (w - m) * torch.rsqrt(v + 1e-5)

    plans = check_inference(fn, [torch.randn(1, 8), torch.randn(4, 8)], {**PLAN, "strict": True})
    eager = {n.name: n.reason for p in plans for n in p.nodes if n.region is None}
    assert eager["var_mean"].startswith("unsupported op: non-integer variance correction")
    assert eager["getitem"].startswith("unsupported op: getitem of an op that stays in eager")
    assert all("operator.getitem" not in r.ops or "aten.var_mean.correction" in r.ops
               for p in plans for r in p.regions)


def test_fallback_warning_keeps_the_head_of_an_nvfuser_error():
    from dynamo_nvf.runtime.region import _short_error

    text = ("INTERNAL ASSERT FAILED at fusion_kernel_runtime.cpp:476\nExpected x . Detected exception\n"
            "Exception raised from compileFusionParallel at f.cpp:476 (most recent call first):\n"
            + "".join(f"frame #{i}: lib.so + 0x{i:x}\n" for i in range(40)))
    short = _short_error(RuntimeError(text))
    assert short.startswith("RuntimeError: INTERNAL ASSERT FAILED") and "Detected exception" in short
    assert "frame #" not in short and "Exception raised from" not in short
    assert len(_short_error(RuntimeError("x" * 5000))) < 1000


def test_full_like_is_planned_and_matches():
    def fn(x):
        return torch.ones_like(x) * 2 + torch.full_like(x, 3.5) * x

    ops = {op for region in region_ops(cuda_plans(fn, (4, 8), fake=False)) for op in region}
    assert "aten.full_like.default" in ops
    check_inference(fn, [torch.randn(4, 8)], {"plan_cpu_as_cuda": True})


def test_embedding_is_fused_unless_fuse_embedding_is_off():
    emb = torch.nn.Embedding(50, 16)

    def fn(tokens):
        return emb(tokens) * 4.0 + 1.0

    tokens = torch.randint(0, 50, (4, 8))
    with torch.no_grad():
        (aten,) = check_inference(fn, [tokens], {**PLAN, "fuse_embedding": False})
        (fused,) = check_inference(fn, [tokens], PLAN)
    reason = next(n.reason for n in aten.nodes if n.op == "aten.embedding.default")
    assert reason == "left to ATen: aten.embedding.default is fused only with fuse_embedding=True"
    assert [r.ops for r in fused.regions] == [["aten.embedding.default", "aten.mul.Tensor", "aten.add.Tensor"]]


def test_negative_variance_correction_stays_eager():
    fn = lambda x: torch.var(x, 1, correction=-1) * 2  # noqa: E731
    (plan,) = check_inference(fn, [torch.randn(4, 8)], {**PLAN, "min_region_size": 1})
    reason = next(n.reason for n in plan.nodes if n.op == "aten.var.correction")
    assert "negative variance correction" in reason


def test_relu_backward_where_joins_the_backward_region():
    """relu's backward decomposes to prims.where; it must fuse with the gradient's other ops rather
    than split the backward region."""
    def f(x, w):
        return torch.relu(x @ w) * 2.0 + 1.0

    plans = check_training(f, [torch.randn(8, 16), torch.randn(16, 16)], {"plan_cpu_as_cuda": True})
    (backward,) = [p for p in plans if p.kind == "backward"]
    assert [r.ops for r in backward.regions] == [["aten.mul.Tensor", "prims.where.default"]]


def test_full_sum_knows_when_its_region_reduces_rows():
    """The lowering sums rows first only beside a row reduction of a tensor of the same shape."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.ops.lowerings import _rows_reduced_in_region

    x = torch.randn(8, 16)
    norm_loss = make_fx(lambda x: torch.ops.aten.sum.default(x - torch.ops.aten.amax.default(x, [-1], True)))(x)
    plain_loss = make_fx(lambda x: torch.ops.aten.sum.default(x * 2))(x)
    column_loss = make_fx(lambda x: torch.ops.aten.sum.default(x - torch.ops.aten.amax.default(x, [0], True)))(x)
    for gm, expected in ((norm_loss, True), (plain_loss, False), (column_loss, False)):
        total = [n for n in gm.graph.nodes if n.target is torch.ops.aten.sum.default][0]
        assert _rows_reduced_in_region(total, total.args[0]) is expected, gm.code


@pytest.mark.parametrize("dims,expected", [([0, 1, 2, 3], []), ([0, 1, -1, 2], [[0, 1, 3, 2]])],
                         ids=["identity", "swap"])
def test_an_identity_permute_lowers_to_its_input(dims, expected):
    """An identity permute defines nothing in nvFuser (nvFuser's no-op permute beside outputs of two
    layouts gave wrong values: scripts/nvfuser_repros/row_major_pin_beside_channels_last_output.py); another
    permute lowers to nvFuser's permute with non-negative dims."""
    from types import SimpleNamespace

    from dynamo_nvf.ops.context import LoweringContext
    from dynamo_nvf.ops.registry import LOWERINGS

    gm = torch.fx.symbolic_trace(lambda x: x.permute(*dims))
    src = next(n for n in gm.graph.nodes if n.op == "placeholder")
    src.meta["val"] = torch.empty(2, 3, 4, 5)
    node = torch.fx.Graph().call_function(torch.ops.aten.permute.default, (src, dims))
    calls = []
    ctx = LoweringContext.__new__(LoweringContext)
    ctx.ops = SimpleNamespace(permute=lambda v, d: calls.append(d) or ("permuted", v))
    ctx.values = {src: "x"}
    out = LOWERINGS[torch.ops.aten.permute.default].lower(ctx, node)
    assert calls == expected
    assert out == ("x" if not expected else ("permuted", "x"))
