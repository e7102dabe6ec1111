"""Composite ops held whole by aot_autograd: decompose those a region fuses, leave lone ones to ATen.

With `lone_composites_eager` (opt-in) and without CUDA graphs, aot_autograd leaves the ops of
`decompositions.HELD_COMPOSITES` (GELU, SiLU, LayerNorm and their backwards) whole
(`Settings.holds_composites`). This pass plans the graph once
as if nvFuser took them as they are, a composite counting as one op. Where a composite's trial
region holds at least `min_region_size` compute ops, the composite is replaced by the aten ops of its
decomposition (the same table, so the graph is what aot_autograd would have traced) and the region
fuses it as before. A composite alone (a GELU between two matmuls, a LayerNorm between a matmul and
an attention) stays whole and runs as ATen's kernel: fusing it saves no kernel, and an nvFuser region
call costs more host time than an ATen dispatch: 24 us more per GELU in a chain of matmul+GELU pairs
(H100, scripts/lone_op_host.py at commit 2828583, 2026-11-24). It is opt-in because the model workloads did not gain
(BERT-style inference measured 4% slower with it; Settings.lone_composites_eager has the numbers).

Graph in, graph out; what it left whole is noted for explain().
"""

from __future__ import annotations

import operator
from collections import Counter
from typing import Any, Callable, Optional

import torch
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from dynamo_nvf.decompositions import held_overloads, table_for
from dynamo_nvf.ops.metadata import is_metadata, static_layout, tensor_val
from dynamo_nvf.passes import add_note
from dynamo_nvf.passes.partition import clear_annotations, partition_regions, regions_of
from dynamo_nvf.settings import Settings

#: Node annotations a decomposed composite's ops inherit (source lines, autograd sequence numbers).
_INHERITED_META = ("stack_trace", "seq_nr", "nn_module_stack", "source_fn_stack", "fwd_nn_module_stack",
                   "fwd_source_fn_stack", "partitioner_tag")


def _compute_count(nodes: list[Node]) -> int:
    """Ops ATen would launch for these nodes: metadata and tuple indexing are free, a composite is one."""
    return sum(1 for n in nodes if not is_metadata(n) and n.target is not operator.getitem)


def decompose_fused_composites(gm: GraphModule, settings: Settings) -> GraphModule:
    """Decomposes each held composite whose trial region has other compute ops; notes the others."""
    held = held_overloads()
    composites = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in held]
    if not composites:
        return gm
    partition_regions(gm, settings, whole_ops=held)
    fused: set[Node] = set()
    for nodes in regions_of(gm).values():
        if _compute_count(nodes) >= settings.min_region_size:
            fused.update(n for n in nodes if n.target in held)
    clear_annotations(gm.graph.nodes)  # the trial's regions and reasons are not the plan's
    table = table_for(settings)  # aot_autograd's table with the composites in: what it would have traced
    whole: Counter[str] = Counter()
    for node in composites:
        if node not in fused or not _decompose(gm, node, table):
            whole[node.target.overloadpacket.__name__] += 1
    gm.graph.lint()
    gm.recompile()
    if whole:
        listed = ", ".join(f"{name} x{count}" for name, count in sorted(whole.items()))
        add_note(gm, f"composites run whole by ATen (alone in their region, lone_composites_eager): {listed}")
    return gm


def _decompose(gm: GraphModule, node: Node, table: dict[Any, Callable[..., Any]]) -> bool:
    """Replaces `node` by the aten ops of its decomposition; False (graph unchanged) where it cannot."""
    traced = _trace_decomposition(node, table)
    if traced is None:
        return False
    sub, input_nodes = traced
    inputs = iter(input_nodes)
    env: dict[Node, Any] = {}
    result: Any = None
    with gm.graph.inserting_before(node):
        for sub_node in sub.graph.nodes:
            if sub_node.op == "placeholder":
                env[sub_node] = next(inputs)
            elif sub_node.op == "output":
                result = torch.fx.node.map_arg(sub_node.args[0], env.__getitem__)
            else:
                new = gm.graph.node_copy(sub_node, env.__getitem__)
                for key in _INHERITED_META:
                    if key in node.meta and key not in new.meta:
                        new.meta[key] = node.meta[key]
                new.meta["original_aten"] = node.target
                env[sub_node] = new
    if isinstance(result, (list, tuple)):
        for user in list(node.users):
            user.replace_all_uses_with(result[user.args[1]])
            gm.graph.erase_node(user)
    else:
        node.replace_all_uses_with(result)
    gm.graph.erase_node(node)
    for new in reversed(list(env.values())):  # results nobody reads (a LayerNorm's mean and rstd in inference)
        if new.op == "call_function" and not new.users:
            gm.graph.erase_node(new)
    return True


def _trace_decomposition(node: Node, table: dict[Any, Callable[..., Any]]
                         ) -> Optional[tuple[GraphModule, list[Node]]]:
    """The decomposition of `node` traced on its fake values, with the argument nodes its
    placeholders stand for, or None when it cannot be (dynamic sizes, constants the graph would
    have to hold, users other than tuple indexing)."""
    from torch._guards import detect_fake_mode

    flat, spec = tree_flatten((node.args, node.kwargs))
    positions = [i for i, a in enumerate(flat) if isinstance(a, Node)]
    vals = [tensor_val(flat[i]) for i in positions]
    if not all(v is not None and static_layout(v) for v in vals):
        return None
    out = node.meta.get("val")
    if isinstance(out, (list, tuple)):
        if not all(u.target is operator.getitem and isinstance(u.args[1], int) for u in node.users):
            return None
    elif not isinstance(out, torch.Tensor):
        return None
    fake_mode = detect_fake_mode(vals)
    if fake_mode is None:
        return None

    def body(*tensors: torch.Tensor) -> Any:
        full = list(flat)
        for i, t in zip(positions, tensors):
            full[i] = t
        args, kwargs = tree_unflatten(full, spec)
        return node.target(*args, **kwargs)

    with fake_mode:
        sub = make_fx(body, decomposition_table=table)(*vals)
    if any(n.op == "get_attr" for n in sub.graph.nodes):
        return None
    return sub, [flat[i] for i in positions]
