"""GPU tests: regions really run on nvFuser (real nvfuser_direct), match eager, keep eager's strides.

Skipped cleanly without CUDA or nvFuser; `make test-gpu` runs them on the device.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.runtime.stats import STATS

from helpers import assert_same, check_inference, check_training, compile_fn, region_ops
import programs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason=f"needs CUDA and nvFuser: {nvf_env.unavailable_reason()}"),
]

STRICT = {"strict": True, "min_region_size": 1}
DEV = "cuda"


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEV, dtype=dtype)


def nvfuser_kernels(fn, *args) -> list[str]:
    """Names of the GPU kernels nvFuser launched during one call, from torch.profiler."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return [n for n in names if "nvfuser" in n.lower() or "CudaCodeGen" in n]


def all_kernels(fn, *args) -> list[str]:
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
            and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]


@pytest.fixture(autouse=True)
def _reset_stats():
    STATS.reset()
    yield


def _ran_on_nvfuser():
    assert STATS.nvfuser_calls > 0, STATS.snapshot()
    assert STATS.fallbacks == 0, STATS.snapshot()


# ------------------------------------------------------------------------------------------------
# One test per supported op family: each compiles a two-op program (the op plus a neighbour), so the
# region is the op under test, and checks it ran on nvFuser.
# ------------------------------------------------------------------------------------------------

UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "exp", "exp2", "expm1", "erf", "erfc",
         "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "relu", "reciprocal", "round",
         "rsqrt", "sign", "sigmoid", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "isfinite", "isinf",
         "isnan", "asinh", "acosh", "atanh", "erfinv"]


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unary(name, dtype):
    op = getattr(torch, name)
    x = _r(64, 33, dtype=dtype)
    if name in ("log", "log10", "log2", "sqrt", "rsqrt", "lgamma", "acosh"):
        x = x.abs() + 1.0
    if name in ("acos", "asin", "atanh", "erfinv"):
        x = x.clamp(-0.9, 0.9)
    check_inference(lambda t: op(t * 1.0), [x], STRICT)
    _ran_on_nvfuser()


BINARY = {
    "add": lambda a, b: torch.add(a, b, alpha=2.0),
    "sub": lambda a, b: torch.sub(a, b, alpha=0.5),
    "mul": torch.mul, "div": torch.div, "pow": lambda a, b: torch.pow(a.abs() + 0.5, b),
    "remainder": torch.remainder, "fmod": torch.fmod, "atan2": torch.atan2,
    "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "where": lambda a, b: torch.where(a > b, a, b),
    "clamp": lambda a, b: torch.clamp(a, -0.5, 0.5) + b,
    "clamp_min": lambda a, b: torch.clamp(a, min=0.1) * b,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "lerp": lambda a, b: torch.lerp(a, b, 0.3),
    "scalar_pow": lambda a, b: a ** 2.0 + b,
}


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_binary(name, dtype):
    fn = BINARY[name]
    a, b = _r(32, 48, dtype=dtype), _r(48, dtype=dtype) + 2.0
    # bf16 values stay in f32 between ops inside a fusion (as in inductor), while eager rounds each
    # one; pow magnifies that difference, so it gets twice bf16's usual tolerance.
    tol = {"rtol": 4e-2, "atol": 4e-2} if name == "pow" and dtype == torch.bfloat16 else {}
    check_inference(lambda x, y: fn(x * 1.0, y), [a, b], STRICT, **tol)
    _ran_on_nvfuser()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_and_bool_pointwise(dtype):
    if dtype == torch.bool:
        a = torch.rand(16, 16, device=DEV) > 0.5
        b = torch.rand(16, 16, device=DEV) > 0.5
        fn = lambda x, y: torch.logical_and(x, y) | (x ^ y)
    else:
        a = torch.randint(-50, 50, (16, 16), device=DEV, dtype=dtype)
        b = torch.randint(1, 9, (16, 16), device=DEV, dtype=dtype)
        fn = lambda x, y: (x * y + 3) // 1 - torch.bitwise_and(x, y) + (x > y).to(dtype)
    check_inference(fn, [a, b], STRICT)
    _ran_on_nvfuser()


@pytest.mark.parametrize("bookend", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reductions_of_expanded_tensors_keep_their_shape(bookend, dtype):
    """nvFuser 0.2.36 lost expanded extents through a reduction (a [1]-shaped bias grad); the lowering
    reads such tensors through `x * ones`. LayerNorm's backward has this: sum(expand(grad), 0)."""
    def fn(s, x):
        e = s.expand(64, 8, 16)
        return e.reshape(512, 16).t().sum(0) + x.sum(), e.sum(dim=(0, 1)) * x[:16], e.mean(0) + 1

    args = [torch.randn((), device=DEV, dtype=dtype), _r(64, dtype=dtype)]
    plans = check_inference(fn, args, {"strict": True, "bookend": bookend})
    assert any("aten.sum.dim_IntList" in ops for ops in region_ops(plans))
    _ran_on_nvfuser()


NORM_LOSSES = {
    # + 1: the sum of normalized rows is a sum of zero-mean terms; near zero it is rounding noise
    # (bf16 eager rounds every element, the fusion does not), which no relative tolerance covers.
    "layer_norm_sum": lambda x: (torch.nn.functional.layer_norm(x, (x.shape[-1],)) + 1.0).sum(),
    "softmax_mean": lambda x: torch.softmax(x, dim=-1).float().mean(),
    "rms_norm_sum_keepdim": lambda x: (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) + 1.0).sum(
        (0, 1), keepdim=True),
}


@pytest.mark.parametrize("name", list(NORM_LOSSES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_full_reduction_after_a_norm_sums_rows_first(name, dtype):
    """A loss over a norm's output: rows first (the norm's persistent kernel keeps that reduction),
    then the row sums; nvFuser otherwise recomputes the norm in a second, full-size kernel."""
    x = _r(512, 1024, dtype=dtype)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-1}
    plans = check_inference(NORM_LOSSES[name], [x], STRICT, **tol)
    _ran_on_nvfuser()
    definition = "\n".join(r.definition for p in plans for r in p.regions)
    assert "dims=[1]" in definition and "dims=[0]" in definition, definition
    assert "dims=[0, 1]" not in definition, definition
    kernels = nvfuser_kernels(compile_fn(NORM_LOSSES[name], STRICT), x)
    assert len(kernels) == 2, kernels


def test_lone_full_reduction_stays_one_reduction():
    """Without a row reduction beside it, a full sum is one nvFuser reduction, not two."""
    x = _r(512, 1024)
    plans = check_inference(lambda x: (x * 2).sum(), [x], STRICT)
    definition = "\n".join(r.definition for p in plans for r in p.regions)
    assert "dims=[0, 1]" in definition, definition


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_embedding_matches_aten(dtype, index_dtype):
    emb = torch.nn.Embedding(300, 64, device=DEV, dtype=dtype)
    pos = _r(16, 64, dtype=dtype)
    fn = lambda t: emb(t) * 8.0 + pos  # noqa: E731
    tokens = torch.randint(0, 300, (4, 16), device=DEV, dtype=index_dtype)
    plans = check_inference(fn, [tokens], {"strict": True})
    assert any("aten.embedding.default" in ops for ops in region_ops(plans))
    _ran_on_nvfuser()
    compiled = compile_fn(fn, {"strict": True})
    with torch.no_grad():
        compiled(tokens)
        kernels = all_kernels(compiled, tokens)
    # Gather, scale and add in one kernel (the bf16 table is gathered as it is, not upcast whole).
    assert len(kernels) == 1, kernels


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_rounding_ops_are_copies_on_integers(dtype):
    a = torch.randint(-50, 50, (16, 16), device=DEV, dtype=dtype)
    check_inference(lambda x: torch.ceil(x) + torch.floor(x) - torch.round(x) * torch.trunc(x), [a], STRICT)
    _ran_on_nvfuser()


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32),
                                     (torch.float32, torch.float16), (torch.float32, torch.int32),
                                     (torch.int64, torch.float32), (torch.float32, torch.bool)])
def test_casts(src, dst):
    x = (_r(16, 64) * 10).to(src)
    check_inference(lambda t: (t * 2).to(dst), [x], STRICT)
    _ran_on_nvfuser()


REDUCTIONS = {
    "sum_dims": lambda x: (x * 2).sum(dim=(0, 2)),
    "sum_keepdim": lambda x: (x * 2).sum(dim=-1, keepdim=True),
    "sum_all": lambda x: (x * 2).sum(),
    "sum_dtype": lambda x: (x * 2).sum(dim=1, dtype=torch.float64),
    "mean": lambda x: (x * 2).mean(dim=1),
    "mean_all": lambda x: (x * 2).mean(),
    "amax": lambda x: (x * 2).amax(dim=(1, 2)),
    "amin": lambda x: (x * 2).amin(dim=0, keepdim=True),
    "prod": lambda x: (x * 0.5 + 1).prod(dim=2),
    "var": lambda x: (x * 2).var(dim=2, correction=0),
    "var_mean": lambda x: torch.var_mean(x * 2, dim=(0, 1), keepdim=True),
    "std": lambda x: (x * 2).std(dim=1),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reductions(name, dtype):
    if name == "sum_dtype" and dtype == torch.bfloat16:
        pytest.skip("f64 accumulation is an f32 case")
    x = _r(8, 16, 40, dtype=dtype)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 5e-2}
    if name == "prod" and dtype == torch.bfloat16:
        # A product of 40 factors, each rounded to bf16 in eager but not inside the fusion.
        tol = {"rtol": 6e-2, "atol": 6e-2}
    check_inference(REDUCTIONS[name], [x], STRICT, **tol)
    _ran_on_nvfuser()


COMPOSITES = {
    "softmax": lambda x: torch.softmax(x * 2, dim=-1),
    "log_softmax": lambda x: torch.log_softmax(x * 2, dim=1),
    "layer_norm": lambda x: torch.nn.functional.layer_norm(x, (x.shape[-1],)) * 2,
    "rms_norm": lambda x: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6),
    "gelu": lambda x: torch.nn.functional.gelu(x) + 1,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh") + 1,
    "silu": lambda x: torch.nn.functional.silu(x) * 2,
}


@pytest.mark.parametrize("name", list(COMPOSITES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decomposed_composites(name, dtype):
    x = _r(16, 8, 64, dtype=dtype)
    check_inference(COMPOSITES[name], [x], STRICT)
    _ran_on_nvfuser()
    check_training(COMPOSITES[name], [x], STRICT)
    _ran_on_nvfuser()


FACTORIES_AND_SHAPES = {
    "full": lambda x: x + torch.full((4, 8), 2.5, device=DEV),
    "zeros": lambda x: x * 2 + torch.zeros(8, device=DEV),
    "ones": lambda x: x * 2 + torch.ones(4, 1, device=DEV),
    "scalar_tensor": lambda x: torch.where(x > 0, x * 2, torch.tensor(0.0, device=DEV)),
    "expand": lambda x: (x[:, :1] * 2).expand(4, 8) + x,
    "view": lambda x: (x * 2).view(8, 4).sum(0),
    "reshape_copy": lambda x: (x * 2).t().reshape(32) + 1,
    "permute": lambda x: (x * 2).permute(1, 0) * 3,
    "transpose": lambda x: (x * 2).transpose(0, 1) * 3,
    "squeeze": lambda x: (x.sum(1, keepdim=True) * 2).squeeze(1) + 1,
    "unsqueeze": lambda x: (x * 2).unsqueeze(1) * 3,
    "slice": lambda x: (x * 2)[1:3, 2:7] + 1,
    "slice_step_stays_eager": lambda x: (x * 2)[1:3, 2:7:2] + 1,
    "select": lambda x: (x * 2)[2] + 1,
    "cat": lambda x: torch.cat([x * 2, x + 1], dim=1) * 3,
    "pad": lambda x: torch.nn.functional.pad(x * 2, (1, 2, 0, 1), value=0.5) + 1,
    "clone": lambda x: (x * 2).clone() + 1,
    "split": lambda x: sum(t * 2 for t in (x + 1).split(4, dim=1)),
    "copy": lambda x: x.new_zeros(4, 8).copy_(x * 2) + 1,
    "full_like": lambda x: torch.ones_like(x) * 2 + torch.full_like(x, 3.5),
}


@pytest.mark.parametrize("name", list(FACTORIES_AND_SHAPES))
def test_factories_and_shape_ops(name):
    x = _r(4, 8)
    check_inference(FACTORIES_AND_SHAPES[name], [x], STRICT)
    _ran_on_nvfuser()


def test_class_token_of_a_layer_norm_runs_on_nvfuser():
    """A ViT's class-token pooling, LayerNorm then `x[:, 0]` read inside the region (a select left
    last would be trimmed to an alias): the select of a computed value is a unit slice and a squeeze
    (nvFuser rejected the SelectOp's vectorized read there, validation.cpp:1559;
    scripts/nvfuser_repros/select_after_norm_vectorized.py)."""
    norm = torch.nn.LayerNorm(384, eps=1e-6).to(DEV, torch.bfloat16)
    x, residual = _r(64, 197, 384, dtype=torch.bfloat16), _r(64, 197, 384, dtype=torch.bfloat16)
    with torch.no_grad():
        plans = check_inference(lambda a, b: norm(a + b)[:, 0] * 2, [x, residual], STRICT)
    assert any("aten.select.int" in ops and any("var_mean" in op for op in ops) for ops in region_ops(plans)), \
        region_ops(plans)
    _ran_on_nvfuser()


def test_matmul_left_to_aten_with_pointwise_fused():
    mlp = programs.MLPGelu(64, 128).to(DEV)
    x = _r(8, 64)
    plans = check_inference(mlp, [x], {"strict": True})
    ops = [op for region in region_ops(plans) for op in region]
    assert not any("mm" in op for op in ops), ops
    assert any("aten.erf.default" in op for op in ops), ops
    _ran_on_nvfuser()


# ------------------------------------------------------------------------------------------------
# Models, inference and training
# ------------------------------------------------------------------------------------------------

MODELS = {
    "mlp_gelu": lambda: (programs.MLPGelu(64, 256), (4, 16, 64)),
    "layernorm_block": lambda: (programs.LayerNormBlock(64), (4, 16, 64)),
    "softmax_attention": lambda: (programs.SoftmaxAttention(64, 4), (2, 16, 64)),
    "rmsnorm_mlp": lambda: (programs.RMSNormMLP(64), (4, 16, 64)),
    "transformer_block": lambda: (programs.TransformerBlock(64, 4), (2, 16, 64)),
}
#: softmax_attention keeps its explicit softmax chain here, to run that chain's regions on nvFuser;
#: its rewrite into SDPA (which leaves it no region) is tested in test_attention.py.
MODEL_OPTIONS = {"softmax_attention": {"fuse_attention": False}}


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_models_inference(name, dtype):
    model, shape = MODELS[name]()
    model = model.to(DEV, dtype)
    check_inference(model, [_r(*shape, dtype=dtype)], {"strict": True, **MODEL_OPTIONS.get(name, {})})
    _ran_on_nvfuser()


@pytest.mark.parametrize("name", list(MODELS))
def test_models_training(name):
    model, shape = MODELS[name]()
    model = model.to(DEV)
    plans = check_training(model, [_r(*shape)], {"strict": True, **MODEL_OPTIONS.get(name, {})},
                           params=list(model.parameters()))
    assert {p.kind for p in plans} >= {"forward", "backward"}
    _ran_on_nvfuser()


# ------------------------------------------------------------------------------------------------
# Seeds
# ------------------------------------------------------------------------------------------------


def test_seed000_gelu_one_kernel():
    x = _r(8192, 3072)
    plans = check_inference(programs.seed000_gelu, [x], {"strict": True})
    assert len(region_ops(plans)) == 1
    compiled = compile_fn(programs.seed000_gelu, {"strict": True})
    compiled(x)
    assert len(nvfuser_kernels(compiled, x)) == 1


def test_seed000_gelu_view_output_is_alias():
    x = _r(8192, 3072)
    compiled = compile_fn(programs.seed000_gelu_with_view_output, {"strict": True})
    out, view = compiled(x)
    assert view.data_ptr() == x.data_ptr() and view.stride() == x.view(64, 128, 3072).stride()
    assert_same((out, view), programs.seed000_gelu_with_view_output(x))
    assert len(nvfuser_kernels(compiled, x)) == 1


def test_seed000_transpose():
    x = _r(768, 128, 64)
    plans = check_inference(programs.seed000_transpose, [x], {"strict": True})
    assert len(region_ops(plans)) <= 1
    compiled = compile_fn(programs.seed000_transpose, {"strict": True})
    compiled(x)
    assert len(all_kernels(compiled, x)) == 1


def test_seed000_metadata_only_runs_no_kernel():
    x = _r(64, 32)
    compiled = compile_fn(programs.metadata_only)
    out = compiled(x)
    assert out.data_ptr() == x.data_ptr()
    assert all_kernels(compiled, x) == []
    assert STATS.nvfuser_calls == 0


def test_metadata_only_untrimmed_goes_to_nvfuser_and_matches():
    """bookend=False sends the views to nvFuser (the comparison perf/ makes); results still match."""
    x = _r(64, 32)
    plans = check_inference(programs.metadata_only, [x], {"bookend": False})
    assert len(region_ops(plans)) == 1
    _ran_on_nvfuser()


def test_seed001_bias_gelu_backward():
    args = [1.0, 2.0, 3.0, 4.0, _r(16, 512, 4096), _r(16, 512, 4096), _r(16, 512, 4096)]
    plans = check_inference(programs.seed001_bias_gelu_backward, args, {"strict": True}, rtol=1e-4, atol=1e-3)
    assert len(region_ops(plans)) == 1
    _ran_on_nvfuser()


# ------------------------------------------------------------------------------------------------
# Layout, fallback
# ------------------------------------------------------------------------------------------------


def test_output_strides_follow_eager_for_permuted_input():
    x = _r(32, 64).t()  # non-contiguous input
    check_inference(lambda t: (t * 2).clone() + 1, [x], STRICT)
    check_inference(lambda t: (t * 2).contiguous() + 1, [x], STRICT)
    _ran_on_nvfuser()


def test_lowering_error_falls_back_once(monkeypatch):
    from dynamo_nvf.ops import registry

    aten = torch.ops.aten
    original = registry.LOWERINGS[aten.erf.default]

    def broken(ctx, node):
        raise RuntimeError("arranged failure")

    monkeypatch.setitem(registry.LOWERINGS, aten.erf.default,
                        registry.Lowering(aten.erf.default, broken, original.check))
    compiled = compile_fn(programs.seed000_gelu)
    x = _r(256, 64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert_same(compiled(x), programs.seed000_gelu(x))
    ours = [w for w in caught if "dynamo_nvf" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert "nvf_region_0" in str(ours[0].message) and "arranged failure" in str(ours[0].message)
    assert STATS.fallbacks == 1 and STATS.nvfuser_calls == 0


def test_new_layout_reuses_nothing_wrong():
    fn = lambda t: torch.sigmoid(t * 2) + 1
    compiled = compile_fn(fn, STRICT)
    for x in (_r(16, 32), _r(32, 16).t(), _r(16, 1).expand(16, 32)):
        assert_same(compiled(x), fn(x))
    _ran_on_nvfuser()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_comparisons_round_like_eager(dtype):
    x = torch.tensor([0.1, 0.2, 0.3, 0.7], device=DEV, dtype=dtype)
    check_inference(lambda t: ((t * 1) == 0.1) | ((t * 1) == 0.7), [x], STRICT)
    check_inference(lambda t: torch.where(t * 2 > 0.2, 1.0, 0.0).to(dtype) + t, [x], STRICT)
    _ran_on_nvfuser()


def test_add_scalar_with_positional_alpha():
    x = _r(8, 8)
    check_inference(lambda t: torch.ops.aten.add.Scalar(t * 1, 2, 3) * 2, [x], STRICT)
    check_inference(lambda t: torch.ops.aten.sub.Scalar(t * 1, 2, 3) * 2, [x], STRICT)
    _ran_on_nvfuser()


def test_expand_minus_one_under_dynamic_shapes():
    def fn(x, y):
        return x.sin().expand(-1, y.shape[1]) * y

    compiled = compile_fn(fn, {"strict": True}, dynamic=True)
    for rows, cols in ((4, 8), (6, 16)):
        x, y = _r(rows, 1), _r(rows, cols)
        assert_same(compiled(x, y), fn(x, y))
    _ran_on_nvfuser()


def test_relu_training_fuses_its_backward_where():
    def f(x, w):
        return torch.relu(x @ w) * 2.0 + 1.0

    plans = check_training(f, [_r(64, 128), _r(128, 128)], STRICT)
    (backward,) = [p for p in plans if p.kind == "backward"]
    assert any("prims.where.default" in r.ops for r in backward.regions)
    _ran_on_nvfuser()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_is_drawn_inside_the_region(dtype):
    """native_dropout lowered with nvFuser's Philox: no ATen dropout kernel, the residual-norm block is
    one region, and the mask's rate, scaling and backward are dropout's."""
    p = 0.25
    norm = torch.nn.LayerNorm(256, device=DEV, dtype=dtype)

    def f(x, r):
        return norm(torch.nn.functional.dropout(x, p=p, training=True) + r)

    x = torch.ones(1024, 256, device=DEV, dtype=dtype, requires_grad=True)
    r = torch.zeros(1024, 256, device=DEV, dtype=dtype)
    compiled = compile_fn(f, STRICT)
    compiled(x, r)
    names = all_kernels(compiled, x, r)
    assert not [n for n in names if "dropout" in n.lower()], names
    _ran_on_nvfuser()

    def g(x):  # mask and scale seen directly
        return torch.nn.functional.dropout(x * 2.0, p=p, training=True) + 1.0

    compiled_g = compile_fn(g, STRICT)
    out = compiled_g(x)
    kept = out != 1.0
    scale = 2.0 / (1 - p)
    tol = {} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1.0 + scale), **tol)
    assert abs((1 - kept.float().mean().item()) - p) < 0.01
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(x.grad, (kept * scale).to(dtype), **tol)
    assert not torch.equal(compiled_g(x) != 1.0, kept), "a second call drew the same mask"
    torch.manual_seed(7)
    first = compiled_g(x) != 1.0
    torch.manual_seed(7)
    assert torch.equal(compiled_g(x) != 1.0, first), "torch.manual_seed no longer repeats the mask"


def test_fuse_dropout_false_draws_eager_masks():
    def g(x):
        return torch.nn.functional.dropout(x * 2.0, p=0.3, training=True) + 1.0

    compiled = compile_fn(g, {**STRICT, "fuse_dropout": False})
    x = _r(256, 256)
    compiled(x)
    torch.manual_seed(3)
    actual = compiled(x)
    torch.manual_seed(3)
    assert torch.equal(actual, g(x))


def test_bias_gradient_of_a_cast_expanded_loss_gradient():
    """`linear(x).float().sum()` in bf16: the backward casts the expanded loss gradient (dense in eager,
    still expanded in the fusion) and reshapes it for the bias gradient; nvFuser 0.2.36 asserted on
    that reshape (perf gpt_mlp_train_bf16 fell back) until the lowering read it through ones."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(128, 256, device=DEV, dtype=torch.bfloat16)
    x = _r(8, 64, 128, dtype=torch.bfloat16)
    check_training(lambda x: linear(x).float().sum(), [x], STRICT, params=list(linear.parameters()),
                   rtol=2e-2, atol=2e-1)
    _ran_on_nvfuser()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_view_that_inserts_size_one_dims_broadcasts(dtype):
    """A view of a value computed in the region that only inserts size-1 dims (GroupNorm's backward
    views its weight as [1, 1, C]) broadcasts against full dims, as an unsqueeze does: the region
    runs on nvFuser (strict) and matches eager."""
    def f(x, w):
        scale = (w * 2 + 1).view(1, 1, w.shape[0])
        return torch.relu(x * scale + x.sum(-1, keepdim=True))

    check_inference(f, [_r(4, 5, 8, dtype=dtype), _r(8, dtype=dtype)], STRICT)


def test_a_layer_norm_backward_of_a_transposed_input_runs_whole_on_nvfuser():
    """MLP-Mixer's token-mixing LayerNorm reads its input transposed in memory; nvFuser 0.2.36 fails
    to compile that backward ("Vectorized dim for producer has to be from an inner most position",
    scripts/nvfuser_repros/transposed_input_norm_backward.py). The region then runs on row-major
    copies of its transposed inputs (runtime/region.py: LAYOUT_ERRORS), not as pieces nor in eager:
    values as eager's, no fallback, no split."""
    batch, tokens, channels = 32, 196, 768

    def norm_of_transposed(x, weight, bias):
        return torch.nn.functional.layer_norm(x.transpose(1, 2), (channels,), weight, bias)

    inputs = [_r(batch, channels, tokens, dtype=torch.bfloat16), _r(channels, dtype=torch.bfloat16),
              _r(channels, dtype=torch.bfloat16)]
    STATS.reset()
    check_training(norm_of_transposed, inputs, {}, rtol=5e-2, atol=5e-2)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
