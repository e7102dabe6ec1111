"""One-hot sums: the sum over classes of a one-hot mask's value is that value where the index is valid.

Why: cross-entropy's backward (our nll_loss decomposition, then log-softmax's) computes
`sum(where(arange(C) == target, g, 0), [1], keepdim=True)`: a reduction over the whole [rows, vocab]
tensor to find a number known without one. It keeps a row reduction in the backward region, which
nvFuser then schedules as a persistent kernel over rows of `vocab` floats (and, beside a bias
gradient's column sum, as an inner-outer persistent kernel: 167 us on an H100 for a BERT-style MLM
head at 4096 x 8192, against inductor's 70 us; scripts/block_kernels.py, 2026-11-24). Without the
row reduction the backward is pointwise, plus the bias gradient's column sum.

The rewrite: `sum(where(eq(a, b), x, 0), [d])`, where `a` holds 0..C-1 along dim d (an `arange(C)`
unsqueezed to that dim) and `b` and `x` are constant along d (size 1 there), is
`where((b >= 0) & (b < C), x, 0)`: exactly one term is x when b is a class, none otherwise. Exact
up to the sign of a zero (x = -0.0 sums to +0.0).

It runs on aot_autograd's joint graph, before the min-cut partitioner (as inductor's joint-graph
passes do): only there is the backward's `arange` visible; after partitioning it may be a saved
input. Pure: GraphModule in, GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import keeps_reduced_dims
from dynamo_nvf.ops.metadata import same_shape, tensor_val, whole_arange_length

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

def _classes_along(node: Node, dim: int, rank: int) -> Optional[int]:
    """C when `node` is `arange(C)` unsqueezed so that its values run along `dim` of a rank-`rank`
    broadcast (size 1 on every other dim), else None."""
    val = tensor_val(node)
    if val is None or val.dim() > rank:
        return None
    shape = [1] * (rank - val.dim()) + list(val.shape)
    source = node
    while source.op == "call_function" and source.target is aten.unsqueeze.default:
        source = source.args[0]
    length = whole_arange_length(source) if isinstance(source, Node) else None
    if length is None or shape[dim] != length or any(s != 1 for i, s in enumerate(shape) if i != dim):
        return None
    return length


def _constant_along(node: object, dim: int, rank: int) -> bool:
    """True when `node` broadcasts along `dim` of a rank-`rank` result (size 1 there, or absent)."""
    if not isinstance(node, Node):
        return isinstance(node, (int, float, bool))
    val = tensor_val(node)
    if val is None or val.dim() > rank:
        return False
    offset = rank - val.dim()
    return dim < offset or val.shape[dim - offset] == 1


def _is_zero(node: object) -> bool:
    if isinstance(node, (int, float)):
        return node == 0
    if isinstance(node, Node) and node.op == "call_function" and node.target is aten.scalar_tensor.default:
        return node.args[0] == 0
    return False


def _match(node: Node) -> Optional[tuple[Node, object, int, int, bool]]:
    """(indices, value, dim, C, keepdim) for a one-hot sum, else None."""
    if node.op != "call_function" or node.target is not aten.sum.dim_IntList:
        return None
    masked = node.args[0]
    dims = node.args[1] if len(node.args) > 1 else None
    keepdim = keeps_reduced_dims(node)
    out, src = tensor_val(node), tensor_val(masked)
    if (not isinstance(masked, Node) or not isinstance(dims, (list, tuple)) or len(dims) != 1
            or out is None or src is None or "dtype" in node.kwargs or out.dtype != src.dtype):
        return None
    rank = src.dim()
    dim = dims[0] % rank if rank else 0
    if masked.op != "call_function" or masked.target is not aten.where.self or not _is_zero(masked.args[2]):
        return None
    mask, value = masked.args[0], masked.args[1]
    if not isinstance(mask, Node) or mask.op != "call_function" or mask.target is not aten.eq.Tensor:
        return None
    for classes, indices in (mask.args, tuple(reversed(mask.args))):
        length = _classes_along(classes, dim, rank) if isinstance(classes, Node) else None
        index_val = tensor_val(indices)
        if (length is not None and index_val is not None and not index_val.dtype.is_floating_point
                and index_val.dtype != torch.bool and _constant_along(indices, dim, rank)
                and _constant_along(value, dim, rank)):
            return indices, value, dim, length, keepdim
    return None


def _fake_mode(*nodes: object):
    for node in nodes:
        val = tensor_val(node)
        if val is not None and getattr(val, "fake_mode", None) is not None:
            return val.fake_mode
    return None


def _call(gm: GraphModule, target, args: tuple, mode, made: list[Node]) -> Node:
    """A new node before the insertion point, with its fake value."""
    node = gm.graph.call_function(target, args)
    made.append(node)
    with mode:
        node.meta["val"] = target(*[tensor_val(a) if isinstance(a, Node) else a for a in args])
    return node


def simplify_one_hot_sums(gm: GraphModule) -> GraphModule:
    """Replaces each sum of a one-hot mask's broadcast value with the value where the index is valid."""
    changed = 0
    for node in list(gm.graph.nodes):
        match = _match(node)
        if match is None:
            continue
        indices, value, dim, length, keepdim = match
        masked = node.args[0]
        mode = _fake_mode(node, masked, indices, value)
        if mode is None:
            continue
        zero, out, made = masked.args[2], tensor_val(node), []
        with gm.graph.inserting_before(node):
            valid = _call(gm, aten.logical_and.default,
                          (_call(gm, aten.ge.Scalar, (indices, 0), mode, made),
                           _call(gm, aten.lt.Scalar, (indices, length), mode, made)), mode, made)
            picked = _call(gm, aten.where.self, (valid, value, zero), mode, made)
            kept = list(tensor_val(masked).shape)
            kept[dim] = 1
            if all(isinstance(s, int) for s in kept):
                result = _call(gm, aten.expand.default, (picked, kept), mode, made)
            else:  # a symbolic size in an expand's arguments would need its size node: only where none is
                result = picked if same_shape(tensor_val(picked).shape, kept) else None
            if result is not None and not keepdim:
                result = _call(gm, aten.squeeze.dim, (result, dim), mode, made)
        if (result is None or not same_shape(tensor_val(result).shape, out.shape)
                or tensor_val(result).dtype != out.dtype):
            for new in reversed(made):  # not the sum's shape or dtype after all: leave it as it was
                gm.graph.erase_node(new)
            continue
        node.replace_all_uses_with(result)
        gm.graph.erase_node(node)
        for dead in (masked, masked.args[0]):  # the mask and its where, unless still used
            if isinstance(dead, Node) and not dead.users:
                gm.graph.erase_node(dead)
        changed += 1
    if changed:
        gm.graph.lint()
        gm.recompile()
        log.debug("dynamo_nvf: %d one-hot sum(s) replaced by a where", changed)
    return gm
