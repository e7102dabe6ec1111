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
broadcasting [N, C, 1, 1] over H and W, whether that value is an input or the region unsqueezes it
from the [N, C] gradient: it is then permuted, a broadcast operand, and expanded in NHWC order), views of them that are views of the memory (GroupNorm's
`[N, G, C/G, H*W]` of a channels-last activation, and its backward's `[N, C, H*W]`) and views or
unsqueezes of smaller tensors (a BatchNorm's [C, 1, 1] weight: made 4-D, then permuted, to broadcast).
Permutes join too: permuted by its inverse, a permute is its source, so a pool's taps (which read the
activation through a permute into memory order, pool_windows.py) compute as they are and their
result, permuted back to NCHW dims, is an NHWC value again; and constant pads, their widths permuted
(a max pool's pad of a channels-last activation: timm BiT's stem, on an H100, 1213 us in logical
NCHW order against inductor's 71 us), concatenations of values in one order (DenseNet's, a CSP
net's, along the channels: the last dim in NHWC order), splits and slices of a moved value (a CSP
net's halves), and a `clone(memory_format=channels_last)` of one (a convolution's dense copy of a
half: a row-major copy in NHWC order). A region input that is a slice of a channels-last tensor (a
half, not dense) is read in that order too: its permute is row-major with a row stride, which nvFuser
reads as it does a dense one. CSPDarkNet-53's backward regions that concatenated a sliced half with
the other's gradient, and its forward regions that split them, were left in logical NCHW order for
lack of these, and nvFuser ran them as transposes (zoo, H200, 2026-11-28: training kernel time 1.96x
inductor's). Any other node of a moved value leaves
the region as it is, as does a pointwise op of a moved value and a full-size activation read as it
is (it would be read strided). Each value is computed as its permute by its own order,
the order its dims lie in memory: NHWC's [0, 2, 3, 1] for the activations, and for a view the order
in which it lies dense ([0, 3, 1, 2] for GroupNorm's), so that the view is a row-major reshape there;
a region input is read in the order it lies in (dense, or a slice of a dense tensor), and a
row-major one as it is.
PoolFormer's GroupNorm regions (timm poolformer_s12, bf16 inference, H100): nvFuser scheduled their
pointwise part over the logical NCHW dims, 455 us against inductor's 28 us for the same region graph.
Values are those of the same math in another order of summation; outputs keep the strides eager gives
them (the permute back of a row-major NHWC tensor is channels-last), and a region with an output eager
lays out otherwise (a broadcast of two keepdim reductions) is left as it is.

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
from torch._prims_common import invert_perm
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg

from dynamo_nvf.ops.lowerings import DIM_REDUCTIONS, is_pointwise, keeps_reduced_dims, reduced_dims
from dynamo_nvf.ops.metadata import (RESHAPE_OPS, memory_order, same_significant_strides, static_sizes, strides_nest,
                                     tensor_val)
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
#: Splits and slices of a 4-D value: its parts lie in its order too (a CSP net's halves along the
#: channels); the dim argument is the third of a split's, the second of a slice's.
SPLITS = frozenset({aten.split.Tensor, aten.split_with_sizes.default})
SLICES = frozenset({aten.slice.Tensor})
#: Nodes whose value is a tuple, read through getitems: never permuted back themselves.
MULTI_OUTPUT = frozenset({aten.var_mean.correction}) | SPLITS

NOTE = "region {region}: computes in NHWC order ({count} value(s)), so nvFuser reads its channels-last tensors row-major"
#: A region whose reductions of its inputs are all it computes from them (a convolution bias's gradient).
NOTE_READS = "region {region}: reduces its channels-last inputs in NHWC order, so nvFuser reads them row-major"


def _rank(node: Any) -> int:
    val = tensor_val(node) if isinstance(node, Node) else None
    return val.dim() if val is not None else -1


Order = tuple[int, ...]


def _activation(val: torch.Tensor) -> bool:
    """A 4-D tensor whose layout matters: C > 1 and H x W > 1."""
    return val.dim() == 4 and val.shape[1] > 1 and val.shape[2] * val.shape[3] > 1


def _moved_dims(dims: list[int], order: Order) -> Optional[list[int]]:
    """`dims` of a value as dims of its permute by `order`; None where the kept dims would come out in
    another order than the logical result's."""
    new = sorted(order.index(d) for d in dims)
    kept = [order[i] for i in range(len(order)) if i not in new]
    return new if kept == sorted(kept) else None


def _dense_strides(shape: list[int], order: Order) -> list[int]:
    """The strides of a dense tensor of `shape` whose dims lie in memory in `order`, outermost first."""
    strides, step = [0] * len(shape), 1
    for d in reversed(order):
        strides[d] = step
        step *= max(int(shape[d]), 1)
    return strides


def _view_order(src: Node, order: Order, view: Node) -> Optional[Order]:
    """The order in which `view` of a value laid out dense in `order` lies dense in memory (GroupNorm's
    `[N, C, H, W] -> [N, G, C/G, H*W]` of a channels-last value: [0, 3, 1, 2]): in those orders the view
    is a row-major reshape. None where it would not be a view, or not a dense one."""
    shape_in, shape_out = static_sizes(tensor_val(src)), static_sizes(tensor_val(view))
    if shape_in is None or shape_out is None:
        return None
    try:
        out = torch.empty_strided(shape_in, _dense_strides(shape_in, order), device="meta").view(shape_out)
    except RuntimeError:
        return None
    new = tuple(memory_order(out))
    dense = _dense_strides(shape_out, new)
    if any(size > 1 and out.stride(d) != dense[d] for d, size in enumerate(shape_out)):
        return None
    return new


def _layout_kwargs(node: Node) -> bool:
    fmt = node.kwargs.get("memory_format")
    return fmt not in (None, torch.preserve_format)


def _channels_last_copy(node: Node) -> bool:
    """A `clone(x, memory_format=channels_last)` of a 4-D value (a convolution's dense input, copied
    from a channel slice): in NHWC order a plain row-major copy."""
    return (node.target is aten.clone.default and set(node.kwargs) == {"memory_format"}
            and node.kwargs["memory_format"] is torch.channels_last and _rank(node) == 4)


def _dim_position(node: Node) -> int:
    """Where a split's or slice's (SPLITS, SLICES) dim argument stands among its args."""
    return 2 if node.target in SPLITS else 1


def _dim_arg(node: Node) -> int:
    """The dim a split or slice cuts, normalized."""
    at = _dim_position(node)
    dim = node.args[at] if len(node.args) > at else node.kwargs.get("dim", 0)
    return dim % _rank(node.args[0])


def _with_dim(node: Node, src: Node, dim: int) -> tuple[tuple, dict]:
    """A split's or slice's args and kwargs for `src`, cutting `dim`."""
    at = _dim_position(node)
    args = list(node.args)
    kwargs = dict(node.kwargs)
    args[0] = src
    if len(args) > at:
        args[at] = dim
    else:
        kwargs["dim"] = dim
    return tuple(args), kwargs


def _elementwise(node: Node) -> bool:
    return node.target in ELEMENTWISE or is_pointwise(node)


def _squeezed_dims(node: Node, order: Order) -> Optional[list[int]]:
    """The dims a squeeze removes, as dims of its input's permute by `order`; None where the rest
    changes order."""
    val_in, val_out = tensor_val(node.args[0]), tensor_val(node)
    rank = val_in.dim()
    gone = [d for d in range(rank) if val_in.shape[d] == 1]
    if node.target is aten.squeeze.dims:
        gone = [d % rank for d in node.args[1] if val_in.shape[d % rank] == 1]
    elif node.target is aten.squeeze.dim:
        gone = [node.args[1] % rank] if val_in.shape[node.args[1] % rank] == 1 else []
    if val_out.dim() != rank - len(gone):
        return None
    return _moved_dims(gone, order)


def _permute_order(node: Node, src_order: Optional[Order]) -> Order:
    """The order of a permute: permuted by it, the permute is its source as computed (the source
    itself, or its permute by `src_order`); the identity where that is the permute itself (the
    taps of a pool read the activation so)."""
    inverse = invert_perm([d % len(node.args[1]) for d in node.args[1]])
    return tuple(inverse) if src_order is None else tuple(inverse[d] for d in src_order)


def _moved_pad(pad: list[int], order: Order) -> list[int]:
    """`constant_pad_nd`'s pad list (pairs from the last dim back) for the value permuted by `order`."""
    rank = len(order)
    widths = {rank - 1 - i // 2: (pad[i], pad[i + 1]) for i in range(0, len(pad), 2)}  # dim -> (low, high)
    moved: list[int] = []
    for d in reversed(order):
        moved.extend(widths.get(d, (0, 0)))
    while moved[-2:] == [0, 0]:
        moved = moved[:-2]
    return moved


class _Unknown(Exception):
    """A node the rewrite does not know: the region stays as it is."""


def _order_of(node: Node, orders: dict[Node, Order], expands: bool = True) -> Optional[Order]:
    """The order `node` is computed in, from its operands' (`orders`: the region's values computed
    permuted, and its 4-D inputs, read NHWC): its operand's for a pointwise op, a keepdim reduction,
    an alias or expand; the dense order of a view; NHWC for a 4-D pointwise op of other values (as a
    BatchNorm's broadcast operands); None for a value computed as it is. Raises `_Unknown`."""
    if any(isinstance(v, Node) for v in node.kwargs.values()):
        raise _Unknown
    src = node.args[0] if node.args and isinstance(node.args[0], Node) else None
    src_order = orders.get(src) if src is not None else None
    moved = [orders[a] for a in node.args if isinstance(a, Node) and a in orders]
    if node.target is operator.getitem:  # of a var_mean: its keepdim results keep the input's order
        return src_order if src_order is not None and _rank(node) == len(src_order) else None
    if _elementwise(node):
        if len(set(moved)) > 1:
            raise _Unknown
        if _layout_kwargs(node) and not (_channels_last_copy(node) and moved and moved[0] == tuple(TO_NHWC)):
            raise _Unknown
        shape = tuple(tensor_val(node).shape) if tensor_val(node) is not None else None
        as_they_are = [a for a in node.args if isinstance(a, Node) and a not in orders and _rank(a) == 4
                       and _activation(tensor_val(a)) and tuple(tensor_val(a).shape) == shape]
        if moved:
            if as_they_are or any(_rank(a) > len(moved[0]) for a in node.args if isinstance(a, Node)):
                raise _Unknown  # an activation computed as it is would be read permuted: strided
            return moved[0]
        return tuple(TO_NHWC) if _rank(node) == 4 and not as_they_are else None
    if node.target is aten.permute.default:
        return _permute_order(node, src_order)
    if node.target is aten.cat.default:  # DenseNet's, a CSP net's: the parts' common order, if any
        parts = {orders.get(a) if isinstance(a, Node) else None for a in node.args[0]}
        if parts == {None} and _rank(node) != 4:
            return None
        if len(parts) != 1 or None in parts or any(_rank(a) != _rank(node) for a in node.args[0]):
            raise _Unknown
        return parts.pop()
    if not moved:
        if expands and node.target is aten.expand.default and src is not None and _rank(src) == 4 \
                and not _activation(tensor_val(src)) and _activation(tensor_val(node)):
            return tuple(TO_NHWC)  # a [N, C, 1, 1] value the region computes (a mean's backward), expanded NHWC
        if (node.target in BROADCAST_BUILDERS or node.target in REDUCTIONS or node.target in RESHAPE_OPS
                or node.target is aten.sum.default):
            return None
        if _rank(node) == 4 or any(_rank(a) == 4 for a in node.args if isinstance(a, Node)):
            raise _Unknown  # a 4-D value from smaller ones (a view's size-1 dims do not broadcast)
        return None
    if len(moved) > 1 or src_order is None:
        raise _Unknown
    if node.target in ALIASES or node.target in SPLITS:
        return src_order
    if node.target in SLICES and _rank(node) == len(src_order):
        return src_order
    if node.target in REDUCTIONS:
        if keeps_reduced_dims(node):
            return src_order
        if _moved_dims(reduced_dims(node), src_order) is None:
            raise _Unknown
        return None
    if node.target is aten.sum.default:
        return None  # a full sum: any order
    if node.target in SQUEEZES:
        if _rank(node) >= len(src_order) or _squeezed_dims(node, src_order) is None:
            raise _Unknown
        return None
    if node.target is aten.expand.default and _rank(node) == len(src_order):
        return src_order  # a [N, C, 1, 1] value broadcast over H and W (a mean's backward)
    if node.target is aten.constant_pad_nd.default and _rank(node) == len(src_order):
        return src_order  # a pad of H and W (a max pool's, or a "same" convolution's): padded in memory order
    if node.target in RESHAPE_OPS:
        order = _view_order(src, src_order, node)
        if order is None:
            raise _Unknown
        return order
    raise _Unknown


def _input_order(val: torch.Tensor) -> Optional[Order]:
    """The order a 4-D region input is read in: NHWC for a broadcast operand ([N, C, 1, 1]); the
    order an activation lies dense in (channels-last, or GroupNorm's [N, G, C/G, H*W] view of it);
    None (read as it is) for a row-major one or one not dense."""
    if not _activation(val):
        return tuple(TO_NHWC)
    order = tuple(memory_order(val))
    sizes = static_sizes(val)
    if order == tuple(range(4)) or sizes is None:
        return None
    return order if _lies_in_order(val, sizes, order) else None


def _lies_in_order(val: torch.Tensor, sizes: list[int], order: Order) -> bool:
    """Whether `val`'s dims lie in memory in `order` without overlap, the innermost contiguous: dense,
    or a slice of a dense tensor (a channel slice of a channels-last activation, a CSP net's half),
    whose permute by `order` nvFuser then reads row by row."""
    inner = [d for d in reversed(order) if sizes[d] != 1]
    return (not inner or val.stride(inner[0]) == 1) and strides_nest(sizes, val.stride(), inner)


def _plan_orders(nodes: list[Node], expands: bool = True) -> Optional[dict[Node, Order]]:
    """The order of each value the rewrite moves (the region's 4-D inputs, NHWC, included); None where
    the region has a node the rewrite does not know."""
    members = set(nodes)
    orders: dict[Node, Order] = {}
    for a in {a for n in nodes for a in n.all_input_nodes if a not in members and _rank(a) == 4}:
        order = _input_order(tensor_val(a))
        if order is not None:
            orders[a] = order
    for node in nodes:
        try:
            order = _order_of(node, orders, expands)
        except _Unknown:
            return None
        if order is not None and order != tuple(range(len(order))):  # in its own order: as it is
            if node.target not in MULTI_OUTPUT and static_sizes(tensor_val(node)) is None:
                return None
            orders[node] = order
    return orders


def _eligible(nodes: list[Node], expands: bool = True) -> Optional[dict[Node, Order]]:
    """The region's orders (`_plan_orders`) where it reads a large channels-last activation and no
    4-D activation in another order; None otherwise."""
    members = set(nodes)
    outside = [a for n in nodes for a in n.all_input_nodes if a not in members]
    acts = [tensor_val(a) for a in outside]
    acts = [v for v in acts if v is not None and _activation(v) and static_sizes(v) is not None]
    if not any(memory_order(v) == TO_NHWC and v.numel() >= MIN_ELEMENTS for v in acts):
        return None
    if any(_rank(n) == 4 and static_sizes(tensor_val(n)) is None for n in nodes):
        return None
    return _plan_orders(nodes, expands)


def _other_strides_outside(node: Node, new: Node, members: set[Node]) -> bool:
    """Whether `node` is read outside its region and `new`, which replaces it, has other strides."""
    val, new_val = tensor_val(node), tensor_val(new)
    return (isinstance(val, torch.Tensor) and isinstance(new_val, torch.Tensor)
            and any(u not in members for u in node.users)
            and not same_significant_strides(new_val, val))


class _Rewriter:
    def __init__(self, gm: GraphModule, nodes: list[Node], orders: dict[Node, Order]) -> None:
        self.gm = gm
        self.nodes = nodes
        self.orders = orders
        self.mode = next(tensor_val(n).fake_mode for n in nodes if tensor_val(n) is not None)
        self.moved: dict[Node, Node] = {}  # a region value -> the node computing its permute by its order
        self.read: dict[tuple[Node, Order], Node] = {}  # a value computed as it is -> its permute, per order
        self.plain: dict[Node, Node] = {}  # a value computed as it is -> its (maybe rebuilt) node

    def _new(self, target: Any, args: tuple, like: Node, kwargs: Optional[dict] = None) -> Node:
        return call_like(self.gm, target, args, like, self.mode, kwargs)

    def moved_of(self, value: Node, order: Order, like: Node) -> Node:
        """`value` permuted by `order`: its rewritten node, or a permute of an input or plain value."""
        if value in self.moved:
            return self.moved[value]
        if (value, order) not in self.read:
            self.read[value, order] = self._new(aten.permute.default, (value, list(order)), like)
        return self.read[value, order]

    def operand(self, arg: Any, like: Node, order: Order) -> Any:
        if not isinstance(arg, Node):
            return arg
        if arg in self.moved or _rank(arg) == len(order):
            return self.moved_of(arg, order, like)
        arg = self.plain.get(arg, arg)
        return permute_operand(self.gm, arg, list(order), like, self.mode) if _rank(arg) >= 0 else arg

    def rewrite(self, node: Node) -> None:
        order = self.orders.get(node)
        src = node.args[0] if node.args and isinstance(node.args[0], Node) else None
        src_order = self.orders.get(src) if src is not None else None
        with self.gm.graph.inserting_before(node):
            if node.target is operator.getitem and src in self.moved:
                self.store(node, self._new(operator.getitem, (self.moved[src], node.args[1]), node))
            elif src_order is not None and node.target in REDUCTIONS:
                moved = self.moved_of(src, src_order, node)
                dims = sorted(src_order.index(d) for d in reduced_dims(node))
                if node.target is aten.var_mean.correction:
                    self.moved[node] = self._new(node.target, (moved, dims), node, dict(node.kwargs))
                    return  # its getitems take the moved or plain results
                kwargs = {k: v for k, v in node.kwargs.items() if k == "dtype"}
                self.store(node, self._new(node.target, (moved, dims, keeps_reduced_dims(node)), node, kwargs))
            elif src_order is not None and node.target is aten.sum.default:
                self.plain[node] = self._new(node.target, (self.moved_of(src, src_order, node),), node,
                                             dict(node.kwargs))
            elif src_order is not None and node.target in SQUEEZES:
                self.plain[node] = self._new(aten.squeeze.dims, (self.moved_of(src, src_order, node),
                                                                 _squeezed_dims(node, src_order)), node)
            elif order is not None and node.target in ALIASES:
                self.moved[node] = self.moved_of(src, src_order, node)
            elif order is not None and (node.target in SPLITS or node.target in SLICES):
                args, kwargs = _with_dim(node, self.moved_of(src, src_order, node), order.index(_dim_arg(node)))
                self.moved[node] = self._new(node.target, args, node, kwargs)  # a split's getitems take its parts
            elif order is not None and node.target is aten.expand.default:
                sizes = [int(tensor_val(node).shape[d]) for d in order]
                base = self.moved_of(src, src_order or order, node)  # a broadcast operand: permuted
                self.moved[node] = self._new(aten.expand.default, (base, sizes), node)
            elif order is not None and node.target is aten.cat.default:
                dim = (node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)) % len(order)
                parts = [self.moved_of(a, order, node) for a in node.args[0]]
                self.moved[node] = self._new(aten.cat.default, (parts, order.index(dim)), node)
            elif order is not None and node.target is aten.constant_pad_nd.default:
                pad = _moved_pad(list(node.args[1]), order)
                self.moved[node] = self._new(aten.constant_pad_nd.default,
                                             (self.moved_of(src, src_order, node), pad, *node.args[2:]), node)
            elif node.target is aten.permute.default and (order is not None or src_order is not None):
                moved = self.moved_of(src, src_order, node) if src_order is not None else src
                (self.moved if order is not None else self.plain)[node] = moved  # plain: computed as it is
            elif order is not None and node.target in RESHAPE_OPS:
                sizes = [int(tensor_val(node).shape[d]) for d in order]
                self.moved[node] = self._new(aten.reshape.default, (self.moved_of(src, src_order, node), sizes), node)
            elif order is not None:  # a pointwise op
                args = tuple(self.operand(a, node, order) for a in node.args)
                kwargs = {} if _channels_last_copy(node) else dict(node.kwargs)  # row-major in NHWC order
                self.moved[node] = self._new(node.target, args, node, kwargs)
            else:  # a value computed as it is: a smaller one, or a 4-D broadcast operand built from one
                args = map_arg(node.args, lambda a: self.plain.get(a, a))
                if args != tuple(node.args):
                    self.plain[node] = self._new(node.target, args, node, dict(node.kwargs))

    def store(self, node: Node, new: Node) -> None:
        (self.moved if node in self.orders else self.plain)[node] = new

    def finish(self) -> Optional[int]:
        """Points every user of a rewritten value at its new node (a moved value through a permute
        back) and erases what is left unused; returns the number of values moved, or None (the graph's
        old nodes untouched) where a value read outside the region would get other strides than
        eager's: TensorIterator lays out a broadcast of two keepdim reductions in logical order, which
        a channels-last result does not match, nor a permute of it that the rewrite computes as is."""
        members = set(self.nodes)
        backs: dict[Node, Node] = {}
        for node in self.nodes:
            if node in self.moved and node.target not in MULTI_OUTPUT and node.users:
                with self.gm.graph.inserting_after(self.moved[node]):
                    back = list(invert_perm(self.orders[node]))
                    backs[node] = self._new(aten.permute.default, (self.moved[node], back), node)
                if _other_strides_outside(node, backs[node], members):
                    return None  # the new nodes have no users: dead code
        # a value computed as it is, from moved values (a permute of one)
        if any(_other_strides_outside(node, new, members) for node, new in self.plain.items()):
            return None
        count = 0
        for node in reversed(self.nodes):
            if node in self.plain:
                node.replace_all_uses_with(self.plain[node])
            elif node in self.moved:
                if node in backs:
                    node.replace_all_uses_with(backs[node])
                count += node.target not in MULTI_OUTPUT
        for node in reversed(self.nodes):
            if not node.users and node.op == "call_function":
                self.gm.graph.erase_node(node)
        return count


def channels_last_regions(gm: GraphModule) -> GraphModule:
    """Rewrites each eligible region to compute in NHWC order (module docstring)."""
    changed, declined = 0, False
    for region, nodes in regions_of(gm).items():
        count, declined_orders = None, None
        # Expanding a computed [N, C, 1, 1] value in NHWC order gives it channels-last strides; where one
        # is read outside the region (eager lays it out NCHW) the region is planned again without that.
        for expands in (True, False):
            orders = _eligible(nodes, expands)
            if orders is None or orders == declined_orders:  # ineligible, or the plan just declined
                break
            declined_orders = orders
            rewriter = _Rewriter(gm, nodes, orders)
            for node in nodes:
                rewriter.rewrite(node)
            count = rewriter.finish()
            if count is not None:
                break
            declined = True
        if count is None:
            continue
        add_note(gm, (NOTE if count else NOTE_READS).format(region=region, count=count))
        changed += 1
    if changed or declined:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
        log.debug("dynamo_nvf: %d region(s) compute in NHWC order", changed)
    return gm
