"""Keeps regions that nvFuser is known to compute wrongly, or to crash on, away from nvFuser.

Three patterns, all found with nvfuser_direct 0.2.36.

**Statistics written beside a partial reduction** (H100 and H200, 2026-11-26) writes out of bounds:
the region reduces a tensor (BatchNorm's statistics over [N, H, W]), writes results of that reduction
squeezed to a lower rank (the running mean and variance, [C]), and after it reduces a tensor of the
same shape over a subset of those dims (a squeeze-excitation block's mean over [H, W] of the
normalised activation). compute-sanitizer finds hundreds of 2-byte writes up to 1 KB past the [C]
outputs; under the caching allocator they land in other tensors, and timm's regnety_016 training step
faulted with an illegal memory access in one run of several.
`scripts/nvfuser_repros/statistics_beside_partial_reduction.py` reproduces it with `nvfuser_direct`
alone. The second reduction, what follows it, and what only they need move to a region of their own,
which reads the normalised activation the first region writes anyway (one more read of it).

**A reduction feeding a joined resize** (2026-11-26) crashes the process (SIGSEGV) in nvFuser's
compile: the region reduces a tensor, resizes (slices, pads, concatenates) what follows from the
reduction, and joins that resized value with another value that also follows from the reduction
(another resize of it, as `rotate_half`'s two padded slices, or the product beside it), where a value
between the reduction and the resize is rounded to bf16 or fp16 (the reproducer's float32 variant
runs). Float32 regions are not cut: cut, the float32 RoPE part that reads the reduction's result as
inputs failed nvFuser's compile ("Invalid domains to map", fusion.cpp:1020) and ran in eager.
A LLaMA-style training step under DDP hands the backend such a region: the key gradient summed over
the query heads of a key head (grouped-query attention), then RoPE's backward (`rotate_half`'s slices
and pads) joined with the `cos` term. `scripts/nvfuser_repros/reduction_resize_join_segfault.py`
reproduces it with `nvfuser_direct` alone. Such a region is cut after its reductions: everything
they feed moves to a region of its own, which reads the reductions' results (nvFuser segments a
reduction from a resize there anyway). A part that still has the pattern runs in eager.

**A broadcast written and its permute reduced** (2026-11-24):
- The region broadcasts a tensor (`expand`).
- It writes something computed from that broadcast, before any reduction, as an output.
- It also reduces a permute of that broadcast.

ConvNeXt's head backward has this pattern. It spreads the pooled gradient over [N, C, H, W], keeps
that tensor, and sums its channels-last permute times the last block's output for the layer-scale
gradient. nvFuser returned the sum (and outputs beside it) wrong by 90-100% of their norm.
`scripts/nvfuser_repros/wrong_reduction_of_expanded_output.py` reproduces it with `nvfuser_direct` alone.
- The sum alone is right.
- The sum together with the broadcast tensor as an output is wrong.
Such a region otherwise reaches nvFuser only after a planning rewrite (`unflatten_reductions`, or the
norm split at any size). Without one, nvFuser refuses it ("Can not find a scheduler").

The check runs on the regions as partitioned, before the rewrites (which could remove the permute
it looks for, or cut the region in two) and the split. A flagged region is cut in two where that
clears the pattern from both parts: the reductions of the permute, what follows them, and what only
they need go to a region of their own (the sums alone were computed right; so was the rest without
them). ConvNeXt's head backward then runs as two fusions instead of about 25 ATen ops. Where a cut
does not clear it, the region's nodes are eager from then on, so no later pass hands them to nvFuser. A `transpose` or `t` counts as a permute (nvFuser lowers
them to one); a broadcast view left at the region's end (trimmed to an eager alias) is not an output.

Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import operator

import logging
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.dtypes import LOW_PRECISION_FLOATS
from dynamo_nvf.ops.lowerings import is_reduction, lowers_to_resize, reduced_dims
from dynamo_nvf.ops.metadata import alias_violation, is_metadata, tensor_val
from dynamo_nvf.passes.partition import (READS_MEMORY_KEY, REGION_KEY, note_cut, reach, reads_own_result, regions_of,
                                         set_eager)
from dynamo_nvf.passes.split_reductions import recompute_in, recomputable_feeders

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

EXPAND_PERMUTE_REDUCTION = (
    "nvFuser 0.2.36 computes a region wrongly when it writes a broadcast (expand) tensor and also reduces "
    "a permute of it (scripts/nvfuser_repros/wrong_reduction_of_expanded_output.py): kept in eager"
)


EXPAND_PERMUTE_SPLIT = (
    "nvFuser 0.2.36 computes a fusion wrongly that writes a broadcast and also reduces a permute of it; "
    "either part alone is right (scripts/nvfuser_repros/wrong_reduction_of_expanded_output.py)"
)

REDUCTION_RESIZE_JOIN = (
    "nvFuser 0.2.36 crashes (SIGSEGV) compiling a fusion that resizes what a reduction feeds and joins it "
    "with another value the reduction feeds (scripts/nvfuser_repros/reduction_resize_join_segfault.py)"
)

STATISTICS_BESIDE_PARTIAL_REDUCTION = (
    "nvFuser 0.2.36 writes out of bounds in a fusion that writes a reduction's squeezed statistics and reduces "
    "a tensor of the same shape over fewer dims after it (scripts/nvfuser_repros/statistics_beside_partial_reduction.py)"
)

#: Ops nvFuser lowers to its `permute` (ops/lowerings.py).
PERMUTES = frozenset({aten.permute.default, aten.transpose.int, aten.t.default})


def _written_out(node: Node, members: set[Node]) -> bool:
    """A value the region hands to the rest of the graph that nvFuser computes: a zero-copy view left
    at the region's end is trimmed to an eager alias by the bookend pass, so it does not count."""
    return any(u not in members for u in node.users) and not (is_metadata(node) and alias_violation(node) is None)


def expand_permute_reduction(members: list[Node]) -> Optional[Node]:
    """The `expand` of a region that makes the pattern above, or None."""
    inside = set(members)
    for node in members:
        if node.op != "call_function" or node.target is not aten.expand.default:
            continue
        below = reach(node, inside)
        reduced: set[Node] = set()
        for r in below:
            if is_reduction(r) and r not in reduced:
                reduced |= {r} | reach(r, inside)
        # An output of the broadcast itself (or of what it feeds before any reduction): the sum's own
        # result leaving the region is fine (a region that only sums was computed right).
        if any(_written_out(n, inside) for n in [node, *below] if n not in reduced) and \
                _reductions_of_permutes(below, inside):
            return node
    return None


def _reductions_of_permutes(below: set[Node], inside: set[Node]) -> list[Node]:
    """The reductions among `below` (what a broadcast feeds in the region `inside`) that read a permute
    among `below`."""
    return [r for r in below if is_reduction(r)
            and any(p in below and p.op == "call_function" and p.target in PERMUTES
                    for p in reach(r, inside, upstream=True))]


def split_off(members: list[Node], expand: Node) -> Optional[list[Node]]:
    """The nodes to move to a region of their own so that neither part has the pattern, in graph
    order, or None where no such cut exists.

    The part moved: the reductions of a permute of the broadcast, everything of the region after them
    (it depends on them), and, upstream, every node all of whose users in the region are moved too.
    So nothing moved feeds what stays: the new region runs after the old one and reads its outputs.
    """
    inside = set(members)
    moved: set[Node] = set()
    for r in _reductions_of_permutes(reach(expand, inside), inside):
        moved |= {r} | reach(r, inside)
    moved = _moved_with(members, moved)
    kept = [n for n in members if n not in moved]
    part = [n for n in members if n in moved]
    if not kept or not part or any(expand_permute_reduction(p) is not None for p in (kept, part)):
        return None
    return part


def _recompute_feeders(gm: GraphModule, kept: list[Node], part: list[Node], expand: Node,
                       region_id: int) -> None:
    """The moved part computes again the pointwise and view nodes it would read from the old region
    (the permuted broadcast itself, from the small tensor before it), rather than reading them written
    out; what cannot be recomputed it reads from the old region if it is no larger than that small
    tensor, else it reads everything from the old region. ConvNeXt's layer-scale sum then reads one
    contiguous NHWC input and the [N, C] gradient instead of a materialised NCHW broadcast through a
    permute (33 us against a few, H100)."""
    small = tensor_val(expand.args[0])
    limit = small.numel() if small is not None else 0
    kept_set = set(kept)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    consumers = [n for n in part if any(p in kept_set for p in n.all_input_nodes)]
    per_consumer = {n: recomputable_feeders([n], kept_set, limit) for n in consumers}
    recompute_in(gm, consumers, per_consumer, region_id, order)


def _rounded_between(reduction: Node, resize: Node, fed: set[Node], inside: set[Node]) -> bool:
    """Whether a value on a path from `reduction` to `resize` is rounded to bf16 or fp16 (the region
    computes in f32 and rounds each such value, as eager does)."""
    between = (reach(resize, inside, upstream=True) & fed) | {reduction}
    return any((val := tensor_val(n)) is not None and val.dtype in LOW_PRECISION_FLOATS for n in between)


def reduction_resize_join(members: list[Node]) -> Optional[Node]:
    """The first reduction of a region that feeds a resize whose result is joined with another value
    the reduction feeds, with a bf16 or fp16 rounding between the reduction and the resize (the crash
    pattern above), or None."""
    if not any(lowers_to_resize(n) for n in members):
        return None
    inside = set(members)
    for node in members:
        if not is_reduction(node):
            continue
        below = reach(node, inside)
        fed = below | {node}
        for resize in (n for n in below if lowers_to_resize(n)):
            if not _rounded_between(node, resize, fed, inside):
                continue
            after = reach(resize, inside) | {resize}
            for join in after - {resize}:
                if any(p in fed and p not in after for p in join.all_input_nodes):
                    return node
    return None


def _move_to_region(part: list[Node], region_id: int, origin: str, note: str) -> None:
    """Annotates `part` as region `region_id`, with `note` (why it left `origin`'s region) on its first
    compute node: a leading view of the part may be trimmed off it later."""
    for node in part:
        node.meta[REGION_KEY] = region_id
    note_cut(part, origin, note)


def _cut_after_reductions(gm: GraphModule, members: list[Node], next_id: int) -> Optional[list[int]]:
    """Moves what the pattern's reductions feed to new regions, one cut at a time, until no part has
    it; returns the ids of the new regions, or None where a cut clears nothing (then the caller sends
    the region to eager)."""
    new_ids: list[int] = []
    part = members
    while (found := reduction_resize_join(part)) is not None:
        inside = set(part)
        # a multi-output reduction (var_mean) keeps its getitems: a region passes tensors, not tuples
        moved = {n for n in reach(found, inside) if not (n.target is operator.getitem and n.args[0] is found)}
        kept = [n for n in part if n not in moved]
        if not moved or reduction_resize_join(kept) is not None:
            return None
        rest = [n for n in part if n in moved]
        _move_to_region(rest, next_id, members[0].name,
                        f"cut after the reduction {found.name}: {len(rest)} nodes it feeds run in a region of "
                        f"their own ({REDUCTION_RESIZE_JOIN})")
        new_ids.append(next_id)
        next_id += 1
        part = rest
    return new_ids


def partial_reductions(members: list[Node]) -> list[Node]:
    """The later reductions of the out-of-bounds pattern above, in graph order: each reduction `second`
    below a reduction `first` in the region, reading a tensor shaped as `first` reads, over a proper
    subset of `first`'s dims, where the region writes a value below `first` (not below `second`) of
    lower rank than `first`'s input. Reductions are grouped by input shape first, so a region with no
    such pair costs no walk (the bookend pass asks this of every merge it considers)."""
    inside = set(members)
    by_shape: dict[tuple, list[tuple[Node, frozenset[int]]]] = {}
    for node in members:
        if is_reduction(node) and (source := tensor_val(node.args[0])) is not None:
            # by the sizes' text: symbolic sizes (SymInt) are not hashable
            by_shape.setdefault(tuple(str(d) for d in source.shape), []).append((node, frozenset(reduced_dims(node))))
    found: list[Node] = []
    for group in by_shape.values():
        for first, dims in group:
            seconds = [second for second, fewer in group if fewer < dims and second not in found]
            if not seconds:
                continue
            rank = tensor_val(first.args[0]).dim()
            below = reach(first, inside)
            for second in seconds:
                if second not in below:
                    continue
                after = reach(second, inside) | {second}
                if any(n not in after and _written_out(n, inside) and (val := tensor_val(n)) is not None
                       and val.dim() < rank for n in below):
                    found.append(second)
    order = {n: i for i, n in enumerate(members)}
    return sorted(found, key=order.__getitem__)


def statistics_beside_partial_reduction(members: list[Node]) -> Optional[Node]:
    """The first later reduction of the out-of-bounds pattern above (`partial_reductions`), or None."""
    found = partial_reductions(members)
    return found[0] if found else None


def _moved_with(members: list[Node], moved: set[Node]) -> set[Node]:
    """`moved` and, upstream, every node all of whose users are moved: nothing moved then feeds what
    stays, so the moved part runs after the rest and reads its outputs."""
    moved = set(moved)
    changed = True
    while changed:
        changed = False
        for node in reversed(members):
            if node not in moved and node.users and all(u in moved for u in node.users):
                moved.add(node)
                changed = True
    return moved


def _split_off_partial_reductions(members: list[Node], next_id: int) -> Optional[list[int]]:
    """Moves each later reduction of the pattern, with what follows it, to a region of its own until no
    part has the pattern; the new regions' ids, or None where a cut clears nothing."""
    new_ids: list[int] = []
    part = members
    while found := partial_reductions(part):
        inside = set(part)
        # every such reduction at once: a sibling left behind (a max pool beside the mean) would keep
        # the pattern in what stays
        moved = _moved_with(part, set(found).union(*(reach(r, inside) for r in found)))
        # a region takes tensors, not tuples: a getitem stays beside its reduction (var_mean's)
        moved -= {n for n in moved if n.target is operator.getitem and n.args[0] not in moved}
        kept = [n for n in part if n not in moved]
        rest = [n for n in part if n in moved]
        if not kept or partial_reductions(kept):
            return None
        _move_to_region(rest, next_id, members[0].name,
                        f"the reduction(s) {', '.join(r.name for r in found)} and the nodes after them "
                        f"({len(rest)} in all) run in a region of their own ({STATISTICS_BESIDE_PARTIAL_REDUCTION})")
        new_ids.append(next_id)
        next_id += 1
        part = rest
    return new_ids


def known_bug(members: list[Node]) -> str:
    """Why nvFuser must not get these nodes as one region (a pattern above), or "": the bookend pass
    asks it before merging a small region into another, so that no merge undoes a cut made here."""
    if statistics_beside_partial_reduction(members) is not None:
        return STATISTICS_BESIDE_PARTIAL_REDUCTION
    if reduction_resize_join(members) is not None:
        return REDUCTION_RESIZE_JOIN
    if expand_permute_reduction(members) is not None:
        return EXPAND_PERMUTE_REDUCTION
    reader = reads_own_result(set(members), [n for n in members if READS_MEMORY_KEY in n.meta])
    return reader.meta[READS_MEMORY_KEY] if reader is not None else ""


def _members_of(gm: GraphModule, region_ids: list[int]) -> list[list[Node]]:
    """The nodes of each of `region_ids`, in graph order."""
    by_id: dict[int, list[Node]] = {i: [] for i in region_ids}
    for node in gm.graph.nodes:
        if node.meta.get(REGION_KEY) in by_id:
            by_id[node.meta[REGION_KEY]].append(node)
    return [by_id[i] for i in region_ids if by_id[i]]


def keep_known_bugs_eager(gm: GraphModule) -> GraphModule:
    """Cuts each region with a pattern nvFuser computes wrongly in two where that clears it (noting
    why, for explain()), else sends the region back to eager, with the reason."""
    regions = regions_of(gm)
    next_id = max(regions, default=-1) + 1
    cut = False
    # New regions a cut makes are checked for every pattern too (the part cut off may hold another).
    pending = list(regions.values())
    while pending:
        members = pending.pop(0)
        if statistics_beside_partial_reduction(members) is not None:
            region_id = members[0].meta[REGION_KEY]
            new_ids = _split_off_partial_reductions(members, next_id)
            if new_ids is None:
                log.info("dynamo_nvf: the region of %s stays in eager: %s", members[0].name,
                         STATISTICS_BESIDE_PARTIAL_REDUCTION)
                set_eager(members, STATISTICS_BESIDE_PARTIAL_REDUCTION)
                continue
            log.info("dynamo_nvf: the region of %s is cut before its partial reductions: %s", members[0].name,
                     STATISTICS_BESIDE_PARTIAL_REDUCTION)
            next_id += len(new_ids)
            cut = True
            pending += _members_of(gm, new_ids)
            members = [n for n in members if n.meta.get(REGION_KEY) == region_id]
        if reduction_resize_join(members) is not None:
            region_id = members[0].meta[REGION_KEY]
            new_ids = _cut_after_reductions(gm, members, next_id)
            if new_ids is None:
                log.info("dynamo_nvf: the region of %s stays in eager: %s", members[0].name, REDUCTION_RESIZE_JOIN)
                set_eager(members, REDUCTION_RESIZE_JOIN)
                continue
            log.info("dynamo_nvf: the region of %s is cut after its reductions: %s", members[0].name,
                     REDUCTION_RESIZE_JOIN)
            next_id += len(new_ids)
            cut = True
            members = [n for n in members if n.meta.get(REGION_KEY) == region_id]
        found = expand_permute_reduction(members)
        if found is None:
            continue
        part = split_off(members, found)
        if part is None:
            log.info("dynamo_nvf: the region of %s stays in eager: %s", found.name, EXPAND_PERMUTE_REDUCTION)
            set_eager(members, EXPAND_PERMUTE_REDUCTION)
            continue
        reason = (f"split from the region of {members[0].name}: {len(part)} nodes that reduce a permute of the "
                  f"broadcast {found.name} run apart from the nodes that write it ({EXPAND_PERMUTE_SPLIT})")
        for node in part:
            node.meta[REGION_KEY] = next_id
        _recompute_feeders(gm, [n for n in members if n not in set(part)], part, found, next_id)
        cut = True
        # The copies can bring another broadcast into the part cut off (a second one whose permute it
        # also reduces): then the whole region stays in eager, as it would have without the cut.
        moved = [n for n in gm.graph.nodes if n.meta.get(REGION_KEY) == next_id]
        if expand_permute_reduction(moved) is not None:
            log.info("dynamo_nvf: the region of %s stays in eager: %s", found.name, EXPAND_PERMUTE_REDUCTION)
            alive = set(gm.graph.nodes)  # the recompute erased originals only the cut part read
            set_eager([n for n in members if n in alive] + moved, EXPAND_PERMUTE_REDUCTION)
            next_id += 1
            continue
        note_cut(part, members[0].name, reason)
        log.info("dynamo_nvf: %s", reason)
        next_id += 1
    if cut:
        gm.graph.lint()
        gm.recompile()
    return gm
