"""Graph passes: each takes a GraphModule and returns it rewritten; no runtime state lives here."""

from __future__ import annotations

from typing import Any, Callable

from torch.fx import GraphModule, Node
from torch.fx.node import map_arg

#: gm.meta key of the notes a rewriting pass leaves for the graph's plan (explain() lists them under
#: "rewrites"): the attention pass's on Dynamo's graph, the aten passes' on aot_autograd's graphs;
#: backend.py moves them into the plans.
NOTES_KEY = "nvf_rewrite_notes"


def is_tangent(node: Node) -> bool:
    """A backward graph's (or joint graph's) gradient input: aot_autograd names them `tangents_*`."""
    return node.op == "placeholder" and node.name.startswith("tangents")


def add_note(gm: GraphModule, note: str) -> None:
    """Records what a pass rewrote, for the plan of this graph."""
    gm.meta.setdefault(NOTES_KEY, []).append(note)


def call_like(gm: GraphModule, target: Any, args: tuple, like: Node, mode: Any, kwargs: dict | None = None) -> Node:
    """A new call_function node at the graph's insertion point, with `like`'s annotations (its region,
    ...) and its fake value computed under `mode` (the graph's FakeTensorMode)."""
    kwargs = kwargs or {}
    node = gm.graph.call_function(target, args, kwargs)
    node.meta.update({k: v for k, v in like.meta.items() if k not in ("val", "tensor_meta")})
    vals = map_arg(args, lambda a: a.meta["val"])  # nested too: cat's list of tensors
    kvals = map_arg(kwargs, lambda a: a.meta["val"])
    with mode:
        node.meta["val"] = target(*vals, **kvals)
    return node


def rewrite_to_fixpoint(gm: GraphModule, rewrite_at: Callable[[GraphModule, Node], bool]) -> int:
    """Offers every node of `gm` to `rewrite_at` (True: it rewrote there), pass after pass, until a
    pass rewrites nothing; nodes a rewrite erased are skipped, nodes it added wait for the next pass.
    Lints and recompiles `gm` when anything changed; returns the number of rewrites."""
    rewrites = 0
    progress = True
    while progress:
        progress = False
        for node in list(gm.graph.nodes):
            if not node._erased and rewrite_at(gm, node):
                rewrites += 1
                progress = True
    if rewrites:
        gm.graph.lint()
        gm.recompile()
    return rewrites
