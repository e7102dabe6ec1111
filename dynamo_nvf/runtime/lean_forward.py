"""The forward of a graph whose views were rewritten by the lean views pass, with the dispatch check
made once per call instead of once per view.

The pass's `reinterpret_tensor` decides per view between torch's raw `_reinterpret_tensor` (no
dispatcher, about 1 us) and `as_strided` (for fake tensors, subclasses and dispatch modes). Made
per view, that check and the Python call around it cost about as much again as the raw call: some
45 us per call of the LLaMA-style inference graph (57 views). The answer is the same for every view
of one call (plain tensors in and no mode active means plain tensors throughout: regions, matmuls
and views of plain tensors are plain), so `LeanForward` asks once and runs one of two codegens of
the same graph: the raw calls, or the checked ones.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Graph, GraphModule

from dynamo_nvf.passes.lean_views import PLAIN_TENSORS, dispatch_modes, raw_reinterpret, reinterpret_tensor
from dynamo_nvf.runtime.boxed_forward import BoxedFn, boxed_module
from dynamo_nvf.runtime.op_bindings import call_bindings

#: Argument types that leave the raw path sound (anything else, a tensor subclass above all, takes
#: the checked path).
_PLAIN_ARGUMENTS = frozenset({*PLAIN_TENSORS, int, float, bool, type(None), torch.SymInt})


def _raw_calls(graph: Graph) -> None:
    """The raw path's code: torch's raw reinterprets and the eager ops' bindings."""
    call_bindings(graph)
    for node in graph.nodes:
        if node.op == "call_function" and node.target is reinterpret_tensor:
            node.target = raw_reinterpret


class LeanForward:
    """Calls `gm` (boxed: one list of arguments, cleared) with raw reinterprets when every argument
    is plain and no dispatch mode is active."""

    def __init__(self, gm: GraphModule) -> None:
        # On the instance: wrappers (torch._dynamo.disable) copy the callable's __dict__, not its class's.
        self._boxed_call = True
        self.checked = boxed_module(gm, call_bindings)
        self.raw = boxed_module(gm, _raw_calls)

    def __call__(self, args: list) -> Any:
        if not dispatch_modes() and all(type(a) in _PLAIN_ARGUMENTS for a in args):
            return self.raw(args)
        return self.checked(args)


def compiled_forward(gm: GraphModule, lean_views: bool) -> BoxedFn:
    """`gm`'s forward, boxed (runtime/boxed_forward.py), its eager ops calling their Python bindings
    (runtime/op_bindings.py): a LeanForward where `lean_views` is on, the graph has reinterprets and
    torch has the raw call."""
    if not lean_views or raw_reinterpret is None or not any(
            n.op == "call_function" and n.target is reinterpret_tensor for n in gm.graph.nodes):
        return boxed_module(gm, call_bindings)
    return LeanForward(gm)
