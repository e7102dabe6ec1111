"""Turns one FX region into an nvFuser FusionDefinition, built for the real inputs of a call.

The definition depends on the inputs' dtypes, ranks, size-1 (broadcast) dims and layouts, not on
their sizes: sizes are symbolic (-1), so one definition serves every size with that description.
A region that resizes may instead be defined with concrete sizes (`static_sizes`,
ops/static_sizes.py); that definition then serves those sizes only.
Outputs are given the strides eager would produce (the traced node.meta["val"]).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Optional, Sequence

import torch
from torch.fx import GraphModule, Node
from dynamo_nvf._compat import hint_int

from dynamo_nvf.ops.context import SEGMENT_INPUTS_KEY, LoweringContext, LoweringError
from dynamo_nvf.ops.dtypes import LOW_PRECISION_FLOATS, python_scalar_dtype_name
from dynamo_nvf.ops.metadata import METADATA_OPS
from dynamo_nvf.ops.registry import LOWERINGS, op_name

# Importing registers every lowering.
import dynamo_nvf.ops.lowerings  # noqa: F401


@dataclass(frozen=True)
class BuiltFusion:
    """A defined fusion and what explain() shows of it."""

    fd: Any
    definition: str
    #: Per output, eager's dense dim order (nvFuser stride order), or None where eager's is not dense.
    output_orders: list[Optional[list[int]]]


def _stride_order(val: torch.Tensor) -> list[int]:
    """nvFuser's stride order of eager's layout: entry i ranks dim i, higher is outer."""
    rank = val.dim()
    strides = [hint_int(s) for s in val.stride()]
    sizes = [hint_int(s) for s in val.shape]
    # Sort dims outermost first: by stride, then by position (stable), like compute_tensor_descriptor.
    order = sorted(range(rank), key=lambda d: (-strides[d], -sizes[d] if strides[d] == 0 else 0, d))
    result = [0] * rank
    for position, dim in enumerate(order):
        result[dim] = rank - 1 - position
    return result


def _define_input(ctx: LoweringContext, arg: Any, static_sizes: bool = False) -> tuple[Any, Any]:
    """Defines a fusion input; returns (the input, the value computations read). A tensor's extents
    are symbolic (size-1 dims broadcast), or its concrete sizes with `static_sizes`."""
    if isinstance(arg, torch.Tensor):
        tv = ctx.fd.define_tensor(
            sizes=list(arg.shape),
            strides=list(arg.stride()),
            dtype=ctx.dtype(arg.dtype),
            static_sizes=static_sizes,
            is_cpu=arg.device.type == "cpu",
        )
        if arg.dtype in LOW_PRECISION_FLOATS:
            return tv, ctx.cast(tv, torch.float32)
        return tv, tv
    if isinstance(arg, (bool, int, float)):
        scalar = ctx.fd.define_scalar(dtype=getattr(ctx.nvf.DataType, python_scalar_dtype_name(arg)))
        return scalar, scalar
    raise LoweringError(f"unsupported region input of type {type(arg).__name__}")


def build_fusion(nvf: ModuleType, region: GraphModule, args: Sequence[Any],
                 materialize: frozenset[int] = frozenset(), pin: frozenset[int] = frozenset(),
                 static_sizes: bool = False) -> BuiltFusion:
    """Defines the fusion of `region` for these actual inputs (their concrete sizes with
    `static_sizes`: the definition then serves only inputs of these sizes).

    `materialize` lists outputs the kernel must compute into fresh, dense storage although nvFuser
    would return them otherwise (see `LoweringContext.times_ones`), `pin` those whose layout is set explicitly;
    the runtime asks for them after a first run showed such outputs, instead of copying them on
    every call.
    """
    fd = nvf.FusionDefinition()
    failure: Optional[BaseException] = None
    with fd:
        try:
            built = _define(nvf, fd, region, args, materialize, pin, static_sizes)
        except BaseException as exc:  # re-raised outside: FusionDefinition.__exit__ prints exceptions
            failure = exc
    if failure is not None:
        raise failure
    return BuiltFusion(fd=fd, definition=repr(fd), output_orders=built.output_orders)


def _define(nvf: ModuleType, fd: Any, region: GraphModule, args: Sequence[Any],
            materialize: frozenset[int] = frozenset(), pin: frozenset[int] = frozenset(),
            static_sizes: bool = False) -> BuiltFusion:
    """Lowers every node of `region` into the open FusionDefinition `fd`."""
    ctx = LoweringContext(nvf, fd)
    placeholders = [n for n in region.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(args):
        raise LoweringError(f"region takes {len(placeholders)} inputs, got {len(args)}")
    for node, arg in zip(placeholders, args):
        ctx.raw_inputs[node], ctx.values[node] = _define_input(ctx, arg, static_sizes)
    inputs = {id(defined) for defined in ctx.raw_inputs.values()}
    output_node = None
    for node in region.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            output_node = node
            continue
        if node.op != "call_function" or node.target not in LOWERINGS:
            raise LoweringError(f"no lowering for {node.format_node()}")
        try:
            if node.meta.get(SEGMENT_INPUTS_KEY):
                result = _lower_behind_segment_boundary(ctx, node)
            else:
                result = LOWERINGS[node.target].lower(ctx, node)
        except LoweringError:
            raise
        except Exception as exc:
            raise LoweringError(f"lowering {op_name(node.target)} ({node.name}) failed: {exc}") from exc
        ctx.values[node] = _match_dtype(ctx, node, result)
    assert output_node is not None
    layouts: list[Optional[list[int]]] = []
    # With row-major inputs nvFuser allocates outputs row-major, so only other layouts are pinned:
    # a stride_order on an output can add a kernel-less host segment (ConvNeXt's LayerNorm region,
    # channels-last input, row-major output: 20.0 us of host time per call pinned, 13.1 not, H100,
    # scripts/nvfuser_repros/kernelless_output_segments.py). Not pinning row-major outputs of regions with other input
    # layouts (H100, 2026-11-24) left nvFuser to infer them, and where it got one wrong, the pinned rebuild
    # of that one output hit an nvFuser scheduler error in a ConvNeXt backward region ("Vectorized
    # dim for producer has to be from an inner most position"), which then ran in eager. So such
    # regions still pin every output. A layout nvFuser gets wrong is fixed by the runtime's
    # one-time check.
    row_major_inputs = all(a.is_contiguous() for a in args if isinstance(a, torch.Tensor))
    for index, out in enumerate(output_node.args[0]):
        value = ctx.values[out]
        val = out.meta.get("val")
        order = _stride_order(val) if isinstance(val, torch.Tensor) and _is_dense(val) else None
        pinned = order is not None and index in pin
        dense_wanted = order is not None and ctx.is_expanded(value)
        if index in materialize or dense_wanted or (isinstance(val, torch.Tensor) and copies_an_input(out)):
            value = ctx.times_ones(value, val)
        if isinstance(val, torch.Tensor):
            value = ctx.cast(value, val.dtype)  # low-precision values were computed in f32
        if id(value) in inputs:
            value = ctx.ops.set(value)  # nvFuser returns fresh tensors, never its inputs
        row_major = order is not None and order == list(range(val.dim() - 1, -1, -1))
        if order is not None and val.dim() > 1 and (pinned or not (row_major and row_major_inputs)):
            value = ctx.ops.stride_order(value, order)
        layouts.append(order)
        fd.add_output(value)
    return BuiltFusion(fd=fd, definition="", output_orders=layouts)


def _lower_behind_segment_boundary(ctx: LoweringContext, node: Node) -> Any:
    """Lowers `node` reading each tensor input through `segment_set`: nvFuser writes the input out at
    the end of one kernel and `node` starts the next. Only this node sees the boundary; the input's
    other users read it as before."""
    inputs = [n for n in node.all_input_nodes if n in ctx.values]
    saved = {n: ctx.values[n] for n in inputs}
    try:
        for n in inputs:
            ctx.values[n] = ctx.behind_segment_boundary(saved[n])
        return LOWERINGS[node.target].lower(ctx, node)
    finally:
        ctx.values.update(saved)


#: Ops whose nvFuser lowering is a meta op (set, reshape, permute, slice, broadcast, expand, squeeze,
#: a cast to the same dtype): nvFuser returns such an output of a fusion input as a view of that
#: input's storage (its alias analysis, Fuser's AliasTest.TrivialInputForwarding), not as a copy.
_COPYING_OPS = frozenset({
    torch.ops.aten.clone.default, torch.ops.aten._to_copy.default, torch.ops.aten.copy.default,
    torch.ops.prims.convert_element_type.default,
})


def copies_an_input(node: Node) -> bool:
    """True when eager gives `node` fresh storage (a clone, copy or same-dtype cast on the way) but its
    value is only meta ops of a region input, which nvFuser would return as an alias of the input.
    Such an output is materialized (`LoweringContext.times_ones`): handing the caller the input's storage would let a later write
    to one show in the other, unlike eager."""
    copied = False
    while node.op != "placeholder":
        if node.op != "call_function":
            return False
        if node.target in _COPYING_OPS:
            src = node.args[1] if node.target is torch.ops.aten.copy.default else node.args[0]
            before, after = (src.meta.get("val") if isinstance(src, Node) else None), node.meta.get("val")
            if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor) or before.dtype != after.dtype:
                return False  # a real conversion computes a new value
            copied = True
        elif node.target in METADATA_OPS:
            src = node.args[0]
        else:
            return False
        if not isinstance(src, Node):
            return False
        node = src
    return copied


def views_an_input(node: Node) -> bool:
    """True when eager's value of `node` is a view chain of a region input (so sharing its storage
    is eager's behaviour too)."""
    while node.op != "placeholder":
        if node.op != "call_function" or node.target not in METADATA_OPS or not isinstance(node.args[0], Node):
            return False
        node = node.args[0]
    return True


_EXPLICIT_CASTS = (torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default)


def _match_dtype(ctx: LoweringContext, node: Node, result: Any) -> Any:
    """Casts a lowering's result to the dtype eager produced, so type promotion always matches.

    Half and bfloat16 values are kept in float32 inside the fusion (as inductor does) and cast back
    where they leave it; an explicit cast to them still rounds.
    """
    val = node.meta.get("val")
    if isinstance(result, tuple):
        if isinstance(val, (tuple, list)):
            return tuple(_match_one(ctx, node, r, v) for r, v in zip(result, val))
        return result
    return _match_one(ctx, node, result, val)


def _match_one(ctx: LoweringContext, node: Node, result: Any, val: Any) -> Any:
    if not isinstance(val, torch.Tensor) or not isinstance(result, ctx.nvf.TensorView):
        return result
    if val.dtype in LOW_PRECISION_FLOATS:
        if node.target in _EXPLICIT_CASTS:
            result = ctx.cast(result, val.dtype)
        return ctx.cast(result, torch.float32)
    return ctx.cast(result, val.dtype)


def _is_dense(val: torch.Tensor) -> bool:
    """Non-overlapping and dense: eager's strides are a permutation of contiguous strides."""
    sizes = [hint_int(s) for s in val.shape]
    strides = [hint_int(s) for s in val.stride()]
    expected = 1
    for d in sorted(range(val.dim()), key=lambda d: (strides[d], sizes[d])):
        if sizes[d] == 1:
            continue
        if strides[d] != expected:
            return False
        expected *= sizes[d]
    return True
