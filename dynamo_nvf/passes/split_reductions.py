"""Split pass: a norm backward's column sums (weight and bias gradients) become a region of their own.

A LayerNorm or RMSNorm backward reduces one (rows, cols) tensor two ways: over cols for dx (an inner
reduction per row) and over rows for the weight and bias gradients (outer reductions, one value per
column). nvFuser 0.2.36 runs such a region as one inner-outer persistent kernel with a grid-wide
reduction of the column partials: the least memory traffic (each input read once), but a fixed cost
that dominates at few rows. BERT-style training (2 x 256 tokens x 768, bf16) on an H100 took 14.4 us
per call there, where inductor ran a 1.5 us row kernel and a column reduction of about 5 us
(scripts/block_kernels.py, 2026-11-23). Inductor always splits like that.

With a row limit (`split_norm_backward_rows`, by default 1024 rows under CUDA graphs and none
without them; any size for a region that unpermute_reductions rewrote, and by default any size for a
norm backward over narrow rows, NARROW_NORM_COLS), a region with both kinds of reduction over tensors
of at most that many rows is cut in two: the column sums, with copies of the pointwise and view nodes that feed
them (recomputed, so the new region reads the same inputs as the original and writes nothing extra),
go to a new region; the row part stays. Nothing random or reducing is copied (a copied dropout would
draw another mask): the new region reads such a value from the old one when it is one per row (the
mean and reciprocal std that min-cut recomputes in the backward), and the split is refused otherwise.

Pure on annotations: GraphModule in (partitioned, `node.meta[REGION_KEY]`), GraphModule out.
"""

from __future__ import annotations

import math
from typing import Optional, Protocol

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.utils.fuser_utils import fuse_as_graphmodule

from dynamo_nvf.ops.context import SEGMENT_INPUTS_KEY
from dynamo_nvf.ops.lowerings import DIM_REDUCTIONS, reduced_dims
from dynamo_nvf.ops.metadata import is_metadata, static_sizes, tensor_val
from dynamo_nvf.passes import add_note
from dynamo_nvf.passes.partition import REGION_KEY, SPLIT_KEY, reach, regions_of
from dynamo_nvf.passes.unpermute_reductions import UNPERMUTED_KEY
from dynamo_nvf.settings import NARROW_NORM_COLS, Settings


class Oracle(Protocol):
    """What planning may ask of nvFuser about a region, given as a standalone GraphModule whose
    placeholders carry traced values (dynamo_nvf/segmenter.py answers; passes stay free of nvFuser)."""

    def schedulers(self, region: GraphModule) -> Optional[tuple[str, ...]]:
        """nvFuser's schedulers that take the whole region as one kernel; () when it would segment
        it; None when it could not be asked."""

    def gpu_us(self, region: GraphModule) -> Optional[float]:
        """The region's GPU time per call on inputs of its traced sizes; None when not measured."""


#: A cut the segmenter's trial chose must take at most this share of the whole region's GPU time
#: (with graphs off, plus HOST_US_PER_EXTRA_REGION): below it, measurement noise.
TRIAL_MARGIN = 0.97
#: Host time of one more region call without CUDA graphs (fec.execute's floor is ~12 us, H100).
HOST_US_PER_EXTRA_REGION = 15.0

aten = torch.ops.aten



def _symbolic(node: Node) -> bool:
    """True when a tensor value of `node` has a symbolic size (dynamic shapes)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else (val,)
    return any(isinstance(v, torch.Tensor) and static_sizes(v) is None for v in vals)


def _rows_and_cols(x: torch.Tensor) -> tuple[int, int]:
    return (math.prod(int(s) for s in x.shape[:-1]), int(x.shape[-1]))


def _reduced_input(node: Node) -> Optional[torch.Tensor]:
    """The (rank >= 2) tensor a reduction over dims reads, or None for any other node."""
    if node.target is not aten.sum.default and node.target not in DIM_REDUCTIONS:
        return None
    x = tensor_val(node.args[0]) if node.args else None
    return x if x is not None and x.dim() >= 2 else None


def _is_row_reduction(node: Node) -> bool:
    """A reduction that includes the last dim (a full sum counts: it reduces rows too)."""
    x = _reduced_input(node)
    return x is not None and (node.target is aten.sum.default or x.dim() - 1 in reduced_dims(node))


def _is_column_sum(node: Node) -> bool:
    """A sum over leading dims only (a weight or bias gradient): keeps the last dim."""
    x = _reduced_input(node)
    return x is not None and node.target is aten.sum.dim_IntList and x.dim() - 1 not in reduced_dims(node)


def recomputable(node: Node) -> bool:
    """Pointwise or a view, deterministic: copying it into another region computes the same values."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    tags = node.target.tags
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    return torch.Tag.pointwise in tags or is_metadata(node) or node.target is aten._to_copy.default


def recomputable_feeders(sums: list[Node], members: set[Node], rows: int) -> Optional[list[Node]]:
    """The region's nodes that `sums` need and the new region recomputes, in no order; None if one
    of them can be neither copied nor read from the old region.

    A node that cannot be copied (a row reduction that min-cut recomputes in the backward, the
    getitem of a var_mean, a random op) is read from the old region instead, as one more of its
    outputs, if it holds at most one value per row (a mean or a reciprocal std): the new region then
    runs after the old one and reads little. A larger one (a dropout mask) refuses the split.
    """
    need: set[Node] = set()
    stack = [p for s in sums for p in s.all_input_nodes if p in members]
    while stack:
        node = stack.pop()
        if node in need:
            continue
        if not recomputable(node):
            val = tensor_val(node)
            if val is None or val.numel() > rows:
                return None
            continue  # read from the old region
        need.add(node)
        stack.extend(p for p in node.all_input_nodes if p in members)
    return list(need)


def recompute_in(gm: GraphModule, consumers: list[Node], per_consumer: dict[Node, Optional[list[Node]]],
                 region_id: int, order: dict[Node, int]) -> None:
    """Copies each consumer's feeders (nodes of the region it leaves, from `recomputable_feeders`) into
    region `region_id`, points the consumers at the copies, and erases the originals nothing reads now.

    Each copy goes right before the first consumer that needs it: after its inputs (ancestors of that
    consumer), and after whatever the consumer reads from the old region. A consumer without feeders
    (None) keeps reading the old region's nodes.
    """
    anchor: dict[Node, Node] = {}
    for node in sorted(consumers, key=order.__getitem__):
        for feeder in per_consumer.get(node) or ():
            anchor.setdefault(feeder, node)
    feeders = sorted(anchor, key=order.__getitem__)
    copies: dict[Node, Node] = {}
    for node in feeders:
        with gm.graph.inserting_before(anchor[node]):
            copy = gm.graph.node_copy(node, lambda n: copies.get(n, n))
        copy.meta[REGION_KEY] = region_id
        copies[node] = copy
    for node in consumers:
        if per_consumer.get(node):
            for old, new in copies.items():
                if old in node.all_input_nodes:
                    node.replace_input_with(old, new)
    for node in reversed(feeders):  # originals only the consumers read
        if not node.users:
            gm.graph.erase_node(node)


def _tail(node: Node, members: set[Node]) -> Optional[list[Node]]:
    """What the region does to `node` after it (a weight gradient's cast back to bf16, its reshape,
    before trimming): recomputable nodes that read nothing else, if nothing else of the region uses
    `node` or them; None otherwise."""
    tail: list[Node] = []
    stack = [u for u in node.users if u in members]
    while stack:
        user = stack.pop()
        if user in tail:
            continue
        if not recomputable(user) or any(p is not node and p not in tail for p in user.all_input_nodes):
            return None
        tail.append(user)
        stack.extend(u for u in user.users if u in members)
    return tail


def _reads_row_reduction(node: Node, members: set[Node]) -> bool:
    """True when `node` depends, inside its region, on a row reduction (a column sum of dx)."""
    return any(_is_row_reduction(n) for n in reach(node, members, upstream=True))


#: Ops that compute a norm's per-row statistics where the backward recomputes them.
_NORM_STATISTICS = (aten.var_mean.correction, aten.rsqrt.default)


def _normalises_rows(nodes: list[Node], members: set[Node], row_shapes: set[tuple[int, int]]) -> bool:
    """A norm backward's signature: the region computes per-row statistics (var_mean, rsqrt), or it reads
    one value per row of the rows it reduces (the forward's saved mean or reciprocal std) and has a
    column sum that reads no row reduction (a norm's weight or bias gradient). A softmax backward reads
    per-row values too (the forward's max and sum), but its only column sum, a linear layer's bias
    gradient, reads the softmax's row sum."""
    if any(n.target in _NORM_STATISTICS for n in nodes):
        return True
    if all(_reads_row_reduction(n, members) for n in nodes if _is_column_sum(n)):
        return False
    rows = {r for r, _ in row_shapes}
    for node in nodes:
        for arg in node.all_input_nodes:
            val = tensor_val(arg) if arg not in members else None
            if val is None or val.dim() < 2 or static_sizes(val) is None:
                continue
            if int(val.shape[-1]) == 1 and math.prod(int(s) for s in val.shape[:-1]) in rows:
                return True
    return False


def _column_sums(nodes: list[Node], members: set[Node], row_shapes: set[tuple[int, int]],
                 max_rows: float) -> tuple[list[Node], list[Node]]:
    """The region's column sums over the (rows, cols) of one of its row reductions, with at most
    `max_rows` rows and a tail the new region can take (`_tail`), and those tails."""
    sums: list[Node] = []
    tails: list[Node] = []
    for n in nodes:
        if not _is_column_sum(n):
            continue
        shape = _rows_and_cols(tensor_val(n.args[0]))
        if shape not in row_shapes or shape[0] > max_rows:
            continue
        tail = _tail(n, members)
        if tail is not None:  # else the rest of the region needs the sum
            sums.append(n)
            tails.extend(tail)
    return sums, tails


def _cut_copy(gm: GraphModule, nodes: list[Node], sums: list[Node], tails: list[Node],
              rows: int) -> Optional[list[GraphModule]]:
    """The two regions the cut would make of `nodes`, as standalone GraphModules (built on a copy; `gm`
    is left as it is), or None where the cut is refused."""
    copy, _, _ = fuse_as_graphmodule(gm, nodes, "nvf_cut_trial", always_return_tuple=True)
    by_name = {n.name: n for n in copy.graph.nodes}
    members = {n for n in copy.graph.nodes if n.op == "call_function"}
    for node in members:
        node.meta[REGION_KEY] = 0
    copied_sums = [by_name[n.name] for n in sums]
    per_sum = {n: recomputable_feeders([n], members, rows) for n in copied_sums}
    if any(f is None for f in per_sum.values()):
        return None
    recompute_in(copy, copied_sums, per_sum, 1, {n: i for i, n in enumerate(copy.graph.nodes)})
    for node in [by_name[n.name] for n in tails] + copied_sums:
        node.meta[REGION_KEY] = 1
    copy.graph.lint()
    return [fuse_as_graphmodule(copy, part, f"nvf_cut_trial_{i}", always_return_tuple=True)[0]
            for i, part in sorted(regions_of(copy).items())]


def _ask_segmenter(gm: GraphModule, nodes: list[Node], sums: list[Node], tails: list[Node], ask: Oracle,
                   settings: Settings) -> str:
    """Why the column sums `sums` of a region the row rules keep whole are cut after all ('' when not):
    nvFuser has no one-kernel schedule for the region (it would segment it anyway), and the cut's two
    regions measured faster on the GPU than the whole one. Notes each answer for explain()."""
    rows = _rows_and_cols(tensor_val(sums[0].args[0]))[0]
    where = f"the region of {nodes[0].name} ({rows} rows)"
    parts = _cut_copy(gm, nodes, sums, tails, rows)
    if not parts:  # nothing to cut to: asking nvFuser (10-350 ms a question) could change nothing
        add_note(gm, f"segmenter: not asked about {where}: a column sum's inputs cannot be recomputed "
                     f"apart, so there is no cut to weigh: kept whole")
        return ""
    whole, _, _ = fuse_as_graphmodule(gm, nodes, "nvf_whole_trial", always_return_tuple=True)
    answer = ask.schedulers(whole)
    if answer:
        add_note(gm, f"segmenter: nvFuser runs {where} as one {answer[0]} kernel: kept whole")
        return ""
    if answer is None:
        return ""
    whole_us = ask.gpu_us(whole)
    part_us = [ask.gpu_us(p) for p in parts] if whole_us is not None else [None]
    if whole_us is None or any(us is None for us in part_us):
        add_note(gm, f"segmenter: nvFuser would segment {where}; the cut was not measured: kept whole")
        return ""
    cut_us = sum(part_us) + (0.0 if settings.cuda_graphs else HOST_US_PER_EXTRA_REGION)
    measured = (f"the cut {' + '.join(f'{us:.1f}' for us in part_us)} us of GPU time"
                f"{'' if settings.cuda_graphs else f' + {HOST_US_PER_EXTRA_REGION:.0f} us host'} against {whole_us:.1f} whole")
    if cut_us > TRIAL_MARGIN * whole_us:
        add_note(gm, f"segmenter: nvFuser would segment {where}, but {measured}: kept whole")
        return ""
    add_note(gm, f"segmenter: nvFuser would segment {where}; {measured}: its column sums "
                 f"{', '.join(n.name for n in sums)} get a region of their own")
    return f"nvFuser would segment the region anyway, and the cut measured faster ({measured})"


def split_norm_backward(gm: GraphModule, settings: Settings, kind: str, ask: Optional[Oracle] = None) -> GraphModule:
    """Moves each qualifying region's column sums, with copies of what feeds them, to a new region.

    By default (-1) only a region one of whose column sums reads a row reduction is cut (a linear
    layer's bias gradient, a sum of dx, next to a LayerNorm backward), or, at any row count, a norm
    backward (`_normalises_rows`) whose rows are at most NARROW_NORM_COLS wide: there nvFuser's inner-outer
    kernel measured 20 us a call at 512 rows (14.5 without that sum). Under CUDA graphs on an H100
    (perf.interleave, 2026-11-23) cutting changed a training step's GPU time by -9% (BERT-style, 512
    rows), -10% (ViT-S, 394 rows) and +3% (GPT-2-style, 256 rows); LLaMA-style RMSNorm regions have
    no such sum and stay whole (cut anyway, 0%).

    Segmenter-aware (`ask`, settings.ask_segmenter): a backward region with such column sums over more
    rows than the rules above cut is kept whole because there nvFuser runs it as one inner-outer
    persistent kernel, which beats two kernels at many rows (BERT-style at 4096 rows: 4% less GPU time
    whole). Where nvFuser has no one-kernel schedule for the region (`ask.schedulers` answers none), it
    would segment the region anyway, at boundaries of its own; then the cut's two regions and the whole
    one are timed on the GPU (`ask.gpu_us`, built on copies), and the cut is made, as a region of its
    own with CUDA graphs or without, if it took at most TRIAL_MARGIN of the whole's time (without graphs
    counting HOST_US_PER_EXTRA_REGION for the extra call). Both answers are noted for explain().
    Why measured and not assumed: on an H100 (2026-11-25, nvfuser_direct 0.2.36, perf.interleave --gpu
    and scripts/repros/segmenter_oracle.py at commit 2828583, forward and backward steps over [2048, 32768], where nvFuser
    has no one-kernel schedule) cutting took a bf16 LayerNorm step from 1.15x inductor's GPU time to
    0.66x (perf layernorm_wide_train_bf16), from 536.7 to 362.8 us with a random output gradient,
    and an f32 RMSNorm step with one from 942.1 to 652.0 us, but a bf16 RMSNorm whose output gradient
    is a broadcast one (perf rmsnorm_wide_train_bf16, a sum's backward) from 0.88x to 1.04x, and an f32
    LayerNorm step like it by +1.5%. The column sums behind a segment_set instead (one region call)
    took 489.8 us for the LayerNorm above, 834.2 against 799.7 whole in f32: nvFuser still cut the row
    part its own way. Where nvFuser has the one kernel (to [4096, 16384] f32 and bf16), whole was
    17-40% faster than cut, and the region stays whole unmeasured.

    The narrow-rows rule (NARROW_NORM_COLS) holds in backward graphs only: an inference region that
    sums columns next to an amax over rows (tests/test_unflatten_reductions.py) failed nvFuser 0.2.36's
    compile behind a segment boundary (H100, 2026-11-25: INTERNAL ASSERT, predicate_elimination.cpp:1056,
    "Inconsistent setting of initialization value").
    """
    limit = settings.norm_backward_split_rows()
    if settings.split_norm_backward_rows == 0:
        return gm
    # segment_norm_backward: without graphs, regions the graphs rule would cut get a kernel boundary
    # in front of their column sums instead (one region, two kernels).
    mark_rows = settings.norm_backward_segment_rows()
    only_reading_dx = settings.split_norm_backward_rows < 0
    regions = regions_of(gm)
    next_id = max(regions, default=-1) + 1
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for region_id, nodes in list(regions.items()):
        if any(_symbolic(n) or any(_symbolic(p) for p in n.all_input_nodes) for n in nodes):
            continue  # a row count to compare needs a guard: it would recompile for every size
        members = set(nodes)
        rows_of_row_reductions = {_rows_and_cols(tensor_val(n.args[0])) for n in nodes if _is_row_reduction(n)}
        # A region unpermute_reductions rewrote is cut at any size (Settings.unpermute_reductions); so
        # are narrow rows by default (NARROW_NORM_COLS), where graphs are off by a segment boundary.
        unpermuted = any(n.meta.get(UNPERMUTED_KEY) for n in nodes)
        narrow = (kind == "backward" and only_reading_dx and bool(limit or mark_rows) and bool(rows_of_row_reductions)
                  and all(cols <= NARROW_NORM_COLS for _, cols in rows_of_row_reductions)
                  and _normalises_rows(nodes, members, rows_of_row_reductions))
        region_limit = math.inf if unpermuted or narrow else (limit or mark_rows)
        mark_only = not unpermuted and not limit
        sums, tails = _column_sums(nodes, members, rows_of_row_reductions, region_limit) if region_limit > 0 else ([], [])
        if sums and only_reading_dx and not unpermuted and not narrow and not any(
                _reads_row_reduction(n, members) for n in sums):
            sums, tails = [], []
        segmenter_rule = ""
        if not sums and ask is not None and kind == "backward" and not unpermuted and not narrow:
            sums, tails = _column_sums(nodes, members, rows_of_row_reductions, math.inf)
            sums = [n for n in sums if _rows_and_cols(tensor_val(n.args[0]))[0] > max(region_limit, 0)]
            segmenter_rule = _ask_segmenter(gm, nodes, sums, tails, ask, settings) if sums else ""
            if segmenter_rule:
                mark_only = False  # a region of its own: a segment_set measured worse (see above)
            else:
                sums, tails = [], []
        if not sums:
            continue
        rows = _rows_and_cols(tensor_val(sums[0].args[0]))[0]
        if mark_only:
            for node in sums:
                node.meta[SEGMENT_INPUTS_KEY] = True
            why = f" (rows of at most {NARROW_NORM_COLS} columns: any size)" if narrow else ""
            add_note(gm, f"segment boundary: column sums {', '.join(n.name for n in sums)} over {rows} rows{why} read "
                         f"their inputs through nvFuser's segment_set (segment_norm_backward: one region, "
                         f"their own kernels)")
            continue
        size_rule = (segmenter_rule or ("an unpermuted sum: any size" if unpermuted
                     else f"rows of at most {NARROW_NORM_COLS} columns: any size" if narrow
                     else f"split_norm_backward_rows={limit}"))
        per_sum = {n: recomputable_feeders([n], members, rows) for n in sums}
        if any(f is None for f in per_sum.values()):
            continue
        recompute_in(gm, sums, per_sum, next_id, order)
        for node in tails:
            node.meta[REGION_KEY] = next_id
        for node in sums:
            node.meta[REGION_KEY] = next_id
            node.meta.setdefault(SPLIT_KEY, []).append(
                (nodes[0].name, f"split from the region of {nodes[0].name}: its column sums over {rows} rows "
                                f"({size_rule}) run apart from its row reductions"))
        next_id += 1
    gm.graph.lint()
    gm.recompile()
    return gm
