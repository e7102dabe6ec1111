"""Merge duplicate views and elementwise ops: two nodes of one region (or both outside any region)
that apply the same op to the same operands become one.

Why: passes that move a view to its region's edge build one view per chain they move
(views_to_edges), so a channels-last GroupNorm (`x.view(N, H*W, G, C/G).float()` read by its two
statistics and its normalization) left three identical views of the convolution output, each
trimmed to a region input and each cast in the region: nvFuser cannot know the three inputs are one
tensor, and each call made three views in ATen and checked three inputs (timm's ResNetV2-BiT
inference, 16 GroupNorms; a CPU plan showed `view(permute(conv), [N, 3136, 32, 2])` three times per
region). Merged, the region reads the tensor once, as aot_autograd's own graph had it.

Exact: a view, or a deterministic elementwise op or cast, of the same operands with the same
arguments computes the same values. Only merged where nothing else can tell them apart: the same
region and eager reason, never a random op, never a value the graph returns (eager's outputs are
tensors of their own), never an op with side effects. A region's slices, pads and cats stay as they
are: the resize-join workaround (passes/known_bugs.py, which runs before) judged the region with them.

Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Any, Hashable, Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import draws_random_numbers, lowers_to_resize
from dynamo_nvf.ops.metadata import METADATA_OPS
from dynamo_nvf.ops.registry import LEFT_TO_ATEN_KEY
from dynamo_nvf.passes import add_note
from dynamo_nvf.passes.partition import REASON_KEY, REGION_KEY

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: Casts that are not tagged pointwise.
CASTS = frozenset({aten._to_copy.default})

NOTE = "merged {count} duplicate view(s) and elementwise op(s) (the same op of the same operands)"


def _mergeable(node: Node, returned: set[Node]) -> bool:
    if node.op != "call_function" or node in returned or node.is_impure() or draws_random_numbers(node):
        return False
    if node.meta.get(REGION_KEY) is not None and lowers_to_resize(node):
        return False  # passes/known_bugs.py judged the region's resizes as they are
    target = node.target
    return target in METADATA_OPS or target in CASTS or torch.Tag.pointwise in getattr(target, "tags", ())


def _frozen(value: Any) -> Hashable:
    """`value` (an FX argument) as a hashable key; lists become tuples, nested too."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _frozen(v)) for k, v in value.items())))
    hash(value)  # TypeError for an unhashable argument: the caller skips the node
    return value


def _key(node: Node) -> Optional[Hashable]:
    try:
        return (node.target, _frozen(node.args), _frozen(node.kwargs), node.meta.get(REGION_KEY),
                node.meta.get(REASON_KEY), node.meta.get(LEFT_TO_ATEN_KEY))
    except TypeError:
        return None


def merge_duplicates(gm: GraphModule) -> GraphModule:
    """Replaces each mergeable node by the first earlier node of the same key (module docstring).
    One sweep in graph order: a merge makes the users' operands equal, so their own duplicates merge
    when the sweep reaches them."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    returned = {a for a in output.all_input_nodes}
    first: dict[Hashable, Node] = {}
    merged = 0
    for node in list(gm.graph.nodes):
        if not _mergeable(node, returned):
            continue
        key = _key(node)
        if key is None:
            continue
        kept = first.setdefault(key, node)
        if kept is node:
            continue
        node.replace_all_uses_with(kept)
        gm.graph.erase_node(node)
        merged += 1
    if merged:
        add_note(gm, NOTE.format(count=merged))
        log.debug("dynamo_nvf: %s", NOTE.format(count=merged))
        gm.graph.lint()
        gm.recompile()
    return gm
