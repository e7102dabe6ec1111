"""Split pass: a region's sums over its per-row results (a loss's mean over tokens) become a region
of their own.

Why: cross-entropy's region computes each token's loss with row reductions over the vocabulary (one
persistent kernel) and then the mean over tokens: a sum of the losses, a count of the valid tokens
and their quotient. nvFuser 0.2.36 cannot join those sums to the row kernel, and the leftover tail
then splits three ways: a training step's loss region ran as 4 kernels (8.6 us on an H100 at 256 x
8192 bf16), where the same tail as a fusion of its own is one reduction kernel of 1.7 us
(scripts/repros/ce_tail.py, session 20; a segment_set in front of the tail, as segment_norm_backward
does, still gave 4). Inductor runs the loss in 2 kernels. Cut here, the loss is 2 kernels in two
region calls: one more call's host time without CUDA graphs (a few us with direct launch), none
under graphs.

What moves: every full reduction (a sum or mean over all dims) of the region whose input holds one
value per row of a row reduction in the same region (it reduces the last dim of a tensor of rank 2 or
more), with everything of the region downstream of those reductions, provided all of it is that
small, and the small pointwise nodes upstream that only the moved ones read (the per-row loss's
negation and its mask by the valid tokens). The new region reads the per-row values the old one
now writes (a few hundred floats). nvFuser makes one kernel of the tail only where its two sums share
a producer: the loss's sum reads the valid mask the count sums (decompositions.py masks it so); read
apart, the same sums were still three kernels (ce_tail.py, variants R1 and R2).

Pure on annotations: GraphModule in (partitioned, `node.meta[REGION_KEY]`), GraphModule out.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import DIM_REDUCTIONS, reduced_dims
from dynamo_nvf.ops.metadata import is_metadata, tensor_val
from dynamo_nvf.passes import add_note
from dynamo_nvf.passes.partition import REGION_KEY, SPLIT_KEY, reach, regions_of

aten = torch.ops.aten

#: Reductions over every dim of their input (`dim` None or all dims).
_FULL_REDUCTIONS = (aten.sum.default, aten.mean.default, aten.sum.dim_IntList, aten.mean.dim)


def _numel(node: object) -> Optional[int]:
    val = tensor_val(node) if isinstance(node, Node) else None
    if val is None or not all(isinstance(s, int) for s in val.shape):
        return None
    return math.prod(val.shape)


def _rows_of_row_reduction(node: Node) -> Optional[int]:
    """The number of rows a reduction over the last dim (of a rank >= 2 tensor) leaves, else None."""
    if node.op != "call_function" or node.target not in DIM_REDUCTIONS:
        return None
    x = tensor_val(node.args[0]) if isinstance(node.args[0], Node) else None
    if x is None or x.dim() < 2 or reduced_dims(node) != [x.dim() - 1]:
        return None
    if not all(isinstance(s, int) for s in x.shape):
        return None
    return math.prod(x.shape[:-1])


def _is_full_reduction(node: Node) -> bool:
    if node.op != "call_function" or node.target not in _FULL_REDUCTIONS or not isinstance(node.args[0], Node):
        return False
    x = tensor_val(node.args[0])
    if x is None or x.dim() < 1:
        return False
    if node.target in (aten.sum.default, aten.mean.default):
        return True
    return sorted(reduced_dims(node)) == list(range(x.dim()))


def _small_pointwise(node: Node, rows: int) -> bool:
    """A deterministic pointwise or metadata node of at most `rows` elements."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    tags = node.target.tags
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    numel = _numel(node)
    return (numel is not None and numel <= rows
            and (torch.Tag.pointwise in tags or is_metadata(node) or node.target is aten._to_copy.default))


def _pull_exclusive_feeders(moved: set[Node], members: set[Node], rows: int) -> None:
    """Adds to `moved` the small pointwise nodes of the region that only moved nodes read, repeatedly."""
    grown = True
    while grown:
        grown = False
        for node in members - moved:
            if node.users and all(u in moved for u in node.users) and _small_pointwise(node, rows):
                moved.add(node)
                grown = True


def _copy_constants(gm: GraphModule, moved: set[Node], members: set[Node], region_id: int) -> None:
    """Nodes of the old region that read no tensor (a `scalar_tensor` zero) and that moved nodes read
    are copied into the new region, so that it does not read them from the old one."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for user in sorted(moved, key=order.__getitem__):
        for source in list(user.all_input_nodes):
            if source in members and source not in moved and not source.all_input_nodes and source.op == "call_function":
                with gm.graph.inserting_before(user):
                    copy = gm.graph.node_copy(source)
                copy.meta[REGION_KEY] = region_id
                user.replace_input_with(source, copy)


def split_row_tails(gm: GraphModule) -> GraphModule:
    """Moves each region's full reductions of per-row values, and what follows them, to a new region."""
    regions = regions_of(gm)
    next_id = max(regions, default=-1) + 1
    changed = False
    for region_id, nodes in list(regions.items()):
        members = set(nodes)
        rows = {r for r in (_rows_of_row_reduction(n) for n in nodes) if r is not None}
        tails = [n for n in nodes if _is_full_reduction(n) and _numel(n.args[0]) in rows]
        if not tails:
            continue
        moved: set[Node] = set(tails)
        for node in tails:
            moved |= reach(node, members)
        small = max(rows)
        if any(_numel(n) is None or _numel(n) > small for n in moved):
            continue  # something big follows the sums: not a tail
        _pull_exclusive_feeders(moved, members, small)
        if len(moved) == len(members):
            continue
        for node in nodes:
            if node in moved:
                node.meta[REGION_KEY] = next_id
        _copy_constants(gm, moved, members, next_id)
        for node in tails:
            node.meta.setdefault(SPLIT_KEY, []).append(
                (node.args[0].name, f"split from the region of {nodes[0].name}: its sums over {small} per-row "
                                    f"values run as a kernel of their own (split_row_tails)"))
        add_note(gm, f"split_row_tails: {', '.join(n.name for n in tails)} over {small} per-row values moved "
                     f"to a region of their own (one kernel, not three after the row kernel)")
        next_id += 1
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm
