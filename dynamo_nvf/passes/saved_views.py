"""Joint-graph pass (CUDA graphs): the forward saves the tensor a chain of views starts from, never the views.

Why: cudagraph trees hand a replay's outputs back in two ways. An output whose storage no other
output shares is a cached tensor, returned as it is on every replay. Outputs that share a storage are
rebuilt from their metadata on every replay (a storage from a raw pointer, a tensor on it, a weak
reference swapped), and so is the output they alias. Torch's min-cut partitioner saves views as they
are: a split qkv projection's q, k and v (what SDPA's backward reads), or the attention output beside
its reshape (what the output projection's weight gradient reads), are five outputs on one or two
storages per layer. cProfile of a 2-layer GPT-2-style training step under CUDA graphs on an H100
(2026-11-24, `scripts/host_profile.py gpt_train_bf16_small nvf_cudagraphs inductor_ro`): 10 outputs
rebuilt per step, cudagraph trees' `reconstruct_outputs` 298 us per step against inductor's 109.
Recomputing a view in the backward costs nothing at replay (the backward graph is captured too).

How: every forward node that eager runs as an alias (a metadata op of ops/metadata.py whose alias rule
holds, a getitem of a split) and that the backward reads gets `recompute = MUST_RECOMPUTE`, the
activation-checkpointing tag the min-cut partitioner honours: the forward then saves what the chain
starts from (one tensor per storage), and the backward's graph recomputes the views. Nothing else is
forced; min-cut still chooses what to save. Without CUDA graphs this would only move host time from
the forward's saving (one saved tensor fewer) to the backward's views (one Python view op more each),
so the backend runs it under CUDA graphs only.

Pure on annotations: GraphModule in (aot_autograd's joint graph), GraphModule out; it runs before the
partitioner, as inductor's joint-graph passes do.
"""

from __future__ import annotations

import logging

from torch.fx import GraphModule, Node
from torch.utils.checkpoint import CheckpointPolicy

from dynamo_nvf.ops.metadata import alias_violation, is_metadata
from dynamo_nvf.passes import is_tangent

log = logging.getLogger("dynamo_nvf")

#: gm.meta key: how many view nodes the pass tagged (backend.py notes it in the backward plan).
RECOMPUTED_VIEWS_KEY = "nvf_recomputed_saved_views"


def tangent_closure(gm: GraphModule) -> set[Node]:
    """Nodes that depend on a tangent. Not quite aot_autograd's backward half: a view it tags
    `is_backward` but that reads only forward values (a weight's transpose for a matmul's gradient, an
    alias of the attention output) is outside, so it is tagged too, and min-cut saves its base."""
    closure: set[Node] = set()
    for node in gm.graph.nodes:
        if is_tangent(node) or any(a in closure for a in node.all_input_nodes):
            closure.add(node)
    return closure


def _is_alias_view(node: Node) -> bool:
    return is_metadata(node) and alias_violation(node) is None


def recompute_saved_views(gm: GraphModule) -> GraphModule:
    """Tags the forward's alias views that the backward reads, and the views they are built from,
    MUST_RECOMPUTE (see the module docstring)."""
    backward = tangent_closure(gm)
    tagged = 0
    # Walk backwards so that a view feeding a tagged view is tagged as well: the whole chain back to
    # its base is recomputed, and only the base can be saved.
    wanted: set[Node] = set()
    for node in reversed(gm.graph.nodes):
        if node in backward or node.op != "call_function" or not _is_alias_view(node):
            continue
        read_by_backward = any(user in backward for user in node.users)
        if not (read_by_backward or node in wanted):
            continue
        if node.meta.get("recompute") is not None:
            continue  # the user's checkpointing policy (MUST_SAVE, ...) stands, and so does its chain
        node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        tagged += 1
        wanted.update(a for a in node.all_input_nodes if a.op == "call_function")
    gm.meta[RECOMPUTED_VIEWS_KEY] = tagged
    if tagged:
        log.debug("dynamo_nvf: recompute_saved_views tagged %d view node(s) MUST_RECOMPUTE", tagged)
    return gm
