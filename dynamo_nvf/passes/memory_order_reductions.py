"""Memory-order pass: a region's reduction of a tensor whose memory order disagrees with its logical order
reduces a permute of it into memory order: `mean(x, [2, 3])` of a channels-last [N, C, H, W] tensor
becomes `mean(permute(x, [0, 2, 3, 1]), [1, 2])`.

Why: nvFuser 0.2.36's reduction scheduler tells an inner reduction from an outer one by the reduced
tensor's logical dims, not by its inputs' allocation. ConvNeXt's head averages a channels-last
[2, 192, 28, 28] tensor over H and W: logically the innermost dims, but in memory C is innermost. nvFuser
scheduled it as an inner reduction, each warp reading one channel's pixels 384 bytes apart (grid 96,
block 128x4), 5.5 us on an H100 (scripts/region_scoreboard.py, 2026-11-25), against inductor's split
reduction at 4.5 us for the whole region (mean and LayerNorm). Once the reduced dims are in memory
order, nvFuser sees the outer reduction the memory holds.

The rewrite applies where it changes which of the two nvFuser sees: the innermost dim of size > 1 is
reduced in one order and kept in the other. Only sums, means, amax and amin (a var_mean over a
channels-last C is LayerNorm2d: hoist_permutes' strided rule handles those, and nvFuser 0.2.36 failed
its backward written over dim 1). The result is the same tensor with the layout eager gives it: only
where the kept dims of size > 1 come out of the permuted reduction in their logical order (a mean over
H and W keeps [N, C] either way); a sum over W alone of a channels-last tensor, whose NHWC view keeps
[N, H, C], is left alone, since putting C back before H would change the result's strides. With
keepdim, a permute puts the reduced size-1 dims back in place. Values are the same up to the order
of summation.

Forward and inference graphs only. In backward graphs the sums it would rewrite are ConvNeXt's
column sums of channels-last gradients (a convolution's bias, a norm's weight), which
unpermute_reductions and split_norm_backward already plan; rewriting them without the split measured
+3% GPU time per ConvNeXt training step at the small batch, and one such region failed nvFuser
0.2.36's compile (H100, 2026-11-24; Settings.unpermute_reductions).

Pure on annotations: GraphModule in (partitioned, `node.meta[REGION_KEY]`), GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
from torch._prims_common import invert_perm
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import keeps_reduced_dims, reduced_dims
from dynamo_nvf.ops.metadata import memory_order, static_sizes, tensor_val
from dynamo_nvf.passes import add_note, call_like, rewrite_to_fixpoint
from dynamo_nvf.passes.partition import REGION_KEY

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: Reductions with (input, dims, keepdim) arguments that this pass rewrites.
LIST_REDUCTIONS = frozenset({aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.amin.default})

#: node.meta key of a reduction this pass wrote (it reads memory order; never rewritten again).
MEMORY_ORDER_KEY = "nvf_memory_order"

#: The note explain() shows for each rewrite (graph plan's `rewrites`).
NOTE = ("{op} {name}: reduces its input permuted {perm} into memory order, so nvFuser schedules the "
        "{kind} reduction the memory holds")


def misread_order(sizes: list[int], order: list[int], dims: list[int]) -> bool:
    """Whether the innermost non-trivial dim is reduced in logical order and kept in memory order (or
    the reverse): nvFuser then schedules an inner reduction where memory holds an outer one."""
    logical = [d for d in range(len(sizes)) if sizes[d] != 1]
    physical = [d for d in order if sizes[d] != 1]
    if len(logical) < 2:
        return False
    return (logical[-1] in dims) != (physical[-1] in dims)


def _rewrite_at(gm: GraphModule, node: Node) -> bool:
    if node.op != "call_function" or node.target not in LIST_REDUCTIONS or node.meta.get(MEMORY_ORDER_KEY):
        return False
    src = node.args[0] if node.args else None
    region = node.meta.get(REGION_KEY)
    val, out = tensor_val(src) if isinstance(src, Node) else None, tensor_val(node)
    if region is None or val is None or out is None or getattr(val, "fake_mode", None) is None:
        return False
    sizes = static_sizes(val)
    if sizes is None or val.dim() < 2:
        return False
    dims = reduced_dims(node)
    order = memory_order(val)
    if not dims or len(dims) == val.dim() or order == sorted(order) or not misread_order(sizes, order, dims):
        return False
    keepdim = keeps_reduced_dims(node)
    new_dims = sorted(order.index(d) for d in dims)
    kept = [order[i] for i in range(val.dim()) if i not in new_dims]
    if [d for d in kept if sizes[d] != 1] != sorted(d for d in kept if sizes[d] != 1):
        return False  # a permute of the result would change the layout eager gives it (and its users)
    back: Optional[list[int]] = None
    if keepdim:  # the reduced size-1 dims back in place: strides of size-1 dims only
        back = list(invert_perm(order))
    elif kept != sorted(kept):  # size-1 kept dims out of place
        back = [kept.index(d) for d in sorted(kept)]
    mode = val.fake_mode
    kwargs = {k: v for k, v in node.kwargs.items() if k == "dtype"}
    with gm.graph.inserting_before(node):
        permuted = call_like(gm, aten.permute.default, (src, order), node, mode)
        reduced = call_like(gm, node.target, (permuted, new_dims, keepdim), node, mode, kwargs)
        result = reduced if back is None else call_like(gm, aten.permute.default, (reduced, back), node, mode)
    new_val = tensor_val(result)
    if list(new_val.shape) != list(out.shape) or new_val.dtype != out.dtype:
        for added in (result, reduced, permuted):  # result may be reduced itself
            if not added._erased and not added.users:
                gm.graph.erase_node(added)
        return False
    reduced.meta[MEMORY_ORDER_KEY] = True
    node.replace_all_uses_with(result)
    gm.graph.erase_node(node)
    kind = "outer" if [d for d in order if sizes[d] != 1][-1] not in dims else "inner"  # as misread_order
    add_note(gm, NOTE.format(op=node.target.__name__.split(".")[0], name=node.name, perm=order, kind=kind))
    return True


def reduce_in_memory_order(gm: GraphModule) -> GraphModule:
    """Rewrites each region reduction whose input's memory order nvFuser would misread (module docstring)."""
    changed = rewrite_to_fixpoint(gm, _rewrite_at)  # a rewritten reduction carries MEMORY_ORDER_KEY
    if changed:
        log.debug("dynamo_nvf: %d reduction(s) now read their input in memory order", changed)
    return gm
