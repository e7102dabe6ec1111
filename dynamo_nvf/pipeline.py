"""Every graph pass of the backend, declared in order, and the one loop that runs them.

Four stages, each a list of `Pass`es run in order on one graph:

- `DYNAMO_PASSES` on Dynamo's graph, before aot_autograd (their notes are shown in the plans of all
  the aten graphs made from it);
- `JOINT_PASSES` on aot_autograd's joint forward-backward graph, before torch's min-cut partitioner
  splits it (training only);
- `GRAPH_PASSES` on each aten graph aot_autograd compiles (forward, backward or inference): partition
  into regions, bookend trimming, fusion, and the rewrites around them;
- `INSTALLED_PASSES` on that graph once each region call is its RegionRuntime.

A pass is a function `(GraphModule, PassContext) -> GraphModule`; a `Pass` entry says when it runs:
the graph kinds it applies to, whether only with or only without CUDA graphs, and the option that
enables it (None: always). `run_passes` runs a stage, collects each pass's notes (`NOTES_KEY`), time
and whether it changed the graph into `PassRecord`s, which the plan keeps and explain() shows.
Adding a pass: write it in `dynamo_nvf/passes/`, add one `Pass(...)` line here (docs/pipeline.md).
"""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx import GraphModule
from torch.fx.node import map_aggregate

from dynamo_nvf.ops.fast_math import region_fast_math
from dynamo_nvf.ops.metadata import stale_views
from dynamo_nvf.passes import NOTES_KEY, add_note
from dynamo_nvf.passes.arange_index import index_by_aranges_as_views
from dynamo_nvf.passes.attention import fuse_attention
from dynamo_nvf.passes.batch_buffer_updates import batch_buffer_updates
from dynamo_nvf.passes.bookend import bookend_regions
from dynamo_nvf.passes.channels_last_regions import channels_last_regions
from dynamo_nvf.passes.conv_input_layout import channels_last_patch_inputs
from dynamo_nvf.passes.conv_layout import channels_last_convs
from dynamo_nvf.passes.conv_weight_layout import channels_last_conv_weights
from dynamo_nvf.passes.fuse import PLAN_KEY, fuse_regions
from dynamo_nvf.passes.gqa_attention import read_grouped_heads
from dynamo_nvf.passes.hoist_permutes import hoist_permutes
from dynamo_nvf.passes.hoist_slices import hoist_slices
from dynamo_nvf.passes.known_bugs import keep_known_bugs_eager
from dynamo_nvf.passes.lean_views import reinterpret_views
from dynamo_nvf.passes.avg_pool_taps import avg_pool_as_taps
from dynamo_nvf.passes.max_pool_taps import max_pool_as_taps
from dynamo_nvf.passes.memory_order_reductions import reduce_in_memory_order
from dynamo_nvf.passes.merge_duplicates import merge_duplicates
from dynamo_nvf.passes.nchw_pool_backward import nchw_avg_pool_backward
from dynamo_nvf.passes.one_hot_sums import simplify_one_hot_sums
from dynamo_nvf.passes.pad_matmuls import pad_matmuls
from dynamo_nvf.passes.partition import REASON_KEY, REGION_KEY, partition_regions
from dynamo_nvf.passes.reinplace import reinplace_fresh_accumulations
from dynamo_nvf.passes.row_major_norm_inputs import row_major_norm_inputs
from dynamo_nvf.passes.saved_views import recompute_saved_views
from dynamo_nvf.passes.sink_permutes import sink_permutes
from dynamo_nvf.passes.split_channel_statistics import split_channel_statistics
from dynamo_nvf.passes.split_reductions import split_norm_backward
from dynamo_nvf.passes.split_transposes import split_transposes
from dynamo_nvf.passes.strided_statistics import strided_statistics
from dynamo_nvf.passes.two_stage_statistics import two_stage_statistics, two_stage_sums
from dynamo_nvf.passes.unflatten_reductions import unflatten_reductions
from dynamo_nvf.passes.unfuse_addmm import unfuse_addmm_bias
from dynamo_nvf.passes.unpermute_reductions import unpermute_reductions
from dynamo_nvf.passes.view_values import refresh_view_values
from dynamo_nvf.passes.views_to_edges import views_to_region_edges
from dynamo_nvf.passes.wide_pads import compute_pads_wide
from dynamo_nvf.plan import PassRecord
from dynamo_nvf.runtime.region import RegionRuntime
from dynamo_nvf.segmenter import oracle_for
from dynamo_nvf.settings import Settings

#: The kinds of aten graph aot_autograd compiles.
GRAPH_KINDS = frozenset({"forward", "backward", "inference"})
NOT_BACKWARD = frozenset({"forward", "inference"})
#: gm.meta key of the PassRecords of the joint-graph stage, on the forward and backward graphs it made.
PASSES_KEY = "nvf_pass_records"


@dataclass(frozen=True)
class PassContext:
    """What a pass may read besides its graph."""

    settings: Settings
    #: "dynamo", "joint", or the aten graph's kind: "forward", "backward" or "inference".
    kind: str
    graph_id: int = 0


@dataclass(frozen=True)
class Pass:
    """One declared pass: its name, function, and when it runs."""

    name: str
    run: Callable[[GraphModule, PassContext], GraphModule]
    #: The graph kinds it runs on (a stage's own kind for the Dynamo and joint stages).
    kinds: frozenset[str] = GRAPH_KINDS
    #: True: only with CUDA graphs (`Settings.cuda_graphs`); False: only without; None: either.
    cuda_graphs: Optional[bool] = None
    #: The Settings field that turns it on or off; None: it always runs.
    option: Optional[str] = None
    #: Whether the option turns it on for a graph kind, where its value is not a plain bool (default:
    #: truthiness).
    enabled: Optional[Callable[[Settings, str], bool]] = None

    def skip_reason(self, ctx: PassContext) -> str:
        """Why it does not run in this context; "" when it runs."""
        if ctx.kind not in self.kinds:
            return f"not for {ctx.kind} graphs"
        if self.cuda_graphs is not None and ctx.settings.cuda_graphs != self.cuda_graphs:
            return "only with CUDA graphs" if self.cuda_graphs else "only without CUDA graphs"
        if self.option is not None:
            on = self.enabled(ctx.settings, ctx.kind) if self.enabled else bool(getattr(ctx.settings, self.option))
            if not on:
                value = getattr(ctx.settings, self.option)
                return f"{self.option}={value!r}" + (f" (not for {ctx.kind} graphs)" if value is None else "")
        return ""


# -- adapters: passes whose functions take other arguments ------------------------------------------


def _fuse_attention(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return fuse_attention(gm, strict=ctx.settings.strict)


def _read_grouped_heads(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return read_grouped_heads(gm, strict=ctx.settings.strict)


def _unfuse_addmm_bias(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return unfuse_addmm_bias(gm, ctx.settings.plan_cpu_as_cuda)


def _pad_matmuls(gm: GraphModule, ctx: PassContext) -> GraphModule:
    padded_outputs = ctx.settings.padded_matmul_outputs and ctx.kind == "inference"
    return pad_matmuls(gm, ctx.settings.plan_cpu_as_cuda, padded_outputs=padded_outputs)


def _channels_last_patch_inputs(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return channels_last_patch_inputs(gm, ctx.settings.plan_cpu_as_cuda)


def _max_pool_as_taps(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return max_pool_as_taps(gm, ctx.settings.plan_cpu_as_cuda)


def _avg_pool_as_taps(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return avg_pool_as_taps(gm, ctx.settings.plan_cpu_as_cuda)


def _nchw_avg_pool_backward(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return nchw_avg_pool_backward(gm, ctx.settings.plan_cpu_as_cuda)


def _views_to_region_edges(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return views_to_region_edges(gm, ctx.kind)


def _channels_last_convs(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return channels_last_convs(gm, ctx.kind, ctx.settings.plan_cpu_as_cuda)


def _channels_last_conv_weights(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return channels_last_conv_weights(gm, ctx.settings)


def _unpermute_reductions(gm: GraphModule, ctx: PassContext) -> GraphModule:
    rows = ctx.settings.unpermute_min_rows()
    assert rows is not None  # the entry's `enabled` says so
    return unpermute_reductions(gm, rows)


def _split_norm_backward(gm: GraphModule, ctx: PassContext) -> GraphModule:
    """split_norm_backward, asking nvFuser's segmenter (on a GPU) about backward regions."""
    oracle = oracle_for(ctx.settings) if ctx.kind == "backward" else None
    gm = split_norm_backward(gm, ctx.settings, ctx.kind, oracle)
    if oracle is not None and oracle.asked:
        add_note(gm, f"segmenter: {oracle.asked} question(s) to nvFuser (schedulers, timings), "
                     f"{oracle.spent_ms:.0f} ms")
    return gm


def _fuse_regions(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return fuse_regions(gm, ctx.kind, ctx.graph_id)


def _assign_fast_math(gm: GraphModule, ctx: PassContext) -> GraphModule:
    """Decides per fused region whether nvFuser compiles it with fast math (ops/fast_math.py)."""
    for region in gm.meta[PLAN_KEY].regions:
        region.fast_math, region.math = region_fast_math(region.ops, ctx.settings.fast_math)
    return gm


def _reinterpret_views(gm: GraphModule, ctx: PassContext) -> GraphModule:
    return reinterpret_views(gm, is_region=lambda target: isinstance(target, RegionRuntime))


def _settings_only(fn: Callable[[GraphModule, Settings], GraphModule]) -> Callable[[GraphModule, PassContext], GraphModule]:
    def run(gm: GraphModule, ctx: PassContext) -> GraphModule:
        return fn(gm, ctx.settings)

    run.__name__ = fn.__name__
    return run


def _graph_only(fn: Callable[[GraphModule], GraphModule]) -> Callable[[GraphModule, PassContext], GraphModule]:
    def run(gm: GraphModule, ctx: PassContext) -> GraphModule:
        return fn(gm)

    run.__name__ = fn.__name__
    return run


# -- the pipeline -----------------------------------------------------------------------------------

DYNAMO = frozenset({"dynamo"})
JOINT = frozenset({"joint"})

#: On Dynamo's graph, before aot_autograd.
DYNAMO_PASSES: tuple[Pass, ...] = (
    Pass("fuse_attention", _fuse_attention, DYNAMO, option="fuse_attention"),
    Pass("read_grouped_heads", _read_grouped_heads, DYNAMO, option="grouped_query_attention"),
)

#: On the joint forward-backward graph, before the min-cut partitioner.
JOINT_PASSES: tuple[Pass, ...] = (
    Pass("simplify_one_hot_sums", _graph_only(simplify_one_hot_sums), JOINT),
    Pass("channels_last_joint_patch_inputs", _channels_last_patch_inputs, JOINT, option="channels_last_patch_inputs"),
    Pass("pad_joint_matmuls", _pad_matmuls, JOINT, option="pad_matmuls"),
    Pass("compute_joint_pads_wide", _graph_only(compute_pads_wide), JOINT, option="pad_matmuls"),
    Pass("recompute_saved_views", _graph_only(recompute_saved_views), JOINT, cuda_graphs=True,
         option="recompute_saved_views"),
)

#: On each aten graph: rewrites, partition, more rewrites on the regions, bookend, fuse.
GRAPH_PASSES: tuple[Pass, ...] = (
    Pass("index_by_aranges_as_views", _graph_only(index_by_aranges_as_views)),
    Pass("unfuse_addmm_bias", _unfuse_addmm_bias, option="unfuse_addmm_bias"),
    Pass("pad_matmuls", _pad_matmuls, option="pad_matmuls"),
    Pass("compute_pads_wide", _graph_only(compute_pads_wide), option="pad_matmuls"),
    # a training step's graphs get it on the joint graph (channels_last_joint_patch_inputs)
    Pass("channels_last_patch_inputs", _channels_last_patch_inputs, frozenset({"inference"}),
         option="channels_last_patch_inputs"),
    Pass("channels_last_convs", _channels_last_convs, option="channels_last_convs"),
    Pass("channels_last_conv_weights", _channels_last_conv_weights, option="channels_last_conv_weights"),
    Pass("max_pool_as_taps", _max_pool_as_taps, NOT_BACKWARD),
    Pass("avg_pool_as_taps", _avg_pool_as_taps, option="avg_pool_taps", enabled=Settings.pools_as_taps),
    Pass("nchw_avg_pool_backward", _nchw_avg_pool_backward, frozenset({"backward"})),
    Pass("batch_buffer_updates", _graph_only(batch_buffer_updates), NOT_BACKWARD),
    Pass("partition_regions", _settings_only(partition_regions)),
    Pass("keep_known_bugs_eager", _graph_only(keep_known_bugs_eager)),
    Pass("split_channel_statistics", _graph_only(split_channel_statistics), NOT_BACKWARD),
    Pass("channels_last_regions", _graph_only(channels_last_regions), option="channels_last_regions"),
    Pass("strided_statistics", _graph_only(strided_statistics)),
    Pass("two_stage_statistics", _graph_only(two_stage_statistics), NOT_BACKWARD, option="bookend"),
    Pass("two_stage_sums", _graph_only(two_stage_sums)),
    Pass("unflatten_reductions", _graph_only(unflatten_reductions), option="unflatten_reductions",
         enabled=lambda s, kind: s.unflattens()),
    Pass("unpermute_reductions", _unpermute_reductions, option="unpermute_reductions",
         enabled=lambda s, kind: s.unpermute_min_rows() is not None),
    Pass("row_major_norm_inputs", _graph_only(row_major_norm_inputs), option="row_major_norm_inputs"),
    Pass("split_norm_backward", _split_norm_backward),
    # each of these four passes' modules says why not in backward graphs
    Pass("reduce_in_memory_order", _graph_only(reduce_in_memory_order), NOT_BACKWARD,
         option="memory_order_reductions"),
    Pass("hoist_permutes", _graph_only(hoist_permutes), NOT_BACKWARD, option="hoist_permutes"),
    Pass("sink_permutes", _graph_only(sink_permutes), NOT_BACKWARD, option="sink_permutes"),
    Pass("split_transposes", _graph_only(split_transposes), NOT_BACKWARD, option="split_transposes"),
    Pass("hoist_slices", _graph_only(hoist_slices), option="hoist_slices"),
    Pass("views_to_region_edges", _views_to_region_edges),
    Pass("refresh_view_values", _graph_only(refresh_view_values)),
    Pass("merge_duplicates", _graph_only(merge_duplicates)),
    Pass("bookend_regions", _settings_only(bookend_regions)),
    Pass("fuse_regions", _fuse_regions),
    Pass("assign_fast_math", _assign_fast_math),
    Pass("reinplace_fresh_accumulations", _graph_only(reinplace_fresh_accumulations)),
)

#: On an aten graph whose region calls are RegionRuntimes (backend.install_runtimes).
INSTALLED_PASSES: tuple[Pass, ...] = (
    Pass("reinterpret_views", _reinterpret_views, option="lean_views"),
)

STAGES: dict[str, tuple[Pass, ...]] = {"dynamo": DYNAMO_PASSES, "joint": JOINT_PASSES, "graph": GRAPH_PASSES,
                                       "installed": INSTALLED_PASSES}


@dataclass
class StageResult:
    gm: GraphModule
    #: The notes the passes left, in order (notes already on the graph first).
    notes: list[str] = field(default_factory=list)
    records: list[PassRecord] = field(default_factory=list)


def _signature(gm: GraphModule) -> tuple[Any, ...]:
    """What a pass may change: the nodes, their operands, their region or eager reason, and the
    fused regions' math (cheap next to planning: no code generation)."""
    nodes = tuple((n.op, n.name, str(n.target), str(n.args), str(n.kwargs),
                   n.meta.get(REGION_KEY), n.meta.get(REASON_KEY)) for n in gm.graph.nodes)
    plan = gm.meta.get(PLAN_KEY)
    math = tuple((r.fast_math, r.math) for r in plan.regions) if plan is not None else ()
    return nodes, math


def run_passes(stage: str, passes: Sequence[Pass], gm: GraphModule, ctx: PassContext) -> StageResult:
    """Runs each pass of `passes` that `ctx` enables, in order: the one loop of the pipeline.

    Notes are taken off the graph (`NOTES_KEY`) after each pass, so each pass's are counted; the
    caller decides where they go."""
    result = StageResult(gm=gm, notes=list(gm.meta.pop(NOTES_KEY, [])))
    signature = None  # of the graph as the last pass that ran left it
    for p in passes:
        why = p.skip_reason(ctx)
        if why:
            result.records.append(PassRecord(name=p.name, stage=stage, ran=False, skipped=why))
            continue
        before = signature if signature is not None else _signature(result.gm)
        start = time.perf_counter()
        result.gm = p.run(result.gm, ctx)
        ms = (time.perf_counter() - start) * 1e3
        notes = result.gm.meta.pop(NOTES_KEY, [])
        result.notes += notes
        signature = _signature(result.gm)
        changed = signature != before
        if changed:
            _check_no_symbolic_literals(result.gm, p.name)
            if ctx.settings.strict:
                _check_view_values(result.gm, p.name)
        result.records.append(PassRecord(name=p.name, stage=stage, ran=True, changed=changed,
                                         notes=len(notes), ms=round(ms, 3)))
    return result


class PassError(RuntimeError):
    """A pass left a graph that cannot run."""


def _check_no_symbolic_literals(gm: GraphModule, name: str) -> None:
    """A symbolic size (SymInt) written into a node's arguments, rather than the node that computes
    it, generates code naming a symbol no variable holds (`NameError: s77` when the graph runs):
    raised here, at planning, where the caller can still run the graph it was given."""
    for node in gm.graph.nodes:
        found: list[Any] = []
        map_aggregate((node.args, node.kwargs),
                      lambda a: found.append(a) if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)) else None)
        if found:
            raise PassError(f"pass {name} put the symbolic value {found[0]} in the arguments of {node.name}")


def _check_view_values(gm: GraphModule, name: str) -> None:
    """Strict mode: a view whose fake value its input's does not give (the pass changed a layout and
    left the views of it as they were) raises here, naming the pass (passes/view_values.py)."""
    stale = stale_views(gm)
    if stale:
        node, val = next(iter(stale.items()))
        old = node.meta["val"]
        raise PassError(f"pass {name} left the fake value of view {node.name} stale "
                        f"({_layout(old)}; its input gives {_layout(val)})")


def _layout(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        return f"sizes {tuple(val.shape)}, strides {val.stride()}, offset {val.storage_offset()}"
    return "(" + "; ".join(_layout(v) for v in val) + ")" if isinstance(val, (tuple, list)) else repr(val)


def run_dynamo_passes(gm: GraphModule, settings: Settings) -> StageResult:
    """The Dynamo-graph stage; its notes stay on `gm` too (`NOTES_KEY`), where the compiler reads them."""
    result = run_passes("dynamo", DYNAMO_PASSES, gm, PassContext(settings, "dynamo"))
    if result.notes:
        result.gm.meta[NOTES_KEY] = result.notes
    return result


def rewritable_copy(gm: GraphModule) -> GraphModule:
    """`gm` with a copy of its graph (nodes and their meta dicts copied, values shared) for a stage to
    rewrite, so that a failure anywhere leaves the original to run as it is; its meta is the caller's."""
    with warnings.catch_warnings():  # copying a graph's pytree codegen warns of torch's own API
        warnings.simplefilter("ignore", FutureWarning)
        return GraphModule(gm, copy.deepcopy(gm.graph))


def run_joint_passes(joint: GraphModule, settings: Settings) -> StageResult:
    """The joint-graph stage; its notes stay on the joint graph (`NOTES_KEY`). Its passes rewrite a
    copy: where one fails (not in strict mode), the partitioner gets aot_autograd's joint graph as it
    was, with one warning, since a failure here would fail the user's compile."""
    if settings.strict:
        result = run_passes("joint", JOINT_PASSES, joint, PassContext(settings, "joint"))
    else:
        work = rewritable_copy(joint)
        work.meta.update(joint.meta)
        try:
            result = run_passes("joint", JOINT_PASSES, work, PassContext(settings, "joint"))
        except Exception as exc:  # planning must never break the user's program
            warnings.warn(f"dynamo_nvf: the joint-graph passes failed, the graph is partitioned as it is: "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
            result = StageResult(gm=joint, notes=list(joint.meta.pop(NOTES_KEY, [])))
    if result.notes:
        result.gm.meta[NOTES_KEY] = result.notes
    return result


def run_graph_passes(gm: GraphModule, settings: Settings, kind: str, graph_id: int = 0) -> GraphModule:
    """The aten-graph stage: the GraphPlan ends up in `gm.meta[PLAN_KEY]`, with every note (the
    joint stage's, left on the graph, first) in its rewrites and the stage's records in its passes."""
    result = run_passes("graph", GRAPH_PASSES, gm, PassContext(settings, kind, graph_id))
    plan = result.gm.meta[PLAN_KEY]
    plan.rewrites.extend(result.notes)
    plan.passes.extend(result.records)
    return result.gm


def run_installed_passes(gm: GraphModule, settings: Settings, kind: str, graph_id: int = 0) -> GraphModule:
    """The stage after the runtimes are installed; its records and notes join the plan's."""
    plan = gm.meta[PLAN_KEY]
    result = run_passes("installed", INSTALLED_PASSES, gm, PassContext(settings, kind, graph_id))
    plan.rewrites.extend(result.notes)
    plan.passes.extend(result.records)
    return result.gm


def describe() -> list[dict[str, Any]]:
    """The declared pipeline as rows (stage, name, kinds, CUDA graphs, option): docs and tests read it."""
    rows = []
    for stage, passes in STAGES.items():
        for p in passes:
            rows.append({
                "stage": stage,
                "name": p.name,
                "kinds": sorted(p.kinds),
                "cuda_graphs": {None: "either", True: "only with", False: "only without"}[p.cuda_graphs],
                "option": p.option or "always",
            })
    return rows
