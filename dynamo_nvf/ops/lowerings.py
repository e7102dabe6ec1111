"""nvFuser lowerings of aten ops, registered by overload into `ops.registry.LOWERINGS`.

Each lowering maps one FX node onto `nvfuser_direct` ops. The fusion builder casts every result to the
dtype eager produced (node.meta["val"]), so lowerings only need to get the values right.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Iterable, Optional, Sequence

import torch
from torch.fx import Node

from dynamo_nvf.ops.dtypes import LOW_PRECISION_FLOATS
from dynamo_nvf.ops.metadata import ARANGES, arange_params
from dynamo_nvf.ops.registry import LOWERINGS, register_lowering

aten = torch.ops.aten
prims = torch.ops.prims

# --------------------------------------------------------------------------------------------------
# Helpers shared by lowerings and checks
# --------------------------------------------------------------------------------------------------


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, Node) else arg


def _rank(arg: Any) -> int:
    return _val(arg).dim()


def _norm_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _norm_dims(dims: Optional[Sequence[int]], rank: int) -> list[int]:
    """Reduction dims; None or [] means all dims, as in aten."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(_norm_dim(d, rank) for d in dims)


def _static(size: Any) -> bool:
    return isinstance(size, int) and not isinstance(size, bool)


def _arg(node: Node, index: int, name: str, default: Any = None) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _is_float_dtype(arg: Any) -> bool:
    v = _val(arg)
    if isinstance(v, torch.Tensor):
        return v.dtype.is_floating_point
    return isinstance(v, float)


# --------------------------------------------------------------------------------------------------
# Pointwise
# --------------------------------------------------------------------------------------------------

#: aten unary op -> (nvFuser op name, computes in floating point)
UNARY_OPS: dict[Any, tuple[str, bool]] = {
    aten.abs.default: ("abs", False),
    aten.acos.default: ("acos", True),
    aten.acosh.default: ("acosh", True),
    aten.asin.default: ("asin", True),
    aten.asinh.default: ("asinh", True),
    aten.atan.default: ("atan", True),
    aten.atanh.default: ("atanh", True),
    aten.ceil.default: ("ceil", False),
    aten.cos.default: ("cos", True),
    aten.cosh.default: ("cosh", True),
    aten.exp.default: ("exp", True),
    aten.exp2.default: ("exp2", True),
    aten.expm1.default: ("expm1", True),
    aten.erf.default: ("erf", True),
    aten.erfc.default: ("erfc", True),
    aten.erfinv.default: ("erfinv", True),
    aten.floor.default: ("floor", False),
    aten.frac.default: ("frac", False),
    aten.lgamma.default: ("lgamma", True),
    aten.log.default: ("log", True),
    aten.log10.default: ("log10", True),
    aten.log1p.default: ("log1p", True),
    aten.log2.default: ("log2", True),
    aten.neg.default: ("neg", False),
    aten.logical_not.default: ("logical_not", False),
    aten.bitwise_not.default: ("bitwise_not", False),
    aten.relu.default: ("relu", False),
    aten.reciprocal.default: ("reciprocal", True),
    aten.round.default: ("round", False),
    aten.rsqrt.default: ("rsqrt", True),
    aten.sign.default: ("sign", False),
    aten.sigmoid.default: ("sigmoid", True),
    aten.sin.default: ("sin", True),
    aten.sinh.default: ("sinh", True),
    aten.sqrt.default: ("sqrt", True),
    aten.tan.default: ("tan", True),
    aten.tanh.default: ("tanh", True),
    aten.trunc.default: ("trunc", False),
    aten.isfinite.default: ("isfinite", False),
    aten.isinf.default: ("isinf", False),
    aten.isnan.default: ("isnan", False),
    aten.silu.default: ("silu", True),
}

#: aten binary op -> nvFuser op name. Overloads taking a Python scalar share the lowering.
BINARY_OPS: dict[Any, str] = {
    aten.mul.Tensor: "mul",
    aten.mul.Scalar: "mul",
    aten.div.Tensor: "truediv",
    aten.div.Scalar: "truediv",
    aten.pow.Tensor_Tensor: "pow",
    aten.pow.Scalar: "pow",
    aten.remainder.Tensor: "remainder",
    aten.remainder.Scalar: "remainder",
    aten.fmod.Tensor: "fmod",
    aten.fmod.Scalar: "fmod",
    aten.atan2.default: "atan2",
    aten.maximum.default: "maximum",
    aten.minimum.default: "minimum",
    aten.logical_and.default: "logical_and",
    aten.logical_or.default: "logical_or",
    aten.bitwise_and.Tensor: "bitwise_and",
    aten.bitwise_and.Scalar: "bitwise_and",
    aten.bitwise_or.Tensor: "bitwise_or",
    aten.bitwise_or.Scalar: "bitwise_or",
    aten.bitwise_xor.Tensor: "bitwise_xor",
    aten.bitwise_xor.Scalar: "bitwise_xor",
}

#: Binary ops whose integer form would differ from aten's (aten promotes them to float).
_FLOAT_RESULT_BINARY = {"truediv", "atan2"}


#: Rounding ops that are the identity on integers in aten; nvFuser's take floating types only.
_INTEGER_IDENTITY = {"ceil", "floor", "round", "trunc"}


def _unary_lowering(name: str, floating: bool):
    def lower(ctx, node: Node) -> Any:
        x = ctx.value(node.args[0])
        if name in _INTEGER_IDENTITY and not _is_float_dtype(node.args[0]):
            return ctx.ops.set(x)  # a copy, as eager's (bool inputs are declined: eager raises)
        if floating and not _is_float_dtype(node.args[0]):
            x = ctx.cast(x, node.meta["val"].dtype)
        return getattr(ctx.ops, name)(x)

    return lower


def _binary_lowering(name: str):
    def lower(ctx, node: Node) -> Any:
        a, b = ctx.value(node.args[0]), ctx.value(node.args[1])
        return getattr(ctx.ops, name)(a, b)

    return lower


def _check_rounding(node: Node) -> Optional[str]:
    v = _val(node.args[0])
    if isinstance(v, torch.Tensor) and v.dtype == torch.bool:
        return "dtype: rounding a bool tensor (eager raises)"
    return None


for _target, (_name, _floating) in UNARY_OPS.items():
    register_lowering(_target, check=_check_rounding if _name in _INTEGER_IDENTITY else None)(
        _unary_lowering(_name, _floating))
for _target, _name in BINARY_OPS.items():
    register_lowering(_target)(_binary_lowering(_name))


@register_lowering(aten.pow.Tensor_Scalar)
def _pow_scalar(ctx, node: Node) -> Any:
    """Small integer and half exponents as ATen's CUDA kernel computes them (x*x rather than powf),
    which is both faster and bit-compatible with eager."""
    x, exponent = ctx.value(node.args[0]), node.args[1]
    floating = _is_float_dtype(node.args[0])
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and floating:
        if exponent == 2:
            return ctx.ops.mul(x, x)
        if exponent == 3:
            return ctx.ops.mul(ctx.ops.mul(x, x), x)
        if exponent == 0.5:
            return ctx.ops.sqrt(x)
        if exponent == -0.5:
            return ctx.ops.rsqrt(x)
        if exponent == -1:
            return ctx.ops.reciprocal(x)
        if exponent == -2:
            return ctx.ops.reciprocal(ctx.ops.mul(x, x))
    return ctx.ops.pow(x, ctx.value(exponent))


#: Comparisons: eager compares in the operands' common dtype, so bf16/f16 operands (and Python
#: scalars) are rounded to it first, while the fusion keeps such values in f32.
COMPARISON_OPS: dict[Any, str] = {
    aten.eq.Tensor: "eq", aten.eq.Scalar: "eq",
    aten.ne.Tensor: "ne", aten.ne.Scalar: "ne",
    aten.lt.Tensor: "lt", aten.lt.Scalar: "lt",
    aten.le.Tensor: "le", aten.le.Scalar: "le",
    aten.gt.Tensor: "gt", aten.gt.Scalar: "gt",
    aten.ge.Tensor: "ge", aten.ge.Scalar: "ge",
}


def _comparison_lowering(name: str):
    def lower(ctx, node: Node) -> Any:
        operands = node.args[:2]
        try:
            common = torch.result_type(*(_val(a) for a in operands))
        except Exception:  # symbolic scalars: no rounding to do
            common = None
        values = []
        for arg in operands:
            if common in LOW_PRECISION_FLOATS:
                if isinstance(arg, Node):
                    v = ctx.cast(ctx.cast(ctx.value(arg), common), torch.float32)
                else:
                    v = ctx.value(float(torch.tensor(arg, dtype=common)))
            else:
                v = ctx.value(arg)
            values.append(v)
        return getattr(ctx.ops, name)(*values)

    return lower


for _target, _name in COMPARISON_OPS.items():
    register_lowering(_target)(_comparison_lowering(_name))


def _alpha(ctx, node: Node, b: Any) -> Any:
    alpha = _arg(node, 2, "alpha", 1)  # positional in add.Scalar / sub.Scalar, keyword in .Tensor
    if alpha == 1:
        return b
    return ctx.ops.mul(b, ctx.value(alpha))


@register_lowering(aten.add.Tensor, aten.add.Scalar)
def _add(ctx, node: Node) -> Any:
    a, b = ctx.value(node.args[0]), ctx.value(node.args[1])
    return ctx.ops.add(a, _alpha(ctx, node, b))


@register_lowering(aten.sub.Tensor, aten.sub.Scalar)
def _sub(ctx, node: Node) -> Any:
    a, b = ctx.value(node.args[0]), ctx.value(node.args[1])
    return ctx.ops.sub(a, _alpha(ctx, node, b))


def _check_div_mode(node: Node) -> Optional[str]:
    mode = node.kwargs.get("rounding_mode")
    if mode == "floor":
        return "unsupported op: floor division rounds differently in nvFuser"
    return None


@register_lowering(aten.div.Tensor_mode, aten.div.Scalar_mode, check=_check_div_mode)
def _div_mode(ctx, node: Node) -> Any:
    a, b = ctx.value(node.args[0]), ctx.value(node.args[1])
    if node.kwargs.get("rounding_mode") is None:
        return ctx.ops.truediv(a, b)
    if node.meta["val"].dtype.is_floating_point:
        return ctx.ops.trunc(ctx.ops.truediv(a, b))
    return ctx.ops.div(a, b)  # integer division truncates, like C


@register_lowering(aten.where.self, prims.where.default)
def _where(ctx, node: Node) -> Any:
    return ctx.ops.where(*(ctx.value(a) for a in node.args[:3]))


@register_lowering(aten.clamp.default, aten.clamp.Tensor)
def _clamp(ctx, node: Node) -> Any:
    x = ctx.value(node.args[0])
    lo, hi = _arg(node, 1, "min"), _arg(node, 2, "max")
    if lo is not None:
        x = ctx.ops.maximum(x, ctx.value(lo))
    if hi is not None:
        x = ctx.ops.minimum(x, ctx.value(hi))
    return x


@register_lowering(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(ctx, node: Node) -> Any:
    return ctx.ops.maximum(ctx.value(node.args[0]), ctx.value(node.args[1]))


@register_lowering(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(ctx, node: Node) -> Any:
    return ctx.ops.minimum(ctx.value(node.args[0]), ctx.value(node.args[1]))


@register_lowering(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(ctx, node: Node) -> Any:
    return ctx.ops.lerp(*(ctx.value(a) for a in node.args[:3]))


# --------------------------------------------------------------------------------------------------
# Casts and copies
# --------------------------------------------------------------------------------------------------


def _check_to_copy(node: Node) -> Optional[str]:
    src, out = _val(node.args[0]), node.meta.get("val")
    if isinstance(src, torch.Tensor) and isinstance(out, torch.Tensor) and src.device != out.device:
        return f"device: _to_copy moves {src.device} -> {out.device}"
    if node.kwargs.get("layout") not in (None, torch.strided):
        return "unsupported op: _to_copy to a non-strided layout"
    return None


@register_lowering(aten._to_copy.default, check=_check_to_copy)
def _to_copy(ctx, node: Node) -> Any:
    return ctx.cast(ctx.value(node.args[0]), node.meta["val"].dtype)


@register_lowering(prims.convert_element_type.default)
def _convert_element_type(ctx, node: Node) -> Any:
    return ctx.cast(ctx.value(node.args[0]), node.args[1])


@register_lowering(aten.clone.default)
def _clone(ctx, node: Node) -> Any:
    # Layout is set where the value leaves the fusion (eager's strides), so a clone is a plain copy.
    return ctx.ops.set(ctx.value(node.args[0]))


def _check_copy(node: Node) -> Optional[str]:
    dst, src = _val(node.args[0]), _val(node.args[1])
    if isinstance(src, torch.Tensor) and tuple(src.shape) != tuple(dst.shape) and not all(
        _static(s) for s in dst.shape
    ):
        return "unsupported op: broadcasting copy_ under dynamic shapes"
    return None


@register_lowering(aten.copy.default, check=_check_copy)
def _copy(ctx, node: Node) -> Any:
    dst, src = _val(node.args[0]), node.args[1]
    value = ctx.value(src)
    if isinstance(src, Node) and tuple(_val(src).shape) != tuple(dst.shape):
        value = ctx.broadcast_to(value, _val(src), list(dst.shape))
    return ctx.cast(value, dst.dtype)


# --------------------------------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------------------------------


def _expanded(arg: Any) -> bool:
    """True for a tensor with a stride-0 dim of size > 1 (an `expand` result)."""
    v = _val(arg)
    return isinstance(v, torch.Tensor) and any(
        _static(st) and st == 0 and not (_static(sz) and sz == 1) for sz, st in zip(v.shape, v.stride())
    )


# nvFuser 0.2.36 returned a [1]-shaped bias gradient where a reshape and a sum read an expanded
# tensor (perf gpt_mlp_train_f32 with bookend=False, H200): the extent of an expanded broadcast dim
# was lost through the reduction. A reshape of such a tensor stays in eager; a reduction of one reads
# it through a product with dense ones (`_reduction_input`), which gives every dim a concrete extent.
# Keeping those reductions in eager cost LayerNorm's backward an extra kernel (its bias gradient is a
# sum of the expanded output gradient).
def _check_reduction(node: Node) -> Optional[str]:
    x = node.args[0]
    if _rank(x) == 0:
        return "unsupported op: reduction of a 0-dim tensor"
    if _expanded(x):
        v = _val(x)
        if not v.dtype.is_floating_point:
            return "unsupported op: reduction of an expanded (stride-0) non-float tensor"
        if not all(_static(s) for s in v.shape):
            return "unsupported op: reduction of an expanded (stride-0) tensor of symbolic size"
    return None


def _reduction_input(ctx, x: Node) -> Any:
    """The value a reduction reads: an expanded input goes through `x * ones` (see _check_reduction);
    multiplying by one is exact, and eager's reduction reads the same values."""
    xv = ctx.value(x)
    return ctx.times_ones(xv, _val(x)) if _expanded(x) or ctx.is_expanded(xv) else xv


def _reduction_dtype(ctx, node: Node, index: int) -> Any:
    dtype = _arg(node, index, "dtype")
    return ctx.dtype(dtype) if dtype is not None else ctx.nvf.DataType.Null


# Rows first, when a region also reduces rows. A training block's loss, `norm(x).sum()`, reduces every
# dim of a tensor whose rows the norm reduced already (var_mean, amax, sum over the last dim). nvFuser
# 0.2.36 segments the full reduction off the norm's persistent kernel and recomputes the norm in a
# reduction kernel of its own: LayerNorm f32 8192x4096 took 48 + 144 us where inductor took 78 + 2
# (H100, scripts/block_kernels.py). Summing rows first (the same last-dim reduction the norm does, so
# the persistent kernel keeps it) and then the row sums (a tiny second kernel) is what inductor does;
# the order of a float sum changes only its rounding, and low-precision inputs accumulate in f32.
#: Reductions whose second argument (`dim`) names the dims they reduce. passes/split_reductions.py
#: reads the same list.
DIM_REDUCTIONS = frozenset({aten.sum.dim_IntList, aten.amax.default, aten.amin.default, aten.mean.dim,
                            aten.var_mean.correction, aten.var.correction})


def is_reduction(node: Node) -> bool:
    """A reduction over dims (DIM_REDUCTIONS) or a full `sum`."""
    return node.op == "call_function" and (node.target in DIM_REDUCTIONS or node.target is aten.sum.default)


def draws_random_numbers(node: Node) -> bool:
    """An op that draws random numbers (dropout): computing it twice gives other values."""
    return node.op == "call_function" and torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())


def is_pointwise(node: Node) -> bool:
    """An elementwise op (torch's `pointwise` tag) that has an nvFuser lowering."""
    return node.op == "call_function" and node.target in LOWERINGS and \
        torch.Tag.pointwise in getattr(node.target, "tags", ())


def reduced_dims(node: Node) -> list[int]:
    """The dims a `DIM_REDUCTIONS` node reduces, normalized (None or [] is every dim, as in aten)."""
    return _norm_dims(_arg(node, 1, "dim"), _rank(node.args[0]))


def keeps_reduced_dims(node: Node) -> bool:
    """Whether a reduction keeps its reduced dims as size 1 (`keepdim`); a full `sum` never does."""
    return node.target is not aten.sum.default and bool(_arg(node, 2, "keepdim", False))


def reduces_last_dim_of(nodes: Iterable[Node], shape: tuple) -> bool:
    """True when one of `nodes` reduces the last dim of a tensor shaped `shape` (a norm's rows)."""
    for other in nodes:
        if other.op != "call_function" or other.target not in DIM_REDUCTIONS:
            continue
        src = other.args[0]
        val = _val(src) if isinstance(src, Node) else None
        if val is not None and tuple(val.shape) == shape and reduced_dims(other) == [len(shape) - 1]:
            return True
    return False


def _rows_reduced_in_region(node: Node, x: Any) -> bool:
    """True when another node of `node`'s region reduces the last dim of a tensor shaped like `x`."""
    return reduces_last_dim_of((n for n in node.graph.nodes if n is not node), tuple(_val(x).shape))


def _sum(ctx, node: Node, xv: Any, dims: list[int], keepdim: bool, acc: Any) -> Any:
    """`sum(xv, dims)`, taken as rows first then the rest where `_rows_reduced_in_region` says so."""
    x = node.args[0]
    rank = _rank(x)
    if rank < 2 or dims != list(range(rank)) or not _rows_reduced_in_region(node, x):
        return ctx.ops.sum(xv, dims, keepdim, acc)
    low_precision = _val(x).dtype if acc == ctx.nvf.DataType.Null and _val(x).dtype in LOW_PRECISION_FLOATS else None
    if low_precision is not None:
        acc = ctx.nvf.DataType.Float  # the row sums must not round to bf16/f16 before the second sum
    rows = ctx.ops.sum(xv, [rank - 1], keepdim, acc)
    total = ctx.ops.sum(rows, list(range(rank - 1)), keepdim, ctx.nvf.DataType.Null)
    return total if low_precision is None else ctx.cast(total, low_precision)


#: `reduce(ctx, node, x_value, dims, keepdim, dtype)`: how a reduction lowering reduces (`_sum`, or
#: the nvFuser op of that name through `_nvf_reduction`).
Reducer = Callable[[Any, Node, Any, list[int], bool, Any], Any]


def _nvf_reduction(name: str) -> Reducer:
    def reduce(ctx, node: Node, xv: Any, dims: list[int], keepdim: bool, dtype: Any) -> Any:
        return getattr(ctx.ops, name)(xv, dims, keepdim, dtype)

    return reduce


def _reduce_dims_lowering(reduce: Reducer, single_dim: bool = False, dtype_index: Optional[int] = 3):
    """`op(x, dim(s), keepdim[, dtype])` overloads: sum.dim_IntList, prod.dim_int, amax, amin."""

    def lower(ctx, node: Node) -> Any:
        x = node.args[0]
        dim = _arg(node, 1, "dim")
        dims = _norm_dims([dim] if single_dim else dim, _rank(x))
        keepdim = keeps_reduced_dims(node)
        dtype = _reduction_dtype(ctx, node, dtype_index) if dtype_index else ctx.nvf.DataType.Null
        return reduce(ctx, node, _reduction_input(ctx, x), dims, keepdim, dtype)

    return lower


def _reduce_all_lowering(reduce: Reducer):
    """`op(x, dtype=None)` overloads reducing every dim: sum.default, prod.default."""

    def lower(ctx, node: Node) -> Any:
        x = node.args[0]
        return reduce(ctx, node, _reduction_input(ctx, x), list(range(_rank(x))), False, _reduction_dtype(ctx, node, 1))

    return lower


register_lowering(aten.sum.dim_IntList, check=_check_reduction)(_reduce_dims_lowering(_sum))
register_lowering(aten.sum.default, check=_check_reduction)(_reduce_all_lowering(_sum))
register_lowering(aten.prod.dim_int, check=_check_reduction)(_reduce_dims_lowering(_nvf_reduction("prod"), single_dim=True))
register_lowering(aten.prod.default, check=_check_reduction)(_reduce_all_lowering(_nvf_reduction("prod")))
register_lowering(aten.amax.default, check=_check_reduction)(_reduce_dims_lowering(_nvf_reduction("max"), dtype_index=None))
register_lowering(aten.amin.default, check=_check_reduction)(_reduce_dims_lowering(_nvf_reduction("min"), dtype_index=None))


def _truth_reduction_lowering(reducer: str, dims_index: Optional[int]):
    """`any` (reducer "max") and `all` ("min") over the truth of `x` (nonzero, NaN included, as in
    ATen): reduced as int32 0/1 and compared with 0, so no reduction of nvFuser's Bool is needed.
    `dims_index` is where the overload takes its dim(s); None reduces every dim."""

    def lower(ctx, node: Node) -> Any:
        x = node.args[0]
        rank = _rank(x)
        dim = None if dims_index is None else _arg(node, dims_index, "dim")
        dims = _norm_dims([dim] if isinstance(dim, int) else dim, rank)
        keepdim = dims_index is not None and bool(_arg(node, dims_index + 1, "keepdim", False))
        xv = _reduction_input(ctx, x)
        truth = xv if _val(x).dtype == torch.bool else ctx.ops.ne(xv, ctx.constant(0, _val(x).dtype))
        reduced = getattr(ctx.ops, reducer)(ctx.cast(truth, torch.int32), dims, keepdim, ctx.nvf.DataType.Null)
        return ctx.ops.ne(reduced, ctx.value(0))

    return lower


for _reducer, _packet in (("max", aten.any), ("min", aten.all)):
    register_lowering(_packet.default, check=_check_reduction)(_truth_reduction_lowering(_reducer, None))
    register_lowering(_packet.dim, _packet.dims, check=_check_reduction)(_truth_reduction_lowering(_reducer, 1))


def _mean(ctx, node: Node, dims: list[int], keepdim: bool) -> Any:
    x = node.args[0]
    xv = _reduction_input(ctx, x)
    acc = ctx.nvf.DataType.Float if _val(x).dtype in LOW_PRECISION_FLOATS else ctx.nvf.DataType.Null
    total = _sum(ctx, node, xv, dims, keepdim, acc)
    count = None
    for d in dims:
        size = ctx.ops.size(xv, d)
        count = size if count is None else ctx.ops.mul(count, size)
    return ctx.ops.truediv(total, count)


@register_lowering(aten.mean.dim, check=_check_reduction)
def _mean_dims(ctx, node: Node) -> Any:
    dims = _norm_dims(_arg(node, 1, "dim"), _rank(node.args[0]))
    return _mean(ctx, node, dims, keeps_reduced_dims(node))


@register_lowering(aten.mean.default, check=_check_reduction)
def _mean_all(ctx, node: Node) -> Any:
    return _mean(ctx, node, list(range(_rank(node.args[0]))), False)


def _correction(node: Node) -> int:
    correction = node.kwargs.get("correction")
    return 1 if correction is None else int(correction)


def _check_var(node: Node) -> Optional[str]:
    reason = _check_reduction(node)
    if reason:
        return reason
    correction = node.kwargs.get("correction")
    if correction is not None and float(correction) != int(correction):
        return "unsupported op: non-integer variance correction"
    if correction is not None and correction < 0:
        return "unsupported op: negative variance correction (nvFuser takes correction >= 0)"
    if not _val(node.args[0]).dtype.is_floating_point:
        return "dtype: variance of a non-floating tensor"
    return None


def _var_input(ctx, node: Node) -> Any:
    x = _reduction_input(ctx, node.args[0])
    if _val(node.args[0]).dtype in LOW_PRECISION_FLOATS:
        x = ctx.cast(x, torch.float32)
    return x


@register_lowering(aten.var.correction, check=_check_var)
def _var(ctx, node: Node) -> Any:
    dims = _norm_dims(_arg(node, 1, "dim"), _rank(node.args[0]))
    keepdim = bool(node.kwargs.get("keepdim", False))
    return ctx.ops.var(_var_input(ctx, node), dims, _correction(node), keepdim)


@register_lowering(aten.var_mean.correction, check=_check_var)
def _var_mean(ctx, node: Node) -> Any:
    """nvFuser's Welford `var_mean`. Two sums instead (the mean, then squared deviations, as inductor's
    persistent Triton kernels compute a LayerNorm) measured no faster: BERT/GPT LayerNorm forwards at
    [256, 768] bf16 on an H100 (scripts/region_scoreboard.py, 2026-11-24) took 2.28-2.96 us against
    Welford's 2.35-3.04, where inductor took 1.7-2.6; the gap is elsewhere (the weight and bias are
    loaded only after the row's reduction, a second dependent memory latency)."""
    dims = _norm_dims(_arg(node, 1, "dim"), _rank(node.args[0]))
    keepdim = bool(node.kwargs.get("keepdim", False))
    var, mean = ctx.ops.var_mean(_var_input(ctx, node), dims, _correction(node), keepdim)
    return (var, mean)


@register_lowering(operator.getitem)
def _getitem(ctx, node: Node) -> Any:
    return ctx.values[node.args[0]][node.args[1]]


# --------------------------------------------------------------------------------------------------
# Factories
# --------------------------------------------------------------------------------------------------


def _full_like_lowering(fill: Any):
    def lower(ctx, node: Node) -> Any:
        value = node.args[1] if fill is None else fill
        dtype = node.meta["val"].dtype
        return ctx.ops.full(ctx.shape(node.args[0]), ctx.constant(value, dtype), ctx.dtype(dtype))

    return lower


def _check_new_empty(node: Node) -> Optional[str]:
    if not node.users or any(u.target is not aten.bernoulli.p for u in node.users):
        return ("unsupported op: new_empty other than a bernoulli's draw: an allocation, no kernel "
                "(in a region it would write zeros)")
    return None


@register_lowering(aten.new_empty.default, check=_check_new_empty)
def _new_empty(ctx, node: Node) -> Any:
    """Uninitialized memory, whose values no program may read before writing them: zeros in the
    fusion. timm's drop path draws its mask into one (`x.new_empty(shape).bernoulli_(keep)`)."""
    dtype = node.meta["val"].dtype
    return ctx.ops.full(ctx.shape(node.args[1]), ctx.constant(0, dtype), ctx.dtype(dtype))


register_lowering(aten.full.default)(_full_like_lowering(None))
register_lowering(aten.zeros.default)(_full_like_lowering(0))
register_lowering(aten.ones.default)(_full_like_lowering(1))


@register_lowering(aten.full_like.default)
def _full_like(ctx, node: Node) -> Any:
    """ones_like / zeros_like / fill decompose to this (sizes: nvFuser's extents where symbolic)."""
    dtype = node.meta["val"].dtype
    src = _val(node.args[0])
    sizes = _extents(ctx, ctx.value(node.args[0]), src)
    return ctx.ops.full(sizes, ctx.constant(node.args[1], dtype), ctx.dtype(dtype))


def _check_arange(node: Node) -> Optional[str]:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype not in (torch.int32, torch.int64):
        return "unsupported op: arange of a floating dtype (its rounding is ATen's own)"
    start, end, step = arange_params(node)
    if not _static(val.shape[0]):
        # a dynamic-shape graph's positions, arange(s0): the length is the region's integer input
        if (isinstance(end, Node) and isinstance(end.meta.get("val"), torch.SymInt)
                and isinstance(start, int) and step == 1):
            return None
        return "unsupported op: arange with a symbolic length (other than arange(start, n) of an integer input)"
    if not all(_static(a) for a in (start, end, step)):
        return "unsupported op: arange with a symbolic start or step"
    return None


@register_lowering(*ARANGES, check=_check_arange)
def _arange(ctx, node: Node) -> Any:
    """Integer arange as nvFuser's iota, computed in the kernel.

    As a region input, the [1, V] int64 column index of cross-entropy's backward (``arange(V) ==
    target``) is the widest vectorizable tensor, and nvFuser's pointwise scheduler sizes its vector
    width by the widest one: 2 elements, so the bf16 logits moved 4 bytes at a time (H100,
    LLaMA-style 4096 x 8192: 81.6 us against inductor's 50.2, which computes the index in-kernel).
    """
    val = node.meta["val"]
    start, end, step = arange_params(node)
    if _static(val.shape[0]):
        length = ctx.value(int(val.shape[0]))
    else:  # arange(start, n), n an integer input of the region (_check_arange): n - start values
        length = ctx.value(end) if start == 0 else ctx.ops.sub(ctx.value(end), ctx.value(int(start)))
    return ctx.ops.iota(length, ctx.value(int(start)), ctx.value(int(step)), ctx.dtype(val.dtype))


@register_lowering(aten.scalar_tensor.default)
def _scalar_tensor(ctx, node: Node) -> Any:
    dtype = node.meta["val"].dtype
    return ctx.ops.full([], ctx.constant(node.args[0], dtype), ctx.dtype(dtype))


# --------------------------------------------------------------------------------------------------
# Shape ops (metadata inside a region) and data movement
# --------------------------------------------------------------------------------------------------


def _check_reshape(node: Node) -> Optional[str]:
    if _expanded(node.args[0]):
        return "unsupported op: reshape of an expanded (stride-0) tensor"
    shape = node.args[1]
    if any(isinstance(s, torch.SymInt) for s in shape):
        return "unsupported op: reshape to a symbolic size that is not a graph value"
    return None


def _inserted_ones(src: Any, target: Any) -> Optional[tuple[list[int], list[bool]]]:
    """Where a view from `src` sizes to `target` sizes makes static size-1 dims (all sizes static, none
    of them 1 in `src`): the target sizes without them, and per target dim whether it is one; else None."""
    src, target = list(src), list(target)
    if not all(_static(v) for v in (*src, *target)) or any(s == 1 for s in src) or 1 not in target:
        return None
    return [int(t) for t in target if t != 1], [t == 1 for t in target]


def _reshaped(ctx, value: Any, src: torch.Tensor, shape: Sequence[Any]) -> Any:
    if ctx.is_expanded(value) and all(_static(s) for s in src.shape):
        # Dense in eager (a cast of an expand) but expanded in the fusion: nvFuser 0.2.36 lost the
        # extents of such a reshape (an internal assert binding 1024 as 1, perf gpt_mlp_train_bf16's
        # bias gradient, H100). Read it through ones, as the reductions of expanded tensors do.
        value = ctx.times_ones(value, src)
    return ctx.ops.reshape(value, ctx.shape(shape))


def _product(ctx, factors: Sequence[Any]) -> Any:
    """The product of ints and nvFuser integer scalars: an int where every factor is one."""
    constant, scalar = 1, None
    for f in factors:
        if isinstance(f, int):
            constant *= f
        else:
            scalar = f if scalar is None else ctx.ops.mul(scalar, f)
    if scalar is None:
        return constant
    return scalar if constant == 1 else ctx.ops.mul(scalar, ctx.value(constant))


@register_lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default, check=_check_reshape)
def _reshape(ctx, node: Node) -> Any:
    shape = node.args[1]
    value, src = ctx.value(node.args[0]), _val(node.args[0])
    if any(isinstance(s, int) and s == -1 for s in shape):
        if all(_static(s) for s in node.meta["val"].shape):
            shape = [int(s) for s in node.meta["val"].shape]
        else:  # dynamic shapes: the inferred dim is the input's elements over the other dims'
            numel = _product(ctx, _extents(ctx, value, src))
            known = _product(ctx, [ctx.values[s] if isinstance(s, Node) else int(s)
                                   for s in shape if not (isinstance(s, int) and s == -1)])
            if isinstance(numel, int) and isinstance(known, int):
                inferred = numel // known
            else:
                inferred = ctx.ops.div(*(ctx.value(v) if isinstance(v, int) else v for v in (numel, known)))
            shape = [inferred if isinstance(s, int) and s == -1 else s for s in shape]
    ones = _inserted_ones(src.shape, shape)
    if ones is not None and not any(u.target in DIM_REDUCTIONS for u in node.users):
        # The size-1 dims a view makes are made by a broadcast: the size-1 dims nvFuser's reshape
        # makes do not broadcast, and a binary op of one against a full dim failed to compile
        # ("Expected sizes to match: 1 vs 64": a GroupNorm backward's weight viewed as [1, 1, C],
        # PoolFormer training, H100, 2026-11-26; "1 vs 8": [1, G, C/G], GroupNorm(32) training).
        core, inserted = ones
        if core != [int(s) for s in src.shape]:
            value = _reshaped(ctx, value, src, core)
        return ctx.ops.broadcast(value, inserted)
    return _reshaped(ctx, value, src, shape)


@register_lowering(aten.permute.default)
def _permute(ctx, node: Node) -> Any:
    """An identity permute is its input: nvFuser's own (a no-op) beside an output pinned row-major and
    another written channels-last gave wrong values (scripts/nvfuser_repros/row_major_pin_beside_channels_last_output.py)."""
    rank = _rank(node.args[0])
    dims = [_norm_dim(d, rank) for d in node.args[1]]
    if dims == list(range(rank)):
        return ctx.value(node.args[0])
    return ctx.ops.permute(ctx.value(node.args[0]), dims)


@register_lowering(aten.transpose.int)
def _transpose(ctx, node: Node) -> Any:
    rank = _rank(node.args[0])
    if rank < 2:
        return ctx.value(node.args[0])
    d0, d1 = _norm_dim(node.args[1], rank), _norm_dim(node.args[2], rank)
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ctx.ops.permute(ctx.value(node.args[0]), perm)


@register_lowering(aten.t.default)
def _t(ctx, node: Node) -> Any:
    if _rank(node.args[0]) < 2:
        return ctx.value(node.args[0])
    return ctx.ops.permute(ctx.value(node.args[0]), [1, 0])


def _squeeze(ctx, node: Node, dims: list[int]) -> Any:
    x = node.args[0]
    shape = _val(x).shape
    ones = [d for d in dims if _static(shape[d]) and shape[d] == 1]
    if not ones:
        return ctx.value(x)
    return ctx.ops.squeeze(ctx.value(x), ones)


@register_lowering(aten.squeeze.default)
def _squeeze_all(ctx, node: Node) -> Any:
    return _squeeze(ctx, node, list(range(_rank(node.args[0]))))


@register_lowering(aten.squeeze.dim)
def _squeeze_dim(ctx, node: Node) -> Any:
    rank = _rank(node.args[0])
    return _squeeze(ctx, node, [_norm_dim(node.args[1], max(rank, 1))] if rank else [])


@register_lowering(aten.squeeze.dims)
def _squeeze_dims(ctx, node: Node) -> Any:
    rank = _rank(node.args[0])
    return _squeeze(ctx, node, [_norm_dim(d, max(rank, 1)) for d in node.args[1]] if rank else [])


@register_lowering(aten.unsqueeze.default)
def _unsqueeze(ctx, node: Node) -> Any:
    rank = _rank(node.args[0]) + 1
    dim = _norm_dim(node.args[1], rank)
    return ctx.ops.broadcast(ctx.value(node.args[0]), [d == dim for d in range(rank)])


@register_lowering(aten.expand.default)
def _expand(ctx, node: Node) -> Any:
    src = _val(node.args[0])
    value = ctx.value(node.args[0])
    out_shape = list(node.args[1])
    offset = len(out_shape) - src.dim()
    for i, s in enumerate(out_shape):
        if isinstance(s, int) and s == -1:
            size = src.shape[i - offset]
            out_shape[i] = size if _static(size) else ctx.ops.size(value, i - offset)
    return ctx.broadcast_to(value, src, out_shape)


#: Ops whose lowerings are nvFuser's resize ops (slice, pad, cat).
RESIZE_OPS = frozenset({aten.slice.Tensor, aten.constant_pad_nd.default, aten.cat.default, aten.split.Tensor,
                        aten.split_with_sizes.default})


def lowers_to_resize(node: Node) -> bool:
    """Whether a region's node lowers to nvFuser's resize ops: the RESIZE_OPS, and a select at a
    static index of a value the region computes (a unit slice and a squeeze, `_select`)."""
    if node.op != "call_function":
        return False
    if node.target in RESIZE_OPS:
        return True
    return (node.target is aten.select.int and isinstance(node.args[0], Node)
            and node.args[0].op != "placeholder" and _static(node.args[2]))


def _extents(ctx, value: Any, src: torch.Tensor) -> list[Any]:
    """`src`'s sizes for a resize op's bounds: ints, or nvFuser's extents of `value` where symbolic."""
    return [int(s) if _static(s) else ctx.ops.size(value, d) for d, s in enumerate(src.shape)]


def _whole_slice(node: Node) -> bool:
    """A slice that keeps every element (`mask[..., :s0]` of a dim of size s0): an alias."""
    src, out = _val(node.args[0]), _val(node)
    dim = _norm_dim(_arg(node, 1, "dim", 0), src.dim())
    start, step = _arg(node, 2, "start"), _arg(node, 4, "step", 1)
    if start not in (None, 0) or step not in (None, 1):
        return False
    a, b = src.shape[dim], out.shape[dim]
    if _static(a) or _static(b):  # static slices keep nvFuser's slice (as before dynamic shapes took them)
        return False
    return a.node.expr == b.node.expr


def _check_slice(node: Node) -> Optional[str]:
    src = _val(node.args[0])
    dim = _norm_dim(_arg(node, 1, "dim", 0), src.dim())
    if _whole_slice(node):
        return None
    if not _static(src.shape[dim]):
        return "unsupported op: slice along a dim of dynamic size"
    for bound in (_arg(node, 2, "start"), _arg(node, 3, "end"), _arg(node, 4, "step", 1)):
        if bound is not None and not _static(bound):
            return "unsupported op: slice with symbolic bounds"
    if (_arg(node, 4, "step", 1) or 1) != 1:
        return "unsupported op: nvFuser slices only with step 1"
    size = int(src.shape[dim])
    if size != 1 and int(_val(node).shape[dim]) == 1 and _feeds_broadcast(node, dim):
        # nvFuser keeps the slice's extent-1 dim an iteration dim, and a binary op against the full
        # extent fails to compile ("No potential concrete_id's"); select + broadcast fails too
        # (scripts/nvfuser_repros/size_one_slice_broadcast.py). As a view in PyTorch it costs nothing,
        # and the next region takes it as a broadcast input.
        return "nvFuser: a one-element slice that a later op broadcasts does not compile; it runs as a view"
    return None


@register_lowering(aten.slice.Tensor, check=_check_slice)
def _slice(ctx, node: Node) -> Any:
    if _whole_slice(node):
        return ctx.value(node.args[0])
    src = _val(node.args[0])
    rank = src.dim()
    dim = _norm_dim(_arg(node, 1, "dim", 0), rank)
    size = int(src.shape[dim])
    start, end = _arg(node, 2, "start"), _arg(node, 3, "end")
    step = _arg(node, 4, "step", 1) or 1
    start = 0 if start is None else (start + size if start < 0 else start)
    end = size if end is None else (end + size if end < 0 else end)
    start, end = min(max(start, 0), size), min(max(end, 0), size)
    end = max(end, start)
    x = ctx.value(node.args[0])
    starts = [0] * rank
    ends = _extents(ctx, x, src)
    steps = [1] * rank
    starts[dim], ends[dim], steps[dim] = start, end, step
    return ctx.ops.slice(x, starts, ends, steps)


_RESIZE_USERS = (aten.cat.default, aten.constant_pad_nd.default, aten.slice_scatter.default)


def _feeds_broadcast(node: Node, dim: int, depth: int = 8) -> bool:
    """True when a value computed from `node` (elementwise, keeping the extent-1 `dim`, up to
    `depth` ops on) meets an op whose output is larger there: aten broadcasts the sliced element.
    False when a cat or pad takes it (they need the iteration dim)."""
    rank = _val(node).dim()
    frontier = [node]
    for _ in range(depth):
        nxt = []
        for cur in frontier:
            for user in cur.users:
                if user.target in _RESIZE_USERS:
                    return False
                out = user.meta.get("val")
                if not isinstance(out, torch.Tensor) or out.dim() < rank:
                    continue
                size = out.shape[out.dim() - rank + dim]
                if not _static(size) or int(size) != 1:
                    return True
                nxt.append(user)
        if not nxt:
            return False
        frontier = nxt
    return False


def _check_static_dim(node: Node, dim_index: int = 1) -> Optional[str]:
    src = _val(node.args[0])
    if src.dim() == 0:
        return "unsupported op: indexing a 0-dim tensor"
    dim = _norm_dim(_arg(node, dim_index, "dim", 0), src.dim())
    if not _static(src.shape[dim]):
        return "unsupported op: indexing a dynamic dim"
    return None


@register_lowering(aten.select.int, check=_check_static_dim)
def _select(ctx, node: Node) -> Any:
    src = _val(node.args[0])
    dim = _norm_dim(node.args[1], src.dim())
    index = node.args[2]
    if _static(index) and index < 0:
        index += int(src.shape[dim])
    x = ctx.value(node.args[0])
    if lowers_to_resize(node):
        # Of a computed value, a unit slice and a squeeze: nvFuser's vectorization check rejects a
        # SelectOp there (validation.cpp:1559; scripts/nvfuser_repros/select_after_norm_vectorized.py).
        starts, ends = [0] * src.dim(), _extents(ctx, x, src)
        starts[dim], ends[dim] = index, index + 1
        return ctx.ops.squeeze(ctx.ops.slice(x, starts, ends, [1] * src.dim()), [dim])
    return ctx.ops.select(x, ctx.index(index), dim)


@register_lowering(aten.unbind.int, check=_check_static_dim)
def _unbind(ctx, node: Node) -> Any:
    src = _val(node.args[0])
    dim = _norm_dim(_arg(node, 1, "dim", 0), src.dim())
    x = ctx.value(node.args[0])
    return tuple(ctx.ops.select(x, ctx.index(i), dim) for i in range(int(src.shape[dim])))


def _check_split(node: Node) -> Optional[str]:
    reason = _check_static_dim(node, dim_index=2)
    if reason:
        return reason
    if not all(_static(piece.shape[_norm_dim(_arg(node, 2, "dim", 0), piece.dim())]) for piece in node.meta["val"]):
        return "unsupported op: split into pieces of dynamic size"
    return None


@register_lowering(aten.split.Tensor, aten.split_with_sizes.default, check=_check_split)
def _split(ctx, node: Node) -> Any:
    src = _val(node.args[0])
    rank = src.dim()
    dim = _norm_dim(_arg(node, 2, "dim", 0), rank)
    x = ctx.value(node.args[0])
    pieces = []
    start = 0
    for piece in node.meta["val"]:
        length = int(piece.shape[dim])
        starts, ends = [0] * rank, _extents(ctx, x, src)
        starts[dim], ends[dim] = start, start + length
        pieces.append(ctx.ops.slice(x, starts, ends, [1] * rank))
        start += length
    return tuple(pieces)


@register_lowering(aten.alias.default, aten.detach.default)
def _alias(ctx, node: Node) -> Any:
    return ctx.value(node.args[0])


def _check_cat(node: Node) -> Optional[str]:
    for t in node.args[0]:
        v = _val(t)
        if not isinstance(v, torch.Tensor) or any(_static(s) and s == 0 for s in v.shape):
            return "unsupported op: cat of an empty tensor"
    return None


def _check_embedding(node: Node) -> Optional[str]:
    weight, indices = _val(node.args[0]), _val(node.args[1])
    if weight.dim() != 2 or indices.dtype not in (torch.int64, torch.int32):
        return "unsupported op: embedding needs a 2-D weight and int32/int64 indices"
    if not all(_static(s) for s in weight.shape):
        return "unsupported op: embedding of a table of symbolic size"
    return None


def _check_gather(node: Node) -> Optional[str]:
    src, index = _val(node.args[0]), _val(node.args[2])
    dim = _norm_dim(node.args[1], max(src.dim(), 1))
    if _arg(node, 3, "sparse_grad", False):
        return "unsupported op: gather with sparse gradients"
    if src.dim() == 0 or index.dim() != src.dim():
        return "unsupported op: gather of a 0-d tensor, or by an index of another rank"
    if index.dtype not in (torch.int64, torch.int32):
        return "unsupported op: gather needs int32/int64 indices"
    if _expanded(node.args[2]):
        # a source expanded in eager is a broadcast in the fusion, which take_along_axis reads; an
        # expanded index is kept out as the index lowerings keep theirs
        return "unsupported op: gather by an expanded (stride-0) index"
    if any(not (_static(i) and _static(s) and i == s) for d, (i, s) in enumerate(zip(index.shape, src.shape)) if d != dim):
        # nvFuser 0.2.36 generates no code for such a gather (NVIDIA/Fuser#5907): every scheduler
        # but the expression evaluator rejects it, which runs ATen's gather between kernels
        return "unsupported op: gather by an index smaller than its source off the gathered dim"
    return None


@register_lowering(aten.gather.default, check=_check_gather)
def _gather(ctx, node: Node) -> Any:
    """`out[i][j][k] = src[i][index[i][j][k]][k]` along `dim`, the index as large as the source off
    `dim`: nvFuser's take_along_axis (its gather of any index extents runs ATen's outside its kernels).
    HF BERT-style embeddings gather the token-type buffer by the position ids; in ATen the gather cut
    the embeddings' region in two, one embedding left in ATen beside it."""
    dim = _norm_dim(node.args[1], _rank(node.args[0]))
    index = ctx.cast(ctx.value(node.args[2]), torch.int64)
    return ctx.ops.take_along_axis(ctx.value(node.args[0]), index, dim)


#: A cumsum along at most this many elements lowers to a masked sum (`_cumsum`): its work grows with
#: the square of the length. Position ids and packed-sequence ids are cumsums along a sequence.
CUMSUM_MAX_LENGTH = 2048
#: ... and where the masked sum reads at most this many elements (16 sequences of 2048: 2^26).
CUMSUM_MAX_ELEMENTS = 1 << 26


def _check_cumsum(node: Node) -> Optional[str]:
    x = _val(node.args[0])
    if x.dim() == 0:
        return "unsupported op: cumsum of a 0-d tensor"
    if not all(_static(s) for s in x.shape):
        return "unsupported op: cumsum of a tensor of symbolic size"
    length = int(x.shape[_norm_dim(node.args[1], x.dim())])
    if length > CUMSUM_MAX_LENGTH or x.numel() * length > CUMSUM_MAX_ELEMENTS:
        return (f"unsupported op: cumsum along {length} elements of {x.numel()}: its masked sum would read "
                f"more than {CUMSUM_MAX_LENGTH} per row or {CUMSUM_MAX_ELEMENTS} in all")
    return None


@register_lowering(aten.cumsum.default, check=_check_cumsum)
def _cumsum(ctx, node: Node) -> Any:
    """`out[.., i, ..] = sum(x[.., k, ..] for k <= i)` along `dim`, as a sum over a new dim of the
    scan's length of `x` masked by `k <= i`: a broadcast, a where and a reduction. nvFuser 0.2.36's
    own scan is scheduled only by its Greedy scheduler, which refuses the symbolic extents the backend
    defines fusions with, so it ran ATen's cumsum inside the fusion. The work is the length squared
    per row, hence the caps (CUMSUM_MAX_LENGTH). transformers number packed sequences by a cumsum
    between their mask's pointwise ops (HF LLaMA, Mistral, Qwen2) and compute position ids as an
    attention mask's cumsum (GPT-2, OPT).

    `i` and `k` come from two iotas: one iota broadcast into both dims maps the two dims to each
    other in nvFuser's exact map, and every scheduler refuses a tensor mapped to itself (the
    segmenter then splits the region). Where the result meets `x` again along the scanned dim
    (`cumsum(mask) * mask`) the two dims are mapped all the same, and nvFuser splits the region at
    the sum. Integers and bools sum exactly in the result's dtype (int64 unless `dtype` says
    otherwise); floats in the fusion's compute dtype, each output summed in a tree (in another order
    than ATen's scan). A `dtype` argument casts the input first, as ATen does."""
    src, out = _val(node.args[0]), node.meta["val"]
    rank, dim = src.dim(), _norm_dim(node.args[1], src.dim())
    length = int(src.shape[dim])
    compute = ctx.compute_dtype(out.dtype)
    x = ctx.value(node.args[0])
    if out.dtype != src.dtype:  # cumsum(x, dtype=...) sums x cast to dtype (a half result rounds x first)
        x = ctx.cast(x, out.dtype)
    x = ctx.cast(x, compute)
    shape = [int(s) for s in src.shape]
    wide = [*shape[:dim], length, *shape[dim:]]  # dim: the output's i; dim + 1: the summed k
    terms = ctx.ops.broadcast_in_dim(x, wide, [d if d < dim else d + 1 for d in range(rank)])
    i, k = (ctx.ops.iota(ctx.value(length), ctx.value(0), ctx.value(1), ctx.dtype(torch.int64)) for _ in range(2))
    upper = ctx.ops.broadcast_in_dim(i, [length, length], [0])
    lower = ctx.ops.broadcast_in_dim(k, [length, length], [1])
    keep = ctx.ops.broadcast_in_dim(ctx.ops.le(lower, upper), wide, [dim, dim + 1])
    masked = ctx.ops.where(keep, terms, ctx.constant(0, compute))
    return ctx.ops.sum(masked, [dim + 1], False, ctx.dtype(compute))


#: Ops lowered through nvFuser's index_select (`_rows`): their rows must not leave their region
#: (passes/partition.py, GATHER_OUTPUT_REASON).
ROW_GATHERS = frozenset({aten.embedding.default, aten.index.Tensor})


def _rows(ctx, table: Node, index: Node, dim: int, wrap_negative: bool) -> Any:
    """`table` indexed along `dim` by the integer tensor `index` (any rank): nvFuser's index_select of
    the flattened index, its dim then made `index`'s shape. The table is read as the fusion defines
    it: an f32 upcast of a half/bfloat16 table would be a whole-table op ahead of the gather; the rows
    are upcast instead (by the dtype matching after the lowering). `wrap_negative`: an index below 0
    counts from the end, as ATen's indexing reads it (index_select would read out of bounds)."""
    indices, src = _val(index), _val(table)
    flat = ctx.value(index)
    # the index's sizes: ints, or (a dynamic-shape graph's batch and length) nvFuser's extents
    sizes = _extents(ctx, flat, indices)
    if indices.dim() != 1:
        flat = ctx.ops.reshape(flat, [_product(ctx, sizes)])
    if wrap_negative:
        flat = ctx.ops.where(ctx.ops.lt(flat, ctx.value(0)), ctx.ops.add(flat, ctx.value(int(src.shape[dim]))), flat)
    raw = ctx.raw_inputs.get(table)
    rows = ctx.ops.index_select(raw if raw is not None else ctx.value(table), flat, dim)
    if indices.dim() == 1:
        return rows
    before, after = [int(s) for s in src.shape[:dim]], [int(s) for s in src.shape[dim + 1:]]
    core = [s for s in sizes if not (_static(s) and s == 1)]
    if not core or len(core) == len(sizes) or not all(_static(s) for s in sizes):
        return ctx.ops.reshape(rows, [*before, *sizes, *after])
    # position ids [1, S]: the rows [S, D] as [1, S, D], the index's 1s made by a broadcast as a view's
    # are (`_reshape`): the 1 of nvFuser's reshape did not broadcast against a batch's [B, S, D] ("Expected
    # sizes to match: 8 vs 1", BERT-style embeddings on an H200, 2026-11-29)
    if len(core) > 1:
        rows = ctx.ops.reshape(rows, [*before, *core, *after])
    return ctx.ops.broadcast(rows, [False] * len(before) + [s == 1 for s in sizes] + [False] * len(after))


@register_lowering(aten.embedding.default, check=_check_embedding, opt_in="fuse_embedding")
def _embedding(ctx, node: Node) -> Any:
    """Rows of the weight picked by the indices (padding_idx matters only to the backward)."""
    return _rows(ctx, node.args[0], node.args[1], 0, wrap_negative=False)


def _one_index(node: Node) -> Optional[tuple[int, Any]]:
    """(dim, index) of `t[:, ..., index]`: one index tensor, every other entry None; else None."""
    indices = node.args[1]
    if not isinstance(indices, (list, tuple)):
        return None
    tensors = [(d, i) for d, i in enumerate(indices) if i is not None]
    return tensors[0] if len(tensors) == 1 else None


def _check_index(node: Node) -> Optional[str]:
    found = _one_index(node)
    if found is None:
        return "unsupported op: index by more than one tensor (a data-dependent gather)"
    index = _val(found[1])
    if not isinstance(index, torch.Tensor) or index.dtype not in (torch.int64, torch.int32):
        return "unsupported op: index by a boolean mask (a result of data-dependent size)"
    if index.dim() == 0 or _expanded(found[1]):
        # a 0-d index may be a CPU scalar; nvFuser 0.2.36 lost the extents of a reshape of an
        # expanded tensor (`_reshaped`), and `_rows` flattens the index
        return "unsupported op: index by a 0-d or expanded (stride-0) tensor"
    source = node.args[0]
    if not (isinstance(source, Node) and source.op == "placeholder"):
        # nvFuser's index_select reads its table from the fusion's inputs (the embedding lowering
        # reads it the same way); a table computed in the graph stays with ATen's gather
        return "unsupported op: index of a tensor the graph computes (a data-dependent gather)"
    src = _val(source)
    if src.dim() == 0 or not all(_static(s) for s in src.shape) or _expanded(source):
        return "unsupported op: index of a 0-d, symbolic-size or expanded (stride-0) table"
    return None


@register_lowering(aten.index.Tensor, check=_check_index)
def _index(ctx, node: Node) -> Any:
    """`table[:, ..., index]`, one integer index tensor: its rows along that dim, in the region around
    it. Relative position biases read this way (Swin's and BEiT's `table[index.view(-1)]`, LeViT's
    `biases[:, index]`, a parameter by an index buffer) ran as ATen's gather between the regions."""
    dim, index = _one_index(node)
    return _rows(ctx, node.args[0], index, dim, wrap_negative=True)


#: An accumulating scatter into a table of T rows reads each of its values T times (`_rows_added`):
#: it lowers where T times the number of values is at most this many terms (16 M: Swin-T's bias
#: tables, 169 rows by 2401 x 24 values, take 9.7 M; BEiT's, 732 by 197^2 x 12, stay in ATen).
SCATTER_ADD_MAX_TERMS = 1 << 24


def _rows_added(ctx, table: Node, index: Node, values: Node, dim: int, rows: int) -> Any:
    """`table` plus, for each position i of `index`, the values at i added into row `index[i]` along
    `dim`: the sum over `index`'s dims of `values` masked by `index == t`, for each row t (an iota),
    as `_cumsum` is a masked sum. The gradient of a gather from a small table, relative position
    biases (`table[index]`: Swin, LeViT). nvfuser_direct binds no accumulating scatter (nvFuser's
    indexPutAccumulate is not bound), so these ran ATen's sort-based kernel between regions. An
    index below 0 counts from the end, as ATen's indexing reads it. Floats add in the fusion's
    compute dtype, in a tree (another order than ATen's); the result is deterministic."""
    val, idx = _val(values), _val(index)
    compute = ctx.compute_dtype(val.dtype)
    pre, irank = dim, idx.dim()
    post = val.dim() - pre - irank
    wide = [*(int(s) for s in val.shape[:pre]), rows, *(int(s) for s in val.shape[pre:])]
    index_dims = list(range(pre + 1, pre + 1 + irank))
    i = ctx.cast(ctx.value(index), torch.int64)
    i = ctx.ops.where(ctx.ops.lt(i, ctx.value(0)), ctx.ops.add(i, ctx.value(rows)), i)
    t = ctx.ops.iota(ctx.value(rows), ctx.value(0), ctx.value(1), ctx.dtype(torch.int64))
    hit = ctx.ops.eq(ctx.ops.broadcast_in_dim(i, wide, index_dims), ctx.ops.broadcast_in_dim(t, wide, [pre]))
    terms = ctx.ops.broadcast_in_dim(ctx.cast(ctx.value(values), compute), wide,
                                     [*range(pre), *index_dims, *range(pre + 1 + irank, pre + 1 + irank + post)])
    added = ctx.ops.sum(ctx.ops.where(hit, terms, ctx.constant(0, compute)), index_dims, False, ctx.dtype(compute))
    return ctx.ops.add(ctx.cast(ctx.value(table), compute), added)


def _check_index_put(node: Node) -> Optional[str]:
    if _arg(node, 3, "accumulate", False) is not True:
        return "unsupported op: index_put without accumulate (a data-dependent scatter)"
    found = _one_index(node)
    if found is None:
        return "unsupported op: index_put by more than one tensor (a data-dependent scatter)"
    dim, index = found
    table, values, idx = _val(node.args[0]), _val(node.args[2]), _val(index)
    if not isinstance(idx, torch.Tensor) or idx.dim() == 0 or idx.dtype not in (torch.int64, torch.int32):
        return "unsupported op: index_put by a 0-d, boolean or non-tensor index"
    if table.dtype == torch.bool:
        return "dtype: accumulating scatter into a boolean table (a logical or)"
    if not all(_static(s) for t in (table, values, idx) for s in t.shape):
        # asked before any size is read: reading one would specialize a dynamic size
        return "unsupported op: accumulating scatter of symbolic size"
    if list(values.shape) != [*table.shape[:dim], *idx.shape, *table.shape[dim + 1:]]:
        return "unsupported op: index_put of values broadcast to the indexed shape"
    rows = int(table.shape[dim])
    if rows * values.numel() > SCATTER_ADD_MAX_TERMS:
        return (f"unsupported op: accumulating scatter of {values.numel()} values into {rows} rows: its "
                f"masked sum would add more than {SCATTER_ADD_MAX_TERMS} terms (a table this large stays "
                f"with ATen's sort-based kernel)")
    return None


@register_lowering(aten.index_put.default, check=_check_index_put)
def _index_put(ctx, node: Node) -> Any:
    """`index_put(table, [None, ..., index], values, accumulate=True)`, the gradient of `table[:, ...,
    index]`: `_rows_added`."""
    dim, index = _one_index(node)
    rows = int(_val(node.args[0]).shape[dim])
    return _rows_added(ctx, node.args[0], index, node.args[2], dim, rows)


def _uniform_like(ctx, arg: Any, dtype: torch.dtype) -> Any:
    """Uniform [0, 1) values of `arg`'s shape in `dtype`, one per element: drawn for a dense tensor
    of that shape, since nvFuser's rand_like keeps its input's broadcast dims (csrc/ops/arith.cpp)
    and would draw once along a dim that is a broadcast in the fusion (`x.expand(8, 4) * 1`)."""
    sizes = _extents(ctx, ctx.value(arg), _val(arg))
    return ctx.ops.rand_like(ctx.ops.full(sizes, ctx.constant(0, dtype), ctx.dtype(dtype)))


def _check_dropout(node: Node) -> Optional[str]:
    p, train = _arg(node, 1, "p"), _arg(node, 2, "train")
    if train is not True:
        return "unsupported op: native_dropout outside training"
    if not isinstance(p, (int, float)) or not 0.0 < p < 1.0:
        return "unsupported op: dropout probability outside (0, 1) or symbolic"
    if not _val(node.args[0]).dtype.is_floating_point:
        return "dtype: dropout of a non-floating tensor"
    return None


@register_lowering(aten.native_dropout.default, check=_check_dropout, opt_in="fuse_dropout")
def _native_dropout(ctx, node: Node) -> Any:
    """(x * mask * 1/(1-p), mask) as ATen computes it, with mask = uniform [0, 1) < 1 - p drawn by
    nvFuser's Philox from torch's default CUDA generator (graph-safe: replays advance its offset)."""
    x = ctx.value(node.args[0])
    keep = 1.0 - float(_arg(node, 1, "p"))
    mask = ctx.ops.lt(_uniform_like(ctx, node.args[0], _val(node.args[0]).dtype), keep)
    kept = ctx.ops.mul(x, ctx.cast(mask, ctx.compute_dtype(_val(node.args[0]).dtype)))
    return ctx.ops.mul(kept, 1.0 / keep), mask


def _check_bernoulli(node: Node) -> Optional[str]:
    p = _arg(node, 1, "p", 0.5)
    if _arg(node, 2, "generator", None) is not None:
        return "unsupported op: bernoulli with a generator of its own"
    if not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        return "unsupported op: bernoulli probability outside [0, 1] or symbolic"
    if not _val(node.args[0]).dtype.is_floating_point:
        return "dtype: bernoulli into a non-floating tensor"
    return None


@register_lowering(aten.bernoulli.p, check=_check_bernoulli, opt_in="fuse_dropout")
def _bernoulli(ctx, node: Node) -> Any:
    """1 with probability p, else 0, in the input's dtype (only its shape is read): stochastic depth's
    per-sample mask (timm's drop path), drawn as dropout's is, from an f32 uniform."""
    u = _uniform_like(ctx, node.args[0], torch.float32)
    return ctx.cast(ctx.ops.lt(u, float(_arg(node, 1, "p", 0.5))), node.meta["val"].dtype)


@register_lowering(aten.cat.default, check=_check_cat)
def _cat(ctx, node: Node) -> Any:
    out = node.meta["val"]
    dim = _norm_dim(_arg(node, 1, "dim", 0), out.dim())
    parts = [ctx.cast(ctx.value(t), out.dtype) for t in node.args[0]]
    return ctx.ops.cat(parts, dim)


def _check_pad(node: Node) -> Optional[str]:
    if any((not _static(p)) or p < 0 for p in node.args[1]):
        return "unsupported op: negative or symbolic padding"
    return None


@register_lowering(aten.constant_pad_nd.default, check=_check_pad)
def _constant_pad_nd(ctx, node: Node) -> Any:
    value = _arg(node, 2, "value", 0)
    dtype = node.meta["val"].dtype
    return ctx.ops.pad(ctx.value(node.args[0]), list(node.args[1]), ctx.constant(value, dtype))
