"""Two-stage BatchNorm statistics: a region's `var_mean` over N, H and W of a large row-major NHWC
activation with few channels reduces a [M / k, k, C] view of it (M = N x H x W, k x C about
`ROW_WIDTH`) to k partial means and variances per channel, then combines the k partials (the
parallel variance formula for equal counts: the mean of the variances plus the variance of the
means). The view is of a tensor the region reads (through the permute channels_last_regions wrote),
so the bookend pass trims it to a zero-copy alias and nvFuser sees a 3-D input; the normalisation
still reads the 4-D tensor.

Why: nvFuser 0.2.36 schedules the statistics of many rows of few channels as a grid Welford whose
warps span the channels with narrow loads, one partial per block and a division per element; with
4096-wide rows it runs a block reduction over contiguous memory. `python
scripts/batch_norm_statistics.py` (H100, 2026-11-27), BatchNorm + ReLU forward, bf16, GPU µs per
call, one `var_mean` -> two stages (inductor):

| rows M (N x H x W) | channels: one -> two stages (inductor) |
|---|---|
| 802816 (64 x 112 x 112) | 16: 77 -> 57 (36); 32: 135 -> 89 (69); 64: 264 -> 155 (129); 128: 565 -> 292 (228); 96: 351 -> 388 (183) |
| 401408 (32 x 112 x 112) | 64: 154 -> 89 (60) |
| 200704 (64 x 56 x 56) | 64: 101 -> 56 (48); 128: 190 -> 89 (72); 256: 200 -> 151 (117); 512: 360 -> 274 (227); 24: 47 -> 27 (23) |
| 100352 (128 x 28 x 28) | 128: 33 -> 55 (39) |
| 50176 (64 x 28 x 28) | 128: 20 -> 28 (26); 256: 34 -> 53 (40); 512: 66 -> 86 (72) |
| 12544 (64 x 14 x 14) | 1024: 33 -> 53 (38) |

So: at least `MIN_ROWS` rows (every measured shape above it gained, every one below lost) and a
power-of-two channel count from `MIN_CHANNELS` to `MAX_CHANNELS` (96 channels, whose rows are
3072 wide, lost; 24 gained, but one point is not a rule). In a whole training step (`python -m perf
--only resnet_train_bf16_large zoo_timm_resnet50_train_bf16 --backends inductor,nvf_bookend --no-host`,
H100, 2026-11-27, beside the tree without the pass in one call) GPU kernel time per step went 4.89
-> 4.60 ms on the ResNet-style model (inductor 3.68) and 7.73 -> 7.39 ms on timm's ResNet-50
(inductor 5.48). That run's rule (at least 2**23 elements and at most 256 channels) split the same
statistics as this one, and also ResNet-50's [64, 256, 28, 28] (measured 19 µs slower split). The
split adds a kernel per BatchNorm.

Only `var_mean` with `correction=0` (a training BatchNorm's biased statistics) of a 4-D value that
is read from outside the region (or through a permute of one), row-major, optionally through a
dtype-only `_to_copy`, reduced over [0, 1, 2], with static sizes (a graph compiled for dynamic
shapes keeps one `var_mean`). Values are those of the same statistics in another order of
summation. Forward graphs (the backward has no `var_mean`), and only with `bookend` on: without it
nothing would trim the view, and nvFuser would reshape its input in the kernel.

`two_stage_sums` does the same for a region's sums over N, H and W of a row-major NHWC value (a
BatchNorm backward's bias and weight gradients, the values computed in the region): they sum N and H
first, keeping W x C-wide rows, then W. No view is needed, so neither is the bookend pass. Only sums
that accumulate in f32 or f64 (the partials can be values of their own), and not in a region that
also reduces rows of that shape (a LayerNorm's: split_norm_backward places its column sums). The
ResNet-style stem's backward sums took 253 µs as one sum; GPU kernel time per training step fell 3%
(docs/design.md has the measurement).

Pure on annotations: GraphModule in (partitioned, `node.meta[REGION_KEY]`), GraphModule out.
"""

from __future__ import annotations

import logging
import operator
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import keeps_reduced_dims, reduced_dims, reduces_last_dim_of
from dynamo_nvf.ops.metadata import static_sizes, tensor_val
from dynamo_nvf.passes import add_note, call_like, rewrite_to_fixpoint
from dynamo_nvf.passes.partition import REGION_KEY, SPLIT_KEY

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: The statistics are split only over at least this many rows (N x H x W) ...
MIN_ROWS = 1 << 17
#: ... and a power-of-two channel count in this range (module docstring: where each was measured).
MIN_CHANNELS, MAX_CHANNELS = 16, 512
#: Elements per row of the [M / k, k, C] view: k x C, as near this as a power-of-two k dividing M allows.
ROW_WIDTH = 4096

NOTE = ("var_mean {name}: BatchNorm statistics of [{m}, {c}] in two stages ({k} partials per channel), "
        "so nvFuser reduces contiguous {width}-wide rows")


def rows_per_block(rows: int, channels: int) -> int:
    """k: the largest power of two up to ROW_WIDTH // channels that divides `rows` (1 where none
    larger does)."""
    k = 1 << max(0, (ROW_WIDTH // channels).bit_length() - 1)
    while rows % k:
        k //= 2
    return k


def splits(rows: int, channels: int) -> bool:
    """Whether statistics over `rows` x `channels` (row-major) are computed in two stages."""
    power_of_two = channels & (channels - 1) == 0
    return rows >= MIN_ROWS and power_of_two and MIN_CHANNELS <= channels <= MAX_CHANNELS \
        and rows_per_block(rows, channels) >= 2


def _read_from_outside(node: Node, region: int) -> bool:
    """`node` is outside the region, or a region permute of a node outside it: the bookend pass
    trims a view of it to an alias."""
    if node.meta.get(REGION_KEY) != region:
        return True
    return node.target is aten.permute.default and isinstance(node.args[0], Node) \
        and node.args[0].meta.get(REGION_KEY) != region


def _statistics_source(node: Node) -> Optional[tuple[Node, Optional[torch.dtype]]]:
    """(the 4-D tensor the statistics read, the dtype they are computed in or None) where `node`
    is a var_mean this pass splits."""
    region = node.meta.get(REGION_KEY)
    if region is None or node.target is not aten.var_mean.correction or node.kwargs.get("correction") != 0:
        return None
    src = node.args[0]
    if not isinstance(src, Node) or reduced_dims(node) != [0, 1, 2]:
        return None
    dtype = None
    if src.target is aten._to_copy.default and src.meta.get(REGION_KEY) == region:
        if set(src.kwargs) != {"dtype"} or len(src.args) != 1:
            return None
        dtype, src = src.kwargs["dtype"], src.args[0]
    val = tensor_val(src)
    if not isinstance(src, Node) or val is None or val.dim() != 4 or not _read_from_outside(src, region):
        return None
    sizes = static_sizes(val)
    if sizes is None or not val.is_contiguous() or getattr(val, "fake_mode", None) is None:
        return None
    if not val.dtype.is_floating_point or (dtype is not None and not dtype.is_floating_point):
        return None
    if not splits(sizes[0] * sizes[1] * sizes[2], sizes[3]):
        return None
    return src, dtype


def _split(gm: GraphModule, node: Node, src: Node, dtype: Optional[torch.dtype]) -> bool:
    val = tensor_val(src)
    n, h, w, c = (int(s) for s in val.shape)
    rows = n * h * w
    k = rows_per_block(rows, c)
    keepdim = keeps_reduced_dims(node)
    mode = val.fake_mode
    getitems = list(node.users)
    if any(u.target is not operator.getitem for u in getitems):
        return False

    made: list[Node] = []

    def new(target, args, kwargs=None) -> Node:  # noqa: ANN001, ANN202 (aten overloads and their args)
        made.append(call_like(gm, target, args, node, mode, kwargs))
        if len(made) > 1:  # the first keeps the statistics' notes (a shared list) on where they are
            made[-1].meta.pop(SPLIT_KEY, None)
        return made[-1]

    with gm.graph.inserting_before(node):
        blocks = new(aten.view.default, (src, [rows // k, k, c]))
        if dtype is not None:
            blocks = new(aten._to_copy.default, (blocks,), {"dtype": dtype})
        parts = new(aten.var_mean.correction, (blocks, [0]), {"correction": 0, "keepdim": False})
        part_var, part_mean = new(operator.getitem, (parts, 0)), new(operator.getitem, (parts, 1))
        mean = new(aten.mean.dim, (part_mean, [0], True))
        deviation = new(aten.sub.Tensor, (part_mean, mean))
        between = new(aten.mean.dim, (new(aten.mul.Tensor, (deviation, deviation)), [0], True))
        var = new(aten.add.Tensor, (new(aten.mean.dim, (part_var, [0], True)), between))
        results = []
        for stat in (var, mean):  # [1, C] -> [1, 1, 1, C] with keepdim, else [C]
            if keepdim:
                stat = new(aten.unsqueeze.default, (new(aten.unsqueeze.default, (stat, 0)), 0))
            else:
                stat = new(aten.squeeze.dims, (stat, [0]))
            results.append(stat)
    if any(list(old.shape) != list(stat.meta["val"].shape) or old.dtype != stat.meta["val"].dtype
           for old, stat in zip(node.meta["val"], results)):  # not the statistics after all: as it was
        for added in reversed(made):
            gm.graph.erase_node(added)
        return False
    for getitem in getitems:
        getitem.replace_all_uses_with(results[getitem.args[1]])
        gm.graph.erase_node(getitem)
    copy = node.args[0]
    gm.graph.erase_node(node)
    if copy is not src and not copy.users:
        gm.graph.erase_node(copy)
    add_note(gm, NOTE.format(name=node.name, m=rows, c=c, k=k, width=k * c))
    return True


def _rewrite_at(gm: GraphModule, node: Node) -> bool:
    found = _statistics_source(node) if node.op == "call_function" else None
    return found is not None and _split(gm, node, *found)


def two_stage_statistics(gm: GraphModule) -> GraphModule:
    """Splits each eligible BatchNorm `var_mean` of a region in two stages (module docstring)."""
    changed = rewrite_to_fixpoint(gm, _rewrite_at)  # the new var_means reduce [0]: never offered again
    if changed:
        log.debug("dynamo_nvf: %d BatchNorm statistics in two stages", changed)
    return gm


#: A sum's first stage keeps W x C values per row; at least this many, so its loads stay wide.
MIN_SUM_ROW_WIDTH = 1024

SUM_NOTE = ("sum {name}: over N, H and W of [{n}, {h}, {w}, {c}] in two stages, N and H first, so nvFuser "
            "reduces contiguous {width}-wide rows")


#: Dtypes a sum may accumulate in to be split: the first stage's partial sums are values of their own
#: (a piece's output under split_by_stage, an eager region's tensor), and bf16 or f16 ones would round.
SUM_DTYPES = (torch.float32, torch.float64)


def _sum_source(node: Node) -> Optional[Node]:
    """The 4-D value `node` sums, where `node` is a region's sum over its leading three dims (N, H, W of
    a row-major NHWC value: a BatchNorm backward's) that this pass splits."""
    region = node.meta.get(REGION_KEY)
    if region is None or node.target is not aten.sum.dim_IntList or reduced_dims(node) != [0, 1, 2]:
        return None
    src = node.args[0]
    val = tensor_val(src) if isinstance(src, Node) else None
    if val is None or val.dim() != 4 or not val.is_contiguous() or getattr(val, "fake_mode", None) is None:
        return None
    sizes = static_sizes(val)
    if sizes is None or (node.kwargs.get("dtype") or val.dtype) not in SUM_DTYPES:
        return None
    n, h, w, c = sizes
    if n * h < 2 or w * c < MIN_SUM_ROW_WIDTH or not splits(n * h * w, c):
        return None
    # a LayerNorm over the channels reduces rows of that shape: split_norm_backward places its column sums
    if reduces_last_dim_of((n for n in node.graph.nodes if n.meta.get(REGION_KEY) == region), tuple(sizes)):
        return None
    return src


def _split_sum(gm: GraphModule, node: Node, src: Node) -> bool:
    n, h, w, c = (int(s) for s in tensor_val(src).shape)
    keepdim = keeps_reduced_dims(node)
    dtype = node.kwargs.get("dtype")
    with gm.graph.inserting_before(node):
        rows = call_like(gm, aten.sum.dim_IntList, (src, [0, 1], keepdim), node, tensor_val(src).fake_mode,
                         {"dtype": dtype} if dtype is not None else None)
        total = call_like(gm, aten.sum.dim_IntList, (rows, [2 if keepdim else 0], keepdim), node,
                          tensor_val(src).fake_mode)
    total.meta.pop(SPLIT_KEY, None)  # the first stage keeps the sum's notes (a shared list) on where it is
    old = tensor_val(node)
    new = tensor_val(total)
    if list(old.shape) != list(new.shape) or old.dtype != new.dtype:  # not the sum after all: as it was
        gm.graph.erase_node(total)
        gm.graph.erase_node(rows)
        return False
    node.replace_all_uses_with(total)
    gm.graph.erase_node(node)
    add_note(gm, SUM_NOTE.format(name=node.name, n=n, h=h, w=w, c=c, width=w * c))
    return True


def _rewrite_sum_at(gm: GraphModule, node: Node) -> bool:
    src = _sum_source(node) if node.op == "call_function" else None
    return src is not None and _split_sum(gm, node, src)


def two_stage_sums(gm: GraphModule) -> GraphModule:
    """Splits each eligible sum over N, H and W of a region's row-major NHWC value in two stages: N and H
    first (rows W x C wide), then W. The sums of a channels-last BatchNorm's backward (its bias and weight
    gradients) are those of the statistics in `two_stage_statistics`: one sum over M rows of C channels
    ran with narrow loads across the channels. Values are those of the same sum in another order."""
    changed = rewrite_to_fixpoint(gm, _rewrite_sum_at)  # the new sums reduce [0, 1] and [0]: never again
    if changed:
        log.debug("dynamo_nvf: %d sums over N, H and W in two stages", changed)
    return gm
