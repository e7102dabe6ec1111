"""A region nvFuser failed to compile runs as pieces, one reduction (or other non-pointwise op) each,
before it runs in eager.

Why: nvFuser 0.2.36 fails to compile some whole regions whose parts it compiles: a cross-entropy over a
vocabulary of 50257 (GPT-2, RoBERTa: validation.cpp:1559, "Vectorized accesses cannot be inline with
computation"), an MLP-Mixer LayerNorm backward of a transposed input (validation.cpp:1266); see
`scripts/nvfuser_repros/`. Such a region used to run wholly in eager PyTorch, each of its pointwise ops
one ATen kernel.

Each piece computes one cut point (a node that is not pointwise, a view or a factory: a reduction, a
gather, a pad) from the region's inputs and the cut points before it, recomputing the pointwise ops
that lead to it; a last piece computes the region's other outputs. So only the cut points' results go
through memory, and those are mostly small (a reduction's): a cross-entropy's pieces each read the
logits once, where eager writes and reads them in f32 several times. Each piece is one of nvFuser's
simplest schedules; a piece that still fails runs in eager on its own (and once all have, the whole
region does: RegionRuntime). Results are the region's: the same ops on the same values.

Regions that draw random numbers (a recomputed dropout would draw others) or mutate a tensor are not
split.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import Graph, GraphModule, Node

from dynamo_nvf._compat import hint_int
from dynamo_nvf.ops.lowerings import draws_random_numbers, is_reduction, reduced_dims
from dynamo_nvf.ops.metadata import is_metadata, tensor_val

#: Ops recomputed in each piece that reads them besides torch's pointwise ones.
ELEMENTWISE = frozenset({torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default,
                         torch.ops.aten.clone.default, torch.ops.prims.where.default})


@dataclass
class Piece:
    """One fusion of a split region: its FX graph and which region values it reads and writes."""
    module: GraphModule
    reads: list[Node]
    writes: list[Node]


def _schema_mutates(node: Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and schema.is_mutable


def splittable(region: GraphModule) -> bool:
    """False for a region that draws random numbers or mutates a tensor (module docstring)."""
    return not any(draws_random_numbers(n) or (n.op == "call_function" and _schema_mutates(n))
                   for n in region.graph.nodes)


def recomputed(node: Node) -> bool:
    """Whether a piece recomputes `node` rather than read it: a pointwise op, a view, a getitem or a
    factory (a node with no tensor input)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem or is_metadata(node) or node.target in ELEMENTWISE:
        return True
    if torch.Tag.pointwise in getattr(node.target, "tags", ()):
        return True
    return not node.all_input_nodes


def _written(node: Node) -> list[Node]:
    """What a cut point hands on: itself, or the getitems of its tuple (a var_mean's two results)."""
    if tensor_val(node) is not None:
        return [node]
    return [u for u in node.users if u.op == "call_function" and u.target is operator.getitem]


def _needed(targets: Sequence[Node], available: set[Node]) -> set[Node]:
    """The nodes a piece computes for `targets`: each target and, walking back, every node not
    `available` (a loop, not recursion: a region may be thousands of nodes deep)."""
    needed: set[Node] = set()
    stack = list(targets)
    while stack:
        node = stack.pop()
        if node in needed:
            continue
        needed.add(node)
        stack.extend(a for a in node.all_input_nodes if a not in available and a not in needed)
    return needed


def _piece(region: GraphModule, targets: Sequence[Node], available: set[Node]) -> Piece:
    """The piece computing `targets` from `available` values, recomputing what `recomputed` allows."""
    needed = _needed(targets, available)
    order = {n: i for i, n in enumerate(region.graph.nodes)}
    graph = Graph()
    env: dict[Node, Node] = {}
    reads = sorted({a for n in needed for a in n.all_input_nodes if a not in needed}, key=order.__getitem__)
    for value in reads:
        env[value] = graph.placeholder(value.name)
        env[value].meta = dict(value.meta)
    for node in sorted(needed, key=order.__getitem__):
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[t] for t in targets))
    return Piece(GraphModule(region, graph), reads, list(targets))


def computes(module: GraphModule) -> bool:
    """Whether `module` has a node that is not a view or a getitem (work for nvFuser)."""
    return any(n.op == "call_function" and n.target is not operator.getitem and not is_metadata(n)
               for n in module.graph.nodes)


def split_region(region: GraphModule) -> Optional[list[Piece]]:
    """`region`'s pieces in order (module docstring), or None where it has fewer than two or must
    not be split."""
    if not splittable(region):
        return None
    placeholders = [n for n in region.graph.nodes if n.op == "placeholder"]
    output = next(n for n in region.graph.nodes if n.op == "output")
    available: set[Node] = set(placeholders)
    pieces: list[Piece] = []
    for node in region.graph.nodes:
        if node.op != "call_function" or recomputed(node):
            continue
        written = _written(node)
        if not written:
            return None  # a tuple read other than by getitem
        pieces.append(_piece(region, written, available))
        available.update(written)
    rest = [n for n in output.all_input_nodes if n not in available]
    if rest:
        pieces.append(_piece(region, rest, available))
    return pieces if len(pieces) > 1 else None


def keeps_innermost_dim(node: Node) -> bool:
    """A reduction over dims that keeps its input's innermost dim in memory: a channels-last
    BatchNorm's statistics and sums over N, H and W, not a norm's or a softmax's over its rows."""
    x = tensor_val(node.args[0]) if is_reduction(node) and node.target is not torch.ops.aten.sum.default else None
    if x is None or x.dim() < 2:
        return False
    wide = [d for d in range(x.dim()) if x.shape[d] != 1 and x.stride(d) != 0]  # not broadcast dims
    if not wide:
        return False
    innermost = min(wide, key=lambda d: x.stride(d))
    return innermost not in reduced_dims(node)


def _cut_stages(region: GraphModule) -> Optional[dict[Node, int]]:
    """Each cut point's stage: how many cut points lie on its longest path from the region's inputs
    (a BatchNorm backward's column sums 0, the input gradient that reads them 1). None where a tuple
    is read other than by getitem."""
    after: dict[Node, int] = {}  # stage of each value: cut points on its longest path, itself included
    stages: dict[Node, int] = {}
    for node in region.graph.nodes:
        if node.op != "call_function":
            after[node] = 0
            continue
        before = max((after.get(a, 0) for a in node.all_input_nodes), default=0)
        if recomputed(node):
            after[node] = before
            continue
        if not _written(node):
            return None
        stages[node] = before
        after[node] = before + 1
    return stages


def split_by_stage(region: GraphModule) -> Optional[list[Piece]]:
    """`region`'s pieces where cut points of one stage (`_cut_stages`) share a piece: a reduction and
    the ops that read its result are never in one piece, reductions that read the same values are.

    For a region nvFuser would segment anyway (no single scheduler takes it): each piece is then one
    that a scheduler takes whole, mostly, and nvFuser's segmenter, which tries merges of the region's
    expressions one pair at a time (1-5 s for a BatchNorm training region of 20-40 ops, most of a conv
    net's first call), has little or nothing to do. The rest's largest outputs and its smaller ones
    are pieces apart (`_by_size`), and its outputs that are views of earlier pieces' values a piece
    without compute (`_views_only`). Only regions whose cut points are all reductions
    that keep the innermost dim (`keeps_innermost_dim`) are split: a row reduction and the one that
    reads its result (a softmax's max and sum, a cross-entropy's) are what nvFuser's persistent
    schedulers run as one kernel, where pieces would read the rows twice (a LLaMA-style training
    step: 7% more GPU time split). None where the region has no cut point, or must not be split."""
    if not splittable(region):
        return None
    stages = _cut_stages(region)
    if not stages or not all(keeps_innermost_dim(node) for node in stages):
        return None
    output = next(n for n in region.graph.nodes if n.op == "output")
    available: set[Node] = {n for n in region.graph.nodes if n.op == "placeholder"}
    pieces: list[Piece] = []
    for stage in sorted(set(stages.values())):
        written = [w for node, s in stages.items() if s == stage for w in _written(node)]
        pieces.append(_piece(region, written, available))
        available.update(written)
    rest = [n for n in output.all_input_nodes if n not in available]
    views = [n for n in rest if _views_only(n, available)]
    for outputs in _by_size([n for n in rest if n not in views]):
        pieces.append(_piece(region, outputs, available))
    if views:  # a piece without compute: its views run in PyTorch, zero-copy (RegionRuntime._piece_runtime)
        pieces.append(_piece(region, views, available))
    return pieces if len(pieces) > 1 else None


def _views_only(node: Node, available: set[Node]) -> bool:
    """Whether `node` is views (or getitems) of available values only: a BatchNorm's saved mean,
    squeezed from the statistics a stage piece wrote. In a piece with compute it would be an output
    nvFuser aliases rather than writes, which keeps that piece off the direct launcher."""
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        if current in available or current in seen:
            continue
        seen.add(current)
        if current.op != "call_function" or not (current.target is operator.getitem or is_metadata(current)):
            return False
        stack.extend(current.all_input_nodes)
    return True


def _by_size(outputs: list[Node]) -> list[list[Node]]:
    """The last piece's outputs as the largest ones and the rest (a BatchNorm's per-channel values
    beside its normalised activation), each a piece of its own: nvFuser 0.2.36 gives a pointwise
    fusion that also writes values derived from two BatchNorms' statistics a 1-D, unvectorised
    schedule (scripts/nvfuser_repros/two_batch_norm_slow_pointwise.py), 1414 µs in 4 calls of a timm
    ResNet-50 training step where nvFuser's own segments took 21 µs (H100, 2026-11-27)."""
    if not outputs:
        return []
    sizes = [hint_int(val.numel()) if (val := tensor_val(node)) is not None else 0 for node in outputs]
    largest = max(sizes)
    full = [n for n, size in zip(outputs, sizes) if size == largest]
    small = [n for n, size in zip(outputs, sizes) if size != largest]
    return [full, small] if small else [full]


def run_pieces(region: GraphModule, pieces: Sequence[Piece],
               runners: Sequence[Callable[..., Any]]) -> Callable[..., Any]:
    """A callable running `runners` (one per piece) in order on the region's inputs; it returns the
    region's outputs. A value is dropped after its last reader, as eager frees it."""
    placeholders = [n for n in region.graph.nodes if n.op == "placeholder"]
    returned = next(n for n in region.graph.nodes if n.op == "output").args[0]
    single = isinstance(returned, Node)  # a graph may return one value, not a tuple
    outputs = [returned] if single else list(returned)
    kept = {o for o in outputs if isinstance(o, Node)}
    last_read: dict[Node, int] = {}
    for index, piece in enumerate(pieces):
        for value in piece.reads:
            last_read[value] = index
    steps = []
    for index, (runner, piece) in enumerate(zip(runners, pieces)):
        done = [v for v in piece.reads if last_read[v] == index and v not in kept]
        steps.append((runner, piece.reads, piece.writes, done))

    def run(*args: Any) -> tuple:
        env: dict[Node, Any] = dict(zip(placeholders, args))
        for runner, reads, writes, done in steps:
            results = runner(*[env[r] for r in reads])
            for value in done:
                del env[value]
            env.update(zip(writes, results))
        if single:
            return env[returned]
        return tuple(env[o] if isinstance(o, Node) else o for o in outputs)

    return run
