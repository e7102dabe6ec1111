"""The one list of metadata-only aten ops, each with the rule for when eager runs it as a zero-copy alias.

The bookend pass moves such nodes off a region's boundary only when the rule says eager makes a view
for the layout the node will actually see; otherwise (a reshape that would copy) the node stays inside
the region, where nvFuser does the copy as part of the kernel.
"""

from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from torch._guards import detect_fake_mode
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg
from torch._prims_common import check_significant_strides
from torch.fx.experimental.symbolic_shapes import statically_known_true
from dynamo_nvf._compat import hint_int

aten = torch.ops.aten

#: Returns None when the node is a zero-copy alias in eager, else the reason it would copy.
AliasRule = Callable[[Node], Optional[str]]


@dataclass(frozen=True)
class MetadataOp:
    """A metadata-only op: `alias_rule` says if eager makes it a view; `broadcast` marks expand."""

    name: str
    alias_rule: AliasRule
    broadcast: bool = False


def _always_alias(node: Node) -> Optional[str]:
    return None


def _hints(values: Any) -> list[int]:
    return [hint_int(v) for v in values]


def _input_val(node: Node) -> Any:
    src = node.args[0]
    return src.meta.get("val") if isinstance(src, Node) else None


def _view_is_alias(node: Node) -> Optional[str]:
    """A view/reshape is an alias only if the input's strides allow the new shape without a copy."""
    val = _input_val(node)
    out = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or not isinstance(out, torch.Tensor):
        return "no shape information to prove the reshape is a view"
    try:
        probe = torch.empty_strided(_hints(val.shape), _hints(val.stride()), dtype=val.dtype, device="meta")
        probe.view(_hints(out.shape))
    except RuntimeError:
        return "reshape of this layout is a copy in eager, so nvFuser does it inside the kernel"
    return None


def _getitem_alias(node: Node) -> Optional[str]:
    src = node.args[0]
    if isinstance(src, Node) and src.op == "call_function" and src.target in MULTI_OUTPUT_METADATA_OPS:
        return None
    return "getitem of a compute op's result"


_VIEW = MetadataOp("view", _view_is_alias)
_ALIAS = MetadataOp("alias", _always_alias)

#: aten overload -> rule. The single source of truth for "metadata op" in this package.
METADATA_OPS: dict[Any, MetadataOp] = {
    aten.view.default: _VIEW,
    aten._unsafe_view.default: _VIEW,
    aten.reshape.default: _VIEW,
    aten.permute.default: MetadataOp("permute", _always_alias),
    aten.transpose.int: MetadataOp("transpose", _always_alias),
    aten.t.default: MetadataOp("t", _always_alias),
    aten.squeeze.default: MetadataOp("squeeze", _always_alias),
    aten.squeeze.dim: MetadataOp("squeeze", _always_alias),
    aten.squeeze.dims: MetadataOp("squeeze", _always_alias),
    aten.unsqueeze.default: MetadataOp("unsqueeze", _always_alias),
    aten.expand.default: MetadataOp("expand", _always_alias, broadcast=True),
    aten.slice.Tensor: MetadataOp("slice", _always_alias),
    aten.select.int: MetadataOp("select", _always_alias),
    aten.alias.default: _ALIAS,
    aten.detach.default: _ALIAS,
    aten.split.Tensor: MetadataOp("split", _always_alias),
    aten.split_with_sizes.default: MetadataOp("split", _always_alias),
    aten.unbind.int: MetadataOp("unbind", _always_alias),
    operator.getitem: MetadataOp("getitem", _getitem_alias),
}

#: Metadata ops that return a list of views, read through operator.getitem.
MULTI_OUTPUT_METADATA_OPS = frozenset(
    {aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int}
)

#: View-like ops whose chains collapse into one reshape inside a region (seed 002's separateNestedViews).
RESHAPE_OPS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})

#: Ops that read or view memory by explicit strides: a pass that changes a tensor's strides (or the
#: layout fake propagation predicts) cannot judge what they read, so it leaves their graph alone.
EXPLICIT_STRIDES = frozenset({aten.as_strided.default, aten.as_strided_.default, aten.as_strided_scatter.default})


def reads_explicit_strides(gm: "GraphModule") -> bool:
    """True when any node of `gm` reads or views memory by explicit strides (EXPLICIT_STRIDES)."""
    return any(n.op == "call_function" and n.target in EXPLICIT_STRIDES for n in gm.graph.nodes)


def static_layout(t: torch.Tensor) -> bool:
    """True when a (fake) tensor's sizes, strides and storage offset are all plain ints."""
    return all(isinstance(v, int) for v in (*t.shape, *t.stride(), t.storage_offset()))


def strides_nest(sizes: Sequence[int], strides: Sequence[int], dims_inner_first: Sequence[int]) -> bool:
    """Whether `dims_inner_first` lie in memory without overlap: each stride at least the extent of
    the dims inside it (size-1 dims skipped). Dense tensors and slices of them do; expands and
    unfolds do not."""
    step = 1
    for d in dims_inner_first:
        if sizes[d] == 1:
            continue
        if strides[d] < step:
            return False
        step = strides[d] * sizes[d]
    return True


def static_sizes(t: torch.Tensor) -> Optional[list[int]]:
    """A (fake) tensor's sizes when they are all plain ints; None where one is symbolic (a SymInt
    can be neither hashed nor compared without adding a guard)."""
    sizes = list(t.shape)
    return sizes if all(isinstance(s, int) for s in sizes) else None


def memory_order(val: torch.Tensor) -> list[int]:
    """A tensor's dims from outermost to innermost in memory (logical order where strides tie)."""
    from torch._prims_common import compute_elementwise_output_logical_to_physical_perm

    perm, _ = compute_elementwise_output_logical_to_physical_perm(val)
    return list(perm)


def tensor_val(node: object) -> Optional[torch.Tensor]:
    """An FX node's (fake) tensor value: Dynamo's `example_value` or aot_autograd's `val`; None for
    anything else (a non-node, a tuple value)."""
    if not isinstance(node, Node):
        return None
    val = node.meta.get("example_value", node.meta.get("val"))
    return val if isinstance(val, torch.Tensor) else None


def same_shape(a: Any, b: Any) -> bool:
    """Whether two shapes are equal, without a guard on symbolic sizes (unknown counts as unequal)."""
    return len(a) == len(b) and all(statically_known_true(x == y) for x, y in zip(a, b))


def same_significant_strides(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a rewrite's value `a` can stand in for `b` where other code reads it: the same shape and
    the same strides in every dim of size above one (what a reader of the tensor sees)."""
    return tuple(a.shape) == tuple(b.shape) and check_significant_strides(a, b, only_cuda=False)[0]


def static_shape(node: object) -> Optional[tuple[int, ...]]:
    """The static shape of an FX node's tensor value; None for anything else or a symbolic size."""
    val = tensor_val(node)
    sizes = static_sizes(val) if val is not None else None
    return tuple(sizes) if sizes is not None else None


def slice_params(node: object) -> Optional[tuple[int, Any, Any, int]]:
    """(dim, start, end, step) of an `aten.slice.Tensor` node with plain-int (or None) arguments,
    positional or keyword; None for anything else."""
    if not isinstance(node, Node) or node.op != "call_function" or node.target is not aten.slice.Tensor:
        return None
    values = dict(zip(("self", "dim", "start", "end", "step"), node.args))
    values.update(node.kwargs)
    dim, start, end, step = values.get("dim", 0), values.get("start"), values.get("end"), values.get("step", 1)
    if not all(v is None or isinstance(v, int) for v in (dim, start, end, step)) or not isinstance(step, int):
        return None
    return dim, start, end, step


ARANGES = (aten.arange.default, aten.arange.start, aten.arange.start_step)


def arange_params(node: object) -> Optional[tuple[Any, Any, Any]]:
    """(start, end, step) of an `aten.arange` node, whichever overload spells it; None for anything
    else. `default` is (end), `start` (start, end), `start_step` (start, end, step)."""
    if not isinstance(node, Node) or node.op != "call_function" or node.target not in ARANGES:
        return None
    args, kwargs = list(node.args), node.kwargs
    if node.target is aten.arange.default:
        return 0, args[0] if args else kwargs["end"], 1
    start = args[0] if args else kwargs["start"]
    end = args[1] if len(args) > 1 else kwargs["end"]
    step = (args[2] if len(args) > 2 else kwargs.get("step", 1)) if node.target is aten.arange.start_step else 1
    return start, end, step


def whole_arange_length(node: object) -> Optional[int]:
    """n for an `arange(n)` node (start 0, step 1, static length), else None."""
    params = arange_params(node)
    if params is None:
        return None
    start, end, step = params
    if start != 0 or step != 1 or not isinstance(end, int):
        return None
    return end


def may_alias_its_input(node: Node) -> bool:
    """Whether `node`'s result may share its first argument's storage: a metadata op, a getitem (of a
    split's list), or any aten op whose schema marks its result as an alias (`diagonal`, `unfold`,
    `view.dtype`, `as_strided`, an in-place op), METADATA_OPS listed or not."""
    if node.op != "call_function":
        return False
    if node.target in METADATA_OPS or node.target is operator.getitem:
        return True
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


def is_metadata(node: Node) -> bool:
    """True for a node that only changes metadata (including getitem of a split)."""
    if node.op != "call_function" or node.target not in METADATA_OPS:
        return False
    if node.target is operator.getitem:
        return _getitem_alias(node) is None
    return True


def alias_violation(node: Node) -> Optional[str]:
    """None when eager runs this metadata node as a zero-copy alias of its input, else why not."""
    return METADATA_OPS[node.target].alias_rule(node)


def is_broadcast(node: Node) -> bool:
    return node.op == "call_function" and node.target in METADATA_OPS and METADATA_OPS[node.target].broadcast


_ABSENT = object()


def save_vals(gm: "GraphModule") -> dict:
    """Every node's `meta["val"]` (or its absence), for `restore_vals` after a rewrite that propagated
    new metadata and was then undone."""
    return {n: n.meta.get("val", _ABSENT) for n in gm.graph.nodes}


def restore_vals(saved: dict) -> None:
    """Puts back what `save_vals` saved, exactly: a value that was absent is removed again."""
    for node, val in saved.items():
        if val is _ABSENT:
            node.meta.pop("val", None)
        else:
            node.meta["val"] = val


# -- fake values of views after a rewrite ------------------------------------------------------------
# A view's fake value (its sizes, strides and storage offset) is a function of its input's. A pass that
# gives a node a new layout (a slice replaced by a fresh tensor, a padded matmul) leaves the values of
# the views taken of it stale unless it recomputes them; the passes after it, and lean_views' one-call
# views, would then read memory where eager's views do not (out of bounds, as a stale storage offset).


def replayed_val(node: Node, vals: Optional[dict[Node, Any]] = None) -> Any:
    """`node`'s fake value computed again from its operands' values (`vals` first, else their meta),
    under their fake mode; raises what the op raises (a view of a layout that would need a copy)."""
    vals = vals or {}
    operand = lambda a: vals[a] if a in vals else a.meta["val"]  # noqa: E731
    args = map_arg(node.args, operand)
    kwargs = map_arg(node.kwargs, operand)
    mode = detect_fake_mode([a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)])
    with mode if mode is not None else contextlib.nullcontext():
        return node.target(*args, **kwargs)


def views_for(node: Node, val: Any, eager_strides: bool = True) -> Optional[dict[Node, Any]]:
    """Every metadata node reached from `node` through metadata ops only, with its value recomputed
    for `node` holding `val`; None where one cannot be taken of that layout (a reshape that would
    copy) or, with `eager_strides`, where `node` or one of them is returned by the graph or read by
    explicit strides (whose strides eager defines: the caller has not kept them)."""
    fresh: dict[Node, Any] = {node: val}
    stack = [node]
    while stack:
        for user in stack.pop().users:
            if eager_strides and (user.op == "output"
                                  or (user.op == "call_function" and user.target in EXPLICIT_STRIDES)):
                return None
            if user in fresh or not is_metadata(user):
                continue
            try:
                fresh[user] = replayed_val(user, fresh)
            except Exception:  # noqa: BLE001 - no view of this layout
                return None
            stack.append(user)
    del fresh[node]
    return fresh


def _same_layout(a: Any, b: Any) -> bool:
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same_layout(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        # A size-1 dim's stride never moves an element (nor does any stride of an empty tensor).
        significant = [d for d, n in enumerate(a.shape) if n != 1] if a.numel() else []
        return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
                and all(a.stride(d) == b.stride(d) for d in significant)
                and (a.storage_offset() == b.storage_offset() or not a.numel()))
    return True


def _static_val(val: Any) -> bool:
    if isinstance(val, (tuple, list)):
        return all(_static_val(v) for v in val)
    return isinstance(val, torch.Tensor) and static_layout(val)


def stale_views(gm: "GraphModule") -> dict[Node, Any]:
    """The metadata nodes of `gm` (static layouts only) whose fake value differs from the one their
    input's value gives, each with that value (computed in graph order, so a view of a stale view
    gets its corrected input); views that cannot be recomputed are left out."""
    fresh: dict[Node, Any] = {}
    for node in gm.graph.nodes:
        if not is_metadata(node) or not _static_val(node.meta.get("val")):
            continue
        if not all(_static_val(fresh.get(a, a.meta.get("val"))) for a in node.all_input_nodes):
            continue
        try:
            val = replayed_val(node, fresh)
        except Exception:  # noqa: BLE001 - judged by the caller's own rules (alias_violation)
            continue
        if not _same_layout(val, node.meta["val"]):
            fresh[node] = val
    return fresh
