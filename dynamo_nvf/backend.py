"""The `nvf_bookend` torch.compile backend: Dynamo graph -> aot_autograd -> planned, fused aten graphs.

Each aten graph (forward, backward or inference) is partitioned into nvFuser regions, trimmed by the
bookend pass, fused into submodules, and each submodule call is replaced by a RegionRuntime.
"""

from __future__ import annotations

import functools
import warnings
import itertools
import logging
import time
from typing import Any, Callable, Optional, Sequence

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.fx import GraphModule

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.decompositions import table_for
from dynamo_nvf.passes import NOTES_KEY, add_note
from dynamo_nvf.passes.fuse import PLAN_KEY
from dynamo_nvf.passes.saved_views import RECOMPUTED_VIEWS_KEY
from dynamo_nvf.pipeline import (PASSES_KEY, rewritable_copy, run_dynamo_passes, run_graph_passes,
                                 run_installed_passes, run_joint_passes)
from dynamo_nvf.plan import GraphPlan, PassRecord, region_label
from dynamo_nvf.passes.conv_layout import adopt_input_strides
from dynamo_nvf.plan_text import render_plan_text
from dynamo_nvf.runtime.boxed_forward import boxed
from dynamo_nvf.runtime.cudagraphs import CudaGraphs
from dynamo_nvf.runtime.lean_forward import compiled_forward
from dynamo_nvf.runtime.region import RegionRuntime
from dynamo_nvf.runtime.views import view_replay
from dynamo_nvf.settings import Settings

log = logging.getLogger("dynamo_nvf")

_graph_ids = itertools.count()
_recorder_stack: list["_Recorder"] = []


def plan_graph(gm: GraphModule, settings: Settings, kind: str = "inference", graph_id: int = 0) -> GraphModule:
    """Runs the declared aten-graph passes (pipeline.GRAPH_PASSES: partition, bookend, fuse and the
    rewrites around them); the GraphPlan ends up in `gm.meta["nvf_plan"]`."""
    return run_graph_passes(gm, settings, kind, graph_id)


def install_runtimes(gm: GraphModule, plan: GraphPlan, settings: Settings) -> GraphModule:
    """Replaces each `call_module nvf_region_i` with a call of its RegionRuntime."""
    regions = {r.name: r for r in plan.regions}
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and node.target in regions:
            region = regions[node.target]
            runtime = RegionRuntime(getattr(gm, node.target), region, settings, region_label(plan, region))
            runtime.__name__ = node.target  # read by FX code generation
            node.op = "call_function"
            node.target = runtime
    gm.recompile()
    return gm


def partition_joint_graph(joint: GraphModule, joint_inputs: Sequence[Any], settings: Optional[Settings] = None,
                          **kwargs: Any) -> Any:
    """aot_autograd's partition_fn: the joint-graph passes (pipeline.JOINT_PASSES), then torch's
    min-cut partitioner.

    Under CUDA graphs the forward saves no view (passes/saved_views.py): cudagraph trees rebuild every
    output that shares a storage with another on each replay.

    Fewer saved tensors were tried and measured no better (commit eb47355, 2026-11-24, reverted):
    tagging each norm's mean and reciprocal std MUST_RECOMPUTE took the forward outputs of 2-layer
    training steps from 66 to 54 (BERT-style), 58 to 48 (GPT-2-style), 63 to 58 (LLaMA-style), but
    under CUDA graphs on an H100 (perf.interleave, 5 rounds) no step got measurably faster than with
    them saved, while GPU time grew 2-4% on the LLaMA-, ViT- and ConvNeXt-style steps and each
    recomputed RMSNorm backward became two kernels. A replay's host time is not in the saved count.
    """
    stage = run_joint_passes(joint, settings if settings is not None else Settings())
    joint = stage.gm
    forward, backward = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
    tagged = joint.meta.pop(RECOMPUTED_VIEWS_KEY, 0)
    if tagged:
        add_note(backward, f"recompute_saved_views: {tagged} view node(s) of the forward recomputed here "
                           f"where the backward reads them; the forward saves their bases (CUDA graphs)")
    for graph in (forward, backward):
        graph.meta[PASSES_KEY] = list(stage.records)
        graph.meta[NOTES_KEY] = list(joint.meta.get(NOTES_KEY, [])) + graph.meta.get(NOTES_KEY, [])
    return forward, backward


class _Recorder:
    """Collects the GraphPlans compiled while active (explain() uses one)."""

    def __init__(self) -> None:
        self.plans: list[GraphPlan] = []
        self.graph_modules: list[GraphModule] = []


def _active_recorders() -> list[_Recorder]:
    # Process-wide, not thread-local: autograd compiles and runs backward graphs on its own thread.
    return _recorder_stack


class recording:
    """Context manager: records every graph plan compiled inside it."""

    def __enter__(self) -> _Recorder:
        self.recorder = _Recorder()
        _active_recorders().append(self.recorder)
        return self.recorder

    def __exit__(self, *exc: Any) -> None:
        _active_recorders().remove(self.recorder)


def _summary(plan: GraphPlan) -> str:
    fused = sum(len(r.nodes) for r in plan.regions)
    leading = sum(len(r.leading) for r in plan.regions)
    trailing = sum(len(r.trailing) for r in plan.regions)
    return (
        f"{plan.kind} graph {plan.graph_id}: {len(plan.regions)} region(s), {fused} node(s) fused, "
        f"{len(plan.eager_nodes)} eager, trimmed {leading} leading / {trailing} trailing"
    )


class _GraphCompiler:
    """Compiles the aten graphs aot_autograd hands over for one Dynamo graph."""

    def __init__(self, settings: Settings, num_dynamo_inputs: int = 0) -> None:
        self.settings = settings
        self.plans: list[GraphPlan] = []
        self.cuda_graphs = CudaGraphs(num_dynamo_inputs, settings.cuda_graph_max_shapes) if settings.cuda_graphs else None
        self.rewrites: list[str] = []  # what the passes on Dynamo's graph changed, shown in each plan
        self.passes: list[PassRecord] = []  # the Dynamo-graph stage's records, shown in each plan

    def __call__(self, gm: GraphModule, example_inputs: Sequence[Any], *, kind: str) -> Callable[..., Any]:
        graph_id = next(_graph_ids)
        # The passes rewrite a copy, so a failure anywhere in planning leaves aot_autograd's graph to run.
        work = rewritable_copy(gm)
        work.meta[NOTES_KEY] = list(gm.meta.get(NOTES_KEY, []))  # the joint-graph passes' notes
        if kind == "backward":  # a forward may save channels-last activations (passes/conv_layout.py)
            work = adopt_input_strides(work, example_inputs)
        earlier = self.passes + list(gm.meta.get(PASSES_KEY, []))  # the Dynamo and joint stages'
        if self.settings.strict:
            plan, forward = self._compile(work, kind, graph_id, earlier)
        else:
            try:
                plan, forward = self._compile(work, kind, graph_id, earlier)
            except Exception as exc:  # planning must never break the user's program
                error = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"dynamo_nvf: planning {kind} graph {graph_id} failed, it runs in eager: {error}",
                              RuntimeWarning, stacklevel=2)
                plan = GraphPlan(kind=kind, graph_id=graph_id, planning_error=error, rewrites=list(self.rewrites),
                                 passes=list(earlier))
                self.plans.append(plan)
                forward = boxed(gm.forward)
        if self.cuda_graphs is None:
            return forward
        return self.cuda_graphs.wrap(gm, forward, example_inputs, kind, plan)

    def _compile(self, gm: GraphModule, kind: str, graph_id: int,
                 earlier: Sequence[PassRecord] = ()) -> tuple[GraphPlan, Callable[..., Any]]:
        start = time.perf_counter()
        gm = plan_graph(gm, self.settings, kind, graph_id)
        plan: GraphPlan = gm.meta[PLAN_KEY]
        plan.rewrites = list(self.rewrites) + plan.rewrites
        plan.passes = list(earlier) + plan.passes
        gm = install_runtimes(gm, plan, self.settings)
        gm = run_installed_passes(gm, self.settings, kind, graph_id)
        # Boxed, each input freed after its last use (runtime/boxed_forward.py); views reinterpreted by
        # lean_views without a dispatch check per view (runtime/lean_forward.py).
        forward = compiled_forward(gm, self.settings.lean_views)
        plan.code = gm.code
        plan.planning_ms = (time.perf_counter() - start) * 1e3
        self.plans.append(plan)
        for recorder in _active_recorders():
            recorder.plans.append(plan)
            recorder.graph_modules.append(gm)
        log.info("dynamo_nvf: %s", _summary(plan))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("dynamo_nvf plan:\n%s", render_plan_text(plan))
        return plan, forward

    def needs_no_fusion(self) -> bool:
        """True when every graph of this program was compiled and none has a region, nor (with
        `padded_matmul_outputs`, which leaves a padded head no copy region) a rewrite to run."""
        kinds = {p.kind for p in self.plans}
        complete = "inference" in kinds or {"forward", "backward"} <= kinds
        rewritten = self.settings.padded_matmul_outputs and any(p.rewrites for p in self.plans)
        return complete and not rewritten and all(not p.regions for p in self.plans)


def nvf_bookend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    options: Optional[dict[str, Any]] = None,
    mode: Optional[str] = None,
) -> Callable[..., Any]:
    """torch.compile backend: `torch.compile(model, backend="nvf_bookend", options={...})`, or with
    `mode="reduce-overhead"` (CUDA graphs; see `Settings.with_mode` for every mode)."""
    settings = Settings.from_options(options).with_mode(mode)
    if not nvf_env.nvfuser_available():
        nvf_env.log_unavailable_once()
    compiler = _GraphCompiler(settings, num_dynamo_inputs=len(example_inputs))
    stage = run_dynamo_passes(gm, settings)
    gm = stage.gm
    compiler.rewrites = gm.meta.get(NOTES_KEY, [])
    compiler.passes = stage.records
    compiled = aot_autograd(
        fw_compiler=functools.partial(compiler, kind="forward"),
        bw_compiler=functools.partial(compiler, kind="backward"),
        inference_compiler=functools.partial(compiler, kind="inference"),
        partition_fn=functools.partial(partition_joint_graph, settings=settings),
        decompositions=table_for(settings),
        keep_inference_input_mutations=True,
    )(gm, example_inputs)
    if compiler.needs_no_fusion():
        # Nothing for nvFuser: skip every wrapper (lone views, seed 003). Views only: one as_strided
        # per output; anything else runs Dynamo's graph as it is, unless CUDA graphs were asked for
        # (the graph may still launch kernels worth replaying).
        replay = view_replay(gm, compiler.plans)
        if replay is not None:
            log.info("dynamo_nvf: no region in this graph; it runs as one as_strided view per output")
            return replay
        if compiler.cuda_graphs is None:
            log.info("dynamo_nvf: no region in this graph; it runs as plain PyTorch")
            return gm.forward
    return compiled
