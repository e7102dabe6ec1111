"""explain(): how a program was split, trimmed and run, as text, notebook HTML and a dict.

It compiles the program with the nvf_bookend backend, runs it once (forward, and backward when an
input requires grad) with nvFuser's profiler on, and reports every compiled graph: which node went to
which region or why it stayed in eager, what the bookend pass trimmed and why, the fusion definitions
and what nvFuser made of them (kernels, schedulers, times). Without CUDA or nvFuser it still shows the
plan a GPU would get (CPU tensors are planned as CUDA tensors) and says that nothing ran on nvFuser.
"""

from __future__ import annotations

import contextlib
import functools
import html
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
import torch._dynamo
from tabulate import tabulate

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import nvf_bookend, recording
from dynamo_nvf.plan import GraphPlan, KernelInfo, RegionPlan, profile_labels
from dynamo_nvf.plan_svg import region_color, render_plan_svg
from dynamo_nvf.plan_text import (PASS_HEADERS, decision_rows, fusion_note, io_rows, kernel_rows, pass_rows,
                                  region_status, render_plan_text)
from dynamo_nvf.runtime.region import NVFUSER_KERNEL_NAME, PROFILING
from dynamo_nvf.runtime.stats import STATS


@dataclass
class GraphBreak:
    reason: str
    count: int


@dataclass
class Report:
    """What explain() returns: print it, display it in a notebook, or serialise `to_dict()`."""

    graphs: list[GraphPlan]
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    nvfuser_available: bool = False
    unavailable_reason: str = ""
    kernels_total: Optional[int] = None
    kernels_nvfuser: Optional[int] = None
    #: Names of the kernels torch.profiler saw that nvFuser did not launch, with their counts.
    eager_kernels: dict[str, int] = field(default_factory=dict)
    kernel_source: str = ""
    runtime: dict[str, int] = field(default_factory=dict)
    #: Wall time of the first call (compile included), forward and backward.
    first_call_ms: Optional[float] = None

    # -- totals ------------------------------------------------------------------------------------
    def totals(self) -> dict[str, Any]:
        regions = [r for g in self.graphs for r in g.regions]
        fused = sum(len(r.nodes) for r in regions)
        eager = sum(len(g.eager_nodes) for g in self.graphs)
        nvf_kernels = sum(len(r.launched_kernels) for r in regions + [p for r in regions for p in r.pieces])
        return {
            "graphs": len(self.graphs),
            "regions": len(regions),
            "nodes_fused": fused,
            "nodes_eager": eager,
            "regions_on_nvfuser": sum(r.executor == "nvfuser" for r in regions),
            "regions_as_pieces": sum(r.executor == "pieces" for r in regions),
            "kernels_nvfuser_profiled": nvf_kernels if nvf_kernels or any(r.kernels for r in regions) else None,
            "kernels_nvfuser_torch_profiler": self.kernels_nvfuser,
            "kernels_eager": None if self.kernels_total is None else self.kernels_total - (self.kernels_nvfuser or 0),
            "kernels_total": self.kernels_total,
            "distinct_fusions": len({r.fusion_key for r in regions if r.fusion_key}),
            **self.first_call_breakdown(),
        }

    def first_call_breakdown(self) -> dict[str, Optional[float]]:
        """Where the first call's time went (ms): planning, building definitions, nvFuser's compile and
        first runs, and the rest (Dynamo, aot_autograd, eager ops). None where not measured."""
        regions = [r for g in self.graphs for r in g.regions]

        def total(values: list[Optional[float]]) -> Optional[float]:
            known = [v for v in values if v is not None]
            return round(sum(known), 3) if known else None

        planning = total([g.planning_ms for g in self.graphs])
        building = total([r.build_ms for r in regions])
        nvfuser = total([r.first_run_ms for r in regions])
        other = None
        if self.first_call_ms is not None:
            other = round(self.first_call_ms - sum(v or 0.0 for v in (planning, building, nvfuser)), 3)
        return {"first_call_ms": self.first_call_ms, "planning_ms": planning, "definitions_ms": building,
                "nvfuser_compile_ms": nvfuser, "dynamo_aot_eager_ms": other}

    def to_dict(self) -> dict[str, Any]:
        return {
            "nvfuser_available": self.nvfuser_available,
            "unavailable_reason": self.unavailable_reason,
            "graph_breaks": [{"reason": b.reason, "count": b.count} for b in self.graph_breaks],
            "graphs": [g.to_dict() for g in self.graphs],
            "totals": self.totals(),
            "kernel_source": self.kernel_source,
            "eager_kernels": dict(self.eager_kernels),
            "runtime": dict(self.runtime),
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        return render_text(self)

    def _repr_html_(self) -> str:
        return render_html(self)

    def graph_svg(self, index: int = 0, columns: int = 6, max_eager_run: int = 4) -> "SVG":
        """A picture of graph `index` (regions, trimmed and eager nodes, boundaries), as SVG text.

        A notebook displays it as a picture; `str()` of it is the SVG document.
        """
        return SVG(render_plan_svg(self.graphs[index], columns=columns, max_eager_run=max_eager_run))


class SVG(str):
    """SVG text that a notebook displays as a picture."""

    def _repr_svg_(self) -> str:
        return str(self)

    def __repr__(self) -> str:  # the picture's plain-text stand-in, not thousands of characters
        return f"<SVG picture, {len(self)} characters>"


# --------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------


def _totals_rows(report: "Report") -> list[list[Any]]:
    return [[k, "n/a" if v is None else v] for k, v in report.totals().items()]


def render_text(report: Report) -> str:
    lines = ["dynamo_nvf explain"]
    if report.nvfuser_available:
        lines.append("nvFuser: available; regions ran on nvFuser unless marked otherwise")
    else:
        lines.append(f"nvFuser: not available here ({report.unavailable_reason}); this is the plan for CUDA, "
                     "and nothing ran on nvFuser")
    if report.graph_breaks:
        lines.append(tabulate([[b.reason, b.count] for b in report.graph_breaks], headers=["graph break", "count"],
                              tablefmt="simple"))
    else:
        lines.append("Dynamo graph breaks: none")
    lines.append(tabulate(_totals_rows(report), headers=["total", "value"], tablefmt="simple"))
    lines.append(f"kernel counts: {report.kernel_source}")
    for plan in report.graphs:
        lines.append("")
        lines.append(render_plan_text(plan))
    return "\n".join(lines)


def _html_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="html")


def render_html(report: Report) -> str:
    esc = html.escape
    parts = ["<div class='dynamo-nvf-report'>", "<h3>dynamo_nvf explain</h3>"]
    if report.nvfuser_available:
        parts.append("<p>nvFuser: available</p>")
    else:
        parts.append(f"<p>nvFuser: not available ({esc(report.unavailable_reason)}); plan for CUDA, "
                     "nothing ran on nvFuser</p>")
    if report.graph_breaks:
        parts.append(_html_table([[b.reason, b.count] for b in report.graph_breaks], ["graph break", "count"]))
    parts.append(_html_table(_totals_rows(report), ["total", "value"]))
    for plan in report.graphs:
        parts.append(f"<h4>{esc(plan.kind)} graph {plan.graph_id}</h4>")
        if plan.cuda_graph:
            parts.append(f"<p>CUDA graph: {esc(plan.cuda_graph)}</p>")
        if plan.passes:
            parts.append("<details><summary>passes</summary>" + _html_table(pass_rows(plan), PASS_HEADERS)
                         + "</details>")
        if plan.rewrites:
            parts.append("<p>rewrites:</p><ul>"
                         + "".join(f"<li>{esc(r)}</li>" for r in plan.rewrites) + "</ul>")
        parts.append(f"<div class='dynamo-nvf-graph' style='overflow-x:auto'>{render_plan_svg(plan)}</div>")
        rows = []
        for n in plan.nodes:
            color = "" if n.region is None else region_color(n.region)[0]
            where = "eager" if n.region is None else f"region {n.region}"
            rows.append(f"<tr style='background:{color}'><td>{esc(n.name)}</td><td>{esc(n.op)}</td>"
                        f"<td>{where}</td><td>{esc(n.reason)}</td></tr>")
        parts.append("<table><thead><tr><th>node</th><th>op</th><th>where</th><th>why eager</th></tr></thead>"
                     f"<tbody>{''.join(rows)}</tbody></table>")
        for region in plan.regions:
            parts.append(f"<h5>{esc(region.name)}: executor {esc(region_status(region))}"
                         f"{esc(fusion_note(region))}</h5>")
            parts.append(_html_table(io_rows(region), ["", "tensor", "dtype", "shape", "stride", "device"]))
            if decision_rows(region):
                parts.append(_html_table(decision_rows(region), ["side", "node", "op", "action", "reason"]))
            if region.boundary:
                parts.append("<ul>" + "".join(f"<li>{esc(b)}</li>" for b in region.boundary) + "</ul>")
            if region.math:
                parts.append(f"<p>math: {esc(region.math)}</p>")
            if region.sizes:
                parts.append(f"<p>sizes: {esc(region.sizes)}</p>")
            if region.pieces:
                parts.append("<p>pieces:</p><ul>" + "".join(
                    f"<li>{esc(p.name)}: executor {esc(region_status(p))}</li>" for p in region.pieces) + "</ul>")
            if region.kernels:
                parts.append(_html_table(kernel_rows(region), ["segment", "scheduler", "kernel", "time ms", "compile ms"]))
            for title, text in (("FX graph", region.fx_code), ("fusion definition", region.definition),
                                ("scheduled IR", region.scheduled_ir), ("CUDA source", region.cuda_source)):
                if text:
                    parts.append(f"<details><summary>{title}</summary><pre>{esc(text)}</pre></details>")
        if plan.code:
            parts.append(f"<details><summary>compiled graph code</summary><pre>{esc(plan.code)}</pre></details>")
    parts.append("</div>")
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------------
# explain()
# --------------------------------------------------------------------------------------------------


def _graph_break_counter() -> Counter:
    from torch._dynamo.utils import counters

    return Counter(counters["graph_break"])


def _requires_grad(values: Sequence[Any]) -> bool:
    return any(isinstance(v, torch.Tensor) and v.requires_grad for v in values)


def _flat_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat_tensors(v)]
    return []


def _grad_leaves(fn_or_module: Any, inputs: Sequence[Any]) -> list[torch.Tensor]:
    """The tensors a backward of explain()'s run accumulates gradients into."""
    leaves = [t for t in _flat_tensors(list(inputs)) if t.requires_grad and t.is_leaf]
    if isinstance(fn_or_module, torch.nn.Module):
        leaves += [p for p in fn_or_module.parameters() if p.requires_grad]
    return leaves


TORCH_PROFILE_SOURCE = "torch.profiler (a segment that launches no kernel is not seen)"


def _region_kernel(name: str, duration_us: float) -> KernelInfo:
    """A kernel a region's call launched, read from its name: nvFuser's scheduler and segment, or
    "aten" for a library kernel that one of nvFuser's host-evaluated segments ran (a matmul, SDPA)."""
    match = NVFUSER_KERNEL_NAME.search(name)
    short = _short_name(name).removeprefix("nvf::")
    if match is None or match.group(2) is None:
        return KernelInfo(name=short, scheduler="aten", time_ms=duration_us / 1e3)
    return KernelInfo(name=short, scheduler=match.group(1), time_ms=duration_us / 1e3, segment_id=int(match.group(2)))


def _short_name(name: str) -> str:
    """A kernel's name as torch.profiler gives it, without its parameter list."""
    return name.split("(", 1)[0]


def _is_copy(name: str) -> bool:
    return "memcpy" in name.lower() or "memset" in name.lower()


def attach_torch_kernels(events: Any, regions: dict[str, RegionPlan]) -> None:
    """Each region's kernels, from a torch.profiler run whose region calls ran inside a profiler range
    named `region_label(...)` (PROFILING in "torch" mode): the kernels the profiler
    linked to that range or to the ops inside it. A region called more than once in the run keeps its
    first call's."""
    seen: set[str] = set()
    for event in events:
        region = regions.get(event.name)
        if region is None or event.name in seen:
            continue
        seen.add(event.name)
        # The profiler can link one launch to the range and to an event inside it (the H100 listed
        # each of seed001's two kernels twice): one entry per launch, told apart by name and time.
        kernels, stack = {}, [event]
        while stack:
            current = stack.pop()
            kernels.update(((k.name, k.duration), k) for k in current.kernels)
            stack.extend(current.cpu_children)
        region.kernels = [_region_kernel(k.name, k.duration) for k in kernels.values() if not _is_copy(k.name)]
        region.kernels.sort(key=lambda k: (k.segment_id is None, k.segment_id or 0))
        region.segments = None
        region.profile_source = TORCH_PROFILE_SOURCE


def _count_kernels(run: Callable[[], Any], regions: Optional[dict[str, RegionPlan]] = None,
                   ) -> tuple[Any, Optional[list[str]], Optional[int], str]:
    """Runs `run` under torch.profiler; returns its result, the names of its GPU kernels and how many
    of them nvFuser launched, and gives each of `regions` (by profile label) the kernels its call
    launched."""
    if not torch.cuda.is_available():
        return run(), None, None, "no CUDA: no kernels launched"
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    if regions:
        activities.append(torch.profiler.ProfilerActivity.CPU)  # the regions' ranges are CPU events
    with torch.profiler.profile(activities=activities) as prof:
        with PROFILING.on("torch") if regions else contextlib.nullcontext():
            result = run()
        torch.cuda.synchronize()
    events = prof.events()
    names = [e.name for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    names = [n for n in names if not _is_copy(n) and not n.startswith("[memory]")]
    if regions:
        attach_torch_kernels(events, regions)
    return result, names, sum(_is_nvfuser(n) for n in names), "torch.profiler"


def _is_nvfuser(name: str) -> bool:
    return "nvfuser" in name.lower() or "CudaCodeGen" in name


_torch_profiler_used = False
#: nvFuser's profiler leaves CUPTI subscribed for the rest of the process: torch.profiler after it
#: cannot be trusted, so "auto" stays with nvFuser's once it ran.
_nvfuser_profiler_used = False


def explain(fn_or_module: Callable[..., Any], *example_inputs: Any, options: Optional[dict[str, Any]] = None,
            profiler: str = "auto", cuda_source: bool = False, scheduled_ir: bool = False,
            **kwargs: Any) -> Report:
    """Compiles `fn_or_module` with nvf_bookend, runs it on the inputs and reports.

    `options` are the backend's options; `kwargs` go to `fn_or_module`.

    `profiler` chooses how kernels are seen on a GPU. "torch" (the default, "auto", where nvFuser
    runs): torch.profiler sees every kernel of the call, eager's and nvFuser's, and each region's call
    runs inside a profiler range of its own, so each region lists the kernels it launched, with
    scheduler and segment read from nvFuser's kernel names and their GPU times. "nvfuser": nvFuser's
    own profiler, which also gives each segment's compile time and lists segments that launch no
    kernel (host-evaluated); it subscribes to CUPTI for the rest of the process, so a later
    torch.profiler (a user's, or explain's) cannot be trusted, and it aborts the process if
    torch.profiler subscribed first. Once it has run, "auto" keeps choosing it. "none": no profiling.
    With CUDA graphs on (`options={"cuda_graphs": True}`) the program runs as a training loop would
    under them: each run starts a new step and from cleared gradients; replays run no Python, so no
    region lists kernels (torch.profiler still counts them), and nvFuser's profiler is not used (its
    synchronization is forbidden during capture). With `cuda_source=True` and `scheduled_ir=True` the
    report carries each region's generated CUDA source and nvFuser's scheduled IR of its segments.
    """
    global _torch_profiler_used, _nvfuser_profiler_used
    available = nvf_env.nvfuser_available()
    if profiler == "auto":
        profiler = ("nvfuser" if _nvfuser_profiler_used else "torch") if available else "none"
    if profiler not in ("nvfuser", "torch", "none"):
        raise ValueError(f"profiler must be 'auto', 'nvfuser', 'torch' or 'none', not {profiler!r}")
    if profiler == "nvfuser" and _torch_profiler_used:
        raise RuntimeError("explain(profiler='nvfuser') after torch.profiler ran in this process would abort "
                           "it (CUPTI takes one subscriber); use profiler='torch' or a new process")
    opts = dict(options or {})
    if not available:
        opts.setdefault("plan_cpu_as_cuda", True)
    breaks_before = _graph_break_counter()
    stats_before = STATS.snapshot()
    # A fresh backend object, so Dynamo compiles anew rather than reusing an earlier compile's cache.
    backend = functools.partial(nvf_bookend, options=opts)
    compiled = torch.compile(fn_or_module, backend=backend)

    graphs_on = bool(opts.get("cuda_graphs")) and available
    if graphs_on and profiler == "nvfuser":
        # The second call records the CUDA graphs; nvFuser's profiler synchronizes, which capture
        # forbids, and replays run no Python to profile. torch.profiler sees replayed kernels.
        profiler = "none"

    def run() -> Any:
        if graphs_on:
            torch.compiler.cudagraph_mark_step_begin()
            # A gradient accumulated into .grad from the last step's CUDA-graph outputs reads memory
            # the next replay overwrites (cudagraph trees refuse it): start every run from no grad.
            for t in _grad_leaves(fn_or_module, example_inputs):
                t.grad = None
        out = compiled(*example_inputs, **kwargs)
        tensors = [t for t in _flat_tensors(out) if t.requires_grad]
        if tensors:
            torch.autograd.backward(tensors, [torch.ones_like(t) for t in tensors])
        return out

    total = nvf_count = None
    eager_kernels: Counter = Counter()
    source = "no GPU profiling"
    with recording() as recorder:
        start = time.perf_counter()
        run()  # compiles, and runs once
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        first_call_ms = (time.perf_counter() - start) * 1e3
        if graphs_on:
            run()  # records the CUDA graphs; the profiled call below (if any) replays them
            source = "CUDA graphs: nvFuser's profiler not used (capture forbids its syncs)"
        if available and profiler == "torch":
            _torch_profiler_used = True
            regions = {label: r for g in recorder.plans for label, r in profile_labels(g).items()}
            _, names, nvf_count, source = _count_kernels(run, regions)
            total = None if names is None else len(names)
            eager_kernels = Counter(_short_name(n) for n in names or () if not _is_nvfuser(n))
        elif available and profiler == "nvfuser":
            _nvfuser_profiler_used = True
            with PROFILING.on("nvfuser"):
                run()
            source = "nvfuser_direct.PythonProfiler (torch.profiler not used: one CUPTI subscriber per process)"
    breaks = _graph_break_counter() - breaks_before
    stats_after = STATS.snapshot()
    report = Report(
        graphs=list(recorder.plans),
        graph_breaks=[GraphBreak(reason=r, count=c) for r, c in breaks.items()],
        nvfuser_available=available,
        unavailable_reason="" if available else nvf_env.unavailable_reason(),
        kernels_total=total,
        kernels_nvfuser=nvf_count,
        eager_kernels=dict(eager_kernels),
        kernel_source=source,
        runtime={k: stats_after[k] - stats_before[k] for k in stats_after},
        first_call_ms=round(first_call_ms, 3),
    )
    if (cuda_source or scheduled_ir) and available:
        _attach_sources(recorder, cuda_source, scheduled_ir)
    return report


def _attach_sources(recorder: Any, cuda_source: bool, scheduled_ir: bool) -> None:
    from dynamo_nvf.runtime.region import RegionRuntime

    for gm in recorder.graph_modules:
        for node in gm.graph.nodes:
            if isinstance(node.target, RegionRuntime):
                node.target.attach_sources(cuda_source, scheduled_ir)
