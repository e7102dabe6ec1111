"""Unpermute pass: a region's sum of a permute sums the permute's input over the same dims.

Why: ConvNeXt's blocks run their LayerNorm channels-last, so a block's backward region computes dx in
[N, H, W, C] and then the depthwise conv's bias gradient as `sum(permute(dx, [0, 3, 1, 2]), [0, 2, 3])`.
nvFuser 0.2.36 cannot join that permuted reduction with the norm backward's reductions over
[N, H, W, C]. It segments the region, and the first segment writes three f32 [N, H, W, C]
intermediates for the second to read. On an H100 (scripts/region_segments_dump.py, 2026-11-24) each
such region of a ConvNeXt-T-style training step ran a 27 us reduction kernel and a 34 us inner-outer
persistent kernel. Inductor ran about 10 us for the same work.

`sum(dx, [0, 1, 2])` is the same sum: the permute only renames the dims. The rewrite applies where
the sum keeps its dims in the order the permute's input has them (no permute of the result is
needed; keepdim=False), and where a reduction of the region that reads no permute reads a tensor
shaped like the permute's input and computed from it (taken before any rewrite): the rewrite then makes the region's
reductions agree. A norm's bias gradient of a tangent permuted into the norm's layout already agrees
and is left alone. Values
are the same up to the order of the summation.

Only regions whose rewritten sum runs over at least `min_rows` rows (the product of the summed dims,
N*H*W) are rewritten, and each rewritten sum carries `node.meta[UNPERMUTED_KEY]`: split_norm_backward
then gives that region's column sums a region of their own at any size (Settings.unpermute_reductions
says why both, and why not at small sizes without CUDA graphs).

Pure on annotations: GraphModule in (partitioned, `node.meta[REGION_KEY]`), GraphModule out.
"""

from __future__ import annotations

import logging
import math
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import keeps_reduced_dims
from dynamo_nvf.ops.metadata import static_shape, static_sizes, tensor_val
from dynamo_nvf.passes.partition import regions_of

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: node.meta key of a sum this pass rewrote (split_norm_backward splits its region at any size).
UNPERMUTED_KEY = "nvf_unpermuted"


def _permute_dims(node: Node) -> Optional[list[int]]:
    """The dims of a permute node, normalised to be non-negative; None for anything else."""
    if node.op != "call_function" or node.target is not aten.permute.default:
        return None
    val = node.meta.get("val")
    dims = node.args[1] if len(node.args) > 1 else None
    if not isinstance(val, torch.Tensor) or not isinstance(dims, (list, tuple)):
        return None
    rank = val.dim()
    if not all(isinstance(d, int) for d in dims) or len(dims) != rank:
        return None
    return [d % rank for d in dims]


def unpermuted_dims(perm: list[int], reduced: list[int]) -> Optional[list[int]]:
    """For `sum(permute(x, perm), reduced)`: the dims of x to sum instead, when the dims the sum keeps
    come out in x's order (so the two results are equal, element for element); else None."""
    rank = len(perm)
    if rank == 0:
        return None
    reduced = sorted({d % rank for d in reduced})
    kept_in_result = [perm[i] for i in range(rank) if i not in reduced]
    if kept_in_result != sorted(kept_in_result):
        return None
    return sorted(perm[d] for d in reduced)


def _sum_dims(node: Node) -> Optional[list[int]]:
    """The dims of a `sum.dim_IntList` without keepdim, else None."""
    if node.op != "call_function" or node.target is not aten.sum.dim_IntList:
        return None
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if keeps_reduced_dims(node) or not isinstance(dims, (list, tuple)) or not dims or not all(isinstance(d, int) for d in dims):
        return None
    return list(dims)


def _reads_permute(node: Node) -> bool:
    arg = node.args[0] if node.args else None
    return isinstance(arg, Node) and _permute_dims(arg) is not None


def _plain_reductions(members: list[Node]) -> list[Node]:
    """The region's reductions that read no permute: the layout the rewrite brings the other sums to.
    Taken once per region, before any rewrite."""
    return [n for n in members if n.op == "call_function" and not _reads_permute(n)
            and n.target in (aten.sum.dim_IntList, aten.var_mean.correction, aten.amax.default)]


def _agrees(base: Node, base_shape: list, plain: list[Node], members: list[Node]) -> bool:
    """True when a permute-free reduction reads a tensor shaped like `base` in `base`'s own dim order:
    one connected to `base` (upstream or downstream, inside the region) without a permute between.
    Shape alone could match another layout where C == H == W (a tangent's NCHW next to NHWC sums)."""
    inside = set(members)
    related: set[Node] = set()
    stack = [base]
    while stack:
        node = stack.pop()
        if node in related:
            continue
        related.add(node)
        if node is not base and _permute_dims(node) is not None:
            continue  # a permute changes the dim order: what lies beyond it is another layout
        stack.extend(n for n in node.all_input_nodes if n in inside and _permute_dims(n) is None)
        stack.extend(u for u in node.users if u in inside and _permute_dims(u) is None)
    return any(static_shape(n.args[0]) == tuple(base_shape) and n.args[0] in related for n in plain)


def _rewrite(gm: GraphModule, node: Node, members: list[Node], plain: list[Node], min_rows: int) -> bool:
    dims = _sum_dims(node)
    permute = node.args[0] if node.args else None
    perm = _permute_dims(permute) if isinstance(permute, Node) and permute in members else None
    if dims is None or perm is None:
        return False
    base = permute.args[0]
    base_val = tensor_val(base)
    base_shape = static_sizes(base_val) if base_val is not None else None
    if base_shape is None:  # dynamic shapes: left as they are
        return False
    if not _agrees(base, base_shape, plain, members):
        return False  # nothing to agree with
    new_dims = unpermuted_dims(perm, dims)
    if new_dims is None or math.prod(int(base_shape[d]) for d in new_dims) < min_rows:
        return False
    mode = getattr(base_val, "fake_mode", None)
    if mode is None:
        return False
    kwargs = {k: v for k, v in node.kwargs.items() if k == "dtype"}
    with mode:
        new_val = aten.sum.dim_IntList(base_val, new_dims, False, **kwargs)
    out_val = tensor_val(node)
    if out_val is None or list(new_val.shape) != list(out_val.shape) \
            or new_val.dtype != out_val.dtype:
        return False
    with gm.graph.inserting_before(node):
        summed = gm.graph.call_function(aten.sum.dim_IntList, (base, new_dims, False), kwargs)
    summed.meta.update({k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")})
    summed.meta["val"] = new_val
    summed.meta[UNPERMUTED_KEY] = True
    node.replace_all_uses_with(summed)
    gm.graph.erase_node(node)
    if not permute.users:
        gm.graph.erase_node(permute)
    return True


def unpermute_reductions(gm: GraphModule, min_rows: int = 1) -> GraphModule:
    """Rewrites each region's sums of permutes, over at least `min_rows` rows, where that makes the
    region's reductions agree."""
    changed = 0
    for members in regions_of(gm).values():
        plain = _plain_reductions(members)
        for node in list(members):
            if getattr(node, "_erased", False):
                continue
            changed += _rewrite(gm, node, members, plain, min_rows)
    if changed:
        gm.graph.lint()
        gm.recompile()
        log.debug("dynamo_nvf: %d sum(s) of permutes now sum the permute's input", changed)
    return gm
