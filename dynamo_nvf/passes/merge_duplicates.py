"""Merge duplicate views: two views of one region (or both outside any region) that apply the same
view op to the same operand with the same arguments become one.

Why: passes that move a view to its region's edge build one view per chain they move
(views_to_edges), so a channels-last GroupNorm whose statistics each recompute their source
(strided_statistics) left three identical views of the convolution output, each trimmed to a region
input: nvFuser was handed one tensor as three inputs, and each call made three views in ATen and
checked three inputs (timm's ResNetV2-BiT inference, 16 GroupNorms; a CPU plan showed
`view(permute(conv), [N, 3136, 32, 2])` three times per region). Merged, the region reads the tensor
as one input; LLaMA-style graphs also viewed a normalized activation once per projection.

Only views: a view is an alias, so one view read by several ops costs nothing, while duplicated
compute may be deliberate (strided_statistics recomputes a statistic's source from the region's
inputs so nvFuser's segments need not pass it between them). Never merged across regions or eager
reasons, never a value the graph returns (eager's outputs are tensors of their own). In a region,
only views at its edge (chains of views of values from outside, or read only outside), never a broadcast, slice,
split or select: passes/known_bugs.py, which runs before, judged the region with its own nodes, and
one inner view feeding two paths can make a pattern it keeps from nvFuser (an expand written out
and reduced through a permute).

Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Any, Hashable, Optional

from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import lowers_to_resize
from dynamo_nvf.ops.metadata import METADATA_OPS, MULTI_OUTPUT_METADATA_OPS, is_broadcast
from dynamo_nvf.ops.registry import LEFT_TO_ATEN_KEY
from dynamo_nvf.passes import add_note
from dynamo_nvf.passes.partition import REASON_KEY, REGION_KEY

log = logging.getLogger("dynamo_nvf")

NOTE = "merged {count} duplicate view(s) (the same view of the same tensor)"


def _mergeable(node: Node, returned: set[Node]) -> bool:
    if node.op != "call_function" or node in returned or node.is_impure() or node.target not in METADATA_OPS:
        return False
    region = node.meta.get(REGION_KEY)
    if region is None:
        return True
    if lowers_to_resize(node) or node.target in MULTI_OUTPUT_METADATA_OPS or is_broadcast(node):
        return False
    # Only at the region's edge: a chain of views of values from outside, or of views only code outside
    # reads. Inside, one view feeding two paths can make a pattern passes/known_bugs.py (which runs
    # before) keeps from nvFuser: an expand both written out and reduced through a permute.
    return _at_edge(node, region, upstream=True) or _at_edge(node, region, upstream=False)


def _at_edge(node: Node, region: Any, upstream: bool) -> bool:
    """Whether every path from `node` out of `region` (upstream: to its inputs; else to its readers)
    runs through views only."""
    nodes = node.all_input_nodes if upstream else list(node.users)
    return all(n.meta.get(REGION_KEY) != region or (
        n.op == "call_function" and n.target in METADATA_OPS and not is_broadcast(n) and _at_edge(n, region, upstream))
        for n in nodes)


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
    """Replaces each mergeable view by the first earlier one of the same key (module docstring). One
    sweep in graph order: a merge makes its users' operands equal, so views of views merge too."""
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
