"""Unflatten pass: a region's reduction of a flattening view reduces the tensor the view was taken of.

Why: nvFuser's schedulers take a fusion whose reductions all share one iteration domain; a reshape
between one reduction and another (`sum(view(dy, [B*T, C]), [0])`, a linear layer's bias gradient
next to a LayerNorm backward over `[B, T, C]`) makes the fusion's domains disagree, and nvFuser's
segmenter then splits the region into several kernels. On an H100 (nvfuser_direct 0.2.36,
scripts/nvf_trace.py, 2026-11-23) every one of the 6 regions nvFuser segmented in a BERT-style
training step was such a region, and segmenting them took 7.3 s of a 20.5 s first call: the
segmenter tries thousands of merges (checkCanSchedule) per region. Reading `dy` directly, over the
dims the view merged, is the same sum without the reshape.

The rewrite applies inside a region, where it makes the region's reductions agree: a reduction of
the region that reads no flattening view reads a tensor shaped like the view's input (a
cross-entropy region whose reductions read `[B*T, V]`, one of them through a view of `[B, T, V]`,
is left alone: rewriting that one would create the disagreement). The view must only merge neighbouring dims (and add or drop
size-1 dims): each dim of the view is then a run of dims of its input, so reducing a view dim is
reducing its run. The result is viewed back to the original shape where the two differ (a trailing
view the bookend pass trims). Values are the same up to the order of the summation.

Pure on annotations: GraphModule in (partitioned, `node.meta[REGION_KEY]`), GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import DIM_REDUCTIONS, is_reduction, keeps_reduced_dims
from dynamo_nvf.ops.metadata import static_shape, static_sizes
from dynamo_nvf.passes.partition import regions_of

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: Views that may merge dims (what a flatten or a `reshape` lowers to in an aten graph).
FLATTENING_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})
#: The region reductions (ops.lowerings' list) this pass rewrites: those over a list of dims whose result
#: depends only on which elements are reduced together; var and var_mean are left as they are.
DIM_LIST_REDUCTIONS = DIM_REDUCTIONS - {aten.var_mean.correction, aten.var.correction}


def merge_groups(src: Sequence[int], dst: Sequence[int]) -> Optional[list[list[int]]]:
    """For a view of shape `dst` of a tensor of shape `src`: the run of `src` dims each `dst` dim
    holds, when the view only merges neighbouring dims (size-1 dims may appear or vanish); else None.

    A size-1 `src` dim joins the run of the `dst` dim next to it (or none where `dst` has no dims).
    """
    groups: list[list[int]] = []
    i = 0
    for size in dst:
        run: list[int] = []
        product = 1
        if size == 1:
            while i < len(src) and src[i] == 1:  # a size-1 view dim holds the size-1 dims here
                run.append(i)
                i += 1
            groups.append(run)
            continue
        while i < len(src) and product < size:
            product *= src[i]
            run.append(i)
            i += 1
        if product != size:
            return None  # the view splits a dim (or the sizes disagree)
        while i < len(src) and src[i] == 1 and (len(groups) + 1 == len(dst) or dst[len(groups) + 1] != 1):
            run.append(i)  # trailing size-1 dims stay with this run
            i += 1
        groups.append(run)
    if i != len(src):
        if any(src[d] != 1 for d in range(i, len(src))):
            return None
        if groups:
            groups[-1].extend(range(i, len(src)))
        else:
            return None
    return groups


def _reduced_view_dims(node: Node, rank: int) -> Optional[list[int]]:
    if node.target is aten.sum.default:
        return list(range(rank))
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    if not all(isinstance(d, int) for d in dims):
        return None
    return sorted({d % rank if rank else 0 for d in dims})


def _rewrite(gm: GraphModule, node: Node) -> bool:
    """Rewrites one reduction of a flattening view in place; False where it does not apply."""
    if not _reads_flattening_view(node):
        return False
    view = node.args[0]
    base = view.args[0]
    if not isinstance(base, Node):
        return False
    base_val, view_val, out_val = base.meta.get("val"), view.meta.get("val"), node.meta.get("val")
    if not all(isinstance(v, torch.Tensor) for v in (base_val, view_val, out_val)):
        return False
    mode = getattr(base_val, "fake_mode", None)
    src, dst = static_sizes(base_val), static_sizes(view_val)
    if mode is None or src is None or dst is None or len(src) == 0:
        return False
    groups = merge_groups(src, dst)
    reduced = _reduced_view_dims(node, len(dst))
    if groups is None or reduced is None:
        return False
    base_dims = sorted(d for j in reduced for d in groups[j])
    if not base_dims or len(groups) == len(src) and all(g == [j] for j, g in enumerate(groups)):
        return False  # only size-1 dims reduced, or the view changes nothing
    keepdim = keeps_reduced_dims(node)
    if node.target is aten.sum.default:
        args: tuple = (base, base_dims, False)
        kwargs = {k: v for k, v in node.kwargs.items() if k == "dtype"}
        target = aten.sum.dim_IntList
    else:
        args = (base, base_dims, keepdim)
        kwargs = {k: v for k, v in node.kwargs.items() if k not in ("dim", "keepdim")}
        target = node.target
    with mode:
        new_val = target(base_val, *args[1:], **kwargs)
    inherited = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}  # its region, ...
    with gm.graph.inserting_before(node):
        reduced_node = gm.graph.call_function(target, args, kwargs)
        reduced_node.meta.update(inherited)
        reduced_node.meta["val"] = new_val
        result = reduced_node
        if list(new_val.shape) != list(out_val.shape):
            result = gm.graph.call_function(aten.view.default, (reduced_node, list(out_val.shape)))
            result.meta.update(inherited)
            with mode:
                result.meta["val"] = aten.view.default(new_val, list(out_val.shape))
    if result.meta["val"].dtype != out_val.dtype:  # never expected; keep the graph as it was
        gm.graph.erase_node(result)
        if result is not reduced_node:
            gm.graph.erase_node(reduced_node)
        return False
    node.replace_all_uses_with(result)
    gm.graph.erase_node(node)
    if not view.users:
        gm.graph.erase_node(view)
    return True


def _reads_flattening_view(node: Node) -> bool:
    view = node.args[0] if node.args else None
    return isinstance(view, Node) and view.op == "call_function" and view.target in FLATTENING_VIEWS


def _plain_shapes(members: list[Node]) -> set[tuple]:
    """Static shapes the region's reductions that read no flattening view reduce (symbolic ones,
    which cannot be hashed nor compared without a guard, left out). A rewrite only adds the shape it
    checked was here already, so this is taken once per region."""
    shapes = {static_shape(n.args[0]) for n in members if is_reduction(n) and not _reads_flattening_view(n)}
    shapes.discard(None)
    return shapes


def _makes_region_agree(node: Node, plain: set[tuple]) -> bool:
    """True when a reduction of the region that reads no flattening view reads a tensor shaped like
    the view's input (so reducing that input instead brings `node` in line with it)."""
    if not _reads_flattening_view(node):
        return False
    base_shape = static_shape(node.args[0].args[0])
    return base_shape is not None and base_shape in plain  # dynamic shapes: left as they are


def unflatten_reductions(gm: GraphModule) -> GraphModule:
    """Rewrites each region's reductions of flattening views where that makes the region's
    reductions agree (see the module docstring)."""
    changed = 0
    for members in regions_of(gm).values():
        plain = _plain_shapes(members)
        for node in members:
            if getattr(node, "_erased", False):  # a view an earlier rewrite of this region removed
                continue
            if node.op == "call_function" and (node.target in DIM_LIST_REDUCTIONS or node.target is aten.sum.default):
                if _makes_region_agree(node, plain):
                    changed += _rewrite(gm, node)
    if changed:
        gm.graph.lint()
        gm.recompile()
        log.debug("dynamo_nvf: %d reduction(s) of flattening views now reduce the unflattened tensor", changed)
    return gm
