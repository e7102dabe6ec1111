"""explain() on the CPU: the report shows the plan a GPU would get, as text, HTML and a dict."""

from __future__ import annotations

import json
import logging
from html.parser import HTMLParser

import torch

import dynamo_nvf
import programs
from helpers import cuda_plans


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables = 0
        self.cells: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables += 1
        self._in_cell = tag in ("td", "th")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell and data.strip():
            self.cells.append(data.strip())


def _regions(report, kind=None):
    return [r for g in report.graphs if kind is None or g.kind == kind for r in g.regions]


def test_seed000_gelu_report_matches_the_plan():
    x = torch.randn(8192, 3072)
    report = dynamo_nvf.explain(programs.seed000_gelu, x)
    plan = cuda_plans(programs.seed000_gelu, (8192, 3072))[0]
    assert not report.nvfuser_available and report.unavailable_reason
    (region,) = _regions(report)
    (expected,) = plan.regions
    assert region.ops == expected.ops
    assert [d.node for d in region.leading] == [d.node for d in expected.leading] == ["view"]
    assert [d.node for d in region.trailing] == [d.node for d in expected.trailing] == ["view_1"]
    # The region's FX code: its ops and nothing trimmed.
    assert region.fx_code.startswith("def forward(self, view)")
    assert all(f"torch.ops.{op}(" in region.fx_code for op in region.ops)
    assert "aten.view" not in region.fx_code
    text = str(report)
    assert "nothing ran on nvFuser" in text
    assert "trimmed (leading)" in text and "zero-copy alias of a region input" in text
    d = report.to_dict()
    json.dumps(d)
    g = d["graphs"][0]
    assert g["kind"] == "inference"
    assert g["regions"][0]["ops"] == expected.ops
    assert [x["node"] for x in g["regions"][0]["leading"]] == ["view"]
    assert {"id", "ops", "leading", "trailing", "executor", "kernels"} <= set(g["regions"][0])
    assert all({"op", "reason"} <= set(e) for e in g["eager_nodes"])


def test_seed000_transpose_and_metadata_only_reports():
    report = dynamo_nvf.explain(programs.seed000_transpose, torch.randn(768, 128, 64))
    (region,) = _regions(report)
    assert region.ops == ["aten.clone.default"]
    assert [d.op for d in region.leading] == ["aten.view.default", "aten.permute.default"]
    reasons = {n["op"]: n["reason"] for g in report.to_dict()["graphs"] for n in g["eager_nodes"]}
    assert reasons["aten.permute.default"].startswith("trimmed (leading)")
    report = dynamo_nvf.explain(programs.metadata_only, torch.randn(64, 32))
    assert _regions(report) == []


def test_transformer_block_training_report():
    model = programs.TransformerBlock(32, 4)
    x = torch.randn(2, 8, 32, requires_grad=True)
    report = dynamo_nvf.explain(model, x)
    kinds = [g.kind for g in report.graphs]
    assert kinds == ["forward", "backward"]
    forward_plan, backward_plan = cuda_plans(programs.TransformerBlock(32, 4), (2, 8, 32), train=True, fake=False)
    for got, want in zip(report.graphs, (forward_plan, backward_plan)):
        assert [r.ops for r in got.regions] == [r.ops for r in want.regions]
        assert [[d.node for d in r.leading] for r in got.regions] == [[d.node for d in r.leading] for r in want.regions]
        assert [[d.node for d in r.trailing] for r in got.regions] == [[d.node for d in r.trailing] for r in want.regions]
        assert {n.name: n.reason for n in got.eager_nodes} == {n.name: n.reason for n in want.eager_nodes}
    totals = report.totals()
    assert totals["regions"] == sum(len(g.regions) for g in report.graphs) > 0
    assert totals["nodes_fused"] + totals["nodes_eager"] == sum(len(g.nodes) for g in report.graphs)
    json.dumps(report.to_dict())

    parser = _Tables()
    parser.feed(report._repr_html_())
    assert parser.tables >= 1 + 2 * len(report.graphs)
    assert "aten.var_mean.correction" in parser.cells and "aten.addmm.default" in parser.cells
    assert "region 0" in parser.cells


def test_explain_reports_graph_breaks():
    def fn(x):
        y = torch.sigmoid(x) * 2
        print("graph break")  # noqa: T201 - a deliberate graph break
        return torch.tanh(y) + 1

    report = dynamo_nvf.explain(fn, torch.randn(8, 8))
    assert len(report.graphs) == 2
    assert report.graph_breaks and sum(b.count for b in report.graph_breaks) >= 1
    assert "graph break" in str(report)


def test_explain_twice_compiles_again():
    x = torch.randn(64, 16)
    first = dynamo_nvf.explain(programs.seed000_gelu, x)
    second = dynamo_nvf.explain(programs.seed000_gelu, x)
    assert len(first.graphs) == len(second.graphs) == 1


def test_debug_logging_prints_the_plan(caplog):
    with caplog.at_level(logging.DEBUG, logger="dynamo_nvf"):
        dynamo_nvf.explain(programs.seed000_gelu, torch.randn(64, 16))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "dynamo_nvf plan:" in text and "nvf_region_0" in text


def test_region_kernels_are_read_from_their_profiled_range():
    """profiler="torch": a region's kernels are those torch.profiler linked to its profiler range or
    to ops inside it; scheduler and segment come from nvFuser's kernel names, a library
    kernel of a host-evaluated segment reads "aten", copies are left out, a second call is ignored."""
    from collections import namedtuple
    from types import SimpleNamespace

    from dynamo_nvf.plan import GraphPlan, RegionPlan, region_label
    from dynamo_nvf.plan_text import render_plan_text
    from dynamo_nvf.reporting import TORCH_PROFILE_SOURCE, attach_torch_kernels

    Kernel = namedtuple("Kernel", "name device duration")

    def event(name, kernels=(), children=()):
        return SimpleNamespace(name=name, kernels=list(kernels), cpu_children=list(children))

    graph = GraphPlan(kind="backward", graph_id=7)
    region = RegionPlan(id=0, name="nvf_region_0", ops=[], nodes=[])
    other = RegionPlan(id=1, name="nvf_region_1", ops=[], nodes=[])
    graph.regions = [region, other]
    label = region_label(graph, region)
    assert label == "dynamo_nvf backward graph 7 nvf_region_0"
    persistent = "nvf::nvfuser_inner_persistent_f0_c1_r0_g3(nvf::Tensor<float, 2, 2>, nvf::Tensor<float, 1, 1>)"
    pointwise = "nvf::nvfuser_pointwise_f0_c1_r0_g1(nvf::Tensor<float, 2, 2>)"
    events = [
        event("aten::mm", [Kernel("nvjet_sm90_tst_64x8_TNT", 0, 9.0)]),  # not in any region's range
        event(label, [Kernel(persistent, 0, 4.5), Kernel("Memset (Device)", 0, 1.0)],
              [event(label, [Kernel(persistent, 0, 4.5)]),  # the same launch linked twice
               event("aten::matmul", [], [event("aten::mm", [Kernel("nvjet_sm90_tst_64x8_TNT", 0, 7.0)])]),
               event("aten::empty_strided", [Kernel(pointwise, 0, 2.0)])]),
        event(label, [Kernel(persistent, 0, 99.0)]),  # a second call of the region
    ]
    attach_torch_kernels(events, {region_label(graph, r): r for r in graph.regions})
    assert [(k.segment_id, k.scheduler, k.name) for k in region.kernels] == [
        (1, "pointwise", "nvfuser_pointwise_f0_c1_r0_g1"),
        (3, "inner_persistent", "nvfuser_inner_persistent_f0_c1_r0_g3"),
        (None, "aten", "nvjet_sm90_tst_64x8_TNT"),
    ]
    assert [k.time_ms for k in region.kernels] == [0.002, 0.0045, 0.007]
    assert region.segments is None and region.profile_source == TORCH_PROFILE_SOURCE
    assert other.kernels == [] and other.profile_source == ""
    text = render_plan_text(graph)
    assert f"nvFuser kernels: 3 ({TORCH_PROFILE_SOURCE})" in text and "inner_persistent" in text
