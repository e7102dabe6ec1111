"""The `nvf_bookend` torch.compile backend: Dynamo graph -> aot_autograd -> planned, fused aten graphs.

Each aten graph (forward, backward or inference) is partitioned into nvFuser regions, trimmed by the
bookend pass, fused into submodules, and each submodule call is replaced by a RegionRuntime.
"""

from __future__ import annotations

import copy
import functools
import warnings
import itertools
import logging
import time
from typing import Any, Callable, Optional, Sequence

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.fx import GraphModule

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.decompositions import table_for
from dynamo_nvf.ops.metadata import static_layout
from dynamo_nvf.passes import NOTES_KEY, add_note
from dynamo_nvf.ops.fast_math import region_fast_math
from dynamo_nvf.passes.attention import fuse_attention
from dynamo_nvf.passes.gqa_attention import read_grouped_heads
from dynamo_nvf.passes.bookend import bookend_regions
from dynamo_nvf.passes.composites import decompose_fused_composites
from dynamo_nvf.passes.fuse import PLAN_KEY, fuse_regions
from dynamo_nvf.passes.conv_input_layout import channels_last_patch_inputs
from dynamo_nvf.passes.conv_layout import adopt_input_strides, channels_last_convs
from dynamo_nvf.passes.conv_weight_layout import channels_last_conv_weights
from dynamo_nvf.passes.hoist_permutes import hoist_permutes
from dynamo_nvf.passes.memory_order_reductions import reduce_in_memory_order
from dynamo_nvf.passes.hoist_slices import hoist_slices
from dynamo_nvf.passes.lean_views import reinterpret_views
from dynamo_nvf.passes.reinplace import reinplace_fresh_accumulations
from dynamo_nvf.passes.partition import partition_regions
from dynamo_nvf.passes.split_reductions import split_norm_backward
from dynamo_nvf.passes.known_bugs import keep_known_bugs_eager
from dynamo_nvf.passes.one_hot_sums import simplify_one_hot_sums
from dynamo_nvf.passes.sink_permutes import sink_permutes
from dynamo_nvf.passes.split_transposes import split_transposes
from dynamo_nvf.passes.saved_views import RECOMPUTED_VIEWS_KEY, recompute_saved_views
from dynamo_nvf.passes.unflatten_reductions import unflatten_reductions
from dynamo_nvf.passes.unfuse_addmm import unfuse_addmm_bias
from dynamo_nvf.passes.unpermute_reductions import unpermute_reductions
from dynamo_nvf.plan import GraphPlan, region_label
from dynamo_nvf.plan_text import render_plan_text
from dynamo_nvf.runtime.cudagraphs import CudaGraphs, boxed
from dynamo_nvf.runtime.lean_forward import lean_forward
from dynamo_nvf.runtime.region import RegionRuntime
from dynamo_nvf.runtime.views import view_replay
from dynamo_nvf.segmenter import oracle_for
from dynamo_nvf.settings import Settings

log = logging.getLogger("dynamo_nvf")

_graph_ids = itertools.count()
_recorder_stack: list["_Recorder"] = []


def plan_graph(gm: GraphModule, settings: Settings, kind: str = "inference", graph_id: int = 0) -> GraphModule:
    """Partition, bookend and fuse passes; the GraphPlan ends up in `gm.meta["nvf_plan"]`."""
    notes: list[str] = []  # what the rewriting passes noted, for the plan's rewrites
    if settings.unfuse_addmm_bias:
        gm = unfuse_addmm_bias(gm, settings.plan_cpu_as_cuda)
        notes += gm.meta.pop(NOTES_KEY, [])
    gm = decompose_fused_composites(gm, settings)
    notes += gm.meta.pop(NOTES_KEY, [])
    if settings.channels_last_patch_inputs and kind == "inference":  # conv_input_layout says why
        gm = channels_last_patch_inputs(gm, settings.plan_cpu_as_cuda)
        notes += gm.meta.pop(NOTES_KEY, [])
    if settings.channels_last_convs:  # conv_layout says why
        gm = channels_last_convs(gm, kind, settings.plan_cpu_as_cuda)
        notes += gm.meta.pop(NOTES_KEY, [])
    if settings.channels_last_conv_weights and settings.cuda_graphs:
        gm = channels_last_conv_weights(gm, settings.plan_cpu_as_cuda)
        notes += gm.meta.pop(NOTES_KEY, [])
    gm = partition_regions(gm, settings)
    gm = keep_known_bugs_eager(gm)
    if settings.unflattens():
        gm = unflatten_reductions(gm)
    unpermute_rows = settings.unpermute_min_rows()
    if unpermute_rows is not None:
        gm = unpermute_reductions(gm, unpermute_rows)
    oracle = oracle_for(settings) if kind == "backward" else None
    gm = split_norm_backward(gm, settings, kind, oracle)
    notes += gm.meta.pop(NOTES_KEY, [])
    if oracle is not None and oracle.asked:
        notes.append(f"segmenter: {oracle.asked} question(s) to nvFuser (schedulers, timings), {oracle.spent_ms:.0f} ms")
    if settings.memory_order_reductions and kind != "backward":  # memory_order_reductions says why
        gm = reduce_in_memory_order(gm)
        notes += gm.meta.pop(NOTES_KEY, [])
    if settings.hoist_permutes and kind != "backward":  # hoist_permutes says why not in backward graphs
        gm = hoist_permutes(gm)
        notes += gm.meta.pop(NOTES_KEY, [])
    if settings.sink_permutes and kind != "backward":  # sink_permutes says why not in backward graphs
        gm = sink_permutes(gm)
        notes += gm.meta.pop(NOTES_KEY, [])
    if settings.split_transposes and kind != "backward":  # split_transposes says why not in backward graphs
        gm = split_transposes(gm)
        notes += gm.meta.pop(NOTES_KEY, [])
    if settings.hoist_slices:
        gm = hoist_slices(gm)
        notes += gm.meta.pop(NOTES_KEY, [])
    gm = bookend_regions(gm, settings)
    gm = fuse_regions(gm, kind, graph_id)
    for region in gm.meta[PLAN_KEY].regions:
        region.fast_math, region.math = region_fast_math(region.ops, settings.fast_math)
    gm = reinplace_fresh_accumulations(gm)
    gm.meta[PLAN_KEY].rewrites.extend(notes)
    return gm


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
    """aot_autograd's partition_fn: the joint-graph passes, then torch's min-cut partitioner.

    Under CUDA graphs the forward saves no view (passes/saved_views.py): cudagraph trees rebuild every
    output that shares a storage with another on each replay.

    Fewer saved tensors were tried and measured no better (session 20, commit eb47355, reverted):
    tagging each norm's mean and reciprocal std MUST_RECOMPUTE took the forward outputs of 2-layer
    training steps from 66 to 54 (BERT-style), 58 to 48 (GPT-2-style), 63 to 58 (LLaMA-style), but
    under CUDA graphs on an H100 (perf.interleave, 5 rounds) no step got measurably faster than with
    them saved, while GPU time grew 2-4% on the LLaMA-, ViT- and ConvNeXt-style steps and each
    recomputed RMSNorm backward became two kernels. A replay's host time is not in the saved count.
    """
    joint = simplify_one_hot_sums(joint)
    if settings is not None and settings.recomputes_saved_views():
        joint = recompute_saved_views(joint)
    forward, backward = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
    tagged = joint.meta.pop(RECOMPUTED_VIEWS_KEY, 0)
    if tagged:
        add_note(backward, f"recompute_saved_views: {tagged} view node(s) of the forward recomputed here "
                           f"where the backward reads them; the forward saves their bases (CUDA graphs)")
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

    def __call__(self, gm: GraphModule, example_inputs: Sequence[Any], *, kind: str) -> Callable[..., Any]:
        graph_id = next(_graph_ids)
        # The passes rewrite a copy (nodes and their meta dicts are copied, values shared), so a
        # failure anywhere in planning leaves aot_autograd's graph intact to run as it is.
        work = GraphModule(gm, copy.deepcopy(gm.graph))
        work.meta[NOTES_KEY] = list(gm.meta.get(NOTES_KEY, []))  # the joint-graph passes' notes
        if kind == "backward":  # a forward may save channels-last activations (passes/conv_layout.py)
            work = adopt_input_strides(work, example_inputs)
        if self.settings.strict:
            plan, forward = self._compile(work, kind, graph_id)
        else:
            try:
                plan, forward = self._compile(work, kind, graph_id)
            except Exception as exc:  # planning must never break the user's program
                error = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"dynamo_nvf: planning {kind} graph {graph_id} failed, it runs in eager: {error}",
                              RuntimeWarning, stacklevel=2)
                plan = GraphPlan(kind=kind, graph_id=graph_id, planning_error=error, rewrites=list(self.rewrites))
                self.plans.append(plan)
                forward = gm.forward
        if self.cuda_graphs is None:
            return make_boxed_func(forward)
        return self.cuda_graphs.wrap(gm, boxed(forward), example_inputs, kind, plan)

    def _compile(self, gm: GraphModule, kind: str, graph_id: int) -> tuple[GraphPlan, Callable[..., Any]]:
        start = time.perf_counter()
        gm = plan_graph(gm, self.settings, kind, graph_id)
        plan: GraphPlan = gm.meta[PLAN_KEY]
        plan.rewrites = list(self.rewrites) + plan.rewrites
        gm = install_runtimes(gm, plan, self.settings)
        forward: Callable[..., Any] = gm.forward
        if self.settings.lean_views:
            gm = reinterpret_views(gm, is_region=lambda target: isinstance(target, RegionRuntime))
            forward = lean_forward(gm)
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
        """True when every graph of this program was compiled and none has a region."""
        kinds = {p.kind for p in self.plans}
        complete = "inference" in kinds or {"forward", "backward"} <= kinds
        return complete and all(not p.regions for p in self.plans)


def _has_dynamic_sizes(example_inputs: Sequence[Any]) -> bool:
    """Whether Dynamo traced with symbolic sizes: then composites are decomposed by aot_autograd
    (passes/composites.py traces decompositions on static shapes only)."""
    return any(isinstance(value, (torch.SymInt, torch.SymFloat))
               or (isinstance(value, torch.Tensor) and not static_layout(value)) for value in example_inputs)


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
    if settings.fuse_attention:
        gm = fuse_attention(gm, strict=settings.strict)
    if settings.grouped_query_attention:
        gm = read_grouped_heads(gm, strict=settings.strict)
    compiler.rewrites = gm.meta.get(NOTES_KEY, [])
    compiled = aot_autograd(
        fw_compiler=functools.partial(compiler, kind="forward"),
        bw_compiler=functools.partial(compiler, kind="backward"),
        inference_compiler=functools.partial(compiler, kind="inference"),
        partition_fn=functools.partial(partition_joint_graph, settings=settings),
        decompositions=table_for(settings, hold_composites=settings.holds_composites()
                                 and not _has_dynamic_sizes(example_inputs)),
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
