"""Partition pass: groups nvFuser-capable aten nodes into regions, recorded in node.meta.

Why not CapabilityBasedPartitioner: it merges unrelated nodes horizontally without limit and has no
cap on a partition's inputs and outputs, both of which this pass needs. Regions are grown along
producer -> consumer edges only, a merge is refused if it would create a cycle through a node outside
the merged region, or take the region past `max_region_io` (the NVRTC argument limit of seed 002).
The result is written as `node.meta[REGION_KEY]` (region id) or `node.meta[REASON_KEY]` (why the
node stays in eager); submodules are created later by `fuse_regions`.
"""

from __future__ import annotations

from typing import Callable, Collection, Iterable, Optional, Sequence

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import ROW_GATHERS
from dynamo_nvf.ops.metadata import is_metadata
from dynamo_nvf.ops.registry import unsupported_reason
from dynamo_nvf.settings import Settings

REGION_KEY = "nvf_region"
REASON_KEY = "nvf_eager_reason"
SPLIT_KEY = "nvf_split"
#: node.meta key of a node whose tensor inputs must come from memory, not from its own region (the
#: value: why, for explain()); a rewrite that knows nvFuser schedules it badly otherwise sets it.
READS_MEMORY_KEY = "nvf_reads_memory"
_SKIPPED_OPS = ("placeholder", "output", "get_attr")


class _Group:
    __slots__ = ("nodes", "reads_memory")

    def __init__(self, node: Node) -> None:
        self.nodes: set[Node] = {node}
        #: members that must read their inputs from memory (READS_MEMORY_KEY)
        self.reads_memory: list[Node] = [node] if READS_MEMORY_KEY in node.meta else []


def reads_own_result(union: set[Node], readers: Iterable[Node]) -> Optional[Node]:
    """A node of `readers` that would read a value computed in `union`, or None."""
    return next((n for n in readers if any(p in union for p in n.all_input_nodes)), None)


def horizon(last: int, spans: Iterable[tuple[int, int]]) -> int:
    """The position past which no path can come back to a node at or before `last`.

    Graph order is topological, so a path only moves forward, except that entering a region (fused
    into one node) lets it continue from that region's earliest member. Any region that starts at or
    before the horizon therefore pushes it to its own last member, transitively.
    """
    limit = last
    for lo, hi in sorted(spans):
        if lo > limit:
            break
        limit = max(limit, hi)
    return limit


def creates_cycle(union: set[Node], order: dict[Node, int],
                  group_members: Callable[[Node], Optional[Collection[Node]]] = lambda n: None,
                  spans: Iterable[tuple[int, int]] = ()) -> bool:
    """True if fusing `union` would need a cycle: some path leaves it and comes back.

    Other regions will be fused too, so a path that reaches one of their nodes continues from all
    of its members (each region becomes one node): A -> eager -> B and B -> eager -> A is a cycle
    although each region alone is convex. `group_members(node)` gives a node's region, or None;
    `spans` are the (first, last) positions of those regions, which bound the search (`horizon`).
    An Adam step's graph showed why the bound must count them: a path went past the union's last
    node into a region whose earlier members fed the union.
    """
    last = horizon(max(order[n] for n in union), spans)
    stack = [u for n in union for u in n.users if u not in union]
    seen: set[Node] = set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        members = group_members(node)
        if members is None:
            if order[node] > last:
                continue
            members = (node,)
        elif min(order[m] for m in members) > last:
            continue
        seen.update(members)
        for member in members:
            for user in member.users:
                if user in union:
                    return True
                if user not in seen:
                    stack.append(user)
    return False


def _members(group_of: dict[Node, "_Group"], node: Node, union: set[Node]) -> Optional[set[Node]]:
    group = group_of.get(node)
    if group is None or node in union:
        return None
    return group.nodes


def region_io_count(nodes: set[Node]) -> int:
    """Inputs (distinct outside producers) plus outputs (nodes used outside) of a node set."""
    inputs = {p for n in nodes for p in n.all_input_nodes if p not in nodes}
    outputs = [n for n in nodes if any(u not in nodes for u in n.users)]
    return len(inputs) + len(outputs)


def clear_annotations(nodes: Iterable[Node]) -> None:
    """Drops what a partition wrote on nodes (region, eager reason, split notes)."""
    for node in nodes:
        node.meta.pop(REGION_KEY, None)
        node.meta.pop(REASON_KEY, None)
        node.meta.pop(SPLIT_KEY, None)


def partition_regions(gm: GraphModule, settings: Settings) -> GraphModule:
    """Annotates every node of `gm` with its region id, or with the reason it stays in eager."""
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    group_of: dict[Node, _Group] = {}

    clear_annotations(nodes)
    for node in nodes:
        if node.op in _SKIPPED_OPS:
            continue
        reason = unsupported_reason(node, settings)
        if reason is not None:
            node.meta[REASON_KEY] = reason
            continue
        group = _Group(node)
        group_of[node] = group
        for producer in node.all_input_nodes:
            other = group_of.get(producer)
            if other is None or other is group:
                continue
            union = other.nodes | group.nodes
            if region_io_count(union) > settings.max_region_io:
                _note_split(node, producer, f"IO limit: merging would pass max_region_io={settings.max_region_io}")
                continue
            reader = reads_own_result(union, other.reads_memory + group.reads_memory)
            if reader is not None:
                _note_split(node, producer, reader.meta[READS_MEMORY_KEY])
                continue
            # No spans: nodes are visited in graph order, so every region ends at or before this
            # node, which is the union's last, and the horizon cannot move past it.
            if creates_cycle(union, order, lambda n: _members(group_of, n, union)):
                _note_split(node, producer, "cycle: merging would need a path through eager code")
                continue
            keep, drop = (other, group) if len(other.nodes) >= len(group.nodes) else (group, other)
            keep.nodes |= drop.nodes
            keep.reads_memory += drop.reads_memory
            for n in drop.nodes:
                group_of[n] = keep
            group = keep

    for node in [n for n in nodes if _gather_leaves_region(n, group_of)]:
        group = group_of.pop(node)
        group.nodes.discard(node)
        node.meta[REASON_KEY] = GATHER_OUTPUT_REASON
        _split_feeders(node, group, group_of, order)

    groups: list[_Group] = []
    seen: set[int] = set()
    for node in nodes:
        group = group_of.get(node)
        if group is not None and id(group) not in seen:
            seen.add(id(group))
            groups.append(group)
    for region_id, group in enumerate(groups):
        for node in group.nodes:
            node.meta[REGION_KEY] = region_id
    return gm



#: Why a gather of rows (an embedding, an index by one tensor) whose rows leave its region runs in ATen.
GATHER_OUTPUT_REASON = (
    "embedding or index whose gathered rows are used outside the region (a region output; in training, "
    "the rows saved for the backward) runs in ATen: nvFuser 0.2.36 faulted (illegal memory access) "
    "running such a region, a BERT-style training step's embeddings at 16 x 256 tokens (H100, 2026-11-23)"
)


def _gather_leaves_region(node: Node, group_of: dict[Node, "_Group"]) -> bool:
    """A gather of rows (ROW_GATHERS: nvFuser's index_select) in a region whose rows, directly or
    through views, are used outside it."""
    group = group_of.get(node)
    if group is None or node.target not in ROW_GATHERS:
        return False
    stack = list(node.users)
    while stack:
        user = stack.pop()
        if user not in group.nodes:  # the graph's output node included
            return True
        if is_metadata(user):
            stack.extend(user.users)
    return False


def _walk(start: Node, keep: Callable[[Node], bool], upstream: bool) -> set[Node]:
    """Every node that `start` feeds (or, upstream, that feeds it) along nodes passing `keep`."""
    neighbours = (lambda n: n.all_input_nodes) if upstream else (lambda n: n.users)
    seen: set[Node] = set()
    stack = [n for n in neighbours(start) if keep(n)]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(n for n in neighbours(node) if keep(n))
    return seen


def _split_feeders(removed: Node, group: "_Group", group_of: dict[Node, "_Group"], order: dict[Node, int]) -> None:
    """After `removed` leaves `group` for eager: the members that feed it become a group of their own
    when other members read its result, or the region would need a path out to `removed` and back
    in (an `arange` of positions in the region of the LayerNorm after its embedding)."""
    if not group.nodes:
        return
    lo, hi = min(order[n] for n in group.nodes), max(order[n] for n in group.nodes)
    within = lambda n: lo <= order.get(n, -1) <= hi  # noqa: E731  (paths through anything in that span)
    feeders = _walk(removed, within, upstream=True) & group.nodes
    readers = _walk(removed, within, upstream=False) & group.nodes
    if not feeders or not readers:
        return
    split = _Group(removed)
    split.nodes = set(feeders)
    group.nodes -= feeders
    for n in feeders:
        group_of[n] = split
    reader = min(readers, key=order.__getitem__)
    _note_split(reader, removed, f"cycle: the nodes that feed {removed.name}, which runs in eager, form their own region")


def _note_split(node: Node, producer: Node, reason: str) -> None:
    """Remembers why `node` did not join its producer's region, for explain()."""
    node.meta.setdefault(SPLIT_KEY, []).append((producer.name, reason))


def note_cut(part: Sequence[Node], origin: str, reason: str) -> None:
    """Remembers why `part` left `origin`'s region, on its first compute node (a leading view of the
    part may be trimmed off it later), for explain()."""
    first = next((n for n in part if not is_metadata(n)), part[0])
    first.meta.setdefault(SPLIT_KEY, []).append((origin, reason))


def regions_of(gm: GraphModule) -> dict[int, list[Node]]:
    """Region id -> its nodes in graph order, read from the annotations."""
    regions: dict[int, list[Node]] = {}
    for node in gm.graph.nodes:
        region = node.meta.get(REGION_KEY)
        if region is not None:
            regions.setdefault(region, []).append(node)
    return regions


def reach(start: Node, members: Collection[Node], upstream: bool = False) -> set[Node]:
    """The nodes of a region that `start` feeds (or, upstream, that feed it), directly or not."""
    return _walk(start, members.__contains__, upstream)


def set_eager(nodes: Iterable[Node], reason: str) -> None:
    for node in nodes:
        node.meta.pop(REGION_KEY, None)
        node.meta[REASON_KEY] = reason
