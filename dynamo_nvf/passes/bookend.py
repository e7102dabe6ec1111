"""Bookend pass: trims metadata-only nodes off the start and end of every region.

Trimmed nodes run in PyTorch as zero-copy aliases, so nvFuser sees only compute (seeds 000 and 003).
Rules, in order:

- Leading: a metadata node whose inputs all come from outside its region moves out, when eager makes
  it a view of the layout it will see. Repeated, for chains.
- Trailing: a metadata node used outside its region moves out (a copy of it, when the region still
  uses it too), under the same alias rule. Repeated. Its input then leaves the fusion with eager's
  strides (the fusion builder sets them), which is the layout the alias rule was checked against.
- A reshape that would copy in eager stays inside: nvFuser does the copy within the kernel (the
  reason Thunder gave for dropping bookending).
- Leading broadcasts (`expand`) stay inside: nvFuser broadcasts for free, while a trimmed expand hands
  it stride-0 inputs, the pattern that split Thunder's var_mean backward into extra kernels. Trimming
  them measured slower (H200, 2026-11-22, nvFuser 0.2.36, the option `trim_broadcasts` at commit
  8d17a2a): the same kernel counts on all seven training workloads, and rmsnorm_train_f32 took 213.1
  us with the expands trimmed against 184.4 us kept (1.16x slower); the others were within 1%.
- Interior chains of reshapes collapse into one (seed 002's separateNestedViews).
- A region left with fewer than `min_region_size` compute nodes (none at all for a metadata-only
  region) goes back to eager: it would only pay nvFuser's host cost (Thunder #1251). The exception
  is a lone copy that transposes, which nvFuser's transpose scheduler does faster than eager's copy
  (perf transpose_views on an H200: 16.7 us against 24.5 us), so trimming never makes seed 000's
  transpose slower than the untrimmed region.

With `bookend=False` the pass is off: no node is trimmed and a region of metadata ops only is sent to
nvFuser like any other (subject to `min_region_size`, counted over all its nodes), which is what
nvFuser without trimming would get. Untrimmed runs show nvFuser's own handling of boundary views, and
perf/ compares the two.
"""

from __future__ import annotations

import operator
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import RESHAPE_OPS, alias_violation, is_broadcast, is_metadata, memory_order, static_layout
from dynamo_nvf.ops.lowerings import is_pointwise
from dynamo_nvf.ops.registry import op_name
from dynamo_nvf.passes.known_bugs import known_bug
from dynamo_nvf.passes.partition import (
    REASON_KEY,
    REGION_KEY,
    creates_cycle,
    region_io_count,
    regions_of,
    set_eager,
)
from dynamo_nvf.plan import Decision
from dynamo_nvf.settings import Settings

aten = torch.ops.aten

DECISIONS_KEY = "nvf_decisions"


def _record(gm: GraphModule, node: Node, region: int, side: str, action: str, reason: str) -> Decision:
    decision = Decision(node=node.name, op=op_name(node.target), action=action, reason=reason)
    gm.meta.setdefault(DECISIONS_KEY, []).append((region, side, decision))
    return decision


def _in(node: Node, region: int) -> bool:
    return node.meta.get(REGION_KEY) == region


def _members(nodes: list[Node], region: int) -> list[Node]:
    """The nodes of `nodes` still in `region` (trimming only ever removes nodes from a region)."""
    return [n for n in nodes if _in(n, region)]


def _kept_if_copy(gm: GraphModule, node: Node, region: int, side: str, kept: set[Node]) -> bool:
    """Keeps `node` inside when eager would copy rather than alias it; True if so."""
    violation = alias_violation(node)
    if violation:
        kept.add(node)
        _record(gm, node, region, side, "kept", violation)
    return bool(violation)


def _trim_leading(gm: GraphModule, region: int, nodes: list[Node], kept: set[Node]) -> bool:
    changed = False
    for node in _members(nodes, region):
        if node in kept or not is_metadata(node):
            continue
        if any(_in(p, region) for p in node.all_input_nodes):
            continue
        if is_broadcast(node):
            kept.add(node)
            _record(gm, node, region, "leading", "kept",
                    "broadcast stays inside: free in nvFuser, and stride-0 inputs can split kernels")
            continue
        if _kept_if_copy(gm, node, region, "leading", kept):
            continue
        set_eager([node], "trimmed (leading): zero-copy alias of a region input, run by PyTorch")
        _record(gm, node, region, "leading", "trimmed", "zero-copy alias of a region input")
        changed = True
    return changed


def _trim_trailing(gm: GraphModule, region: int, nodes: list[Node], kept: set[Node]) -> bool:
    changed = False
    for node in reversed(_members(nodes, region)):
        if node in kept or not is_metadata(node):
            continue
        outside = [u for u in node.users if not _in(u, region)]
        if not outside or _kept_if_copy(gm, node, region, "trailing", kept):
            continue
        inside = [u for u in node.users if _in(u, region)]
        if not inside:
            set_eager([node], "trimmed (trailing): zero-copy alias of a region output, run by PyTorch")
            _record(gm, node, region, "trailing", "trimmed", "zero-copy alias of a region output")
        else:
            with gm.graph.inserting_after(node):
                copy = gm.graph.node_copy(node)
            copy.meta = {k: v for k, v in node.meta.items() if k not in (REGION_KEY, REASON_KEY)}
            for user in outside:
                user.replace_input_with(node, copy)
            set_eager([copy], "trimmed (trailing): alias of a region output, duplicated out of the region")
            _record(gm, copy, region, "trailing", "duplicated",
                    f"also used inside the region; the outside users read an alias ({copy.name}) instead")
        changed = True
    return changed


def _collapse_reshape_chains(gm: GraphModule, region: int, nodes: list[Node]) -> None:
    for node in _members(nodes, region):
        if node.op != "call_function" or node.target not in RESHAPE_OPS:
            continue
        src = node.args[0]
        while (
            isinstance(src, Node)
            and _in(src, region)
            and src.target in RESHAPE_OPS
            and len(src.users) == 1
        ):
            inner = src
            src = inner.args[0]
            node.args = (src,) + tuple(node.args[1:])
            _record(gm, inner, region, "interior", "collapsed", f"reshape chain folded into {node.name}")
            inner.meta.pop(REGION_KEY, None)
            gm.graph.erase_node(inner)


_COPY_OPS = (torch.ops.aten.clone.default, torch.ops.aten._to_copy.default, torch.ops.aten.copy.default)


def _is_transposing_copy(node: Node) -> bool:
    """A lone copy that changes layout (a transpose): of a strided tensor, or into another memory order
    (a weight made channels-last, passes/conv_weight_layout.py). Worth a region of its own: on an
    H200, perf's transpose_views took 16.7 us in nvFuser's transpose scheduler against 24.5 us for
    eager's copy; on an H100 a [192, 96, 2, 2] bf16 weight's conversion 0.7 us less than ATen's."""
    if node.target not in _COPY_OPS:
        return False
    src = node.args[1] if node.target is torch.ops.aten.copy.default else node.args[0]
    val = src.meta.get("val") if isinstance(src, Node) else None
    if not isinstance(val, torch.Tensor) or val.dim() < 2:
        return False
    out = node.meta.get("val")
    reorders = isinstance(out, torch.Tensor) and out.dim() == val.dim() and memory_order(out) != memory_order(val)
    if val.is_contiguous() and not reorders:
        return False
    # A copy of an expanded (stride-0) tensor, such as GQA's repeat_kv, is no transpose: eager's copy
    # kernel does it as well, and a region of its own would only add nvFuser's host cost.
    return all(not (isinstance(st, int) and st == 0) for st in val.stride())


def _is_strided_broadcast(node: Node) -> bool:
    """A pointwise op that broadcasts an operand into a result not laid out row-major (a convolution's
    bias added to a channels-last output): ATen's broadcast kernel takes its slow strided path there.
    Worth a region of its own under CUDA graphs, where a replay costs no host time per region: on an
    H100 (scripts/repros/convnext_head.py at commit 2828583, 2026-11-25) ConvNeXt's downsampling bias add took 1.6 us
    as nvFuser's kernel against ATen's 2.7. Not every lone pointwise op: same-shape ops (an optimizer
    step's, by the hundred) run as fast in ATen, and each region is a compile. A result that
    channels_last_regions computes in NHWC order is row-major; its permute back, the region's output,
    is what eager lays out strided."""
    out = node.meta.get("val")
    if not is_pointwise(node) or not isinstance(out, torch.Tensor) or out.dim() < 2:
        return False
    backs = [u.meta.get("val") for u in node.users if u.target is aten.permute.default]
    if all(v.is_contiguous() for v in [out, *backs] if isinstance(v, torch.Tensor)):
        return False
    operands = [a.meta.get("val") for a in node.all_input_nodes]
    return any(isinstance(v, torch.Tensor) and tuple(v.shape) != tuple(out.shape) for v in operands)


def _compute_nodes(nodes: list[Node]) -> list[Node]:
    return [n for n in nodes if not is_metadata(n) and n.target is not operator.getitem]


def _symbolic(nodes: list[Node]) -> bool:
    """True if a node's result has a symbolic size, stride or offset. aot_autograd then rebuilds an
    output that aliases an input with as_strided from the region's output, which nvFuser does not
    promise to return as a view: such metadata-only regions stay in eager even with bookend=False."""
    vals = (node.meta.get("val") for node in nodes)
    return any(isinstance(val, torch.Tensor) and not static_layout(val) for val in vals)


def _too_small(nodes: list[Node], settings: Settings) -> bool:
    if settings.bookend:
        compute = _compute_nodes(nodes)
        return len(compute) < settings.min_region_size and not (
            len(compute) == 1 and (_is_transposing_copy(compute[0])
                                   or (settings.cuda_graphs and _is_strided_broadcast(compute[0])))
        )
    return len(nodes) < settings.min_region_size


#: Regions an orphan tries to join, best first (most shared inputs, then nearest): horizontal fusion
#: stays bounded, and planning stays fast on graphs with thousands of lone ops (optimizer steps).
MERGE_CANDIDATES = 8


class _RegionIndex:
    """Regions, their spans in graph order and their inputs, kept up to date while orphans move."""

    def __init__(self, gm: GraphModule) -> None:
        self.order = {n: i for i, n in enumerate(gm.graph.nodes)}
        self.regions = regions_of(gm)
        self.spans = {r: (self.order[ns[0]], self.order[ns[-1]]) for r, ns in self.regions.items()}
        self.inputs = {r: {p for n in ns for p in n.all_input_nodes} for r, ns in self.regions.items()}
        self.small: dict[int, bool] = {}  # region -> _too_small, filled on demand

    def too_small(self, region: int, settings: Settings) -> bool:
        if region not in self.small:
            self.small[region] = _too_small(self.regions[region], settings)
        return self.small[region]

    def move(self, source: int, target: int) -> None:
        nodes = self.regions.pop(source)
        self.regions[target] = sorted(self.regions[target] + nodes, key=self.order.__getitem__)
        ns = self.regions[target]
        self.spans[target] = (self.order[ns[0]], self.order[ns[-1]])
        self.inputs[target] |= self.inputs.pop(source)
        del self.spans[source]
        self.small.pop(source, None)
        self.small.pop(target, None)

    def drop(self, region: int) -> None:
        for table in (self.regions, self.spans, self.inputs, self.small):
            table.pop(region, None)


def _merge_orphan(gm: GraphModule, orphan: int, index: _RegionIndex, settings: Settings) -> bool:
    """Joins a too-small region to another region of the graph, when that needs no cycle, fits the IO
    cap and makes no pattern nvFuser is known to get wrong (passes/known_bugs.py: a region cut there
    stays cut). Bounded horizontal fusion: only regions that would otherwise run alone in eager are
    moved, each to one of the MERGE_CANDIDATES best regions, so nvFuser can schedule them beside the
    others (seed 001's sum beside its pointwise chain).
    """
    nodes = index.regions[orphan]
    members = set(nodes)
    lo, hi = index.spans[orphan]
    candidates = []
    for region in index.regions:
        if region == orphan or index.too_small(region, settings):
            continue
        shared = len(index.inputs[orphan] & index.inputs[region])
        r_lo, r_hi = index.spans[region]
        distance = max(0, r_lo - hi, lo - r_hi)
        candidates.append((-shared, distance, region))
    for _, _, region in sorted(candidates)[:MERGE_CANDIDATES]:
        union = members | set(index.regions[region])

        def group(node: Node, union: set[Node] = union) -> Optional[list[Node]]:
            region_id = node.meta.get(REGION_KEY)
            return None if region_id is None or node in union else index.regions.get(region_id)

        others_spans = [span for r, span in index.spans.items() if r not in (region, orphan)]
        if region_io_count(union) > settings.max_region_io or creates_cycle(union, index.order, group, others_spans):
            continue
        if known_bug(sorted(union, key=index.order.__getitem__)):
            continue
        for node in nodes:
            node.meta[REGION_KEY] = region
            _record(gm, node, region, "interior", "merged",
                    f"too small alone ({len(_compute_nodes(nodes))} compute op(s)); joined horizontally")
        index.move(orphan, region)
        return True
    return False


def bookend_regions(gm: GraphModule, settings: Settings) -> GraphModule:
    """Trims each region's boundary metadata nodes and drops regions with too little compute."""
    gm.meta[DECISIONS_KEY] = []
    if settings.bookend:
        for region, nodes in sorted(regions_of(gm).items()):
            kept: set[Node] = set()
            while _trim_leading(gm, region, nodes, kept) | _trim_trailing(gm, region, nodes, kept):
                pass
            _collapse_reshape_chains(gm, region, nodes)
    index = _RegionIndex(gm)
    for region in sorted(index.regions):
        nodes = index.regions.get(region)
        if nodes is None:
            continue
        compute = _compute_nodes(nodes)
        if not compute and (settings.bookend or _symbolic(nodes)):
            set_eager(nodes, "metadata-only: region has no compute, so PyTorch runs it as aliases")
            index.drop(region)
        elif index.too_small(region, settings) and not _merge_orphan(gm, region, index, settings):
            count = len(compute) if settings.bookend else len(nodes)
            set_eager(nodes, f"single-op policy: {count} {'compute ' if settings.bookend else ''}op(s) "
                             f"< min_region_size={settings.min_region_size}")
            index.drop(region)
    gm.graph.lint()
    gm.recompile()
    return gm
