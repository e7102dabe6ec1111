"""Give a BatchNorm region's running-statistics update its own region: the [C] values a training
forward computes from its `var_mean` (the squeezed mean and variance, times the momentum, plus the old
running value, cast to the buffer's dtype) and writes out move, with what only they need, to a new
region that reads the statistics the old region writes anyway.

Why: nvFuser 0.2.36 puts these [C] outputs into the pointwise segment that normalises the 4-D
activation, beside the [1, C, 1, 1] statistics saved for the backward, and that segment then runs
many times slower. ResNet-50's bf16 training forward (H100, 2026-11-26, `python
scripts/block_kernels.py zoo_timm_resnet50_train_bf16 explain`): the region of a bottleneck's two
BatchNorms, the residual add and the ReLU ([64, 56, 56, 256]) took 2.9 ms, 1.8 ms of it in its
pointwise segment; the same fusion without the [C] outputs took 0.34 ms, and so did it without the
statistics outputs instead. In one fusion with a squeeze-excitation pool the [C] outputs also met an
out-of-bounds write (passes/known_bugs.py). The new region is a few pointwise ops on [C] tensors: one
more small kernel per BatchNorm.

Forward and inference graphs (an evaluation BatchNorm updates nothing; the backward has no `var_mean`). Values
are unchanged: the same ops on the same values.

Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
import operator

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import is_reduction, reduced_dims
from dynamo_nvf.ops.metadata import is_metadata, tensor_val
from dynamo_nvf.passes.partition import REGION_KEY, SPLIT_KEY, reach, regions_of, with_exclusive_feeders

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

REASON = ("running statistics of a BatchNorm moved to a region of their own: nvFuser 0.2.36 runs a "
          "normalising segment that also writes them many times slower (passes/split_running_stats.py)")


def _per_channel(node: Node, channels: int) -> bool:
    """A 1-D value of `channels` elements that is neither a reduction nor its tuple's item."""
    val = tensor_val(node)
    return (val is not None and val.dim() == 1 and val.shape[0] == channels and not is_reduction(node)
            and node.target is not operator.getitem)


def _batch_norm_channels(node: Node) -> int:
    """C for a BatchNorm's statistics (`var_mean` over every dim but 1 of an [N, C, ...] tensor), else 0."""
    if node.op != "call_function" or node.target is not aten.var_mean.correction:
        return 0
    source = tensor_val(node.args[0])
    if source is None or source.dim() < 2 or sorted(reduced_dims(node)) != [d for d in range(source.dim()) if d != 1]:
        return 0
    return int(source.shape[1])


def running_stats(members: list[Node]) -> list[Node]:
    """The nodes to move, in graph order: each [C] value below a BatchNorm's `var_mean` in the region
    that the rest of the graph reads, and the [C] nodes only they need."""
    inside = set(members)
    moved: set[Node] = set()
    channels = set()
    for node in members:
        c = _batch_norm_channels(node)
        if not c:
            continue
        channels.add(c)
        moved |= {n for n in reach(node, inside) if _per_channel(n, c) and not is_metadata(n)
                  and any(u not in inside for u in n.users)}
    if not moved:
        return []
    closed = with_exclusive_feeders(members, moved, lambda n: any(_per_channel(n, c) for c in channels))
    return [n for n in members if n in closed]


def split_running_stats(gm: GraphModule) -> GraphModule:
    """Moves each region's running-statistics update (`running_stats`) to a new region."""
    regions = regions_of(gm)
    next_id = max(regions, default=-1) + 1
    for members in regions.values():
        part = running_stats(members)
        if not part or len(part) == len(members):
            continue
        for node in part:
            node.meta[REGION_KEY] = next_id
        first = next((n for n in part if not is_metadata(n)), part[0])
        first.meta.setdefault(SPLIT_KEY, []).append((members[0].name, REASON))
        log.debug("dynamo_nvf: %d running-statistics node(s) of the region of %s moved to region %d",
                  len(part), members[0].name, next_id)
        next_id += 1
    return gm
