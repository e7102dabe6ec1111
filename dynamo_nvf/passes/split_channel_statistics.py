"""Give the per-channel outputs of a region that normalises with two or more BatchNorms a region of
their own: the saved reciprocal std, the new running mean and variance and whatever else the region
writes at one value per channel is recomputed, from the statistics, in a new small region; the
normalising region writes only the statistics themselves (`var_mean`'s outputs) and its full-size
tensors.

Why: nvFuser 0.2.36 schedules the pointwise segment that normalises two BatchNorms' activations
(a ResNet bottleneck's main and shortcut branches, their add and the ReLU) with neither
vectorisation nor a 2D split when that segment also writes values derived from both variances (the
reciprocal std beside the variance or the new running variance), and the segment then takes 8x as
long. ResNet-50's first such region ([64, 56, 56, 256] bf16, channels-last) as `nvfuser_direct`
fusions on an H100 (2026-11-27): 2914 us with all its outputs; 332 us writing the two means and
variances and the activation; 335 us writing the means and reciprocal stds; 2744 us writing means,
variances and reciprocal stds. A region with one BatchNorm was not slowed (206 us with all outputs),
so regions with one are left as they are: the split costs one more small kernel and region call.

Values are unchanged: the same ops on the same values, computed in another region. Forward and
inference graphs (the backward has no `var_mean`).

Pure on annotations and a copy of each moved node: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
import operator
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import tensor_val
from dynamo_nvf.passes.partition import REGION_KEY, SPLIT_KEY, note_cut, reach, regions_of
from dynamo_nvf.passes.split_reductions import recomputable

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

REASON = ("per-channel outputs of a region with two BatchNorms recomputed in a region of their own: "
          "nvFuser 0.2.36 runs the normalising segment that also writes them many times slower "
          "(passes/split_channel_statistics.py)")

#: A region needs this many BatchNorm statistics for the slow schedule (one measured fast).
MIN_STATISTICS = 2


def channel_statistics(node: Node) -> int:
    """The number of values per statistic (C) of a BatchNorm's `var_mean` (over every dim of its
    [N, C, ...] input but the channels, dim 1), else 0: a LayerNorm over a 2-D input's rows keeps dim 0."""
    if node.op != "call_function" or node.target is not aten.var_mean.correction:
        return 0
    source = tensor_val(node.args[0])
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if source is None or source.dim() < 2 or dims is None:
        return 0
    reduced = {d % source.dim() for d in dims}
    if [d for d in range(source.dim()) if d not in reduced] != [1] or not isinstance(source.shape[1], int):
        return 0
    return int(source.shape[1])


def _numel(node: Node) -> Optional[int]:
    """The node's element count if static; None for a symbolic one (read without guarding on it)."""
    val = tensor_val(node)
    if val is None:
        return None
    numel = val.numel()
    return numel if isinstance(numel, int) else None


def per_channel_outputs(members: list[Node]) -> list[Node]:
    """The nodes a new region recomputes, in graph order: every value of at most C elements below the
    region's BatchNorm statistics that the rest of the graph reads, and what of the region it needs
    (down to the statistics, which it reads). Empty where the region has fewer than MIN_STATISTICS."""
    statistics = [(n, c) for n in members if (c := channel_statistics(n))]
    if len(statistics) < MIN_STATISTICS:
        return []
    inside = set(members)
    channels = max(c for _, c in statistics)
    readers = {g for s, _ in statistics for g in s.users if g.target is operator.getitem}

    def small(node: Node) -> bool:
        numel = _numel(node)
        return numel is not None and numel <= channels and node not in readers and recomputable(node)

    below = set().union(*(reach(s, inside) for s, _ in statistics))
    outputs = [n for n in members if n in below and small(n) and any(u not in inside for u in n.users)]
    moved: set[Node] = set()
    stack = list(outputs)
    while stack:
        node = stack.pop()
        if node in moved:
            continue
        moved.add(node)
        for feeder in node.all_input_nodes:
            if feeder in inside and feeder not in readers and feeder not in moved:
                if not small(feeder):
                    return []  # reads more than the statistics: leave the region whole
                stack.append(feeder)
    return [n for n in members if n in moved]


def _copy_into(gm: GraphModule, part: list[Node], inside: set[Node], region_id: int) -> dict[Node, Node]:
    """Copies `part` (in graph order) into region `region_id`, each copy right after its original
    (after its inputs and before any reader), points the readers outside the old region at the
    copies and erases the originals nothing reads now."""
    copies: dict[Node, Node] = {}
    for node in part:
        with gm.graph.inserting_after(node):
            copy = gm.graph.node_copy(node, lambda n: copies.get(n, n))
        copy.meta[REGION_KEY] = region_id
        copy.meta.pop(SPLIT_KEY, None)  # the original's notes (a shared list) say why it is where it is
        copies[node] = copy
    for node in part:
        node.replace_all_uses_with(copies[node], delete_user_cb=lambda user: user not in inside)
    for node in reversed(part):
        if not node.users:
            gm.graph.erase_node(node)
    return copies


def split_channel_statistics(gm: GraphModule) -> GraphModule:
    """Recomputes each qualifying region's per-channel outputs (`per_channel_outputs`) in a new region."""
    regions = regions_of(gm)
    next_id = max(regions, default=-1) + 1
    changed = False
    for members in regions.values():
        part = per_channel_outputs(members)
        if not part:
            continue
        copies = _copy_into(gm, part, set(members), next_id)
        note_cut([copies[n] for n in part], members[0].name, REASON)
        log.debug("dynamo_nvf: %d per-channel node(s) of the region of %s recomputed in region %d",
                  len(part), members[0].name, next_id)
        next_id += 1
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm
