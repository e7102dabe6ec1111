"""Compute a padded matmul operand at its padded width: `constant_pad_nd(f(x[..., :n]), [0, p])`,
where `x` is already `n + p` wide (pad_matmuls' padded product, sliced back to `n`) and `f` is
elementwise, becomes `where(arange(n + p) < n, f(x), 0)`.

Why: a language model's logits gradient is computed elementwise from the forward's logits and then
padded to a multiple of 8 columns for the two matmuls that read it (pad_matmuls). The pad copies the
whole gradient through rows that are not 16-byte aligned: ATen's took 0.64 ms for GPT-2's
[4096, 50257] bf16 gradient, and nvFuser's, inside the gradient's region, 0.71 ms more than the
gradient alone (0.33 ms) (H100, nvfuser_direct 0.2.36, 2026-11-28), against a training step of
4.7 ms of GPU time. Computed from the padded product, one pointwise kernel writes the padded gradient,
and the forward saves the product (aligned rows) instead of a dense copy of its slice.

Exact: f's ops are elementwise, so f(x) at a column below n is f of the elements there, which are
x[..., :n]'s; views reshape only the other dims; operands without the padded dim broadcast along it;
`arange(n)` in f becomes `arange(n + p)`, equal below n. Columns from n on are the pad's zeros
whatever f computed there. Where any op of f is of another kind (a reduction over the padded dim, a
gather, a random op), or the pad's operand has readers other than sums over other dims (a bias
gradient: summed wide, then its first n columns taken), the pad stays.

Runs after pad_matmuls on the joint graph (training: the one graph where the forward's slice and the
backward's pad meet) and on each aten graph (an inference graph's padded product read by another
padded matmul through elementwise ops). Pure: GraphModule in, GraphModule out.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import draws_random_numbers, is_pointwise
from dynamo_nvf.ops.metadata import ARANGES, RESHAPE_OPS, arange_params, slice_params, static_sizes, tensor_val
from dynamo_nvf.passes import add_note, call_like

aten = torch.ops.aten

NOTE = "pad {name}: {operand} computed {n} + {p} columns wide from {source} (wide_pads)"


def _column_pad(node: Node) -> Optional[tuple[Node, int, int]]:
    """(operand, n, p) of `constant_pad_nd(operand, [0, p, 0, 0, ...], 0)` that appends p zero columns
    (+0: the mask writes +0) to the last dim of a static operand n wide; None for any other node."""
    if node.op != "call_function" or node.target is not aten.constant_pad_nd.default:
        return None
    operand, pads = node.args[0], node.args[1]
    value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    val = tensor_val(operand)
    if not isinstance(operand, Node) or val is None or val.dim() == 0 or static_sizes(val) is None:
        return None
    if value != 0 or math.copysign(1.0, value) < 0 or len(pads) < 2 or not isinstance(pads[1], int) \
            or pads[1] <= 0 or any(w != 0 for i, w in enumerate(pads) if i != 1):
        return None  # [0, p] or [0, p, 0, 0, ...]: columns appended, nothing else
    return operand, int(val.shape[-1]), int(pads[1])


def _column_sum(node: Node, operand: Node) -> bool:
    """A sum of `operand` over every dim but its last, one row of n (a bias gradient): it becomes the
    sum of the wide value, its first columns taken (the same elements summed in the same order)."""
    if node.op != "call_function" or node.target is not aten.sum.dim_IntList or node.args[0] is not operand:
        return False
    rank, out = tensor_val(operand).dim(), tensor_val(node)
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if out is None or any(s != 1 for s in out.shape[:-1]):
        return False  # more than one row: its first n columns would be a strided slice, not eager's layout
    return bool(dims) and all(d % rank != rank - 1 for d in dims)


class _Widener:
    """Rebuilds the elementwise ops under a pad `p` columns wider, before `anchor`; memoized."""

    def __init__(self, gm: GraphModule, n: int, p: int, anchor: Optional[Node], mode: Any, dry: bool = False) -> None:
        self.gm, self.n, self.p, self.anchor, self.mode = gm, n, p, anchor, mode
        self.dry = dry  # only say whether it could: each op stands for its wide copy
        self.memo: dict[Node, Optional[Node]] = {}
        self.sources: list[Node] = []

    def spans(self, node: Any) -> Optional[bool]:
        """True: `node`'s last dim is the padded one; False: it broadcasts along it (a scalar, or last
        dim 1); None: a value this pass cannot place."""
        val = tensor_val(node) if isinstance(node, Node) else None
        if val is None:
            return False if not isinstance(node, Node) else None
        if static_sizes(val) is None:
            return None
        if val.dim() == 0 or val.shape[-1] == 1:
            return False
        return True if val.shape[-1] == self.n else None

    def operand(self, node: Any) -> Any:
        """`node` itself where it broadcasts along the padded dim, its wide value where it spans it;
        None where it cannot be had."""
        spans = self.spans(node)
        if spans is None:
            return None
        return self.wide(node) if spans else node

    def wide(self, node: Node) -> Optional[Node]:
        if node not in self.memo:
            self.memo[node] = self._wide(node)
        return self.memo[node]

    def _call(self, target: Any, args: tuple, like: Node, kwargs: Optional[dict] = None) -> Optional[Node]:
        if self.dry:
            return like
        with self.gm.graph.inserting_before(self.anchor):
            try:
                return call_like(self.gm, target, args, like, self.mode, kwargs)
            except Exception:  # noqa: BLE001 - a view the wide layout does not allow: leave the pad
                return None

    def _wide(self, node: Node) -> Optional[Node]:
        val = tensor_val(node)
        if node.op != "call_function" or val is None:
            return None
        width = self.n + self.p
        target, args = node.target, node.args
        if target is aten.slice.Tensor:
            found, src, src_val = slice_params(node), args[0], tensor_val(args[0])
            if found is None or src_val is None or static_sizes(src_val) is None:
                return None
            dim, start, end, step = found
            if dim % src_val.dim() != src_val.dim() - 1:
                return None
            if start not in (0, None) or step != 1 or end != self.n or src_val.shape[-1] != width:
                return None
            self.sources.append(src)
            return src
        if target in ARANGES:  # integer only: a float arange's values are ATen's own rounding
            start, end, step = arange_params(node)
            if val.dtype.is_floating_point or start != 0 or step != 1 or end != self.n:
                return None
            return self._call(aten.arange.default, (width,), node, dict(node.kwargs))
        if target in RESHAPE_OPS or target in (aten.alias.default, aten.unsqueeze.default, aten.expand.default):
            if target is not aten.expand.default and self.spans(args[0]) is not True:
                return None  # a reshape that makes the padded dim (from [8, 1] to [2, 4]) regroups elements
            inner = self.operand(args[0])
            if inner is None:
                return None
            rest = list(args[1:])
            if target in RESHAPE_OPS or target is aten.expand.default:
                shape = list(rest[0])
                if not shape or shape[-1] not in (self.n, -1):
                    return None
                rest[0] = shape[:-1] + [width]
            elif target is aten.unsqueeze.default and rest[0] % val.dim() == val.dim() - 1:
                return None  # a new last dim: the padded dim would move
            return self._call(target, (inner, *rest), node, dict(node.kwargs))
        if target is aten._to_copy.default:  # a cast: no layout or device change
            kwargs, src_val = node.kwargs, tensor_val(args[0])
            if set(kwargs) - {"dtype", "layout", "device"} or kwargs.get("layout", torch.strided) != torch.strided \
                    or src_val is None or kwargs.get("device", src_val.device) != src_val.device:
                return None
            inner = self.operand(args[0])
            return None if inner is None else self._call(target, (inner,), node, dict(node.kwargs))
        if is_pointwise(node) and not draws_random_numbers(node):
            if not (val.dtype.is_floating_point or val.dtype == torch.bool):
                return None  # integer math on the pad's columns could divide by their zeros
            new_args = []
            for a in args:
                if isinstance(a, Node):
                    a = self.operand(a)
                    if a is None:
                        return None
                new_args.append(a)
            if any(isinstance(v, Node) for v in node.kwargs.values()):
                return None
            return self._call(target, tuple(new_args), node, dict(node.kwargs))
        return None


def can_compute_wide(operand: Node, p: int, matmul_read: Callable[[Node], bool]) -> bool:
    """Whether `operand`, padded by `p` columns for a matmul, is a function compute_pads_wide can
    compute at the padded width (pad_matmuls' cost model then counts that pad as free): each reader
    is a matmul's (`matmul_read`, which the pad will take), a column pad or a column sum."""
    val = tensor_val(operand)
    if operand.op != "call_function" or val is None or val.dim() == 0 or static_sizes(val) is None:
        return False
    if not all(_column_sum(u, operand) or _column_pad(u) is not None or matmul_read(u) for u in operand.users):
        return False
    widener = _Widener(operand.graph.owning_module, int(val.shape[-1]), p, None, None, dry=True)
    return widener.wide(operand) is not None and bool(widener.sources)


def _widen_at(gm: GraphModule, pad: Node) -> bool:
    found = _column_pad(pad)
    if found is None:
        return False
    operand, n, p = found
    mode = getattr(tensor_val(pad), "fake_mode", None)
    if mode is None or not all(u is pad or _column_sum(u, operand) for u in operand.users):
        return False
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    anchor = min(operand.users, key=order.__getitem__)  # a bias gradient's sum may come before the pad
    widener = _Widener(gm, n, p, anchor, mode)
    anchor_prev = anchor.prev
    wide = widener.wide(operand)
    out = tensor_val(pad)
    if wide is None or not widener.sources or tensor_val(wide).shape != out.shape \
            or tensor_val(wide).dtype != out.dtype:
        while anchor.prev is not anchor_prev:  # erase what was built, newest first
            gm.graph.erase_node(anchor.prev)
        return False
    with gm.graph.inserting_before(anchor):  # annotated like the operand: the pad's (reads memory) would not do
        columns = call_like(gm, aten.arange.default, (n + p,), operand, mode,
                            {"dtype": torch.int64, "device": out.device})
        keep = call_like(gm, aten.lt.Scalar, (columns, n), operand, mode)
        zero = call_like(gm, aten.scalar_tensor.default, (0,), operand, mode,
                         {"dtype": out.dtype, "device": out.device})
        masked = call_like(gm, aten.where.self, (keep, wide, zero), operand, mode)
    pad.replace_all_uses_with(masked)
    gm.graph.erase_node(pad)
    for user in [u for u in operand.users if _column_sum(u, operand)]:  # sum wide, then take n columns
        with gm.graph.inserting_before(user):
            total = call_like(gm, user.target, (masked, *user.args[1:]), user, mode, dict(user.kwargs))
            narrow = call_like(gm, aten.slice.Tensor, (total, -1, 0, n), user, mode)
        user.replace_all_uses_with(narrow)
        gm.graph.erase_node(user)
    add_note(gm, NOTE.format(name=pad.name, operand=operand.name, n=n, p=p, source=widener.sources[0].name))
    return True


def compute_pads_wide(gm: GraphModule) -> GraphModule:
    """Replaces each column pad of an elementwise function of a padded value's slice (module docstring)."""
    changed = False
    for node in list(gm.graph.nodes):
        if not node._erased and _widen_at(gm, node):
            changed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return gm
