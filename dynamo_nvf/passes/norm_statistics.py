"""Joint-graph pass: a norm's per-row statistics are recomputed in the backward instead of saved.

Why: a training graph's forward returns every tensor its backward needs, and each one costs host time
on every step, in aot_autograd's wrappers (save_for_backward, the backward's unpacking) and, under
CUDA graphs, in cudagraph trees' output and input bookkeeping. Torch's min-cut partitioner counts
bytes, not tensors, and it never recomputes a reduction (`ban_recompute_reductions`), so each
LayerNorm saves its mean and reciprocal std (two [rows, 1] tensors) and each RMSNorm its reciprocal
RMS, next to the norm's input, which the backward reads anyway. These are a fifth of the saved
tensors of a 2-layer GPT-2- or BERT-style model (12 of 65). Recomputed, they cost the backward's norm
region one more row reduction over data it already loads, in the same kernel.

How: the statistic nodes (the reduction over the norm's last dims, its getitems, the epsilon add, the
rsqrt, casts and aliases of them, all one value per row) and the pointwise ops that feed only the
reduction (RMSNorm's square) get `recompute = MUST_RECOMPUTE`, the activation-checkpointing tag the
min-cut partitioner honours: it recomputes them in the backward from the norm's input. Nothing else is
forced; min-cut still decides what to save.

Pure on annotations: GraphModule in (aot_autograd's joint graph), GraphModule out; it runs before
the partitioner, as inductor's joint-graph passes do.
"""

from __future__ import annotations

import logging
import operator
from typing import Optional

import torch
from torch.fx import GraphModule, Node
from torch.utils.checkpoint import CheckpointPolicy

from dynamo_nvf.ops.metadata import tensor_val

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: Row statistics a norm's decomposition computes: LayerNorm's var_mean, RMSNorm's mean of squares.
STATISTIC_REDUCTIONS = (aten.var_mean.correction, aten.mean.dim)
#: What may sit between such a reduction and the statistic the backward reads (one value per row).
_STATISTIC_FOLLOWERS = (aten.add.Tensor, aten.add.Scalar, aten.rsqrt.default, aten.sqrt.default,
                        aten.reciprocal.default, aten._to_copy.default, aten.alias.default,
                        aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar)
#: What may feed a mean of squares: the square of the norm's (upcast) input.
_SQUARES = (aten.pow.Tensor_Scalar, aten.mul.Tensor)
#: node.meta key on the statistic nodes (kept on their copies in the backward graph): passes that
#: look for a backward's own row reductions (split_reductions) tell these recomputed ones apart.
NORM_STATISTIC_KEY = "nvf_norm_statistic"
#: gm.meta key: how many norms' statistics the pass tagged (backend.py notes it in the backward plan).
RECOMPUTED_STATISTICS_KEY = "nvf_recomputed_norm_statistics"


def _numel(node: object) -> Optional[int]:
    val = tensor_val(node) if isinstance(node, Node) else None
    if val is None or not all(isinstance(s, int) for s in val.shape):
        return None
    return val.numel()


def _backward_nodes(gm: GraphModule) -> set[Node]:
    """Nodes that depend on a tangent: the backward half of the joint graph."""
    backward: set[Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder" and node.name.startswith("tangents"):
            backward.add(node)
        elif any(isinstance(a, Node) and a in backward for a in node.all_input_nodes):
            backward.add(node)
    return backward


def _row_reduction(node: Node) -> Optional[int]:
    """The per-row numel of a statistic reduction over the last dims of its input, else None."""
    if node.op != "call_function" or node.target not in STATISTIC_REDUCTIONS:
        return None
    source = node.args[0]
    src = tensor_val(source) if isinstance(source, Node) else None
    if src is None or src.dim() < 1 or not src.dtype.is_floating_point:
        return None
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if not isinstance(dims, (list, tuple)) or not dims:
        return None
    rank = src.dim()
    reduced = sorted(d % rank for d in dims)
    if reduced != list(range(rank - len(reduced), rank)):
        return None  # not the trailing dims: not a norm's row statistic
    out = node.meta.get("val")
    first = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(first, torch.Tensor) or not all(isinstance(s, int) for s in first.shape):
        return None
    if node.target is aten.mean.dim and not _is_square(source):
        return None  # a plain mean is not RMSNorm's statistic
    return first.numel()


def _is_square(node: object) -> bool:
    if not isinstance(node, Node) or node.op != "call_function" or node.target not in _SQUARES:
        return False
    if node.target is aten.pow.Tensor_Scalar:
        return node.args[1] == 2
    return len(node.args) == 2 and node.args[0] is node.args[1]


def _statistic_closure(reduction: Node, rows: int, backward: set[Node]) -> list[Node]:
    """The reduction and every forward node downstream of it that is one value per row and computed
    from it (and scalars) alone."""
    closure = [reduction]
    members = {reduction}
    frontier = [reduction]
    while frontier:
        node = frontier.pop()
        for user in node.users:
            if user in members or user in backward or user.op != "call_function":
                continue
            if user.target is not operator.getitem and (user.target not in _STATISTIC_FOLLOWERS
                                                         or _numel(user) != rows):
                continue
            others = [a for a in user.all_input_nodes if a not in members]
            if any(_numel(a) not in (1, None) or tensor_val(a) is None for a in others):
                continue
            members.add(user)
            closure.append(user)
            frontier.append(user)
    return closure


def recompute_norm_statistics(gm: GraphModule) -> GraphModule:
    """Tags each norm's row statistics (and the square feeding a mean of squares) MUST_RECOMPUTE, so
    that the min-cut partitioner recomputes them in the backward rather than saving them."""
    backward = _backward_nodes(gm)
    if not backward:
        return gm
    tagged = 0
    for node in gm.graph.nodes:
        if node in backward:
            continue
        rows = _row_reduction(node)
        if rows is None:
            continue
        closure = _statistic_closure(node, rows, backward)
        if not any(user in backward for member in closure for user in member.users):
            continue  # the backward does not read these statistics
        square = node.args[0]
        if node.target is aten.mean.dim and all(u is node for u in square.users):
            closure.append(square)
        for member in closure:
            member.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
            member.meta[NORM_STATISTIC_KEY] = True
        tagged += 1
    if tagged:
        log.debug("dynamo_nvf: %d norm statistic(s) left for the backward to recompute", tagged)
    gm.meta[RECOMPUTED_STATISTICS_KEY] = tagged
    return gm
