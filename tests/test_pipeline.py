"""The declared pass pipeline (dynamo_nvf/pipeline.py): its entries, the loop's records, and
explain()'s text and dict listing per graph the passes run, skipped and what each changed."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
import torch

import dynamo_nvf
from dynamo_nvf import nvf as nvf_env
from dynamo_nvf import pipeline
from dynamo_nvf.pipeline import DYNAMO_PASSES, GRAPH_PASSES, INSTALLED_PASSES, JOINT_PASSES, STAGES, Pass, PassContext
from dynamo_nvf.settings import Settings


class Block(torch.nn.Module):
    """Explicit attention (fuse_attention rewrites it) and an f32 linear + ReLU (unfuse_addmm_bias
    moves its bias into the ReLU's region): two passes that leave notes."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(16), dim=-1) @ v
        return torch.relu(self.lin(a)) * 2


def _explain(options: dict | None = None) -> dynamo_nvf.Report:
    torch.manual_seed(0)
    inputs = [torch.randn(2, 8, 16) for _ in range(3)]
    return dynamo_nvf.explain(Block(), *inputs, options=options)


def test_declared_passes_name_real_options_once():
    names = [p.name for passes in STAGES.values() for p in passes]
    assert len(names) == len(set(names))
    options = {f.name for f in fields(Settings)}
    for p in (*DYNAMO_PASSES, *JOINT_PASSES, *GRAPH_PASSES, *INSTALLED_PASSES):
        assert p.option is None or p.option in options, p.name
        assert p.kinds <= pipeline.GRAPH_KINDS | {"dynamo", "joint"}
    # the order plan_graph ran them in: partition after the pre-partition rewrites, fuse after bookend
    order = [p.name for p in GRAPH_PASSES]
    assert order.index("partition_regions") < order.index("split_norm_backward") < order.index("bookend_regions")
    assert order[-4:] == ["bookend_regions", "fuse_regions", "assign_fast_math", "reinplace_fresh_accumulations"]
    assert {row["name"] for row in pipeline.describe()} == set(names)


def test_skip_reasons_follow_kind_mode_and_option():
    hoist = next(p for p in GRAPH_PASSES if p.name == "hoist_permutes")
    saved_views = next(p for p in JOINT_PASSES if p.name == "recompute_saved_views")
    unpermute = next(p for p in GRAPH_PASSES if p.name == "unpermute_reductions")
    on = Settings()
    assert hoist.skip_reason(PassContext(on, "forward")) == ""
    assert hoist.skip_reason(PassContext(on, "backward")) == "not for backward graphs"
    assert hoist.skip_reason(PassContext(Settings(hoist_permutes=False), "forward")) == "hoist_permutes=False"
    assert saved_views.skip_reason(PassContext(on, "joint")) == "only with CUDA graphs"
    assert saved_views.skip_reason(PassContext(Settings(cuda_graphs=True), "joint")) == ""
    assert unpermute.skip_reason(PassContext(on, "backward")) == ""
    assert unpermute.skip_reason(PassContext(Settings(unpermute_reductions=0), "backward")) == "unpermute_reductions=0"


def test_run_passes_records_notes_changes_and_skips():
    def noting(gm, ctx):
        gm.meta.setdefault(pipeline.NOTES_KEY, []).append("noted")
        return gm

    def renaming(gm, ctx):
        node = next(n for n in gm.graph.nodes if n.op == "call_function")
        node.target = torch.ops.aten.mul.Tensor
        gm.recompile()
        return gm

    gm = torch.fx.symbolic_trace(lambda x: torch.ops.aten.add.Tensor(x, x))
    gm.meta[pipeline.NOTES_KEY] = ["earlier"]
    passes = (Pass("noting", noting), Pass("renaming", renaming),
              Pass("off", renaming, option="hoist_slices"), Pass("backward_only", renaming, frozenset({"backward"})))
    result = pipeline.run_passes("graph", passes, gm, PassContext(Settings(hoist_slices=False), "forward"))
    assert result.notes == ["earlier", "noted"]
    assert pipeline.NOTES_KEY not in result.gm.meta
    got = [(r.name, r.ran, r.changed, r.notes, r.skipped) for r in result.records]
    assert got == [("noting", True, False, 1, ""), ("renaming", True, True, 0, ""),
                   ("off", False, False, 0, "hoist_slices=False"), ("backward_only", False, False, 0, "not for forward graphs")]


def _writes_a_symbolic_size(gm, ctx):
    """A broken pass: the first op's second operand becomes a SymInt object, not the node computing it."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.args = (node.args[0], ShapeEnv().create_unbacked_symint())
    gm.recompile()
    return gm


def test_a_pass_that_writes_a_symbolic_size_into_arguments_is_caught_at_planning():
    gm = torch.fx.symbolic_trace(lambda x: torch.ops.aten.add.Tensor(x, x))
    with pytest.raises(pipeline.PassError, match="pass broken put the symbolic value"):
        pipeline.run_passes("graph", (Pass("broken", _writes_a_symbolic_size),), gm, PassContext(Settings(), "forward"))


def test_a_failing_joint_pass_leaves_the_joint_graph_as_it_was_with_one_warning(monkeypatch):
    monkeypatch.setattr(pipeline, "JOINT_PASSES", (Pass("broken", _writes_a_symbolic_size, frozenset({"joint"})),))
    joint = torch.fx.symbolic_trace(lambda x: torch.ops.aten.add.Tensor(x, x))
    code = joint.code
    with pytest.warns(RuntimeWarning, match="joint-graph passes failed"):
        result = pipeline.run_joint_passes(joint, Settings())
    assert result.gm is joint and joint.code == code
    with pytest.raises(pipeline.PassError):
        pipeline.run_joint_passes(joint, Settings(strict=True))


def test_explain_lists_the_passes_run_per_graph():
    report = _explain()
    assert [g.kind for g in report.graphs] == ["forward", "backward"]
    text = str(report)
    as_dict = report.to_dict()
    declared = [p.name for p in (*DYNAMO_PASSES, *JOINT_PASSES, *GRAPH_PASSES, *INSTALLED_PASSES)]
    for graph, graph_dict in zip(report.graphs, as_dict["graphs"]):
        assert [p.name for p in graph.passes] == declared
        assert [p["name"] for p in graph_dict["passes"]] == declared
        records = {p["name"]: p for p in graph_dict["passes"]}
        # every note in the plan's rewrites is counted against the pass that left it
        assert sum(p["notes"] for p in graph_dict["passes"]) == len(graph_dict["rewrites"])
        assert records["fuse_attention"]["ran"] and records["fuse_attention"]["changed"]
        assert records["fuse_attention"]["notes"] == 1
        for name in ("partition_regions", "bookend_regions", "fuse_regions"):
            assert records[name]["ran"] and records[name]["changed"], name
        assert records["recompute_saved_views"]["skipped"] == "only with CUDA graphs"
        assert all(p["ms"] >= 0 for p in graph_dict["passes"])
    forward, backward = ({p["name"]: p for p in g["passes"]} for g in as_dict["graphs"])
    assert forward["unfuse_addmm_bias"]["notes"] == 1 and forward["unfuse_addmm_bias"]["changed"]
    assert forward["hoist_permutes"]["ran"] and backward["hoist_permutes"]["skipped"] == "not for backward graphs"
    for name in declared:
        assert name in text
    assert "skipped (not for backward graphs)" in text
    assert "passes" in report._repr_html_()
    assert forward["reinterpret_views"]["ran"]


def test_a_disabled_option_marks_its_pass_skipped():
    report = _explain({"unfuse_addmm_bias": False, "fuse_attention": False, "lean_views": False})
    forward = {p["name"]: p for p in report.to_dict()["graphs"][0]["passes"]}
    assert not forward["unfuse_addmm_bias"]["ran"]
    assert forward["unfuse_addmm_bias"]["skipped"] == "unfuse_addmm_bias=False"
    assert forward["fuse_attention"]["skipped"] == "fuse_attention=False"
    assert forward["reinterpret_views"]["skipped"] == "lean_views=False"
    assert forward["hoist_permutes"]["ran"]
    text = str(report)
    assert "skipped (unfuse_addmm_bias=False)" in text and "skipped (fuse_attention=False)" in text
    assert not report.graphs[0].rewrites


def test_inference_graphs_see_no_joint_stage():
    torch.manual_seed(0)
    block = Block().eval().requires_grad_(False)
    report = dynamo_nvf.explain(block, *[torch.randn(2, 8, 16) for _ in range(3)])
    (graph,) = report.graphs
    assert graph.kind == "inference"
    assert {p.stage for p in graph.passes} == {"dynamo", "graph", "installed"}
    assert next(p for p in graph.passes if p.name == "channels_last_patch_inputs").ran


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_cuda_graph_passes_follow_the_mode(cuda_graphs):
    report = _explain({"cuda_graphs": cuda_graphs})
    for graph in report.graphs:
        records = {p.name: p for p in graph.passes}
        assert records["recompute_saved_views"].ran == cuda_graphs
        assert records["channels_last_conv_weights"].ran  # computed weights in either mode


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_gpu_runs_the_passes_planned_on_the_cpu():
    """The pipeline runs the same passes, with the same effect, on a GPU as planned on the CPU (the
    premise of tests/test_plans_golden.py), and the regions then run on nvFuser."""
    def records(device: str) -> list[tuple]:
        torch.manual_seed(0)
        block = Block().to(device)
        inputs = [torch.randn(2, 8, 16, device=device) for _ in range(3)]
        report = dynamo_nvf.explain(block, *inputs, profiler="none",
                                    options={"plan_cpu_as_cuda": True} if device == "cpu" else {})
        if device == "cuda":
            assert all(r.executor == "nvfuser" for g in report.graphs for r in g.regions)
        return [(g.kind, p.name, p.ran, p.skipped, p.changed, p.notes) for g in report.graphs for p in g.passes]

    assert records("cuda") == records("cpu")
