"""A compiled graph's forward in aot_autograd's boxed calling convention, freeing each input after
its last use.

aot_autograd hands a compiled graph its inputs as one list it gives up (`steal_args`): a backward's
saved activations, a forward's parameters and batch. A function called as `f(*args)` keeps every one
of them alive until it returns, whatever the graph's own code frees: the caller's list and the
argument tuple both hold them. Inductor's generated code takes the list, clears it, and drops each
input after its last use; this does the same with FX's boxed code generation (`args_list`, cleared
on entry; FX's code already sets each value to None after its last use). A conv net's backward
then frees each saved activation once its gradient is computed, not at the end of the backward.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import torch
from torch.fx import Graph, GraphModule
from torch.fx.graph import CodeGen

BoxedFn = Callable[[list], Any]

#: torch's boxed code generation (torch.fx.graph._BoxedCodeGen), where this torch has it.
_BOXED_CODEGEN: Optional[type] = getattr(torch.fx.graph, "_BoxedCodeGen", None)


def boxed(fn: Callable[..., Any]) -> BoxedFn:
    """`fn(*args)` in the boxed convention: the list cleared on entry, but every input held until
    `fn` returns (for a function FX did not generate)."""

    def run(args: list) -> Any:
        local = list(args)
        args.clear()
        return fn(*local)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def frees_inputs_early(graph: Graph) -> bool:
    """True where FX can generate this graph's code in the boxed convention: torch has the code
    generation and the graph uses plain positional code (not a pytree or other custom codegen)."""
    return _BOXED_CODEGEN is not None and type(graph._codegen) is CodeGen


def boxed_module(gm: GraphModule, retarget: Optional[Callable[[Graph], None]] = None) -> BoxedFn:
    """A copy of `gm` (its graph deep-copied; node metadata shared) whose forward takes one list and
    clears it, each input then freed after its last use. `retarget` may edit the copy's graph first.
    Where the boxed code cannot be generated, `boxed(forward)`. The copy's code is generated once
    (GraphModule's constructor): about 10 ms for a graph of 250 nodes; the function's `code` is it."""
    graph = copy.deepcopy(gm.graph)  # Graph's deepcopy shares node meta values
    if retarget is not None:
        retarget(graph)
    freed = frees_inputs_early(graph)
    if freed:
        graph.set_codegen(_BOXED_CODEGEN())
    module = GraphModule(gm, graph)
    forward = module.forward
    if not freed:
        run = boxed(forward)
    else:
        def run(args: list) -> Any:
            return forward(args)  # the generated code clears the list

        run._boxed_call = True  # type: ignore[attr-defined]
    run.code = module.code  # type: ignore[attr-defined]  # the code that runs, for reading
    return run
