"""Sink a permute inside a region below the pointwise ops that consume it, onto the region's output,
where that makes the region compute in memory order: `x_cl + permute(z, [0, 3, 1, 2])`, with `x_cl`
a channels-last tensor, becomes `permute(permute(x_cl, [0, 2, 3, 1]) + z, [0, 3, 1, 2])`.

Why: ConvNeXt's residual add, `x + (gamma * mlp(y)).permute(0, 3, 1, 2)`, reads the MLP's row-major
NHWC output through a permute and adds the channels-last residual in NCHW order. Where that add is a
region of its own (a block whose output feeds the next block's convolution), nvFuser 0.2.36 schedules
it as one unvectorized pointwise kernel that walks the logical NCHW order over memory laid out NHWC:
on an H100 (2026-11-25, f32, batch 64) 582 us against inductor's 76 for [64, 96, 56, 56], and 296
against 39 for [64, 192, 28, 28] (scripts/region_scoreboard.py convnext_fwd_f32_large). With the
permute sunk, every full-size tensor the fusion reads or writes is row-major NHWC: the operand's
permute reads a region input and the result's permute ends the region, so the bookend pass trims
both to zero-copy aliases, and the region's output keeps eager's channels-last strides.

Only where exact and useful:
- the permute reads a value the region computes (a permute of a region input is trimmed anyway);
- every op on the way is pointwise (or a dtype-only copy; no copy into a memory format, which does
  not commute with the permute) in the permute's region, the permute and
  each op but the last have one user (the next op), and the last op's users are all outside the
  region: the permute ends on a region output (ending inside, before a reduction, it would gain
  nothing);
- every other operand of full shape is a region input that the inverse permute makes row-major;
  smaller operands broadcast (they get leading size-1 dims, then the inverse permute; 0-d tensors
  stay as they are: ranked up, a bf16 op with an f32 scalar tensor would compute in f32, and a CPU
  scalar would no longer be one);
- eager's result of the last op has the strides of the permuted row-major result, so the region's
  output keeps eager's layout.
Elementwise math commutes with a permute, so values are unchanged.

Forward and inference graphs only, as hoist_permutes (whose docstring says why backward regions are
left as they are). Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch
from torch._prims_common import invert_perm
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import static_sizes, tensor_val
from dynamo_nvf.passes import add_note, call_like, rewrite_to_fixpoint
from dynamo_nvf.passes.hoist_permutes import permute_dims, permute_operand, pointwise_or_cast
from dynamo_nvf.passes.partition import REGION_KEY

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: The note explain() shows for each sunk permute (graph plan's `rewrites`).
NOTE = ("permute {permute}: moved below {ops} onto the region's output, so the region reads and writes "
        "row-major tensors")


def _row_major_once_unpermuted(val: torch.Tensor, inverse: list[int]) -> bool:
    return val.permute(inverse).is_contiguous()


def _operands_ok(op: Node, via: Node, shape: list[int], inverse: list[int], region: Any) -> bool:
    """Whether every operand of `op` other than `via` (the permute's chain) can be unpermuted into a
    row-major region input or is a broadcast one."""
    for operand in (*op.args, *op.kwargs.values()):
        if operand is via or not isinstance(operand, Node):
            continue
        val = tensor_val(operand)
        sizes = static_sizes(val) if val is not None else None
        if sizes is None or len(sizes) > len(shape):
            return False
        if sizes != shape:
            continue  # broadcast: nothing of its layout matters
        if operand.meta.get(REGION_KEY) == region or not _row_major_once_unpermuted(val, inverse):
            return False
    return True


def _chain(permute: Node, perm: list[int], region: Any) -> Optional[list[Node]]:
    """The pointwise ops the permute sinks through, down to a region output; None where it cannot."""
    out = tensor_val(permute)
    shape = static_sizes(out) if out is not None else None
    if shape is None or getattr(out, "fake_mode", None) is None:
        return None
    inverse = list(invert_perm(perm))
    chain: list[Node] = []
    node = permute
    while True:
        users = list(node.users)
        if chain and all(u.meta.get(REGION_KEY) != region for u in users):
            last = tensor_val(node)
            return chain if last is not None and _row_major_once_unpermuted(last, inverse) else None
        if len(users) != 1:
            return None
        (op,) = users
        val = tensor_val(op)
        if (op.meta.get(REGION_KEY) != region or not pointwise_or_cast(op) or val is None
                or op.kwargs.get("memory_format", torch.preserve_format) is not torch.preserve_format
                or static_sizes(val) != shape or not _operands_ok(op, node, shape, inverse, region)):
            return None
        chain.append(op)
        node = op


def _sink(gm: GraphModule, permute: Node, perm: list[int], chain: list[Node]) -> None:
    """Rewrites `op_k(... op_1(permute(z), a) ...)` as `permute(op_k'(... op_1'(z, unpermute(a)) ...))`."""
    inverse = list(invert_perm(perm))
    mode = tensor_val(permute).fake_mode
    source: Node = permute.args[0]
    for op in chain:
        def unpermuted(arg: Any, via: Node = permute, like: Node = op) -> Any:
            return source if arg is via else permute_operand(gm, arg, inverse, like, mode)

        with gm.graph.inserting_before(op):
            args = tuple(unpermuted(a) for a in op.args)
            kwargs = {k: unpermuted(v) for k, v in op.kwargs.items()}
            computed = call_like(gm, op.target, args, op, mode, kwargs)
        # The op's users read the result permuted back: the next op of the chain, which the next step
        # rewrites to read `computed` itself, or (after the last op) the region's outside users.
        with gm.graph.inserting_after(computed):
            result = call_like(gm, aten.permute.default, (computed, list(perm)), op, mode)
        op.replace_all_uses_with(result)
        gm.graph.erase_node(op)
        if not permute.users:
            gm.graph.erase_node(permute)
        permute, source = result, computed


def _sink_at(gm: GraphModule, node: Node) -> bool:
    perm = permute_dims(node)
    region = node.meta.get(REGION_KEY)
    if perm is None or region is None or not isinstance(node.args[0], Node):
        return False
    if node.args[0].meta.get(REGION_KEY) != region:
        return False  # a permute of a region input is a leading alias already (the bookend trims it)
    chain = _chain(node, perm, region)
    if chain is None:
        return False
    add_note(gm, NOTE.format(permute=node.name, ops=", ".join(op.name for op in chain)))
    _sink(gm, node, perm, chain)
    return True


def sink_permutes(gm: GraphModule) -> GraphModule:
    """Moves each qualifying in-region permute below its pointwise consumers (module docstring)."""
    sunk = rewrite_to_fixpoint(gm, _sink_at)
    if sunk:
        log.debug("dynamo_nvf: sank %d permute(s) below pointwise ops onto region outputs", sunk)
    return gm
