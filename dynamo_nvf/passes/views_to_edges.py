"""Move a view across the one-operand elementwise ops (casts, exp, neg, ...) between it and its region's
edge: `view(x.float(), [rows, vocab])` becomes `view(x, [rows, vocab]).float()` where `x` is a region
input, and `view(y, [b, s, vocab]).bfloat16()` becomes `view(y.bfloat16(), [b, s, vocab])` where the
cast is read only outside the region. The bookend pass then trims the view to a zero-copy alias, and
nvFuser is handed the tensor in the shape the region computes in.

Why: a cross-entropy's forward over GPT-2's 50257-word vocabulary upcasts the [batch, seq, vocab]
logits and flattens them to [rows, vocab] inside its region; nvFuser 0.2.36 fails to compile that
fusion ("Vectorized accesses cannot be inline with computation") and the region ran in eager, where
the same fusion handed [rows, vocab] logits compiles and matches eager
(`scripts/nvfuser_repros/cross_entropy_vectorized_reduction.py`, variant `flat`, H100, 2026-11-26).
The backward region ends the same way mirrored (the gradient viewed back to [b, s, vocab], then cast).
Where the chain above a view starts at another reshape inside the region, the two become one (none
where the pair gives the value its own shape back): a padded LM head's logits are sliced, copied
dense, viewed [b, s, vocab], upcast and flattened, all in the loss's region, and nvFuser failed on
that round trip the same way (GPT-2 training ran the region as six pieces; H100, 2026-11-28).

A view that only splits dims (and adds or drops size-one ones), read by its region, also moves above
elementwise ops of several tensors, where one operand continues the chain inside the region and the
others come from outside it: each of those is viewed by the same split, its broadcast dims split into
ones. Joins go first: a split that a later view undoes becomes none. Why: a tiled pool is such a split
followed by a reduction over the phase dims, and VGG's 2x2 max pool follows the convolution's bias add
and ReLU in one region; nvFuser 0.2.36 fails to run a reshape between a broadcast add and a reduction
("BFS traversal could not visit some nodes", bfs.h:261) and VGG-11's five pool regions ran in eager;
handed the inputs already split, the same fusion runs
(`scripts/nvfuser_repros/tiled_pool_after_pointwise.py`, H200, 2026-11-29). Splitting a dim never needs
a copy, so the moved views are always aliases.

Exact: an elementwise op of one tensor computes each element from the element at the same index, and
a view (of a tensor whose layout allows it) only renames indices, so the two commute; dtypes are
unchanged. Only where it is also free:
- every op crossed has one tensor operand (scalars aside), keeps its operand's shape, is not random,
  sits in the view's region, and is read only by the next op of the chain;
- hoisting, the chain starts at a value from outside the region, or a view of one (so the moved view
  is trimmed), or at an in-region reshape (joined), and the layout allows the view (an alias, never
  a copy);
- sinking, the chain's last op is read only outside the region, or through views read only there,
  and, in a forward or inference graph, is not a value the graph returns (it would become a view
  where eager returns a fresh tensor);
- no op crossed takes keyword arguments (clone's memory_format sets a layout), a cast aside;
- the value that replaces the chain's end has the same significant strides (what readers see), or
  only the region's compute ops read it (a cast of a padded slice is dense in eager, strided here).

Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
import math
import operator
from typing import Any, Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import draws_random_numbers, is_pointwise
from dynamo_nvf.ops.metadata import (METADATA_OPS, MULTI_OUTPUT_METADATA_OPS, RESHAPE_OPS, same_significant_strides,
                                     static_sizes, tensor_val)
from dynamo_nvf.passes import add_note, call_like, rewrite_to_fixpoint
from dynamo_nvf.passes.partition import REGION_KEY
from dynamo_nvf.passes.unflatten_reductions import merge_groups

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: The notes explain() shows for each move (graph plan's `rewrites`).
NOTE_HOIST = "view {view}: moved above {ops} onto the region input {source}"
NOTE_JOIN = "view {view}: moved above {ops} and joined with the view {inner} of {source}"
NOTE_SINK = "view {view}: moved below {ops}, which only other code reads"
NOTE_HOIST_SPLIT = "view {view}: a split, moved above {ops} onto the region inputs {sources}"


def _deterministic_op_of(node: Node, region: Any) -> bool:
    """An op of `region` that draws no random numbers (moving a view across one keeps its values)."""
    return node.op == "call_function" and node.meta.get(REGION_KEY) == region and not draws_random_numbers(node)


def _tensor_operands(node: Node) -> list[Node]:
    return [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, Node)]


def _operand(node: Node, region: Any) -> Optional[Node]:
    """The one tensor operand of an elementwise op of one tensor in `region` whose result has that
    operand's shape (a cast, exp, neg, ...); None for any other node."""
    if not _deterministic_op_of(node, region):
        return None
    operands = _tensor_operands(node)
    if len(operands) != 1:
        return None
    val, src = tensor_val(node), tensor_val(operands[0])
    if val is None or src is None or static_sizes(val) is None or static_sizes(src) is None:
        return None  # symbolic sizes: comparing them would add guards
    if val.shape != src.shape:
        return None  # strides may differ (a cast of a padded slice is dense): the chain's end is checked
    if node.target is aten._to_copy.default:  # a cast: no layout, memory format or device change
        kwargs = dict(node.kwargs)
        if kwargs.pop("layout", torch.strided) != torch.strided or kwargs.pop("device", src.device) != src.device:
            return None
        return operands[0] if set(kwargs) <= {"dtype"} and len(node.args) == 1 else None
    return operands[0] if is_pointwise(node) and not node.kwargs else None  # clone's memory_format: a layout


def _is_view(node: Node, region: Any) -> bool:
    """A one-tensor metadata op (view, permute, slice, ...) in `region`: the bookend pass trims it
    where it reads a region input or only code outside reads it."""
    return (node.op == "call_function" and node.meta.get(REGION_KEY) == region and node.target in METADATA_OPS
            and node.target not in MULTI_OUTPUT_METADATA_OPS and node.target is not operator.getitem)


def _from_outside(node: Node, region: Any) -> bool:
    """Whether `node` comes from outside `region`, directly or through views of a region input."""
    while _is_view(node, region):
        node = node.args[0]
    return isinstance(node, Node) and node.meta.get(REGION_KEY) != region


def _read_only_outside(node: Node, region: Any, returned_ok: bool) -> bool:
    """Whether only code outside `region` reads `node`, directly or through views; unless
    `returned_ok`, the graph must not return it either: a returned value that became a view of an
    intermediate is, to autograd, a view it did not make (an in-place op on it raises), where eager
    returns a fresh tensor. A backward graph's outputs are gradients autograd accumulates."""
    return bool(node.users) and all(
        (returned_ok or u.op != "output")
        and (u.meta.get(REGION_KEY) != region or (_is_view(u, region) and _read_only_outside(u, region, returned_ok)))
        for u in node.users)


def _view_shape(node: Node) -> Optional[list[int]]:
    """The target shape of a view, reshape or _unsafe_view with plain-int sizes; None otherwise."""
    if node.op != "call_function" or node.target not in RESHAPE_OPS or len(node.args) != 2:
        return None
    shape = node.args[1]
    return list(shape) if isinstance(shape, (list, tuple)) and all(isinstance(s, int) for s in shape) else None


def _same_strides(new: Node, old: Node) -> bool:
    new_val, old_val = tensor_val(new), tensor_val(old)
    return new_val is not None and old_val is not None and same_significant_strides(new_val, old_val)


def _rebuild(gm: GraphModule, chain: list[Node], source: Node, mode: Any) -> Node:
    """The ops of `chain` (top first) applied again from `source`, each reading the one before."""
    value = source
    for op in chain:
        old = _operand(op, op.meta.get(REGION_KEY))
        args = tuple(value if a is old else a for a in op.args)
        kwargs = {k: value if v is old else v for k, v in op.kwargs.items()}
        value = call_like(gm, op.target, args, op, mode, kwargs)
    return value


def _read_only_inside(node: Node, region: Any) -> bool:
    """Whether only ops of `region` that compute (not views, which could carry the strides out) read
    `node`: its strides are then nvFuser's business, never seen by other code."""
    return all(u.op == "call_function" and u.meta.get(REGION_KEY) == region and u.target not in METADATA_OPS
               for u in node.users)


def _insert_or_roll_back(gm: GraphModule, before: Node, build: Any, replaced: Node) -> Optional[Node]:
    """Runs `build()` with new nodes inserted before `before`; keeps them when it returns a value with
    the significant strides of `replaced`, or `replaced` is read only by its region's compute ops
    (a dense copy of a padded slice: the view moves onto the slice), else erases them (and returns
    None)."""
    anchor = before.prev
    with gm.graph.inserting_before(before):
        try:
            value = build()
        except RuntimeError:  # a view the layout does not allow: it would copy
            value = None
    if value is not None and (_same_strides(value, replaced)
                              or _read_only_inside(replaced, replaced.meta.get(REGION_KEY))):
        return value
    while before.prev is not anchor:
        gm.graph.erase_node(before.prev)
    return None


def _hoist(gm: GraphModule, view: Node, shape: list[int], region: Any) -> bool:
    """`view(op_k(...op_1(source)))` -> `op_k(...op_1(view(source)))` where `source` is a region input;
    where the chain starts at an in-region reshape instead, the two views become one:
    `view(op(reshape(y)))` -> `op(view(y))`, or `op(y)` where the view gives y its own shape back."""
    chain: list[Node] = []  # bottom first
    current = view.args[0]
    while isinstance(current, Node) and len(current.users) == 1 and _operand(current, region) is not None:
        chain.append(current)
        current = _operand(current, region)
    mode = getattr(tensor_val(view), "fake_mode", None)
    if not chain or tensor_val(current) is None or mode is None:
        return False
    inner: Optional[Node] = None
    if not _from_outside(current, region):
        if not _is_view(current, region) or _view_shape(current) is None or not isinstance(current.args[0], Node):
            return False
        inner, current = current, current.args[0]
        if tensor_val(current) is None:
            return False
    top = list(reversed(chain))
    source = current

    def build() -> Node:
        own_shape = inner is not None and list(tensor_val(source).shape) == shape
        viewed = source if own_shape else call_like(gm, aten.view.default, (source, shape), view, mode)
        return _rebuild(gm, top, viewed, mode)

    value = _insert_or_roll_back(gm, top[0], build, view)
    if value is None:
        return False
    view.replace_all_uses_with(value)
    for node in [view, *chain]:  # users first
        gm.graph.erase_node(node)
    ops = ", ".join(n.name for n in top)
    if inner is None:
        add_note(gm, NOTE_HOIST.format(view=view.name, ops=ops, source=current.name))
        return True
    if not inner.users:
        gm.graph.erase_node(inner)
    add_note(gm, NOTE_JOIN.format(view=view.name, ops=ops, inner=inner.name, source=current.name))
    return True


def _sink(gm: GraphModule, view: Node, shape: list[int], region: Any, returned_ok: bool) -> bool:
    """`op_k(...op_1(view(y)))` -> `view(op_k(...op_1(y)))` where `op_k` is read only outside the region."""
    source = view.args[0]
    if not isinstance(source, Node) or _from_outside(view, region):
        return False  # a view of a region input: the bookend pass trims it already
    chain: list[Node] = []  # top first
    current = view
    while len(current.users) == 1:
        user = next(iter(current.users))
        if _operand(user, region) is not current:
            break
        chain.append(user)
        current = user
    mode = getattr(tensor_val(view), "fake_mode", None)
    if not chain or not _read_only_outside(current, region, returned_ok) or mode is None:
        return False
    value = _insert_or_roll_back(
        gm, current.next, lambda: call_like(gm, aten.view.default, (_rebuild(gm, chain, source, mode), shape), view, mode),
        current)
    if value is None:
        return False
    current.replace_all_uses_with(value)
    for node in [*reversed(chain), view]:  # users first
        gm.graph.erase_node(node)
    add_note(gm, NOTE_SINK.format(view=view.name, ops=", ".join(n.name for n in chain)))
    return True


def _split_groups(src: list[int], dst: list[int]) -> Optional[list[list[int]]]:
    """Per dim of `src`, the sizes of the dims of `dst` it becomes, where viewing `src` as `dst` only
    splits dims (size-one dims may be added or dropped); None where the view merges dims. The mirror of
    a merge: viewing `dst` as `src` merges each run of `dst` dims into one `src` dim."""
    runs = merge_groups(dst, src)
    return None if runs is None else [[dst[i] for i in run] for run in runs]


def _split_shape(operand: torch.Tensor, groups: list[list[int]]) -> Optional[list[int]]:
    """The shape `operand`, broadcast against the split tensor's unsplit shape, takes under the split:
    its full dims split as the tensor's, its broadcast (size-one) dims into ones."""
    sizes = static_sizes(operand)
    if sizes is None or len(sizes) > len(groups):
        return None
    shape: list[int] = []
    for size, group in zip([1] * (len(groups) - len(sizes)) + sizes, groups):
        if size == 1:
            shape += [1] * len(group)
        elif size == math.prod(group):
            shape += group
        else:
            return None
    return shape


def _elementwise_of_many(node: Node, region: Any, shape: list[int]) -> bool:
    """An elementwise op of `region` (no keyword arguments, not random) whose result has `shape`."""
    if not _deterministic_op_of(node, region):
        return False
    val = tensor_val(node)
    return is_pointwise(node) and not node.kwargs and val is not None and static_sizes(val) == shape


def _hoist_split(gm: GraphModule, view: Node, shape: list[int], region: Any) -> bool:
    """`view(op_k(...op_1(a, b)..., c))` -> `op_k(...op_1(view(a), view'(b))..., view'(c))` where the
    view only splits dims, each op is elementwise, and all operands but the chain's come from outside
    the region (module docstring)."""
    source_val = tensor_val(view.args[0])
    unsplit = static_sizes(source_val) if source_val is not None else None
    groups = _split_groups(unsplit, shape) if unsplit is not None else None
    mode = getattr(tensor_val(view), "fake_mode", None)
    if groups is None or mode is None or _read_only_outside(view, region, returned_ok=True):
        return False  # read only outside: the bookend pass trims the view where it is
    chain: list[tuple[Node, Optional[Node]]] = []  # bottom first: (op, the operand the chain goes on to)
    current = view.args[0]
    while True:
        if not isinstance(current, Node) or len(current.users) != 1:
            return False
        if _operand(current, region) is None and not _elementwise_of_many(current, region, unsplit):
            return False
        inside = [a for a in _tensor_operands(current) if not _from_outside(a, region)]
        if len(inside) > 1:
            return False
        chain.append((current, inside[0] if inside else None))
        if not inside:
            break
        current = inside[0]
    sources = [a for op, _ in chain for a in _tensor_operands(op) if _from_outside(a, region)]
    if all(len(_tensor_operands(op)) == 1 for op, _ in chain):
        return False  # one operand each: `_hoist` moves such a chain where it can
    if any(tensor_val(a) is None or _split_shape(tensor_val(a), groups) is None for a in sources):
        return False

    def build() -> Node:
        value: Optional[Node] = None
        for op, inner in reversed(chain):
            def moved(a: Any, inner: Optional[Node] = inner) -> Any:
                if inner is not None and a is inner:
                    return value
                if not isinstance(a, Node) or tensor_val(a).dim() == 0:
                    return a  # a 0-dim tensor broadcasts as it is (and may stay a CPU scalar)
                return call_like(gm, aten.view.default, (a, _split_shape(tensor_val(a), groups)), view, mode)
            value = call_like(gm, op.target, tuple(moved(a) for a in op.args), op, mode,
                              {k: moved(v) for k, v in op.kwargs.items()})
        assert value is not None
        return value

    value = _insert_or_roll_back(gm, view, build, view)
    if value is None:
        return False
    view.replace_all_uses_with(value)
    for node in [view, *(op for op, _ in chain)]:  # users first
        gm.graph.erase_node(node)
    add_note(gm, NOTE_HOIST_SPLIT.format(view=view.name, ops=", ".join(op.name for op, _ in reversed(chain)),
                                         sources=", ".join(dict.fromkeys(a.name for a in sources))))
    return True


def _move_at(gm: GraphModule, node: Node, returned_ok: bool, splits: bool) -> bool:
    region = node.meta.get(REGION_KEY)
    shape = _view_shape(node)
    if region is None or shape is None:
        return False
    return (_hoist(gm, node, shape, region) or (splits and _hoist_split(gm, node, shape, region))
            or _sink(gm, node, shape, region, returned_ok))


def views_to_region_edges(gm: GraphModule, kind: str) -> GraphModule:
    """Moves each in-region view across the elementwise ops between it and its region's edge (module
    docstring); `kind` is the graph's ("forward", "backward", "inference")."""
    # splits move above ops of several tensors last: a split that a later view undoes is joined with it
    moved = sum(rewrite_to_fixpoint(gm, lambda g, n: _move_at(g, n, kind == "backward", splits))
                for splits in (False, True))
    if moved:
        log.debug("dynamo_nvf: moved %d view(s) to their region's edge", moved)
    return gm
