"""Hoist a permute above the pointwise ops that feed it inside a region, onto the region's inputs, where
that makes those inputs row-major: `permute(x + bias.view(C, 1, 1), [0, 2, 3, 1])` becomes
`permute(x, [0, 2, 3, 1]) + permute(view(bias, [1, C, 1, 1]), [0, 2, 3, 1])`.

Why: ConvNeXt's LayerNorm regions take a channels-last convolution output, add the convolution's bias
in NCHW order, then permute to NHWC and normalise over C. nvFuser schedules that fusion (input with a
channels-last allocation domain, permute inside) at about half the speed of the same math on the NHWC
view: on an H100 (scripts/repros/ln_shapes.py at commit 2828583, bf16, 2026-11-24) 6.08 against 2.85 us at [2, 96, 56, 56],
3.30 against 2.43 at [2, 192, 28, 28], 6.96 against 3.71 at [8, 192, 28, 28]; the NHWC form is what a
hand-written row-major [N*H*W, C] fusion takes. Once hoisted, each permute reads a region input, so the
bookend pass trims it to a zero-copy alias and nvFuser is handed the row-major NHWC view (or, under the
strided rule below, the strided view with its allocation order).

Only where exact and useful: every op on the way is pointwise (or a dtype-only copy), has the permute
(or the op above it) as its only user and sits in the permute's region; every operand of full shape
is row-major once permuted, and smaller operands broadcast (they get leading size-1 dims, then the
same permute). Where the permuted tensor is normalised over its last dim inside the region (a
LayerNorm2d: a reduction over the permute's last dim), an operand whose permute is strided (an
NCHW-contiguous convolution output, the stem's and the downsampling layer's LayerNorm2d) is hoisted
too: nvFuser then gets the permuted view with its allocation order and schedules the reduction over
channels along contiguous pixels, where a permute inside the fusion makes it read a row of C values
3136 elements apart. On an H100 (2026-11-25, ConvNeXt-style training, bf16, [2, 96, 56, 56]): the
stem's region took 20.1 us in-fusion against inductor's 3.1; the permuted view alone, 3.5
(scripts/repros/convnext_norms.py at commit 2828583). Elementwise math
commutes with a permute, so values are unchanged; the region's outputs are the same nodes as before.

Forward and inference graphs only: in ConvNeXt's training step (H100, 2026-11-24) two backward
regions that the pass had rewritten (LayerNorm backwards with the forward's normalisation recomputed,
several nvFuser segments) failed nvFuser 0.2.36's parallel segment compile (INTERNAL ASSERT,
fusion_kernel_runtime.cpp:476) and ran in eager, as the same regions did when only their
output layouts changed.

Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import same_significant_strides, static_sizes, tensor_val
from dynamo_nvf.ops.lowerings import DIM_REDUCTIONS, is_pointwise, reduced_dims
from dynamo_nvf.passes import add_note, call_like, rewrite_to_fixpoint
from dynamo_nvf.passes.partition import REGION_KEY

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: The note explain() shows for each hoist (graph plan's `rewrites`).
NOTE = "permute {permute}: moved above {op} onto the region's inputs, which it makes row-major"
#: The note for a strided hoist (a norm over the permute's last dim).
NOTE_STRIDED = ("permute {permute}: moved above {op} onto the region's inputs, strided views nvFuser reads "
                "in their allocation order (a norm over the permuted last dim)")


def pointwise_or_cast(node: Node) -> bool:
    """is_pointwise, or a dtype-only copy (elementwise too, but not tagged pointwise)."""
    if node.op == "call_function" and node.target is aten._to_copy.default:
        return set(node.kwargs) <= {"dtype"} and len(node.args) == 1
    return is_pointwise(node)


def permute_dims(node: Node) -> Optional[list[int]]:
    """A permute node's dims, normalized; None for any other node (or symbolic dims)."""
    if node.op != "call_function" or node.target is not aten.permute.default:
        return None
    dims = node.args[1]
    rank = len(dims)
    return [d % rank for d in dims] if all(isinstance(d, int) for d in dims) else None


def _operands(node: Node) -> list[Node]:
    return [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, Node)]


def _can_hoist(node: Node, perm: list[int], region: Any, strided_ok: bool = False) -> bool:
    """Whether `permute(node, perm)` can move above `node` and on up to row-major region inputs (or
    any region inputs, with `strided_ok`)."""
    out = tensor_val(node)
    if out is None or node.meta.get(REGION_KEY) != region or len(node.users) != 1 or not pointwise_or_cast(node):
        return False
    shape = static_sizes(out)
    if shape is None or len(shape) != len(perm):
        return False
    for operand in _operands(node):
        val = tensor_val(operand)
        if val is None:
            return False
        sizes = static_sizes(val)
        if sizes is None or len(sizes) > len(shape):
            return False
        if sizes != shape:  # broadcast: nothing of its layout matters
            continue
        if operand.meta.get(REGION_KEY) == region and pointwise_or_cast(operand) and len(operand.users) == 1:
            if not _can_hoist(operand, perm, region, strided_ok):
                return False
        elif not val.permute(perm).is_contiguous() and (not strided_ok or operand.meta.get(REGION_KEY) == region):
            return False  # strided: only a region input's (an in-region value's permute stays in the fusion)
    return True


#: node.meta key of a permute that a strided hoist moved (or is moving) up a chain toward the inputs.
STRIDED_HOIST_KEY = "nvf_strided_hoist"

#: What may sit between a permute and the reduction that normalises its last dim.
_LAYOUT_ONLY = (aten.clone.default, aten._to_copy.default)


def _normalised_over_last_dim(permute: Node, region: Any) -> bool:
    """Whether the region reduces the permute's result over its last dim (through clones and casts):
    a norm over what the permute moved last."""
    rank = len(permute.args[1])
    todo, seen = [permute], set()
    while todo:
        node = todo.pop()
        for user in node.users:
            if user in seen or user.meta.get(REGION_KEY) != region:
                continue
            seen.add(user)
            if user.target in DIM_REDUCTIONS and reduced_dims(user) == [rank - 1]:
                return True
            if user.op == "call_function" and user.target in _LAYOUT_ONLY:
                todo.append(user)
    return False


def permute_operand(gm: GraphModule, arg: Any, perm: list[int], like: Node, mode: Any) -> Any:
    """An operand of a pointwise op of rank len(perm), permuted by `perm` at the insertion point: a
    smaller operand gets leading size-1 dims first (it broadcasts; by unsqueeze: a view of a value
    computed in the region made ResNet-50's inference head region fail nvFuser 0.2.36's compile,
    "conflict ... 7 vs 1", H100, 2026-11-26); a 0-d tensor stays as it is (ranked
    up, a bf16 op with an f32 scalar tensor would compute in f32, and a CPU scalar would stop being
    one), as does anything not a node. hoist_permutes and sink_permutes both move permutes this way."""
    if not isinstance(arg, Node):
        return arg
    val = tensor_val(arg)
    if val.dim() == 0:
        return arg
    src = arg
    for _ in range(len(perm) - val.dim()):  # unsqueeze, not view: nvFuser's reshape makes size-1 dims
        src = call_like(gm, aten.unsqueeze.default, (src, 0), like, mode)  # that do not broadcast
    return call_like(gm, aten.permute.default, (src, list(perm)), like, mode)


def _hoist(gm: GraphModule, permute: Node, perm: list[int]) -> bool:
    """Rewrites `permute(op(a, b, ...))` as `op(permute(a'), permute(b'), ...)`, a' ranked up with 1s;
    False (the graph as it was) where the permute is read outside its region and the rewrite would
    give it other strides than eager's (a permute of a broadcast of two keepdim reductions, which
    TensorIterator lays out in logical order)."""
    op = permute.args[0]
    mode = tensor_val(op).fake_mode
    first = op.prev  # the new nodes go between it and op
    with gm.graph.inserting_before(op):
        args = tuple(permute_operand(gm, a, perm, permute, mode) for a in op.args)
        kwargs = {k: permute_operand(gm, v, perm, permute, mode) for k, v in op.kwargs.items()}
        replacement = call_like(gm, op.target, args, op, mode, kwargs)
    region = permute.meta.get(REGION_KEY)
    read_outside = any(u.meta.get(REGION_KEY) != region or u.op == "output" for u in permute.users)
    if read_outside and not same_significant_strides(tensor_val(replacement), tensor_val(permute)):
        while op.prev is not first:
            gm.graph.erase_node(op.prev)
        return False
    permute.replace_all_uses_with(replacement)
    gm.graph.erase_node(permute)
    gm.graph.erase_node(op)
    return True


def _hoist_at(gm: GraphModule, node: Node) -> bool:
    perm = permute_dims(node)
    region = node.meta.get(REGION_KEY)
    if perm is None or region is None or not isinstance(node.args[0], Node):
        return False
    op = node.args[0]
    if getattr(tensor_val(op), "fake_mode", None) is None:
        return False
    # A strided hoist checked the whole chain up to the region's inputs once; the permutes it leaves
    # on the way (which feed the next pointwise op, no longer the norm) carry the mark to go on.
    strided_ok = bool(node.meta.get(STRIDED_HOIST_KEY)) or _normalised_over_last_dim(node, region)
    if not _can_hoist(op, perm, region, strided_ok=strided_ok):
        return False
    row_major = not strided_ok or _can_hoist(op, perm, region)  # without strided_ok, the check above said so
    marked = STRIDED_HOIST_KEY in node.meta
    if not row_major:
        node.meta[STRIDED_HOIST_KEY] = True  # call_like copies it onto the permutes that replace this one
    if not _hoist(gm, node, perm):
        if not marked:
            node.meta.pop(STRIDED_HOIST_KEY, None)
        return False
    add_note(gm, (NOTE if row_major else NOTE_STRIDED).format(permute=node.name, op=op.name))
    return True


def hoist_permutes(gm: GraphModule) -> GraphModule:
    """Moves each qualifying in-region permute above its pointwise producers (module docstring)."""
    hoisted = rewrite_to_fixpoint(gm, _hoist_at)
    if hoisted:
        log.debug("dynamo_nvf: hoisted %d permute(s) above pointwise ops onto region inputs", hoisted)
    return gm
