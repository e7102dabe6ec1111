"""Chained reductions: where a region reduces a reduction's result again (ConvNeXt's head: a LayerNorm
of the mean over H and W), the first reduction's users read its result through nvFuser's `segment_set`,
so the first reduction ends a kernel of its own.

Why: nvFuser cannot run a reduction of a reduction's result in one kernel; it segments the region
anyway, and where it cut ConvNeXt's head itself the first kernel got a slower schedule. On an H100
(session 22, scripts/repros/convnext_head.py, bf16, [2, 192, 28, 28] channels-last): the residual add
and mean alone took 3.17 us in one kernel (inductor 3.07), but as part of the region with the norm
4.3 us plus a 0.9 us semaphore fill, 7.42 us for the whole region against inductor's 4.48.

A chain, not a norm: the second reduction reads a tensor the size of the first reduction's result
(through pointwise ops and casts no larger). A softmax's sum reads `exp(x - amax(x))`, full size, which
nvFuser's persistent schedulers keep in one kernel, and is left alone. The first reduction is a sum,
mean, amax or amin (one output); the second a norm's statistics (var_mean, var): the only chain
measured. A cross-entropy's per-row losses summed into their mean are a chain too, but nvFuser ran
that region in two kernels already (session 20), so it is left to nvFuser. Forward and inference
graphs only: nothing in the backward graphs was measured.

Pure on annotations: GraphModule in (partitioned), GraphModule out; the lowering reads the mark.
"""

from __future__ import annotations

import logging
import math

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.context import SEGMENT_INPUTS_KEY
from dynamo_nvf.ops.lowerings import is_reduction
from dynamo_nvf.ops.metadata import static_sizes, tensor_val
from dynamo_nvf.passes import add_note
from dynamo_nvf.passes.memory_order_reductions import LIST_REDUCTIONS
from dynamo_nvf.passes.partition import regions_of

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: The second reductions this pass looks behind: a norm's statistics (nothing else was measured).
NORM_STATISTICS = frozenset({aten.var_mean.correction, aten.var.correction})

#: The note explain() shows for each boundary (graph plan's `rewrites`).
NOTE = ("segment boundary: {users} read {reduction} through nvFuser's segment_set ({second} reduces its "
        "result again: the first reduction ends a kernel of its own)")


def _numel(node: Node) -> int | None:
    val = tensor_val(node)
    sizes = static_sizes(val) if val is not None else None
    return None if sizes is None else math.prod(sizes)


def _first_reductions(second: Node, members: set[Node]) -> list[Node]:
    """The single-output reductions whose result `second` reduces again: reached from its input through
    in-region nodes no larger than that input."""
    src = second.args[0] if second.args else None
    limit = _numel(src) if isinstance(src, Node) else None
    if limit is None:
        return []
    found, todo, seen = [], [src], set()
    while todo:
        node = todo.pop()
        if node in seen or node not in members:
            continue
        seen.add(node)
        size = _numel(node)
        if size is None or size > limit:
            continue
        if node.op == "call_function" and node.target in LIST_REDUCTIONS | {aten.sum.default}:
            if size == limit:  # smaller: broadcast back up on the way (a softmax's max), not a chain
                found.append(node)
            continue
        if is_reduction(node):
            continue  # a tuple reduction (var_mean): not marked
        todo.extend(node.all_input_nodes)
    return found


def segment_chained_reductions(gm: GraphModule) -> GraphModule:
    """Marks the users of each reduction that a later reduction of its region reduces again."""
    marked = 0
    for nodes in regions_of(gm).values():
        members = set(nodes)
        for second in nodes:
            if second.op != "call_function" or second.target not in NORM_STATISTICS:
                continue
            for first in _first_reductions(second, members):
                users = [u for u in first.users if u in members and not u.meta.get(SEGMENT_INPUTS_KEY)]
                if not users:
                    continue
                for user in users:
                    user.meta[SEGMENT_INPUTS_KEY] = True
                marked += 1
                add_note(gm, NOTE.format(users=", ".join(u.name for u in users), reduction=first.name,
                                         second=second.name))
    if marked:
        log.debug("dynamo_nvf: %d reduction(s) end a kernel before a reduction of their result", marked)
    return gm
