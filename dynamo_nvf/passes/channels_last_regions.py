"""Channels-last regions: a region whose activations are channels-last computes in NHWC order. Each
4-D value of the region is computed as its permute `[0, 2, 3, 1]`; the 4-D inputs are read through
that permute and the 4-D outputs permuted back, so the bookend pass trims both to zero-copy views:
nvFuser sees row-major [N, H, W, C] tensors and a BatchNorm's statistics over N, H and W as the outer
reduction the memory holds.

Why: nvFuser 0.2.36's schedulers read a reduction's kind, and a pointwise kernel's vectorised dim, from
the logical dims, not the allocation order. A BatchNorm of a channels-last ResNet activation is written
`var_mean(x, [0, 2, 3])` on the logical NCHW tensor: W is innermost and reduced, so nvFuser scheduled an
inner reduction over memory that holds C innermost. ResNet-50's bf16 training step spent 13 of its 16.5
ms of GPU time in such regions on an H100 (inductor's whole step: 5.5 ms). Rewriting the reductions
alone (a permute into memory order in front of each) made the regions slower, 20.9 ms, as their
pointwise part then read the same tensors in two orders; the whole region in one order is what a
hand-written NHWC kernel does. `python scripts/channels_last_reductions.py` (H100, 2026-11-26,
[64, 64, 112, 112] bf16): the statistics 460 -> 317 us, the backward's two sums 974 -> 156 us.

Which regions: one that reads a channels-last 4-D activation (C and H x W both > 1, memory order
[0, 2, 3, 1], at least `MIN_ELEMENTS`) and no 4-D tensor of such sizes in another order, and whose
nodes are all pointwise ops (a dtype-only `_to_copy` included), sums, means, amax, amin and var_means
(their dims mapped into NHWC order; a result without keepdim only where its dims keep their order),
getitems, squeezes of the 4-D values (the same condition), expands of 4-D values (a mean's backward
broadcasting [N, C, 1, 1] over H and W) and views or unsqueezes of smaller tensors (a BatchNorm's
[C, 1, 1] weight: made 4-D, then permuted, to broadcast). Any other node leaves the
region as it is. Values are those of the same math in another order of summation; outputs keep the
strides eager gives them (the permute back of a row-major NHWC tensor is channels-last), and a region
with an output eager lays out otherwise (a broadcast of two keepdim reductions) is left as it is.

On by default (`channels_last_regions`). It was opt-in while timm's regnety_016 training step faulted
with it on; the fault was nvFuser writing out of bounds in a BatchNorm region that also pools, with
the option off as well (passes/known_bugs.py now cuts such regions; docs/options.md has the runs). Measured
with it on (H100, bf16, GPU kernel time per training step against inductor's, same run): ResNet-50
16.7 -> 9.5 ms (5.6), MobileNetV3 10.6 -> 6.4 (4.1), EfficientNet-B0 16.6 -> 13.2 (6.6), RepVGG
9.0 -> 7.3 (3.6), CSPDarkNet-53 22.4 -> 12.2 (6.9).

Pure on annotations: GraphModule in (partitioned, `node.meta[REGION_KEY]`), GraphModule out.
"""

from __future__ import annotations

import logging
import operator
from typing import Any, Optional

import torch
from torch._prims_common import check_significant_strides
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import DIM_REDUCTIONS, is_pointwise, keeps_reduced_dims, reduced_dims
from dynamo_nvf.ops.metadata import memory_order, static_sizes, tensor_val
from dynamo_nvf.passes import add_note, call_like
from dynamo_nvf.passes.hoist_permutes import permute_operand
from dynamo_nvf.passes.partition import regions_of

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: Logical NCHW -> NHWC, and back.
TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]
#: A region is rewritten only for an activation of at least this many elements (a region of tiny
#: tensors runs in a few microseconds either way).
MIN_ELEMENTS = 1 << 16
#: Reductions whose dims this pass maps (var is left alone: no user seen).
REDUCTIONS = frozenset(DIM_REDUCTIONS - {aten.var.correction})
SQUEEZES = frozenset({aten.squeeze.dims, aten.squeeze.dim, aten.squeeze.default})
#: Views that may build a broadcast operand from a tensor of lower rank (not view or reshape: the size-1
#: dims nvFuser's reshape makes are not broadcast dims, and a 4-D binary op with one failed to compile).
BROADCAST_BUILDERS = frozenset({aten.unsqueeze.default, aten.expand.default})
#: Elementwise ops torch does not tag pointwise.
ELEMENTWISE = frozenset({torch.ops.prims.where.default, aten._to_copy.default})
#: Aliases of a 4-D value: the same value in NHWC order too.
ALIASES = frozenset({aten.alias.default})

NOTE = "region {region}: computes in NHWC order ({count} 4-D value(s)), so nvFuser reads its channels-last tensors row-major"


def _rank(node: Any) -> int:
    val = tensor_val(node) if isinstance(node, Node) else None
    return val.dim() if val is not None else -1


def _activation(val: torch.Tensor) -> bool:
    """A 4-D tensor whose layout matters: C > 1 and H x W > 1."""
    return val.dim() == 4 and val.shape[1] > 1 and val.shape[2] * val.shape[3] > 1


def _nhwc_dims(dims: list[int]) -> Optional[list[int]]:
    """`dims` of a logical NCHW tensor as dims of its NHWC permute; None where the kept dims would come
    out in another order than the logical result's."""
    new = sorted(TO_NHWC.index(d) for d in dims)
    kept = [TO_NHWC[i] for i in range(4) if i not in new]
    return new if kept == sorted(kept) else None


def _layout_kwargs(node: Node) -> bool:
    fmt = node.kwargs.get("memory_format")
    return fmt not in (None, torch.preserve_format)


def _elementwise(node: Node) -> bool:
    return node.target in ELEMENTWISE or is_pointwise(node)


def _node_ok(node: Node) -> bool:
    """Whether the rewrite knows `node` (a region member)."""
    rank4_args = [a for a in node.args if isinstance(a, Node) and _rank(a) == 4]
    if any(isinstance(v, Node) for v in node.kwargs.values()):
        return False
    if node.target is operator.getitem:
        return True
    if _elementwise(node):
        return not _layout_kwargs(node)
    if node.target in ALIASES:
        return True
    if node.target in REDUCTIONS:
        if _rank(node.args[0]) != 4:
            return True
        return keeps_reduced_dims(node) or _nhwc_dims(reduced_dims(node)) is not None
    if node.target is aten.sum.default:
        return True  # a full sum: any order
    if node.target in SQUEEZES:
        if _rank(node.args[0]) != 4:
            return True
        return _rank(node) < 4 and _squeezed_dims(node) is not None
    if node.target is aten.expand.default and rank4_args:
        return _rank(node) == 4  # a [N, C, 1, 1] value broadcast over H and W (a mean's backward)
    if node.target in BROADCAST_BUILDERS:
        return not rank4_args
    return not rank4_args and _rank(node) != 4


def _squeezed_dims(node: Node) -> Optional[list[int]]:
    """The dims a squeeze of a 4-D value removes, mapped to NHWC; None where the rest changes order."""
    val_in, val_out = tensor_val(node.args[0]), tensor_val(node)
    gone = [d for d in range(4) if val_in.shape[d] == 1]
    if node.target is aten.squeeze.dims:
        gone = [d % 4 for d in node.args[1] if val_in.shape[d % 4] == 1]
    elif node.target is aten.squeeze.dim:
        gone = [node.args[1] % 4] if val_in.shape[node.args[1] % 4] == 1 else []
    if val_out.dim() != 4 - len(gone):
        return None
    return _nhwc_dims(gone)


def _eligible(nodes: list[Node]) -> bool:
    members = set(nodes)
    outside = [a for n in nodes for a in n.all_input_nodes if a not in members]
    acts = [tensor_val(a) for a in outside]
    acts = [v for v in acts if v is not None and _activation(v) and static_sizes(v) is not None]
    if not any(memory_order(v) == TO_NHWC and v.numel() >= MIN_ELEMENTS for v in acts):
        return False
    if any(memory_order(v) != TO_NHWC for v in acts):
        return False  # a row-major NCHW activation would become a strided read
    if any(_rank(n) == 4 and static_sizes(tensor_val(n)) is None for n in nodes):
        return False
    return all(_node_ok(n) for n in nodes)


class _Rewriter:
    def __init__(self, gm: GraphModule, nodes: list[Node]) -> None:
        self.gm = gm
        self.nodes = nodes
        self.mode = next(tensor_val(n).fake_mode for n in nodes if tensor_val(n) is not None)
        self.nhwc: dict[Node, Node] = {}  # a 4-D value -> the node computing its NHWC permute
        self.plain: dict[Node, Node] = {}  # a value of lower rank -> its (maybe rebuilt) node

    def _new(self, target: Any, args: tuple, like: Node, kwargs: Optional[dict] = None) -> Node:
        return call_like(self.gm, target, args, like, self.mode, kwargs)

    def nhwc_of(self, value: Node, like: Node) -> Node:
        """`value` (4-D) in NHWC order: the rewritten node, or a permute of an input or built value."""
        if value not in self.nhwc:
            self.nhwc[value] = self._new(aten.permute.default, (value, TO_NHWC), like)
        return self.nhwc[value]

    def operand(self, arg: Any, like: Node, four_d: bool) -> Any:
        if not isinstance(arg, Node):
            return arg
        if _rank(arg) == 4:
            return self.nhwc_of(arg, like)
        arg = self.plain.get(arg, arg)
        return permute_operand(self.gm, arg, TO_NHWC, like, self.mode) if four_d and _rank(arg) >= 0 else arg

    def rewrite(self, node: Node) -> None:
        four_d = _rank(node) == 4
        with self.gm.graph.inserting_before(node):
            if node.target is operator.getitem and node.args[0] in self.nhwc:
                self.nhwc_or_plain(node, self._new(operator.getitem, (self.nhwc[node.args[0]], node.args[1]), node))
            elif node.target in REDUCTIONS and _rank(node.args[0]) == 4:
                src = self.nhwc_of(node.args[0], node)
                dims = sorted(TO_NHWC.index(d) for d in reduced_dims(node))
                if node.target is aten.var_mean.correction:
                    new = self._new(node.target, (src, dims), node, dict(node.kwargs))
                    self.nhwc[node] = new  # its getitems take the NHWC or plain results
                    return
                keep = keeps_reduced_dims(node)
                kwargs = {k: v for k, v in node.kwargs.items() if k == "dtype"}
                self.nhwc_or_plain(node, self._new(node.target, (src, dims, keep), node, kwargs))
            elif node.target is aten.sum.default and _rank(node.args[0]) == 4:
                self.plain[node] = self._new(node.target, (self.nhwc_of(node.args[0], node),), node, dict(node.kwargs))
            elif node.target in SQUEEZES and _rank(node.args[0]) == 4:
                src = self.nhwc_of(node.args[0], node)
                self.plain[node] = self._new(aten.squeeze.dims, (src, _squeezed_dims(node)), node)
            elif four_d and node.target in ALIASES:
                self.nhwc[node] = self.nhwc_of(node.args[0], node)
            elif four_d and node.target is aten.expand.default and _rank(node.args[0]) == 4:
                sizes = [int(tensor_val(node).shape[d]) for d in TO_NHWC]
                self.nhwc[node] = self._new(aten.expand.default, (self.nhwc_of(node.args[0], node), sizes), node)
            elif four_d and _elementwise(node):
                args = tuple(self.operand(a, node, True) for a in node.args)
                self.nhwc[node] = self._new(node.target, args, node, dict(node.kwargs))
            else:  # a value of lower rank, or a 4-D broadcast operand built from one
                args = tuple(self.plain.get(a, a) if isinstance(a, Node) else a for a in node.args)
                if args != tuple(node.args):
                    self.plain[node] = self._new(node.target, args, node, dict(node.kwargs))

    def nhwc_or_plain(self, node: Node, new: Node) -> None:
        (self.nhwc if _rank(node) == 4 else self.plain)[node] = new

    def finish(self) -> Optional[int]:
        """Points every user of a rewritten value at its new node (a 4-D value through a permute back
        to NCHW) and erases what is left unused; returns the number of 4-D values rewritten, or None
        (the graph's old nodes untouched) where a value read outside the region would get other
        strides than eager's: TensorIterator lays out a broadcast of two keepdim reductions in logical
        order, which a channels-last result does not match."""
        members = set(self.nodes)
        backs: dict[Node, Node] = {}
        for node in self.nodes:
            if node in self.nhwc and self.nhwc[node].args[0] is not node \
                    and node.target is not aten.var_mean.correction and node.users:
                with self.gm.graph.inserting_after(self.nhwc[node]):
                    backs[node] = self._new(aten.permute.default, (self.nhwc[node], TO_NCHW), node)
                read_outside = any(u not in members for u in node.users)
                if read_outside and not check_significant_strides(backs[node].meta["val"], tensor_val(node),
                                                                  only_cuda=False)[0]:
                    return None  # the new nodes have no users: dead code
        count = 0
        for node in reversed(self.nodes):
            if node in self.plain:
                node.replace_all_uses_with(self.plain[node])
            elif node in self.nhwc and self.nhwc[node].args[0] is not node:
                if node in backs:
                    node.replace_all_uses_with(backs[node])
                count += _rank(node) == 4
        for node in reversed(self.nodes):
            if not node.users and node.op == "call_function":
                self.gm.graph.erase_node(node)
        return count


def channels_last_regions(gm: GraphModule) -> GraphModule:
    """Rewrites each eligible region to compute in NHWC order (module docstring)."""
    changed, declined = 0, False
    for region, nodes in regions_of(gm).items():
        if not _eligible(nodes):
            continue
        rewriter = _Rewriter(gm, nodes)
        for node in nodes:
            rewriter.rewrite(node)
        count = rewriter.finish()
        if count is None:
            declined = True
            continue
        add_note(gm, NOTE.format(region=region, count=count))
        changed += 1
    if changed or declined:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
        log.debug("dynamo_nvf: %d region(s) compute in NHWC order", changed)
    return gm
