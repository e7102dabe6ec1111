"""What a conv net's compiled training step saves for its backward, and its layout conversions, on the
CPU (plans as for CUDA): the nvf backend's forward/backward graphs against inductor's partition of
the same step (inductor's decompositions, joint-graph passes and min-cut partitioner, no code
generation), under the two bf16 recipes of perf/parallel.py:

* ``autocast``  f32 parameters, the step under ``torch.autocast(bf16)`` (DDP's recipe);
* ``bf16``      bf16 parameters, BatchNorm's in f32, bf16 images (FSDP2's MixedPrecisionPolicy).

Printed per recipe and backend: the bytes the forward saves for the backward (the backward graph's
inputs that are not tangents) by dtype and layout, the largest of them, and per graph the layout
conversions (clones into a memory format, contiguous) and dtype casts (`_to_copy`,
`convert_element_type`) with where they run (a region or ATen). Sizes are for ``--batch`` and scale
linearly with it.

    python3 scripts/saved_for_backward.py --model resnet --batch 4 [--ddp]

``--measure`` runs the step on CUDA instead and prints `torch.cuda.max_memory_allocated` over the
first steps (compiles, first region runs) and over the steady steps after them, per backend:

    python3 scripts/saved_for_backward.py --measure --batch 64 --recipes autocast
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import operator
import re
import sys
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RECIPES = ("autocast", "bf16")


def _model(name: str, batch: int, recipe: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from perf.models import MODELS, WithLoss

    spec = MODELS[name]
    cfg = spec.config_for("large", tiny=False)
    cfg = type(cfg)(**{**cfg.__dict__, "batch": batch})
    torch.manual_seed(0)
    model = WithLoss(spec.module(cfg).train())
    images, targets = spec.inputs(cfg, "cpu", torch.float32) + (spec.targets(cfg, "cpu"),)
    if recipe == "bf16":
        model = model.to(torch.bfloat16)
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.float()
        images = images.to(torch.bfloat16)
    return model, (images, targets)


def _context(recipe: str, device: str = "cpu") -> contextlib.AbstractContextManager:
    return torch.autocast(device, dtype=torch.bfloat16) if recipe == "autocast" else contextlib.nullcontext()


def _saved(backward: torch.fx.GraphModule) -> list[tuple[str, torch.Tensor]]:
    return [(n.name, n.meta["val"]) for n in backward.graph.nodes if n.op == "placeholder"
            and not n.name.startswith("tangents") and isinstance(n.meta.get("val"), torch.Tensor)]


def _layout(t: torch.Tensor) -> str:
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
        return "NHWC"
    return "NCHW" if t.dim() == 4 and t.is_contiguous() else ("4-D strided" if t.dim() == 4 else f"{t.dim()}-D")


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


_COPY = re.compile(r"torch\.ops\.(aten\.clone\.default|aten\.contiguous|aten\._to_copy\.default|"
                   r"prims\.convert_element_type\.default)\((.*)\)")


def _conversions(code: str) -> collections.Counter:
    """(kind) -> count of the layout conversions and dtype casts in FX code."""
    found: collections.Counter = collections.Counter()
    for line in code.splitlines():
        m = _COPY.search(line)
        if not m:
            continue
        op, args = m.groups()
        if "memory_format = torch.channels_last" in args:
            found["to NHWC"] += 1
        elif "memory_format = torch.contiguous_format" in args:
            found["to NCHW"] += 1
        elif op == "aten.contiguous":
            found["contiguous"] += 1
        if "torch.bfloat16" in args:
            found["cast to bf16"] += 1
        elif "torch.float32" in args:
            found["cast to f32"] += 1
    return found


def _report_saved(label: str, saved: list[tuple[str, torch.Tensor]], top: int) -> int:
    total = sum(_bytes(t) for _, t in saved)
    groups: collections.Counter = collections.Counter()
    for _, t in saved:
        groups[(str(t.dtype).removeprefix("torch."), _layout(t))] += _bytes(t)
    print(f"  {label}: {len(saved)} saved tensors, {total / 2**20:.1f} MiB")
    for (dtype, layout), b in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"      {dtype:9s} {layout:11s} {b / 2**20:8.1f} MiB")
    for name, t in sorted(saved, key=lambda nt: -_bytes(nt[1]))[:top]:
        print(f"      {name:28s} {str(t.dtype).removeprefix('torch.'):9s} {_layout(t):5s} {tuple(t.shape)} "
              f"{_bytes(t) / 2**20:.1f} MiB")
    return total


def _is_view(node: torch.fx.Node) -> bool:
    """An alias of its first input: an aten view, or the plan's own reinterpretation of a storage."""
    target = node.target
    if getattr(target, "__name__", "") == "reinterpret_tensor":
        return True
    schema = getattr(target, "_schema", None)
    return bool(schema and schema.returns and schema.returns[0].alias_info is not None
                and not schema.returns[0].alias_info.is_write)


def graph_peak(gm: torch.fx.GraphModule, kind: str, region_copies: int = 0) -> tuple[int, str]:
    """The most bytes live at once while the graph runs, at the granularity of its nodes (a region or
    an ATen op allocates its outputs; a buffer dies after its last reader unless the graph returns it),
    and the node where that happens. A backward's saved inputs are live from the start and die after
    their last reader (aot_autograd frees them as the backward runs); a forward's inputs are not
    counted. nvFuser's own intermediates inside a region are not seen here. `region_copies`: that
    many more copies of a region's outputs live while it runs (the direct launcher's build runs a
    region twice more, a captured call and a checked one, while its first outputs are live)."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    owner: dict[torch.fx.Node, torch.fx.Node] = {}  # node -> the node whose buffer it reads
    size: dict[torch.fx.Node, int] = {}
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if n.op == "placeholder":
            if kind == "backward" and isinstance(val, torch.Tensor):
                owner[n], size[n] = n, _bytes(val)
        elif n.op == "call_function" and n.target is operator.getitem:
            src = n.args[0]
            if isinstance(val, torch.Tensor) and src in size and isinstance(size[src], dict):
                owner[n] = n
                size[n] = size[src].get(n.args[1], 0)
        elif n.op == "call_function":
            if isinstance(val, torch.Tensor):
                if _is_view(n) and isinstance(n.args[0], torch.fx.Node) and n.args[0] in owner:
                    owner[n] = owner[n.args[0]]
                elif not _is_view(n):
                    owner[n], size[n] = n, _bytes(val)
            elif isinstance(val, (list, tuple)):
                size[n] = {i: _bytes(v) for i, v in enumerate(val) if isinstance(v, torch.Tensor)}
    last: dict[torch.fx.Node, int] = {}
    output = next(n for n in gm.graph.nodes if n.op == "output")
    for n in gm.graph.nodes:
        for a in n.all_input_nodes:
            if a in owner:
                buf = owner[a]
                last[buf] = float("inf") if n is output else max(last.get(buf, -1), order[n])
    live, peak, where = 0, 0, ""
    starts: dict[int, list] = collections.defaultdict(list)
    for buf, o in owner.items():
        if buf is o and not (buf.op == "placeholder"):
            src = buf.args[0] if buf.target is operator.getitem else buf
            starts[order[src]].append(buf)
    live = sum(size[b] for b in owner if b.op == "placeholder" and owner[b] is b)
    ends: dict[int, list] = collections.defaultdict(list)
    for buf, i in last.items():
        if i != float("inf"):
            ends[int(i)].append(buf)
    for b in owner:
        if owner[b] is b and b not in last and b.op != "placeholder":
            ends[order[b.args[0] if b.target is operator.getitem else b]].append(b)
    for n in gm.graph.nodes:
        i = order[n]
        live += sum(size[b] for b in starts[i])
        extra = region_copies * sum(size[b] for b in starts[i]) if "nvf_region" in n.name else 0
        if live + extra > peak:
            peak, where = live + extra, n.name
        live -= sum(size[b] for b in ends[i])
    return peak, where


def _nvf_graphs(model: nn.Module, inputs: tuple, recipe: str, options: dict) -> dict[str, Any]:
    import dynamo_nvf  # noqa: F401  (registers the backend)
    from dynamo_nvf.backend import recording

    torch._dynamo.reset()
    compiled = torch.compile(model, backend="nvf_bookend", options={"plan_cpu_as_cuda": True, **options})
    with recording() as rec:
        with _context(recipe):
            loss = compiled(*inputs)
        loss.backward()
    graphs: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for plan, gm in zip(rec.plans, rec.graph_modules):
        codes = [plan.code] + [r.fx_code for r in plan.regions]
        in_regions = sum((_conversions(r.fx_code) for r in plan.regions), collections.Counter())
        graphs[plan.kind].append({"gm": gm, "all": sum((_conversions(c) for c in codes), collections.Counter()),
                                  "regions": in_regions,
                                  "notes": [n for n in plan.rewrites if "channels-last" in n],
                                  "error": plan.planning_error})
    return graphs


def _inductor_graphs(model: nn.Module, inputs: tuple, recipe: str) -> dict[str, Any]:
    """Inductor's forward and backward graphs as its partition leaves them (before lowering)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    graphs: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)

    def compiler(kind: str) -> Callable:
        def compile_graph(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable:
            graphs[kind].append({"gm": gm, "all": _conversions(gm.code), "regions": collections.Counter(),
                                 "notes": [], "error": None})
            return make_boxed_func(gm.forward)
        return compile_graph

    def partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
        try:
            from torch._inductor.compile_fx import _recursive_joint_graph_passes

            _recursive_joint_graph_passes(joint)
        except Exception as exc:  # another torch's internals: min-cut alone
            print(f"  (inductor joint-graph passes not run: {type(exc).__name__}: {exc})")
        kwargs.pop("static_lifetime_input_indices", None)
        return min_cut_rematerialization_partition(joint, joint_inputs, compiler="inductor", **kwargs)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                           partition_fn=partition, decompositions=select_decomp_table())
    compiled = torch.compile(model, backend=backend)
    with _context(recipe):
        loss = compiled(*inputs)
    loss.backward()
    return graphs


def _ddp(model: nn.Module) -> nn.Module:
    """DDP in a gloo process group of one: Dynamo's DDPOptimizer splits the graph at DDP's buckets
    (sized by the f32 parameters' bytes, as on the GPU)."""
    import os
    import socket

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if not dist.is_initialized():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    return DDP(model)


def _total(counters: list[collections.Counter]) -> dict[str, int]:
    return dict(sum(counters, collections.Counter()))


def measure_peaks(model: nn.Module, inputs: tuple, recipe: str, backend: str, options: dict,
                  steps: int, warmup: int) -> tuple[float, float]:
    """On CUDA: `torch.cuda.max_memory_allocated` (MiB) over the first `warmup` training steps
    (compiles, first runs) and over the steps after them (steady state)."""
    device = torch.device("cuda")
    model, inputs = model.to(device), tuple(t.to(device) for t in inputs)
    torch._dynamo.reset()
    kwargs: dict[str, Any] = {"backend": backend}
    if backend == "nvf_bookend":
        import dynamo_nvf  # noqa: F401

        kwargs["options"] = options
    step = model if backend == "eager" else torch.compile(model, **kwargs)
    optimizer = torch.optim.AdamW(model.parameters())
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(device)
    peaks = []
    for i in range(steps):
        if i == warmup:
            torch.cuda.synchronize()
            peaks.append(torch.cuda.max_memory_allocated(device))
            torch.cuda.reset_peak_memory_stats(device)
        with _context(recipe, "cuda"):
            loss = step(*inputs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    peaks.append(torch.cuda.max_memory_allocated(device))
    return peaks[0] / 2**20, peaks[1] / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--recipes", default=",".join(RECIPES))
    p.add_argument("--ddp", action="store_true", help="wrap in DDP (graphs split at its buckets)")
    p.add_argument("--top", type=int, default=8, help="largest saved tensors listed per backend")
    p.add_argument("--options", default="", help="nvf options, k=v,k=v (Python literals)")
    p.add_argument("--measure", action="store_true",
                   help="on CUDA instead: peak memory of the first --warmup steps and of the steps after, "
                        "per backend (eager, inductor, nvf_bookend, nvf_bookend with direct_launch=False)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    import ast

    options = {k: ast.literal_eval(v) for k, v in (kv.split("=") for kv in args.options.split(",") if kv)}
    print(f"{args.model}, batch {args.batch} (sizes scale linearly with the batch), plans as for CUDA"
          + (", DDP" if args.ddp else ""))
    if args.measure:
        runs = [("eager", {}), ("inductor", {}), ("nvf_bookend", options),
                ("nvf_bookend", {**options, "direct_launch": False})]
        for recipe in args.recipes.split(","):
            for backend, opts in runs:
                model, inputs = _model(args.model, args.batch, recipe)
                first, steady = measure_peaks(model, inputs, recipe, backend, opts, args.steps, args.warmup)
                print(f"{recipe:9s} {backend:12s} {str(opts):28s} peak MiB: first {args.warmup} steps "
                      f"{first:8.1f}, steps after {steady:8.1f}")
        return
    for recipe in args.recipes.split(","):
        model, inputs = _model(args.model, args.batch, recipe)
        print(f"\n== {recipe} ==")
        wrap = _ddp if args.ddp else (lambda m: m)
        ours = _nvf_graphs(wrap(copy.deepcopy(model)), inputs, recipe, options)
        theirs = _inductor_graphs(wrap(copy.deepcopy(model)), inputs, recipe)
        print(f"  graphs: nvf {len(ours['forward'])} forward / {len(ours['backward'])} backward; "
              f"inductor {len(theirs['forward'])} / {len(theirs['backward'])}")
        for g in ours["forward"] + ours["backward"]:
            if g["error"]:
                print(f"  nvf planning error: {g['error'][:200]}")
        a = _report_saved("nvf_bookend", [s for g in ours["backward"] for s in _saved(g["gm"])], args.top)
        b = _report_saved("inductor partition", [s for g in theirs["backward"] for s in _saved(g["gm"])], args.top)
        print(f"  saved bytes nvf / inductor: {a / max(b, 1):.2f}")
        for kind in ("forward", "backward"):
            for copies in (0, 2):
                peaks = [graph_peak(g["gm"], kind, copies) for g in ours[kind]]
                print(f"  nvf {kind} graph peak (graph-level, regions as units"
                      f"{', each region output x3 as in a direct-launch build' if copies else ''}): "
                      + ", ".join(f"{pk / 2**20:.1f} MiB at {at}" for pk, at in peaks))
        for kind in ("forward", "backward"):
            print(f"  {kind}: nvf conversions {_total([g['all'] for g in ours[kind]])} "
                  f"(in regions {_total([g['regions'] for g in ours[kind]])}); "
                  f"inductor graph {_total([g['all'] for g in theirs[kind]])}")
            for g in ours[kind]:
                for note in g["notes"]:
                    print(f"      {note}")


if __name__ == "__main__":
    main()
