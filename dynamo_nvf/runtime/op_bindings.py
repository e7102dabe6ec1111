"""Eager ops between regions call torch's Python bindings, not their op overloads:
`torch.ops.aten.permute.default(x, dims)` becomes `torch.permute(x, dims)`, a view `x.view(shape)`.

Why: an op overload's call boxes its arguments through the op's schema from Python; the binding
parses them in C++ and calls the same ATen function, as inductor's generated code calls its extern
kernels (`torch.convolution`, `torch.addmm`). On this project's CPU machine (Python 3.11, torch 2.13,
timeit, 2026-11-29): permute 1.97 against 0.90 µs a call, addmm 3.11 against 1.84, t 1.23 against 0.63, view
1.70 against 1.08. A conv net's inference step keeps such ops between its regions (timm
DenseNet-121: 20 convolutions and 16-30 permutes of their outputs; an HF LLaMA step 15 matmuls).

Exact: the same ATen op with the same arguments, through the public API (tensor subclasses and
dispatch modes see it as they see any torch call). Only the overloads listed, whose bindings take
the schema's arguments in the same order and keywords.

Applied to the copy of the graph that runs (runtime/lean_forward.py's `compiled_forward`), so the
graph explain() shows and tests read keeps the aten ops.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch
from torch.fx import Graph

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: aten overload -> the torch function that takes the same arguments.
FUNCTIONS: dict[Any, Callable[..., Any]] = {
    aten.permute.default: torch.permute,
    aten.t.default: torch.t,
    aten.transpose.int: torch.transpose,
    aten.unsqueeze.default: torch.unsqueeze,
    aten.convolution.default: torch.convolution,
    aten.mm.default: torch.mm,
    aten.bmm.default: torch.bmm,
    aten.addmm.default: torch.addmm,
    aten.add.Tensor: torch.add,
    aten.mul.Tensor: torch.mul,
}
#: aten overload -> the tensor method that takes the same arguments.
METHODS: dict[Any, str] = {
    aten.view.default: "view",
    aten.reshape.default: "reshape",
    aten.expand.default: "expand",
}


def call_bindings(graph: Graph) -> None:
    """Retargets each listed aten call of `graph` to its binding, in place (module docstring)."""
    changed = 0
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in FUNCTIONS:
            node.target = FUNCTIONS[node.target]
            changed += 1
        elif node.target in METHODS and not node.kwargs:
            node.op, node.target = "call_method", METHODS[node.target]
            changed += 1
    if changed:
        log.debug("dynamo_nvf: %d eager op(s) call their Python bindings", changed)
