"""explain()'s picture of each graph: one <svg> per graph in the HTML, region-coloured nodes, trimmed
and eager nodes marked, boundary edges with their reason, long eager runs collapsed."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import torch

import dynamo_nvf
import programs
from dynamo_nvf.plan import Decision, GraphPlan, KernelInfo, NodeInfo, RegionPlan
from dynamo_nvf.plan_svg import region_color, render_plan_svg

NS = "{http://www.w3.org/2000/svg}"


class _SvgCount(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.svgs = 0

    def handle_starttag(self, tag, attrs):
        self.svgs += tag == "svg"


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML, or this raises


def _groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{NS}g") if cls in g.get("class", "").split()]


def _title(element: ET.Element) -> str:
    title = element.find(f"{NS}title")
    return "" if title is None else title.text or ""


def _nodes(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-node"): g for g in _groups(root, "node")}


def _check_graph(plan: GraphPlan, root: ET.Element) -> None:
    """Every node of the plan is drawn once, with its region's colour or marked eager/trimmed."""
    nodes = _nodes(root)
    drawn: list[str] = []
    for key, g in nodes.items():
        classes = g.get("class").split()
        drawn.extend(g.get("data-nodes").split() if "collapsed" in classes else [key])
    assert sorted(drawn) == sorted(n.name for n in plan.nodes)
    for region in plan.regions:
        fill, _ = region_color(region.id)
        (band,) = [b for b in _groups(root, "band") if b.get("data-region") == str(region.id)]
        assert region.name in "".join(band.itertext())
        for name in region.nodes:
            g = nodes[name]
            assert g.get("class").split() == ["node", "region"] and g.get("data-region") == str(region.id)
            assert g.find(f"{NS}rect").get("fill") == fill
            assert f"region {region.id}" in _title(g)
        for d in region.leading + region.trailing:
            if d.action in ("trimmed", "duplicated"):
                g = nodes[d.node]
                assert "trimmed" in g.get("class").split() and g.get("data-region") == str(region.id)
                assert g.find(f"{NS}rect").get("stroke-dasharray")  # dashed outline
                assert d.reason in _title(g)
    for node in plan.eager_nodes:
        if node.name in nodes and not node.reason.startswith("trimmed"):
            g = nodes[node.name]
            assert g.get("class").split() == ["node", "eager"]
            assert node.reason in _title(g)
    for edge in _groups(root, "boundary"):
        assert " -> " in _title(edge) and edge.get("data-from") and edge.get("data-to")


def test_training_report_html_has_one_svg_per_graph():
    model = programs.TransformerBlock(32, 4)
    report = dynamo_nvf.explain(model, torch.randn(2, 8, 32, requires_grad=True))
    html = report._repr_html_()
    counter = _SvgCount()
    counter.feed(html)
    assert counter.svgs == len(report.graphs) == 2
    svgs = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    for i, (plan, svg) in enumerate(zip(report.graphs, svgs)):
        assert svg == str(report.graph_svg(i))
        root = _parse(svg)
        _check_graph(plan, root)
        assert {g.get("data-region") for g in _groups(root, "region") if "node" in g.get("class")} == \
            {str(r.id) for r in plan.regions}
        assert _groups(root, "trimmed") and _groups(root, "boundary")
    assert report.graph_svg(1)._repr_svg_() == str(report.graph_svg(1))


def test_seed000_gelu_picture_shows_the_bookends_and_why():
    report = dynamo_nvf.explain(programs.seed000_gelu, torch.randn(64, 16))
    (plan,) = report.graphs
    root = _parse(report.graph_svg(0))
    _check_graph(plan, root)
    nodes = _nodes(root)
    assert "trimmed" in nodes["view"].get("class") and "trimmed" in nodes["view_1"].get("class")
    edges = {(e.get("data-from"), e.get("data-to")): _title(e) for e in _groups(root, "boundary")}
    (region,) = plan.regions
    into = [why for (src, dst), why in edges.items() if src == "view" and dst in region.nodes]
    out_of = [why for (src, dst), why in edges.items() if dst == "view_1" and src in region.nodes]
    assert into and "producer stays in eager (trimmed (leading)" in into[0]
    assert out_of and "consumer stays in eager (trimmed (trailing)" in out_of[0]


def _matmul_chain(x, w):
    y = torch.relu(x) * 2
    y = y @ w @ w @ w @ w @ w
    return torch.sigmoid(y) + 1


def test_long_eager_runs_collapse_into_one_box():
    report = dynamo_nvf.explain(_matmul_chain, torch.randn(8, 8), torch.randn(8, 8))
    (plan,) = report.graphs
    mms = [n.name for n in plan.eager_nodes if n.op == "aten.mm.default"]
    assert len(mms) == 5 and len(plan.regions) == 2
    root = _parse(report.graph_svg(0))
    _check_graph(plan, root)
    (run,) = _groups(root, "collapsed")
    assert run.get("data-nodes").split() == mms and run.get("data-count") == "5"
    assert "5 eager nodes" in "".join(run.itertext())
    assert "matmul: runs in ATen (cuBLAS)" in _title(run)
    edges = {(e.get("data-from"), e.get("data-to")) for e in _groups(root, "boundary")}
    assert (mms[-1], plan.regions[1].nodes[0]) in edges  # into the collapsed box's consumer region
    # Not collapsed when the limit allows the run.
    root = _parse(report.graph_svg(0, max_eager_run=5))
    assert not _groups(root, "collapsed")
    assert all(m in _nodes(root) for m in mms)


def test_text_is_escaped_and_segments_are_drawn():
    nasty = "bad <op> & \"quotes\" 'too'"
    region = RegionPlan(id=0, name="nvf_region_0", ops=["aten.mul.Tensor", "aten.sum.dim_IntList"],
                        nodes=["mul", "sum_1"], boundary=[f"x_view -> mul: producer stays in eager ({nasty})"],
                        leading=[Decision("x_view", "aten.view.default", "trimmed", "zero-copy alias")],
                        executor="nvfuser", segments=2, profile_source="nvfuser_direct.PythonProfiler",
                        kernels=[KernelInfo("nvfuser_pointwise_f0_c1", "pointwise", 0.01, 5.0, 0),
                                 KernelInfo("nvfuser_reduction_f0_c1", "reduction", 0.02, 6.0, 1)])
    plan = GraphPlan(kind="forward", graph_id=7, regions=[region], nodes=[
        NodeInfo("x_view", "aten.view.default", None, "trimmed (leading): zero-copy alias", inputs=["x"]),
        NodeInfo("mul", "aten.mul.Tensor", 0, inputs=["x_view"]),
        NodeInfo("sum_1", "aten.sum.dim_IntList", 0, inputs=["mul"]),
        NodeInfo("weird", "aten.custom.default", None, nasty, inputs=["sum_1"]),
    ])
    root = _parse(render_plan_svg(plan))
    _check_graph(plan, root)
    assert nasty in _title(_nodes(root)["weird"])
    edges = {(e.get("data-from"), e.get("data-to")): _title(e) for e in _groups(root, "boundary")}
    assert nasty in edges[("x_view", "mul")]
    assert "leaves region 0" in edges[("sum_1", "weird")]
    (segments,) = _groups(root, "segments")
    assert segments.get("data-count") == "2"
    chips = [_title(g) for g in _groups(root, "segment")]
    assert len(chips) == 2 and "scheduler pointwise" in chips[0] and "nvfuser_reduction_f0_c1" in chips[1]


def test_a_graph_that_failed_planning_still_gets_a_picture():
    plan = GraphPlan(kind="backward", graph_id=3, planning_error="RuntimeError: <boom>")
    root = _parse(render_plan_svg(plan))
    assert "planning failed: RuntimeError: <boom>" in "".join(root.itertext())
    assert not _nodes(root)
