"""A graph made only of zero-copy views runs as one `as_strided` per output.

When no graph of a program has a region and every aten node is a metadata op that eager runs as an
alias (a lone view, seed 003's metadata-only programs), the outputs are fixed views of the inputs:
same storage, with sizes, strides and an offset known at compile time (Dynamo guards the inputs'
sizes and strides). Replaying each output as one `torch.as_strided` call, as inductor's
`reinterpret_tensor` does, skips the chain of view calls and the FX module call; only Dynamo's own
cost remains. Used for inference graphs only: autograd would see as_strided instead of the views.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import METADATA_OPS
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
        plan.kind == "inference" and not plan.regions and all(n.op in _ALIAS_OP_NAMES for n in plan.nodes)
        for plan in plans
    )


def _static(values: Sequence[Any]) -> bool:
    return all(isinstance(v, int) for v in values)


def _source_placeholder(node: Node) -> Optional[Node]:
    """The input a chain of views starts from (each view's tensor is its first argument)."""
    src = node
    while src.op != "placeholder":
        if src.op not in ("call_function", "call_method") or not src.args or not isinstance(src.args[0], Node):
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
        if not (_static(out.size()) and _static(out.stride()) and _static([out.storage_offset(), inp.storage_offset()])):
            return None
        specs.append(ViewOfInput(placeholders.index(src), tuple(out.size()), tuple(out.stride()),
                                 int(out.storage_offset()) - int(inp.storage_offset())))
    return specs, as_tuple


def view_replay(gm: GraphModule, plans: Sequence[GraphPlan]) -> Optional[Callable[..., Any]]:
    """A callable returning `gm`'s outputs as `as_strided` views of its inputs, or None."""
    found = view_specs(gm, plans)
    if found is None:
        return None
    specs, as_tuple = found
    as_strided = torch.as_strided

    if not as_tuple and len(specs) == 1:
        (s,) = specs

        def replay_one(*args: Any) -> torch.Tensor:
            x = args[s.input_index]
            return as_strided(x, s.size, s.stride, x.storage_offset() + s.offset_delta)

        return replay_one

    def replay(*args: Any) -> tuple[torch.Tensor, ...]:
        return tuple(
            as_strided(args[s.input_index], s.size, s.stride, args[s.input_index].storage_offset() + s.offset_delta)
            for s in specs
        )

    return replay
