"""A picture of one compiled graph's plan, as SVG text (no system binary, no extra package).

People read a partitioned graph faster as a picture than as a table: which node went to which
region, what the bookend pass trimmed, where the regions stop and why. The graph is laid out by
region, in graph order: one band per region (its nodes in rows, its nvFuser segments when profiled)
and, between them, bands of the nodes that run in eager, with long runs of plain eager nodes
collapsed into one box. Only the edges that cross a band are drawn, each with the reason for that
boundary on hover (an SVG <title>, as every node has). The output is deterministic.
"""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from dynamo_nvf.plan import GraphPlan, NodeInfo, RegionPlan

#: (fill, stroke) per region, cycled; HTML tables use the fills too.
REGION_COLORS = [
    ("#d0e8ff", "#3a78b5"),
    ("#d8f5d0", "#4a9a3a"),
    ("#ffe8c8", "#c07a20"),
    ("#f0d8ff", "#8a4ab5"),
    ("#fff6b0", "#a89a10"),
    ("#ffd6d6", "#c04040"),
]
EAGER_FILL, EAGER_STROKE = "#e6e6e6", "#8a8a8a"
EDGE_COLOR = "#d0021b"

BOX_W, BOX_H, GAP, PAD = 150, 32, 10, 12
HEADER_H, SEGMENT_H, LEGEND_H, LEGEND_W = 20, 20, 28, 740
CHARS = 23  # characters of 10px monospace that fit in a box


def region_color(region: int) -> tuple[str, str]:
    return REGION_COLORS[region % len(REGION_COLORS)]


@dataclass
class _Box:
    key: str
    names: list[str]
    kind: str  # "region", "eager", "trimmed" or "collapsed"
    region: Optional[int]  # the region of a region node; the region a trimmed node came from
    label: str
    sub: str
    title: str
    x: float = 0.0
    y: float = 0.0


@dataclass
class _Band:
    region: Optional[int]  # None: nodes that run in eager
    nodes: list[NodeInfo]
    boxes: list[_Box] = field(default_factory=list)
    y: float = 0.0
    height: float = 0.0


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _short_op(op: str) -> str:
    """`aten.mul.Tensor` -> `mul.Tensor`, `aten.add.default` -> `add`."""
    op = op.removeprefix("aten.").removeprefix("prims.")
    return op.removesuffix(".default")


def _fit(text: str, chars: int = CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "\u2026"


def _bands(plan: GraphPlan) -> list[_Band]:
    """Regions at their first node, in graph order; eager nodes in runs between them."""
    bands: list[_Band] = []
    by_region: dict[int, _Band] = {}
    for node in plan.nodes:
        if node.region is not None:
            if node.region not in by_region:
                by_region[node.region] = _Band(node.region, [])
                bands.append(by_region[node.region])
            by_region[node.region].nodes.append(node)
        else:
            if not bands or bands[-1].region is not None:
                bands.append(_Band(None, []))
            bands[-1].nodes.append(node)
    return bands


def _trims(plan: GraphPlan) -> dict[str, tuple[int, str]]:
    """Trimmed or duplicated node -> (its region, why), from the regions' bookend decisions."""
    trims = {}
    for region in plan.regions:
        for side, decisions in (("leading", region.leading), ("trailing", region.trailing)):
            for d in decisions:
                if d.action in ("trimmed", "duplicated"):
                    trims[d.node] = (region.id, f"{d.action} ({side}) from {region.name}: {d.reason}")
    return trims


def _kept(plan: GraphPlan) -> dict[str, str]:
    return {d.node: f"{d.action}: {d.reason}" for r in plan.regions for d in r.kept}


def _node_box(node: NodeInfo, trims: dict[str, tuple[int, str]], kept: dict[str, str]) -> _Box:
    if node.region is not None:
        title = f"{node.name}: {node.op}\nregion {node.region}"
        if node.name in kept:
            title += f"\nbookend {kept[node.name]}"
        return _Box(node.name, [node.name], "region", node.region, node.name, _short_op(node.op), title)
    title = f"{node.name}: {node.op}\neager: {node.reason or 'not planned'}"
    if node.reason.startswith("trimmed") or node.name in trims:
        region, why = trims.get(node.name, (None, node.reason))
        return _Box(node.name, [node.name], "trimmed", region, node.name, _short_op(node.op),
                    f"{node.name}: {node.op}\n{why}")
    return _Box(node.name, [node.name], "eager", None, node.name, _short_op(node.op), title)


def _collapsed(run: list[NodeInfo]) -> _Box:
    ops = Counter(_short_op(n.op) for n in run)
    summary = ", ".join(f"{op}\u00d7{c}" if c > 1 else op for op, c in ops.most_common())
    lines = [f"{n.name}: {n.op} ({n.reason or 'eager'})" for n in run[:40]]
    if len(run) > 40:
        lines.append(f"... and {len(run) - 40} more")
    title = f"{len(run)} eager nodes, {run[0].name} .. {run[-1].name}\n" + "\n".join(lines)
    return _Box(f"eager-run-{run[0].name}", [n.name for n in run], "collapsed", None,
                f"{len(run)} eager nodes", summary, title)


def _eager_boxes(nodes: list[NodeInfo], trims: dict[str, tuple[int, str]], kept: dict[str, str],
                 max_eager_run: int) -> list[_Box]:
    """Trimmed nodes stay visible; runs of more than `max_eager_run` other nodes become one box."""
    boxes: list[_Box] = []
    run: list[NodeInfo] = []

    def flush() -> None:
        if len(run) > max_eager_run:
            boxes.append(_collapsed(run))
        else:
            boxes.extend(_node_box(n, trims, kept) for n in run)
        run.clear()

    for node in nodes:
        box = _node_box(node, trims, kept)
        if box.kind == "trimmed":
            flush()
            boxes.append(box)
        else:
            run.append(node)
    flush()
    return boxes


def _boundary_reasons(plan: GraphPlan) -> dict[tuple[str, str], str]:
    """(producer, consumer) -> the boundary note of fuse.py that explains that edge."""
    reasons: dict[tuple[str, str], str] = {}
    for region in plan.regions:
        for note in region.boundary:
            edge, _, _ = note.partition(": ")
            producer, _, consumer = edge.partition(" -> ")
            reasons.setdefault((producer, consumer), f"{region.name}: {note}")
    return reasons


def _segments(region: RegionPlan) -> str:
    if region.kernels:
        if region.segments is None:
            return f"nvFuser: {len(region.kernels)} kernel(s)"
        return f"nvFuser: {region.segments} segment(s)"
    if region.profile_source:
        return "nvFuser segments: unknown"
    return ""


def _region_header(region: Optional[RegionPlan], band: _Band) -> tuple[str, str]:
    if region is None:
        return f"region {band.region}", ""
    text = (f"{region.name} \u00b7 {len(region.nodes)} nodes ({len(region.compute_ops)} compute) \u00b7 "
            f"{region.executor}")
    title = [f"{region.name}: executor {region.executor}" + (f" ({region.executor_reason})" if region.executor_reason else "")]
    title += [f"trimmed: {len(region.leading)} leading, {len(region.trailing)} trailing"]
    title += [f"boundary: {b}" for b in region.boundary]
    return text, "\n".join(title)


def _box_svg(box: _Box) -> str:
    classes = {"region": "node region", "eager": "node eager", "trimmed": "node eager trimmed",
               "collapsed": "node eager collapsed"}[box.kind]
    if box.kind == "region":
        fill, stroke = region_color(box.region or 0)
        dash = ""
    elif box.kind == "trimmed":
        fill = "#f7f7f7"
        stroke = region_color(box.region)[1] if box.region is not None else EAGER_STROKE
        dash = ' stroke-dasharray="5 3"'
    else:
        fill, stroke, dash = EAGER_FILL, EAGER_STROKE, ""
    attrs = f'class="{classes}" data-node="{_esc(box.key)}"'
    if box.region is not None:
        attrs += f' data-region="{box.region}"'
    if box.kind == "collapsed":
        attrs += f' data-count="{len(box.names)}" data-nodes="{_esc(" ".join(box.names))}"'
    width = 2 if box.kind == "collapsed" else 1.2
    return (
        f'<g {attrs}><title>{_esc(box.title)}</title>'
        f'<rect x="{box.x:.0f}" y="{box.y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="4" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="{width}"{dash}/>'
        f'<text x="{box.x + 5:.0f}" y="{box.y + 13:.0f}" font-weight="bold">{_esc(_fit(box.label))}</text>'
        f'<text x="{box.x + 5:.0f}" y="{box.y + 26:.0f}" fill="#333">{_esc(_fit(box.sub))}</text></g>'
    )


def _legend(marker: str) -> list[str]:
    items = []
    x = PAD
    for label, fill, stroke, dash in (("region node", REGION_COLORS[0][0], REGION_COLORS[0][1], ""),
                                      ("eager", EAGER_FILL, EAGER_STROKE, ""),
                                      ("trimmed bookend", "#f7f7f7", REGION_COLORS[0][1], ' stroke-dasharray="5 3"'),
                                      ("eager run (collapsed)", EAGER_FILL, EAGER_STROKE, "")):
        items.append(f'<rect x="{x}" y="{PAD}" width="18" height="12" rx="2" fill="{fill}" stroke="{stroke}"{dash}/>'
                     f'<text x="{x + 22}" y="{PAD + 10}">{_esc(label)}</text>')
        x += 28 + 7 * len(label)
    items.append(f'<line x1="{x}" y1="{PAD + 6}" x2="{x + 24}" y2="{PAD + 6}" stroke="{EDGE_COLOR}" '
                 f'marker-end="url(#{marker})"/><text x="{x + 30}" y="{PAD + 10}">boundary (hover: why)</text>')
    return ['<g class="legend">' + "".join(items) + "</g>"]


def render_plan_svg(plan: GraphPlan, columns: int = 6, max_eager_run: int = 4) -> str:
    """SVG of one graph's plan: region bands, eager bands, trimmed nodes, boundary edges."""
    columns = max(1, columns)
    width = max(LEGEND_W, 2 * PAD + columns * BOX_W + (columns - 1) * GAP)
    uid = f"{plan.kind}-{plan.graph_id}"
    marker = f"nvf-arrow-{uid}"
    regions = {r.id: r for r in plan.regions}
    trims, kept = _trims(plan), _kept(plan)

    body: list[str] = []
    y = PAD + LEGEND_H
    if plan.planning_error or not plan.nodes:
        message = f"planning failed: {plan.planning_error}" if plan.planning_error else "no nodes"
        body.append(f'<text class="message" x="{PAD}" y="{y + 14}">{_esc(_fit(message, 150))}</text>')
        y += 24
    boxes: dict[str, _Box] = {}
    bands = _bands(plan)
    for band in bands:
        region = regions.get(band.region) if band.region is not None else None
        if band.region is not None:
            band.boxes = [_node_box(n, trims, kept) for n in band.nodes]
        else:
            band.boxes = _eager_boxes(band.nodes, trims, kept, max_eager_run)
        segments = _segments(region) if region is not None else ""
        top = HEADER_H + (SEGMENT_H if segments else 0)
        rows = (len(band.boxes) + columns - 1) // columns
        band.y, band.height = y, top + rows * (BOX_H + GAP) + GAP / 2
        for i, box in enumerate(band.boxes):
            box.x = PAD + (i % columns) * (BOX_W + GAP)
            box.y = y + top + (i // columns) * (BOX_H + GAP)
            for name in box.names:
                boxes[name] = box
        y += band.height + GAP

    for band in bands:
        body.append(_band_svg(band, regions.get(band.region) if band.region is not None else None, width))
    body.extend(_edges_svg(plan, boxes, marker))

    height = y + PAD
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dynamo-nvf-graph" data-graph="{_esc(uid)}" '
        f'width="{width}" height="{height:.0f}" viewBox="0 0 {width} {height:.0f}" '
        f'font-family="monospace" font-size="10">'
        f'<title>{_esc(plan.kind)} graph {plan.graph_id}: {len(plan.regions)} region(s)</title>'
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{EDGE_COLOR}"/></marker></defs>'
    )
    return "\n".join([head, *_legend(marker), *body, "</svg>"])


def _band_svg(band: _Band, region: Optional[RegionPlan], width: float) -> str:
    x, w = PAD / 2, width - PAD
    parts: list[str] = []
    if band.region is None:
        parts.append(f'<g class="band eager"><rect x="{x}" y="{band.y:.0f}" width="{w}" height="{band.height:.0f}" '
                     f'rx="6" fill="#fafafa" stroke="#cccccc" stroke-dasharray="2 3"/>'
                     f'<text x="{PAD}" y="{band.y + 14:.0f}" fill="#666">eager (PyTorch)</text></g>')
    else:
        fill, stroke = region_color(band.region)
        text, title = _region_header(region, band)
        parts.append(f'<g class="band region" data-region="{band.region}"><title>{_esc(title)}</title>'
                     f'<rect x="{x}" y="{band.y:.0f}" width="{w}" height="{band.height:.0f}" rx="6" fill="{fill}" '
                     f'fill-opacity="0.45" stroke="{stroke}"/>'
                     f'<text x="{PAD}" y="{band.y + 14:.0f}" font-weight="bold">{_esc(_fit(text, 140))}</text>')
        if region is not None and _segments(region):
            parts.append(_segments_svg(region, band.y + HEADER_H))
        parts.append("</g>")
    parts.extend(_box_svg(box) for box in band.boxes)
    return "".join(parts)


def _segments_svg(region: RegionPlan, y: float) -> str:
    """One chip per nvFuser segment (scheduler; kernel and times on hover)."""
    parts = [f'<g class="segments" data-count="{len(region.kernels)}">'
             f'<text x="{PAD}" y="{y + 12:.0f}">{_esc(_segments(region))}</text>']
    x = PAD + 7 * len(_segments(region)) + 10
    for k in region.kernels:
        label = f"{k.segment_id if k.segment_id is not None else '?'}: {k.scheduler or 'segment'}"
        title = [f"segment {k.segment_id}: scheduler {k.scheduler}",
                 f"kernel {k.name}" if k.name else "no kernel launched (evaluated on the host)"]
        if k.time_ms is not None:
            title.append(f"time {k.time_ms:.3f} ms")
        if k.compile_time_ms is not None:
            title.append(f"compile {k.compile_time_ms:.3f} ms")
        w = 6 * len(label) + 10
        dash = "" if k.name else ' stroke-dasharray="2 2"'  # host-evaluated: no kernel
        tooltip = "\n".join(title)
        parts.append(f'<g class="segment"><title>{_esc(tooltip)}</title>'
                     f'<rect x="{x:.0f}" y="{y + 2:.0f}" width="{w}" height="14" rx="7" fill="#ffffff" '
                     f'stroke="#555555"{dash}/><text x="{x + 5:.0f}" y="{y + 12:.0f}">{_esc(label)}</text></g>')
        x += w + 6
    parts.append("</g>")
    return "".join(parts)


def _edges_svg(plan: GraphPlan, boxes: dict[str, _Box], marker: str) -> list[str]:
    """Edges that cross a band and touch a region, with the boundary note as their title."""
    reasons = _boundary_reasons(plan)
    seen: set[tuple[str, str]] = set()
    parts: list[str] = []
    for node in plan.nodes:
        dst = boxes.get(node.name)
        for producer in node.inputs:
            src = boxes.get(producer)
            if src is None or dst is None or src is dst:
                continue
            if src.kind != "region" and dst.kind != "region":
                continue  # eager to eager: not a region boundary
            if src.kind == dst.kind == "region" and src.region == dst.region:
                continue
            if (src.key, dst.key) in seen:
                continue
            seen.add((src.key, dst.key))
            why = reasons.get((producer, node.name)) or _edge_reason(producer, node.name, src, dst)
            curve = _curve(src, dst)
            parts.append(
                f'<g class="edge boundary" data-from="{_esc(producer)}" data-to="{_esc(node.name)}">'
                f'<title>{_esc(why)}</title>'
                f'<path d="{curve}" fill="none" stroke="{EDGE_COLOR}" stroke-width="1.2" stroke-opacity="0.75" '
                f'marker-end="url(#{marker})"/>'
                # a wide invisible stroke, so the tooltip is easy to hover
                f'<path d="{curve}" fill="none" stroke="transparent" stroke-width="8"/></g>'
            )
    return parts


def _curve(src: _Box, dst: _Box) -> str:
    """Bottom of the producer to the top of the consumer; top to bottom when the consumer is above."""
    sx, dx = src.x + BOX_W / 2, dst.x + BOX_W / 2
    if dst.y >= src.y + BOX_H:
        sy, dy, sign = src.y + BOX_H, dst.y, 1
    else:
        sy, dy, sign = src.y, dst.y + BOX_H, -1
    bend = sign * max(24.0, abs(dy - sy) / 3)
    return f"M {sx:.0f} {sy:.0f} C {sx:.0f} {sy + bend:.0f}, {dx:.0f} {dy - bend:.0f}, {dx:.0f} {dy:.0f}"


def _edge_reason(producer: str, consumer: str, src: _Box, dst: _Box) -> str:
    if src.kind == dst.kind == "region":
        return f"{producer} -> {consumer}: region {src.region} feeds region {dst.region}"
    if src.kind == "region":
        return f"{producer} -> {consumer}: leaves region {src.region} for eager ({dst.title.splitlines()[-1]})"
    return f"{producer} -> {consumer}: enters region {dst.region} from eager ({src.title.splitlines()[-1]})"
