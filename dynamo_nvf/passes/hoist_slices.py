"""Hoist a slice above the pointwise op that feeds it inside a region, onto that op's operands:
`slice(g * sin, 3, 0, 32)` becomes `slice(g, 3, 0, 32) * slice(sin, 1, 0, 32)`.

Why: the backward of LLaMA's rotary embedding (`rotate_half`: `cat([-x2, x1])`) slices a product
computed inside the region, `g * sin`, into halves, and pads them back. nvFuser 0.2.36's resize
scheduler takes slices and pads of fusion inputs in one kernel (the forward RoPE region is one kernel
per output), but a slice of an intermediate that two slices share splits the fusion: a pointwise
kernel writes the product to global memory and a resize kernel reads it back. On an H100
(`scripts/region_scoreboard.py llama_train_bf16_small`, 2026-11-24) the three RoPE-backward regions
took 2, 2 and 4 kernels, 2.85, 3.31 and 6.59 us, where inductor took 1, 1 and 2 kernels, 1.19, 1.37
and 2.57 us. Hoisted, each slice reads a region input, which the bookend pass trims to a zero-copy
alias, and nvFuser sees slices and pads of its inputs only.

Exact: a pointwise op computes each element from the same-index elements of its operands, so slicing
its operands first gives the same values; dtypes are unchanged. Only where it is also free:
- every user of the pointwise op is a slice in its region (the full result is then dead, so nothing is
  computed twice except where slices overlap), and every user of each slice is in the region (a
  slice that leaves the region is an output whose strides eager defines: a view);
- each slice becomes a fresh tensor, so the views taken of it get new strides and no storage offset:
  their fake values are recomputed (stale ones made lean_views read the whole tensor's offsets from
  the slice, out of bounds: BEiT's patch-embedding gradient), and where one of them cannot be taken
  of the new layout, or is returned or read by explicit strides, the slice stays;
- the op is pointwise (torch's tag), not random (an RNG draws by position), with static shapes;
- an operand that broadcasts along the sliced dim (size 1, or missing) is not sliced.
Repeated, so a chain of pointwise ops between an input and the slices is crossed too.

Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import draws_random_numbers, is_pointwise
from dynamo_nvf.ops.metadata import slice_params, static_sizes, tensor_val, views_for
from dynamo_nvf.passes import add_note, call_like, rewrite_to_fixpoint
from dynamo_nvf.passes.partition import REGION_KEY

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: The note explain() shows for each hoist (graph plan's `rewrites`).
NOTE = "slices of {op}: moved above it onto its operands ({slices})"


def _hoistable(op: Node, region: Any) -> Optional[list[int]]:
    """The output shape of `op` when its slices can move above it (module docstring), else None."""
    if op.op != "call_function" or op.meta.get(REGION_KEY) != region or not is_pointwise(op):
        return None
    if draws_random_numbers(op):
        return None
    out = tensor_val(op)
    shape = static_sizes(out) if out is not None else None
    if shape is None or not op.users:
        return None
    for user in op.users:
        if slice_params(user) is None or user.args[0] is not op or user.meta.get(REGION_KEY) != region:
            return None
        if any(u.meta.get(REGION_KEY) != region for u in user.users):
            return None
    for operand in (*op.args, *op.kwargs.values()):
        if isinstance(operand, Node):
            val = tensor_val(operand)
            if val is None or static_sizes(val) is None or val.dim() > len(shape):
                return None
    return shape


def _slice_dim(operand: Node, dim: int, rank: int, out_size: int) -> Optional[int]:
    """The operand's dim that the op's output dim `dim` reads, or None where it broadcasts there."""
    val = tensor_val(operand)
    local = dim - (rank - val.dim())
    if local < 0 or (val.shape[local] == 1 and out_size != 1):
        return None
    return local


def _operand_slice(gm: GraphModule, operand: Any, dim: int, rank: int, out_size: int,
                   bounds: tuple[Any, Any, int], like: Node, mode: Any) -> Any:
    """`operand` sliced like the op's output along `dim`, unless it broadcasts there."""
    if not isinstance(operand, Node) or (local := _slice_dim(operand, dim, rank, out_size)) is None:
        return operand
    return call_like(gm, aten.slice.Tensor, (operand, local, *bounds), like, mode)


def _hoisted_views(op: Node, shape: list[int]) -> Optional[dict[Node, Any]]:
    """The fake values the views of `op`'s slices get once each slice is a fresh tensor (the op of
    sliced operands: its own strides, no storage offset); None where one of those views cannot be
    taken of that layout, or is returned or read by explicit strides (eager defines its strides)."""
    mode = tensor_val(op).fake_mode
    rank = len(shape)
    fresh: dict[Node, Any] = {}
    for user in op.users:
        dim, start, end, step = slice_params(user)
        dim %= rank

        def sliced(a: Any) -> Any:
            if not isinstance(a, Node):
                return a
            local = _slice_dim(a, dim, rank, shape[dim])
            return tensor_val(a) if local is None else aten.slice.Tensor(tensor_val(a), local, start, end, step)

        with mode:
            val = op.target(*map(sliced, op.args), **{k: sliced(v) for k, v in op.kwargs.items()})
        views = views_for(user, val)
        if views is None:
            return None
        fresh.update(views)
    return fresh


def _hoist(gm: GraphModule, op: Node, shape: list[int]) -> list[str]:
    """Replaces every `slice(op(a, b, ...))` by `op(slice(a), slice(b), ...)`; erases `op`."""
    mode = tensor_val(op).fake_mode
    rank = len(shape)
    names = []
    for user in list(op.users):
        dim, start, end, step = slice_params(user)
        dim %= rank
        with gm.graph.inserting_before(user):
            args = tuple(_operand_slice(gm, a, dim, rank, shape[dim], (start, end, step), user, mode)
                         for a in op.args)
            kwargs = {k: _operand_slice(gm, v, dim, rank, shape[dim], (start, end, step), user, mode)
                      for k, v in op.kwargs.items()}
            replacement = call_like(gm, op.target, args, op, mode, kwargs)
        user.replace_all_uses_with(replacement)
        names.append(user.name)
        gm.graph.erase_node(user)
    gm.graph.erase_node(op)
    return names


def _hoist_at(gm: GraphModule, node: Node) -> bool:
    if slice_params(node) is None or node.meta.get(REGION_KEY) is None or not isinstance(node.args[0], Node):
        return False
    op = node.args[0]
    if getattr(tensor_val(op), "fake_mode", None) is None:
        return False
    shape = _hoistable(op, node.meta[REGION_KEY])
    if shape is None:
        return False
    views = _hoisted_views(op, shape)
    if views is None:
        return False
    slices = _hoist(gm, op, shape)
    for view, val in views.items():  # their input is no longer a slice of the whole: new strides
        view.meta["val"] = val
    add_note(gm, NOTE.format(op=op.name, slices=", ".join(slices)))
    return True


def hoist_slices(gm: GraphModule) -> GraphModule:
    """Moves the in-region slices of pointwise ops above them, onto their operands (module docstring)."""
    hoisted = rewrite_to_fixpoint(gm, _hoist_at)
    if hoisted:
        log.debug("dynamo_nvf: hoisted the slices of %d pointwise op(s) onto their operands", hoisted)
    return gm
