"""Give a region's transposed token input a row-major copy of its own, where the region normalizes its
rows: a region that reduces the last dim of a [..., T, C] tensor (a LayerNorm, forward or backward)
and reads one held as [..., C, T] in memory reads instead a contiguous copy that a one-op region
(nvFuser's transpose scheduler) writes first.

Why: nvFuser 0.2.36's normalization schedulers pick an inner persistent schedule from the logical
dims and read each row's C elements T apart. MLP-Mixer keeps its residual stream as the patch
convolution wrote it (`flatten(2).transpose(1, 2)` of NCHW: [B, 196, 768] held as [B, 768, 196]),
so every LayerNorm and LayerNorm backward of its training step reads transposed tokens: in the
forward, six calls of one inner persistent kernel took 870 us where inductor's LayerNorm kernels over
the same tensors took about 170 (`python scripts/block_kernels.py zoo_timm_mixer_train_bf16
nvf_bookend` and `inductor`, 2 x H200, 2026-11-28). A transposed copy of such a tensor moves 2 x 9.6 MB (bf16,
batch 32), about 10 us.

Which inputs: a value read from outside the region (directly or through the region's leading
views) whose memory order is its logical order with its last two non-trivial dims swapped, with at
least `MIN_ELEMENTS` elements and static sizes, where the region reduces the last dim of a tensor of
its shape (`reduces_last_dim_of`). Channels-last activations (4-D, memory order N, H, W, C) are not
such tensors: channels_last_regions and reduce_in_memory_order plan those. A value several regions
read gets one copy, made just before the first of them (a saved input's copy is not held from the
backward graph's start). Values are unchanged (a copy); the readers' planned output layouts are kept.

Pure on annotations: GraphModule in (partitioned), GraphModule out.
"""

from __future__ import annotations

import logging
import math
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.lowerings import reduces_last_dim_of
from dynamo_nvf.ops.metadata import is_metadata, memory_order, static_sizes, tensor_val
from dynamo_nvf.passes import add_note, call_like
from dynamo_nvf.passes.partition import REASON_KEY, REGION_KEY, SPLIT_KEY, regions_of, set_eager

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: The smallest transposed input copied (elements): Mixer's tokens at batch 32 are 4.8 million; a
#: small one's extra region costs a launch and host time that its reads do not repay.
MIN_ELEMENTS = 1 << 20

EAGER_VIEW = "view read by a row-major copy and by other code: zero-copy alias, run by PyTorch (row_major_norm_inputs)"
NOTE = ("{value}: read row-major from a copy in a region of its own by {region} (it normalizes rows "
        "of a tensor held transposed in memory)")


def is_transposed_tokens(val: Optional[torch.Tensor]) -> bool:
    """A large tensor with static sizes held in memory as its logical order with its last two dims of
    size > 1 swapped ([..., T, C] stored [..., C, T])."""
    if val is None or getattr(val, "fake_mode", None) is None or val.dim() < 2:
        return False
    sizes = static_sizes(val)
    if sizes is None or math.prod(sizes) < MIN_ELEMENTS:
        return False
    big = [d for d in range(val.dim()) if sizes[d] != 1]
    if len(big) < 2:
        return False
    order = [d for d in memory_order(val) if sizes[d] != 1]
    expected = big[:-2] + [big[-1], big[-2]]
    return order == expected and val.stride(big[-2]) == 1


def _leading_chain(value: Node, members: set[Node]) -> Optional[list[Node]]:
    """The region's views from outside to `value` (`value` last), each read by the next alone; [] for
    a value from outside; None where the chain computes or branches."""
    if value not in members:
        return []
    chain: list[Node] = []
    node = value
    while node in members:
        if not is_metadata(node):
            return None
        inputs = node.all_input_nodes
        if len(inputs) != 1:
            return None
        chain.append(node)
        node = inputs[0]
    for earlier, later in zip(chain[1:], chain):
        if set(earlier.users) != {later}:
            return None
    return list(reversed(chain))


def _first_in_graph(gm: GraphModule, nodes: list[Node]) -> Node:
    """The node of `nodes` that comes first in the graph."""
    wanted = set(nodes)
    return next(n for n in gm.graph.nodes if n in wanted)


def row_major_norm_inputs(gm: GraphModule) -> GraphModule:
    """Copies each qualifying transposed input row-major in a region of its own (module docstring)."""
    regions = regions_of(gm)
    next_id = max(regions, default=-1) + 1
    copies: dict[Node, Node] = {}
    made = 0
    for region, members_list in list(regions.items()):
        members = set(members_list)
        readers = [n for n in members_list if not is_metadata(n)]
        candidates: list[Node] = []
        for node in readers:
            for value in node.all_input_nodes:
                if value not in candidates and (value not in members or is_metadata(value)):
                    candidates.append(value)
        for value in candidates:
            val = tensor_val(value)
            if not is_transposed_tokens(val) or not reduces_last_dim_of(members_list, tuple(val.shape)):
                continue
            chain = _leading_chain(value, members)
            readers_here = [u for u in value.users if u in members]
            if chain is None or any(is_metadata(u) for u in readers_here):
                continue  # a view of it would describe the transposed layout it no longer reads
            if chain and len(readers_here) != len(value.users):
                # read elsewhere too (a saved view): the views run in PyTorch, as the bookend pass would
                set_eager(chain, EAGER_VIEW)
                chain = []
            first_reader = _first_in_graph(gm, readers_here)
            if value not in copies:
                # just before its first reader, so that it is not held from the graph's start
                with gm.graph.inserting_before(first_reader):
                    copy = call_like(gm, aten.clone.default, (value,), value, val.fake_mode,
                                     {"memory_format": torch.contiguous_format})
                for key in ("stack_trace", REASON_KEY, SPLIT_KEY):
                    copy.meta.pop(key, None)
                for moved in (*chain, copy):
                    moved.meta[REGION_KEY] = next_id
                next_id += 1
                copies[value] = copy
            copy = copies[value]
            if _first_in_graph(gm, [copy, first_reader]) is not copy:
                first_reader.prepend(copy)  # another region read it first
            for user in readers_here:
                user.replace_input_with(value, copy)
            first_reader.meta.setdefault(SPLIT_KEY, []).append(
                (copy.name, f"split: {value.name} is read row-major from a copy in a region of its own "
                            f"(row_major_norm_inputs)"))
            add_note(gm, NOTE.format(value=value.name, region=f"region {region}"))
            made += 1
    if made:
        gm.graph.lint()
        gm.recompile()
        log.debug("dynamo_nvf: %d transposed input(s) copied row-major for the norms reading them", made)
    return gm
