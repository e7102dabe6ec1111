"""A graph made only of zero-copy views runs as one `as_strided` per output.

When no graph of a program has a region and every aten node is a metadata op that eager runs as an
alias (a lone view, seed 003's metadata-only programs), the outputs are fixed views of the inputs:
same storage, with sizes, strides and an offset known at compile time (Dynamo guards the inputs'
sizes and strides). Replaying each output as one `torch.as_strided` call, as inductor's
`reinterpret_tensor` does, skips the chain of view calls and the FX module call; only Dynamo's own
cost remains. Used for inference graphs only: autograd would see as_strided instead of the views.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import METADATA_OPS, static_layout
from dynamo_nvf.ops.registry import op_name
from dynamo_nvf.plan import GraphPlan

_ALIAS_OP_NAMES = frozenset(op_name(target) for target in METADATA_OPS)


@dataclass(frozen=True)
class ViewOfInput:
    """One output: a view of input `input_index` with these sizes, strides and offset delta."""

    input_index: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset_delta: int


def _only_aliases(plans: Sequence[GraphPlan]) -> bool:
    return bool(plans) and all(
        plan.kind == "inference" and not plan.planning_error and not plan.regions and plan.nodes
        and all(n.op in _ALIAS_OP_NAMES for n in plan.nodes)
        for plan in plans
    )


#: Dynamo-level calls that always return a new view (never the input object itself, as `flatten`,
#: `contiguous` or `to` may), with the viewed tensor as first argument.
_VIEW_METHODS = frozenset({
    "view", "reshape", "permute", "transpose", "t", "unsqueeze", "squeeze", "expand", "expand_as",
    "__getitem__", "split", "unbind", "select", "narrow", "unflatten", "chunk", "swapaxes", "swapdims",
})
_VIEW_FUNCTIONS = frozenset({
    operator.getitem, torch.transpose, torch.permute, torch.reshape, torch.squeeze, torch.unsqueeze,
    torch.split, torch.unbind, torch.narrow, torch.select, torch.t, torch.swapaxes, torch.chunk,
})


def _is_view_call(node: Node) -> bool:
    if not node.args or not isinstance(node.args[0], Node):
        return False
    if node.op == "call_method":
        return node.target in _VIEW_METHODS
    return node.op == "call_function" and node.target in _VIEW_FUNCTIONS


def _source_placeholder(node: Node) -> Optional[Node]:
    """The input a chain of views starts from (each view's tensor is its first argument)."""
    src = node
    while src.op != "placeholder":
        if not _is_view_call(src):
            return None
        src = src.args[0]
    return src


def view_specs(gm: GraphModule, plans: Sequence[GraphPlan]) -> Optional[tuple[list[ViewOfInput], bool]]:
    """The outputs of `gm` as views of its inputs, and whether it returns a tuple; None when the
    graph is not views only (or a size, stride or offset is symbolic)."""
    if not _only_aliases(plans):
        return None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    result = output.args[0]
    as_tuple = isinstance(result, (tuple, list))
    specs: list[ViewOfInput] = []
    for node in result if as_tuple else (result,):
        if not isinstance(node, Node) or node.op == "placeholder":
            return None  # a constant, or an input returned as itself (eager returns the same object)
        src = _source_placeholder(node)
        if src is None:
            return None
        out, inp = node.meta.get("example_value"), src.meta.get("example_value")
        if not isinstance(out, torch.Tensor) or not isinstance(inp, torch.Tensor) or out.dtype != inp.dtype:
            return None
        if not (static_layout(out) and isinstance(inp.storage_offset(), int)):
            return None
        specs.append(ViewOfInput(placeholders.index(src), tuple(out.size()), tuple(out.stride()),
                                 int(out.storage_offset()) - int(inp.storage_offset())))
    return specs, as_tuple


def _one_view(s: ViewOfInput) -> Callable[[Sequence[Any]], torch.Tensor]:
    as_strided, index, size, stride, delta = torch.as_strided, s.input_index, s.size, s.stride, s.offset_delta
    if delta == 0:  # as_strided keeps the input's own offset
        return lambda args: as_strided(args[index], size, stride)
    return lambda args: as_strided(args[index], size, stride, args[index].storage_offset() + delta)


def view_replay(gm: GraphModule, plans: Sequence[GraphPlan]) -> Optional[Callable[..., Any]]:
    """A callable returning `gm`'s outputs as `as_strided` views of its inputs, or None."""
    found = view_specs(gm, plans)
    if found is None:
        return None
    specs, as_tuple = found
    views = [_one_view(s) for s in specs]
    if len(views) == 1:  # the common lone view: no loop
        (view,) = views
        if as_tuple:
            return lambda *args: (view(args),)
        return lambda *args: view(args)
    return lambda *args: tuple([view(args) for view in views])
