"""Give a large transposed read that feeds a concatenation its own region: the transpose (and what
computes its input in the region) moves to a new region that writes the transposed tensor row-major,
and the concatenation reads that.

Why: ViT's patch embedding. The convolution's NCHW output gets its bias added, is flattened and
transposed to tokens [B, 196, 384], the CLS token is concatenated and the position embedding added,
then the first LayerNorm runs: one region. nvFuser 0.2.36 runs it as a pointwise segment (the
concatenation) that walks the transposed memory, then a norm that reads the pointwise segment's output
in that same transposed order: on an H100 (2026-11-25, f32, batch 64; scripts/repros/conv_stems.py at commit 2828583
and scripts/region_scoreboard.py vit_fwd_f32_large) 87 + 42 us against inductor's one 31 us kernel.
Spelled as two regions, nvFuser's transpose scheduler writes the tokens in 12 us and the norm with the
concatenation takes 19 us.

The same where the convolution's output is channels-last (conv_input_layout.py converts ViT's image):
the bias add, flatten and transpose then keep memory order, but nvFuser 0.2.36 still ran the region as
a 75 us pointwise segment (reshape and permute inside the fusion before the concatenation) and a 41 us
norm (2026-11-25, conv_stems.py `nvf cl-input`).

Only where measured: the transpose's result has at least `MIN_ELEMENTS` elements (the ViT case has
4.8 million; at a small batch, 150 thousand, the extra region's launch and host time are not known to
pay), its sizes are static, it either turns row-major memory into a strided view or permutes a value
the region computes, and a concatenation in its region reads it. Forward and inference graphs (the backward's transposes of ViT's stem are not
measured). Values are unchanged (a copy).

Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
import math

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import static_sizes, tensor_val
from dynamo_nvf.passes import add_note, call_like
from dynamo_nvf.passes.partition import REGION_KEY, SPLIT_KEY, reach, regions_of

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: The smallest transposed tensor given its own region (elements): ViT-S/16's tokens at batch 64 are
#: 4.8 million; at batch 2, 150 thousand (not split).
MIN_ELEMENTS = 1 << 20

_TRANSPOSES = (aten.transpose.int, aten.permute.default)
_CONCATS = (aten.cat.default,)

NOTE = ("transpose {transpose}: {count} node(s) split into a region of their own that writes its result "
        "row-major for {cat} (a concatenation reading a transpose)")


def _splittable(node: Node, members: set[Node]) -> bool:
    """A large transpose that reads row-major memory transposed or permutes a value the region computes
    (whether a concatenation reads it is the caller's test)."""
    if node.op != "call_function" or node.target not in _TRANSPOSES:
        return False
    out, src = tensor_val(node), tensor_val(node.args[0])
    if out is None or src is None or getattr(out, "fake_mode", None) is None:
        return False
    sizes = static_sizes(out)
    if sizes is None or math.prod(sizes) < MIN_ELEMENTS:
        return False
    transposed_read = src.is_contiguous() and not out.is_contiguous()
    return transposed_read or node.args[0] in members  # else a view of a region input in memory order


def split_transposes(gm: GraphModule) -> GraphModule:
    """Splits each qualifying transpose, with its feeders in the region, into a region of its own."""
    regions = regions_of(gm)
    next_id = max(regions, default=-1) + 1
    split = 0
    for members_list in list(regions.values()):
        members = set(members_list)
        for node in members_list:
            cats = [u for u in node.users if u in members and u.target in _CONCATS]
            if not cats or not _splittable(node, members):
                continue
            part = {node} | reach(node, members, upstream=True)
            if len(part) + 1 >= len(members):
                continue  # nothing but the transpose would stay: no split to make
            mode = tensor_val(node).fake_mode
            with gm.graph.inserting_after(node):
                copy = call_like(gm, aten.clone.default, (node,), node, mode,
                                 {"memory_format": torch.contiguous_format})
            # Only the concatenations read the copy: another reader keeps the transposed view (its
            # fake value, which later passes read for strides, describes that view).
            for cat in cats:
                cat.replace_input_with(node, copy)
            for moved in (*part, copy):
                moved.meta[REGION_KEY] = next_id
            cats[0].meta.setdefault(SPLIT_KEY, []).append(
                (copy.name, f"split: {node.name}'s transposed read runs in a region of its own, which writes "
                            f"it row-major (split_transposes)"))
            add_note(gm, NOTE.format(transpose=node.name, count=len(part) + 1, cat=cats[0].name))
            next_id += 1
            split += 1
            break  # the region changed: at most one split per region
    if split:
        gm.graph.lint()
        gm.recompile()
        log.debug("dynamo_nvf: split %d transposed read(s) into regions of their own", split)
    return gm
