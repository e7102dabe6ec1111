"""The plan of one compiled graph: its regions, trimmed nodes and the reason for each decision.

Planning fills it; the runtime adds what nvFuser did (definition, kernels, fallbacks); explain()
renders it. Everything here is plain data, JSON-serialisable through `to_dict()`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import torch
from torch.fx import Node


@dataclass
class TensorInfo:
    name: str
    shape: list[Any]
    dtype: str
    stride: list[Any]
    device: str

    @classmethod
    def of(cls, node: Node) -> "TensorInfo":
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return cls(
                name=node.name,
                shape=[_size(s) for s in val.shape],
                dtype=str(val.dtype).replace("torch.", ""),
                stride=[_size(s) for s in val.stride()],
                device=str(val.device),
            )
        kind = type(val).__name__ if val is not None else "unknown"
        return cls(name=node.name, shape=[], dtype=kind, stride=[], device="")


def _size(s: Any) -> Any:
    return s if isinstance(s, int) else str(s)


@dataclass
class Decision:
    """A bookend decision about one node at a region's boundary."""

    node: str
    op: str
    action: str  # "trimmed", "kept", "duplicated" or "collapsed"
    reason: str


@dataclass
class KernelInfo:
    name: str
    scheduler: str
    time_ms: Optional[float] = None
    compile_time_ms: Optional[float] = None
    segment_id: Optional[int] = None


@dataclass
class RegionPlan:
    id: int
    name: str
    ops: list[str]
    nodes: list[str]
    leading: list[Decision] = field(default_factory=list)
    trailing: list[Decision] = field(default_factory=list)
    kept: list[Decision] = field(default_factory=list)
    boundary: list[str] = field(default_factory=list)
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    #: "nvfuser" once it ran there, "eager" when it cannot (no CUDA/nvFuser) or fell back, else "planned".
    executor: str = "planned"
    executor_reason: str = ""
    #: Python code of the region's FX graph: what nvFuser is given and what eager runs on fallback.
    fx_code: str = ""
    definition: Optional[str] = None
    kernels: list[KernelInfo] = field(default_factory=list)
    segments: Optional[int] = None
    profile_source: str = ""
    cuda_source: Optional[str] = None
    scheduled_ir: Optional[str] = None
    calls_nvfuser: int = 0
    calls_eager: int = 0
    first_run_ms: Optional[float] = None  # nvFuser's compile and first run, host wall time
    #: Host time to build the fusion definition (lowering), before nvFuser compiles it.
    build_ms: Optional[float] = None
    #: Equal keys mean one shared compiled fusion (passes/fusion_key.py).
    fusion_key: str = ""
    #: The definition was taken from an earlier region with the same key (not built again).
    fusion_reused: bool = False
    #: How steady calls launch its kernel: "direct" (runtime/direct_launch.py; with the count of calls
    #: it declined to fec.execute and the last reason), or why they go through fec.execute; "" until a
    #: steady call decided it.
    launch: str = ""
    #: Compiled with nvFuser's fast math (settings.fast_math, ops/fast_math.py), and why or why not.
    fast_math: bool = False
    math: str = ""
    #: Its tensor inputs are defined with concrete sizes (settings.static_resize_sizes,
    #: ops/static_sizes.py), and why; "" for symbolic sizes.
    static_sizes: bool = False
    sizes: str = ""
    #: After an nvFuser error on the whole region: the plans of the pieces it runs as
    #: (runtime/split_region.py), each with its own executor.
    pieces: list["RegionPlan"] = field(default_factory=list)

    @property
    def launched_kernels(self) -> list["KernelInfo"]:
        """Profiled segments that launched a GPU kernel (host-evaluated ones have no name)."""
        return [k for k in self.kernels if k.name]

    @property
    def compute_ops(self) -> list[str]:
        from dynamo_nvf.ops.metadata import METADATA_OPS
        from dynamo_nvf.ops.registry import op_name

        metadata = {op_name(t) for t in METADATA_OPS}
        return [op for op in self.ops if op not in metadata]


@dataclass
class NodeInfo:
    name: str
    op: str
    region: Optional[int]
    reason: str = ""
    #: Names of the nodes it reads (graph inputs included): the edges explain()'s picture draws.
    inputs: list[str] = field(default_factory=list)


@dataclass
class PassRecord:
    """One declared pass (dynamo_nvf/pipeline.py) on one graph: whether it ran and what it changed."""

    name: str
    #: "dynamo" (Dynamo's graph), "joint" (the joint forward-backward graph) or "graph" (this aten graph).
    stage: str
    ran: bool
    #: Why it did not run ("" when it ran): its option off, or not for this graph kind or mode.
    skipped: str = ""
    #: Whether the graph (nodes, their operands, regions, math) differed after it.
    changed: bool = False
    #: How many notes it left (listed among the plan's rewrites).
    notes: int = 0
    #: Host time it took.
    ms: float = 0.0


@dataclass
class GraphPlan:
    kind: str  # "forward", "backward" or "inference"
    graph_id: int
    nodes: list[NodeInfo] = field(default_factory=list)
    regions: list[RegionPlan] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    code: str = ""
    #: Set when planning failed and the graph runs as aot_autograd gave it (nodes are then unknown).
    planning_error: str = ""
    #: With CUDA graphs on: whether this graph is captured, or why not ("" when CUDA graphs are off).
    cuda_graph: str = ""
    #: Host time of partitioning, bookend, fuse and runtime set-up for this graph.
    planning_ms: Optional[float] = None
    #: What the rewriting passes changed: on Dynamo's graph before aot_autograd (attention into SDPA,
    #: shared by the forward and backward plans of one graph, or why an attention-like chain was left
    #: alone), and on this aten graph (a float32 addmm's bias moved into a region, a permute hoisted
    #: onto a region's inputs).
    rewrites: list[str] = field(default_factory=list)
    #: Every declared pass of the pipeline that saw this graph (the Dynamo and joint stages' included,
    #: shared with the other graphs made from the same Dynamo graph), in order, run or skipped.
    passes: list[PassRecord] = field(default_factory=list)

    @property
    def eager_nodes(self) -> list[NodeInfo]:
        return [n for n in self.nodes if n.region is None]

    def to_dict(self) -> dict[str, Any]:
        regions = []
        for region in self.regions:
            d = asdict(region)
            d["compute_ops"] = region.compute_ops
            d["launched_kernels"] = len(region.launched_kernels)
            regions.append(d)
        return {
            "kind": self.kind,
            "graph_id": self.graph_id,
            "regions": regions,
            "eager_nodes": [{"node": n.name, "op": n.op, "reason": n.reason} for n in self.eager_nodes],
            "nodes": [asdict(n) for n in self.nodes],
            "decisions": [asdict(d) for d in self.decisions],
            "cuda_graph": self.cuda_graph,
            "planning_ms": self.planning_ms,
            "planning_error": self.planning_error,
            "rewrites": list(self.rewrites),
            "passes": [asdict(p) for p in self.passes],
        }


def region_label(graph: "GraphPlan", region: RegionPlan) -> str:
    """A region's name in a torch.profiler trace, unique in the process (graph ids are)."""
    return f"dynamo_nvf {graph.kind} graph {graph.graph_id} {region.name}"


def profile_labels(graph: "GraphPlan") -> dict[str, RegionPlan]:
    """Every region of `graph` and every piece of a split one (runtime/split_region.py) by its
    torch.profiler range name; a piece's label is its region's with the piece's suffix."""
    labels = {}
    for region in graph.regions:
        label = region_label(graph, region)
        labels[label] = region
        for piece in region.pieces:
            labels[label + piece.name[len(region.name):]] = piece
    return labels
