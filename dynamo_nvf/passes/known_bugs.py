"""Keeps regions that nvFuser is known to compute wrongly in eager PyTorch.

One pattern so far, found on an H100 with nvfuser_direct 0.2.36+git7e04d26 (2026-11-24):
- The region broadcasts a tensor (`expand`).
- It writes something computed from that broadcast, before any reduction, as an output.
- It also reduces a permute of that broadcast.

ConvNeXt's head backward has this pattern. It spreads the pooled gradient over [N, C, H, W], keeps
that tensor, and sums its channels-last permute times the last block's output for the layer-scale
gradient. nvFuser returned the sum (and outputs beside it) wrong by 90-100% of their norm.
`scripts/repros/nvfuser_convnext_head_backward.py` reproduces it with `nvfuser_direct` alone.
- The sum alone is right.
- The sum together with the broadcast tensor as an output is wrong.
Such a region otherwise reaches nvFuser only after a planning rewrite (`unflatten_reductions`, or the
norm split at any size). Without one, nvFuser refuses it ("Can not find a scheduler").

Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import DIM_REDUCTIONS
from dynamo_nvf.passes.partition import regions_of, set_eager

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

EXPAND_PERMUTE_REDUCTION = (
    "nvFuser 0.2.36 computes a region wrongly when it writes a broadcast (expand) tensor and also reduces "
    "a permute of it (scripts/repros/nvfuser_convnext_head_backward.py): kept in eager"
)


def _is_reduction(node: Node) -> bool:
    return node.op == "call_function" and (node.target in DIM_REDUCTIONS or node.target is aten.sum.default)


def _downstream(start: Node, members: set[Node]) -> list[Node]:
    seen: list[Node] = []
    stack = [u for u in start.users if u in members]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.append(node)
        stack.extend(u for u in node.users if u in members)
    return seen


def _leaves_region(node: Node, members: set[Node]) -> bool:
    return any(u not in members for u in node.users)


def expand_permute_reduction(members: list[Node]) -> Optional[Node]:
    """The `expand` of a region that makes the pattern above, or None."""
    inside = set(members)
    for node in members:
        if node.op != "call_function" or node.target is not aten.expand.default:
            continue
        below = _downstream(node, inside)
        reduced = {n for r in below if _is_reduction(r) for n in [r, *_downstream(r, inside)]}
        # An output of the broadcast itself (or of what it feeds before any reduction): the sum's own
        # result leaving the region is fine (a region that only sums was computed right).
        if not any(_leaves_region(n, inside) for n in [node, *below] if n not in reduced):
            continue
        for permute in below:
            if permute.target is aten.permute.default and any(_is_reduction(n) for n in _downstream(permute, inside)):
                return node
    return None


def keep_known_bugs_eager(gm: GraphModule) -> GraphModule:
    """Sends each region with a pattern nvFuser computes wrongly back to eager, with the reason."""
    for members in regions_of(gm).values():
        found = expand_permute_reduction(members)
        if found is not None:
            log.info("dynamo_nvf: the region of %s stays in eager: %s", found.name, EXPAND_PERMUTE_REDUCTION)
            set_eager(members, EXPAND_PERMUTE_REDUCTION)
    return gm
