"""Statistics over dims that are not adjacent as two-pass sums: a region's `var_mean` that reduces
dims with a kept dim between them (GroupNorm's over H*W and C/G of a channels-last activation, which
channels_last_regions reduces as dims [1, 3] of `[N, H*W, G, C/G]`) becomes the mean as a sum over
the outer run of reduced dims, then over the rest, and the variance as the same two sums of the
squared deviations from that mean.

Why: nvFuser 0.2.36 schedules a Welford over such dims as a 3-D inner-persistent kernel that fails
to launch where each group's channels and pixels are many ("CUDA_ERROR_INVALID_VALUE", at
[64, 128, 56, 56] with 32 groups: `scripts/nvfuser_repros/group_norm_strided_welford_launch.py`), so
BiT's GroupNorm(32) regions ran in eager; where it launches, it is slower than the sums. GroupNorm(32)
+ ReLU forward, bf16, channels-last, GPU µs per call (H100, 2026-11-27, a lab script timing
nvfuser_direct definitions of each form; inductor for comparison):

| [N, C, H, W] | Welford over [1, 3] | two-pass sums | inductor |
|---|---|---|---|
| [64, 128, 56, 56] | fails to launch | 158 | 125 |
| [64, 256, 56, 56] | fails to launch | 296 | 369 |
| [64, 64, 56, 56] | 234 | 83 | 130 |
| [64, 512, 28, 28] | 182 | 154 | 271 |
| [8, 320, 64, 64] | 96 | 105 | 171 |

Values are those of the same statistics with another order of summation (two passes: the mean
first, then the squared deviations from it, as accurate as Welford's), summed in float32 for a
bf16 or f16 input as var_mean accumulates (f16 sums of a few thousand values overflow). Only
`var_mean.correction` of a floating-point value with static sizes whose reduced dims are not one
run and keep the first (batch) dim; `correction` and `keepdim` are honoured. A BatchNorm's statistics of a row-major NCHW
activation (over [0, 2, 3]) keep their Welford: nvFuser's 3-D schedule was made for them, and
they were not measured in this form.

The sums read their own copy of the statistics' source where the region computes it from its
inputs by a few pointwise ops, casts and views (BiT's residual add before its GroupNorm): nvFuser
segments the sums and the normalisation into several kernels, and one BiT region allocated 294 MiB
of scratch on an H100 where inductor allocates none: the f32 source kept between those kernels.
With the copies each kernel recomputes it from the region's inputs: BiT inference on an H100 (bf16,
`python -m perf --only zoo_timm_resnetv2_bit_fwd_bf16 --backends inductor,nvf_bookend`, 2026-11-27)
went from 2.80x inductor's peak memory to 1.28x, and from 1.30x its kernel time to 1.16x.

Pure on annotations: GraphModule in (partitioned, `node.meta[REGION_KEY]`), GraphModule out.
"""

from __future__ import annotations

import logging
import math
import operator
from typing import Any, Optional

import torch
from torch._prims_common import get_computation_dtype
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg

from dynamo_nvf.ops.lowerings import is_pointwise, keeps_reduced_dims, reduced_dims
from dynamo_nvf.ops.metadata import RESHAPE_OPS, static_sizes, tensor_val
from dynamo_nvf.passes import add_note, call_like, rewrite_to_fixpoint
from dynamo_nvf.passes.partition import REGION_KEY

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

NOTE = "var_mean {name}: statistics over dims {dims} (not adjacent) as two-pass sums, over {outer} then {inner}"


def _runs(dims: list[int]) -> list[list[int]]:
    """`dims` (sorted) as maximal runs of adjacent dims: [1, 3] -> [[1], [3]], [1, 2] -> [[1, 2]]."""
    runs: list[list[int]] = []
    for d in dims:
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


#: The most ops a statistics' own copy of its source recomputes (module docstring).
MAX_RECOMPUTED = 8
#: Ops a copy recomputes: a cast, views, and pointwise ops (with is_pointwise).
_VIEWS = RESHAPE_OPS | {aten.permute.default}
_CHEAP = _VIEWS | {aten._to_copy.default}


def _source_chain(src: Node, region: Any) -> Optional[list[Node]]:
    """The region nodes `src` is computed from, in graph order, where all are pointwise ops, casts or
    views of region inputs (at most MAX_RECOMPUTED); [] where `src` is read from outside; None else."""
    chain: list[Node] = []
    todo = [src]
    while todo:
        node = todo.pop()
        if node.meta.get(REGION_KEY) != region or node in chain:
            continue
        if node.target in _VIEWS and all(a.meta.get(REGION_KEY) != region for a in node.all_input_nodes):
            continue  # a view of a region input: the bookend pass trims it to an input of its own
        cheap = node.target in _CHEAP and set(node.kwargs) <= {"dtype"}
        if node.op != "call_function" or not (cheap or is_pointwise(node)) or len(chain) >= MAX_RECOMPUTED:
            return None
        chain.append(node)
        todo.extend(node.all_input_nodes)
    order = {n: i for i, n in enumerate(src.graph.nodes)}
    return sorted(chain, key=order.__getitem__)


def _eligible(node: Node) -> Optional[list[int]]:
    """The sorted reduced dims of a region `var_mean` this pass rewrites, else None."""
    if node.op != "call_function" or node.target is not aten.var_mean.correction or node.meta.get(REGION_KEY) is None:
        return None
    src = node.args[0]
    val = tensor_val(src) if isinstance(src, Node) else None
    if val is None or not val.dtype.is_floating_point or static_sizes(val) is None:
        return None
    if getattr(val, "fake_mode", None) is None or any(u.target is not operator.getitem for u in node.users):
        return None
    dims = sorted(reduced_dims(node) or [])
    return dims if len(_runs(dims)) > 1 and 0 not in dims else None


def _rewrite_at(gm: GraphModule, node: Node) -> bool:
    dims = _eligible(node)
    if dims is None:
        return False
    src = node.args[0]
    val = tensor_val(src)
    count = math.prod(int(val.shape[d]) for d in dims)
    correction = node.kwargs.get("correction", 1)
    correction = 1 if correction is None else correction
    outer = _runs(dims)[0]
    inner = [d for d in dims if d not in outer]
    made: list[Node] = []

    def new(target, args, kwargs=None) -> Node:  # noqa: ANN001, ANN202 (aten overloads and their args)
        made.append(call_like(gm, target, args, node, val.fake_mode, kwargs))
        return made[-1]

    def two_sums(x: Node) -> Node:  # keepdim: broadcasts against src
        return new(aten.sum.dim_IntList, (new(aten.sum.dim_IntList, (x, outer, True)), inner, True))

    compute = get_computation_dtype(val.dtype)
    chain = _source_chain(src, node.meta.get(REGION_KEY)) or []

    def own_source() -> Node:  # src recomputed from the region's inputs (module docstring)
        copies: dict[Node, Node] = {}
        for old in chain:
            args = map_arg(old.args, lambda a: copies.get(a, a))
            kwargs = map_arg(old.kwargs, lambda a: copies.get(a, a))
            copies[old] = new(old.target, args, kwargs)
        x = copies.get(src, src)
        return x if compute == val.dtype else new(aten._to_copy.default, (x,), {"dtype": compute})

    with gm.graph.inserting_before(node):
        mean = new(aten.div.Tensor, (two_sums(own_source()), float(count)))
        deviation = new(aten.sub.Tensor, (own_source(), mean))
        var = new(aten.div.Tensor, (two_sums(new(aten.mul.Tensor, (deviation, deviation))),
                                    float(max(count - correction, 0))))
        results = [var, mean]
        if compute != val.dtype:  # var_mean's results are in its input's dtype
            results = [new(aten._to_copy.default, (r,), {"dtype": val.dtype}) for r in results]
        if not keeps_reduced_dims(node):
            results = [new(aten.squeeze.dims, (r, dims)) for r in results]
    if any(list(old.shape) != list(r.meta["val"].shape) or old.dtype != r.meta["val"].dtype
           for old, r in zip(node.meta["val"], results)):  # not what var_mean gave: as it was
        for added in reversed(made):
            gm.graph.erase_node(added)
        return False
    for getitem in list(node.users):
        getitem.replace_all_uses_with(results[getitem.args[1]])
        gm.graph.erase_node(getitem)
    gm.graph.erase_node(node)
    add_note(gm, NOTE.format(name=node.name, dims=dims, outer=outer, inner=inner))
    return True


def strided_statistics(gm: GraphModule) -> GraphModule:
    """Rewrites each region `var_mean` over non-adjacent dims as two-pass sums (module docstring)."""
    changed = rewrite_to_fixpoint(gm, _rewrite_at)
    if changed:
        log.debug("dynamo_nvf: %d statistics over non-adjacent dims as two-pass sums", changed)
    return gm
