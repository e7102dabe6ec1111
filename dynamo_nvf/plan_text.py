"""The plan of one compiled graph as text tables: the backend's DEBUG log and explain()'s text.

Kept apart from explain() (reporting.py), which compiles through the backend: the backend can
render its plans without importing the module that imports it.
"""

from __future__ import annotations

from typing import Any, Optional

from tabulate import tabulate

from dynamo_nvf.plan import GraphPlan, RegionPlan


def decision_rows(region: RegionPlan) -> list[list[str]]:
    rows = []
    for side, items in (("leading", region.leading), ("trailing", region.trailing), ("kept", region.kept)):
        for d in items:
            rows.append([side, d.node, d.op, d.action, d.reason])
    return rows


def io_rows(region: RegionPlan) -> list[list[str]]:
    rows = []
    for role, infos in (("in", region.inputs), ("out", region.outputs)):
        for t in infos:
            rows.append([role, t.name, t.dtype, str(t.shape), str(t.stride), t.device])
    return rows


def kernel_rows(region: RegionPlan) -> list[list[Any]]:
    return [[k.segment_id, k.scheduler, k.name, _ms(k.time_ms), _ms(k.compile_time_ms)] for k in region.kernels]


def pass_rows(plan: GraphPlan) -> list[list[Any]]:
    """One row per declared pass that saw the graph: stage, name, what it did, notes, host time."""
    rows = []
    for p in plan.passes:
        if p.ran:
            rows.append([p.stage, p.name, "changed" if p.changed else "no change", p.notes, f"{p.ms:.1f}"])
        else:
            rows.append([p.stage, p.name, f"skipped ({p.skipped})", "", ""])
    return rows


PASS_HEADERS = ["stage", "pass", "result", "notes", "ms"]


def _ms(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.3f}"


def fusion_note(region: RegionPlan) -> str:
    """', fusion <key>' (and whether the compiled fusion was shared): equal keys, one compile."""
    if not region.fusion_key:
        return ""
    return f", fusion {region.fusion_key}" + (" (reused)" if region.fusion_reused else "")


def region_status(region: RegionPlan) -> str:
    status = region.executor
    if region.executor_reason:
        status += f" ({region.executor_reason})"
    return status


def render_plan_text(plan: GraphPlan, show_definitions: bool = True) -> str:
    """Text of one compiled graph's plan."""
    lines = [f"== {plan.kind} graph {plan.graph_id}: {len(plan.regions)} region(s) =="]
    if plan.cuda_graph:
        lines.append(f"CUDA graph: {plan.cuda_graph}")
    if plan.passes:
        lines.append("passes:")
        lines.append(tabulate(pass_rows(plan), headers=PASS_HEADERS, tablefmt="simple"))
    if plan.rewrites:
        lines.append("rewrites:")
        lines.extend(f"  {r}" for r in plan.rewrites)
    node_rows = [[n.name, n.op, "" if n.region is None else f"region {n.region}",
                  n.reason if n.region is None else ""] for n in plan.nodes]
    lines.append(tabulate(node_rows, headers=["node", "op", "where", "why eager"], tablefmt="simple"))
    for region in plan.regions:
        lines.append("")
        lines.append(f"-- {region.name}: {len(region.nodes)} node(s), {len(region.compute_ops)} compute, "
                     f"executor {region_status(region)}{fusion_note(region)}")
        lines.append(tabulate(io_rows(region), headers=["", "tensor", "dtype", "shape", "stride", "device"],
                              tablefmt="simple"))
        rows = decision_rows(region)
        if rows:
            lines.append("bookend decisions:")
            lines.append(tabulate(rows, headers=["side", "node", "op", "action", "reason"], tablefmt="simple"))
        if region.boundary:
            lines.append("boundaries:")
            lines.extend(f"  {b}" for b in region.boundary)
        if region.math:
            lines.append(f"math: {region.math}")
        if region.sizes:
            lines.append(f"sizes: {region.sizes}")
        if region.launch:
            lines.append(f"launch: {region.launch}")
        if region.pieces:
            lines.append("pieces:")
            lines.extend(f"  {p.name}: {len(p.compute_ops)} compute, executor {region_status(p)}"
                         f"{f'; launch: {p.launch}' if p.launch else ''}" for p in region.pieces)
        if region.kernels:
            first = "" if region.first_run_ms is None else f"; first run with compile {region.first_run_ms:.1f} ms"
            counted = (f"nvFuser segments: {region.segments}" if region.segments is not None
                       else f"nvFuser kernels: {len(region.kernels)}")
            lines.append(f"{counted} ({region.profile_source}{first})")
            lines.append(tabulate(kernel_rows(region), headers=["segment", "scheduler", "kernel", "time ms", "compile ms"],
                                  tablefmt="simple"))
        elif region.profile_source:
            lines.append(f"nvFuser segments: unknown ({region.profile_source})")
        if show_definitions and region.definition:
            lines.append("fusion definition:")
            lines.append(region.definition.rstrip())
        if region.scheduled_ir:
            lines.append("scheduled IR:")
            lines.append(region.scheduled_ir.rstrip())
        if region.cuda_source:
            lines.append("CUDA source:")
            lines.append(region.cuda_source.rstrip())
    if plan.decisions:
        lines.append("")
        lines.append("decisions on regions later merged into another or returned to eager:")
        lines.append(tabulate([[d.node, d.op, d.action, d.reason] for d in plan.decisions],
                              headers=["node", "op", "action", "reason"], tablefmt="simple"))
    return "\n".join(lines)
