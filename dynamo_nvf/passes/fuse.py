"""Fuse pass: turns each annotated region into a `call_module` of its own GraphModule.

Uses torch's `fuse_by_partitions`; region i becomes submodule `nvf_region_i`, whose graph is exactly
what the fusion builder lowers and what the eager fallback runs. It also writes the GraphPlan that
explain() reports.
"""

from __future__ import annotations

import operator

from torch.fx import GraphModule, Node
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from dynamo_nvf.ops.registry import op_name
from dynamo_nvf.passes.bookend import DECISIONS_KEY
from dynamo_nvf.passes.fusion_key import region_fusion_key
from dynamo_nvf.passes.partition import REASON_KEY, SPLIT_KEY, regions_of
from dynamo_nvf.plan import GraphPlan, NodeInfo, RegionPlan, TensorInfo

REGION_PREFIX = "nvf_region_"
PLAN_KEY = "nvf_plan"


def _boundary_notes(nodes: list[Node], region: int, regions: dict[Node, int]) -> list[str]:
    """Why the region stops where it does: what feeds it and what it feeds."""
    members = set(nodes)
    notes: list[str] = []
    for node in nodes:
        for producer in node.all_input_nodes:
            if producer in members:
                continue
            if producer.op == "placeholder":
                continue
            if producer in regions:
                notes.append(f"{producer.name} -> {node.name}: producer is in region {regions[producer]}")
            elif REASON_KEY in producer.meta:
                notes.append(f"{producer.name} -> {node.name}: producer stays in eager ({producer.meta[REASON_KEY]})")
        for producer_name, reason in node.meta.get(SPLIT_KEY, []):
            notes.append(f"{producer_name} -> {node.name}: not merged ({reason})")
        for user in node.users:
            if user in members or user.op == "output":
                continue
            if user.target is operator.getitem:
                continue
            if REASON_KEY in user.meta and user not in regions:
                notes.append(f"{node.name} -> {user.name}: consumer stays in eager ({user.meta[REASON_KEY]})")
    return list(dict.fromkeys(notes))


def fuse_regions(gm: GraphModule, kind: str, graph_id: int) -> GraphModule:
    """Replaces each region by a submodule call and stores the GraphPlan in `gm.meta[PLAN_KEY]`."""
    plan = GraphPlan(kind=kind, graph_id=graph_id)
    by_region = regions_of(gm)
    region_of_node = {n: r for r, ns in by_region.items() for n in ns}
    ordered = [by_region[r] for r in sorted(by_region)]
    renumber = {old: new for new, old in enumerate(sorted(by_region))}

    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        region = region_of_node.get(node)
        plan.nodes.append(
            NodeInfo(
                name=node.name,
                op=op_name(node.target) if node.op == "call_function" else node.op,
                region=None if region is None else renumber[region],
                reason="" if region is not None else node.meta.get(REASON_KEY, ""),
                inputs=[producer.name for producer in node.all_input_nodes],
            )
        )

    decisions = gm.meta.get(DECISIONS_KEY, [])
    for new_id, nodes in enumerate(ordered):
        old_id = sorted(by_region)[new_id]
        region = RegionPlan(
            id=new_id,
            name=f"{REGION_PREFIX}{new_id}",
            ops=[op_name(n.target) for n in nodes],
            nodes=[n.name for n in nodes],
            boundary=_boundary_notes(nodes, new_id, {n: renumber[r] for n, r in region_of_node.items()}),
        )
        for rid, side, decision in decisions:
            if rid != old_id:
                continue
            if decision.action == "kept" or side == "interior":
                region.kept.append(decision)
            elif side == "leading":
                region.leading.append(decision)
            else:
                region.trailing.append(decision)
        plan.regions.append(region)
    for rid, side, decision in decisions:
        if rid not in renumber:
            plan.decisions.append(decision)

    if ordered:
        fuse_by_partitions(
            gm, [dict.fromkeys(nodes) for nodes in ordered], prefix=REGION_PREFIX, always_return_tuple=True
        )
    for region in plan.regions:
        sub = getattr(gm, region.name)
        region.fx_code = sub.code.strip()
        region.inputs = [TensorInfo.of(n) for n in sub.graph.nodes if n.op == "placeholder"]
        out = next(n for n in sub.graph.nodes if n.op == "output")
        region.outputs = [TensorInfo.of(n) for n in out.args[0]]
        region.fusion_key = region_fusion_key(sub)
    gm.meta[PLAN_KEY] = plan
    return gm
