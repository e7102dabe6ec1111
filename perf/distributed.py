"""Data-parallel training steps per backend, under DDP and FSDP2, on several GPUs (or CPUs over gloo).

    torchrun --nproc-per-node 2 -m perf.distributed --model llama --wrappers ddp,fsdp2,fsdp2-model \\
        --backends eager,inductor,nvf_bookend --steps 20 --dtype bf16 --json perf/results/distributed.json

For every wrapper (``perf.parallel``) and backend, each rank builds the same perf model (same seed),
trains it with AdamW for ``--steps`` steps on its own fixed batch (seeded by rank: every rank sees
different data, and the model can fit it, so a wrong gradient shows up in the loss), and rank 0
prints one row per run:

* step ms: median over the steps after ``--warmup`` of the slowest rank's synchronized step time
  (forward, backward, optimizer step, zero_grad), and tokens/s (images/s) of all ranks together;
* peak memory: ``torch.cuda.max_memory_allocated`` over the whole run, the largest rank's;
* losses: the mean over ranks at every step, and their largest difference from eager's under the
  same wrapper (absolute and relative); ``match`` says whether every step is within tolerance;
* dynamo_nvf: fallbacks (nvFuser errors) and planning failures on all ranks, nvFuser calls per step,
  regions run eagerly per step, compiled graphs and the collectives found in them.

Run one after another, two backends' step times also differ by whatever the machine did between the
runs (20-30% from run to run on a shared two-GPU machine). ``--interleave`` builds every backend's model
under a wrapper at once and goes round them each step, in reverse order every other round: their step
times are then measured side by side (peak memory is the models' together, so it is not reported).

``inductor_ro`` and ``nvf_cudagraphs`` are inductor and nvf_bookend with ``mode="reduce-overhead"``
(CUDA graphs, a ``cudagraph_mark_step_begin()`` before each step); nvf_cudagraphs' step time is
compared with inductor_ro's.  ``--check`` makes the exit status 1 when a run failed, or an nvf
backend's loss is out of tolerance or it fell back; ``--device cpu`` runs over gloo with tiny shapes (what the CPU
test suite runs).  NCCL settings come from the environment as they are (the GPU machine sets
NCCL_NVLS_ENABLE=0; it is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import socket
import statistics
import sys
import time
import traceback
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist

from perf.models import MODELS, ModelSpec, build_model, model_inputs
from perf.backends import get_backend, mark_step
from perf.measure import is_device_event
from perf.parallel import BACKENDS, NVF_BACKENDS, STEP_REFERENCE, WRAPPERS, wrap

#: Default loss tolerances (rtol, atol) per --dtype: the largest difference from eager's loss at any
#: step that still counts as a match.  Over 20 AdamW steps the difference compounds, so these are
#: looser than one op's tolerance.
TOLERANCES = {"f32": (1e-4, 1e-4), "bf16": (1e-2, 1e-2)}


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m perf.distributed", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama", choices=sorted(MODELS))
    p.add_argument("--wrappers", default="ddp,fsdp2", help=f"comma-separated, from {','.join(WRAPPERS)}")
    p.add_argument("--backends", default="eager,inductor,nvf_bookend",
                   help=f"comma-separated, from {','.join(BACKENDS)}; eager is the loss reference")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of the step time (compiles)")
    p.add_argument("--dtype", default="bf16", choices=sorted(TOLERANCES),
                   help="bf16: DDP under autocast, FSDP2 with MixedPrecisionPolicy (see perf/parallel.py)")
    p.add_argument("--batch", default="small", choices=("small", "large"))
    p.add_argument("--tiny", action="store_true", help="the model's tiny config (CPU tests)")
    p.add_argument("--config", default="", help="config overrides, e.g. vocab=8192,layers=4")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda: NCCL; cpu: gloo")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bucket-cap-mb", type=float, default=None,
                   help="DDP bucket size (Dynamo splits graphs at bucket boundaries; at least 1 on torch 2.13)")
    p.add_argument("--nvf-options", default="{}", help="JSON dict of nvf_bookend options")
    p.add_argument("--rtol", type=float, default=None, help="loss tolerance (default per --dtype)")
    p.add_argument("--atol", type=float, default=None)
    p.add_argument("--timeout", type=float, default=300.0, help="process-group timeout, seconds")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="after the timed steps, profile this many more (CUDA): kernel time per step and how much "
                        "of the NCCL kernels' time runs beside compute kernels")
    p.add_argument("--interleave", action="store_true",
                   help="under each wrapper, build every backend's model at once and alternate their steps "
                        "(step times side by side; peak memory is then not per backend)")
    p.add_argument("--json", default=None, help="write the results here (rank 0, after every run)")
    p.add_argument("--check", action="store_true",
                   help="exit 1 on a failed run, a loss out of tolerance, or an nvf fallback")
    args = p.parse_args(argv)
    args.wrappers = _names(args.wrappers, WRAPPERS, "wrapper")
    args.backends = _names(args.backends, BACKENDS, "backend")
    args.nvf_options = json.loads(args.nvf_options)
    rtol, atol = TOLERANCES[args.dtype]
    args.rtol = rtol if args.rtol is None else args.rtol
    args.atol = atol if args.atol is None else args.atol
    if args.steps < 1 or not 0 <= args.warmup < args.steps:
        p.error("need steps >= 1 and 0 <= warmup < steps")
    if args.bucket_cap_mb is not None and args.bucket_cap_mb < 1 and "ddp" in args.wrappers:
        # Dynamo's DDPOptimizer asserts that DDP's buckets are no smaller than its own first bucket
        # (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB).
        p.error("--bucket-cap-mb below 1 is refused by Dynamo's DDPOptimizer")
    return args


def _names(text: str, known: Sequence[str], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SystemExit(f"unknown {what}(s) {unknown or text!r}; choose from {','.join(known)}")
    return names


def model_spec(name: str, overrides: str) -> ModelSpec:
    """The perf model, with `key=value` config overrides applied to both its configs."""
    spec = MODELS[name]
    if not overrides:
        return spec
    changes = {}
    for item in overrides.split(","):
        key, _, value = item.partition("=")
        if not hasattr(spec.config, key.strip()):
            raise SystemExit(f"--config: {spec.name} has no config field {key.strip()!r}")
        changes[key.strip()] = int(value)
    return replace(spec, config=replace(spec.config, **changes), tiny=replace(spec.tiny, **changes))


# ------------------------------------------------------------------------------------ processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(device_type: str, timeout_s: float) -> torch.device:
    """Joins torchrun's process group, or makes a group of one when started without torchrun."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    kwargs: dict[str, Any] = {"timeout": datetime.timedelta(seconds=timeout_s)}
    if "RANK" not in os.environ:
        kwargs.update(init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: CUDA is not available (use --device cpu)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, **kwargs)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", **kwargs)
    return device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------ one run


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def top_kernels(kernels: Sequence[tuple[str, float, float]], steps: int, count: int = 15) -> list[list]:
    """The `count` GPU kernels (NCCL's too) with the most time, as [name, ms per step, launches per
    step]: where one backend's step differs from another's."""
    total: Counter = Counter()
    launches: Counter = Counter()
    for name, a, b in kernels:
        total[name] += b - a
        launches[name] += 1
    return [[name[:160], us / 1e3 / steps, launches[name] / steps] for name, us in total.most_common(count)]


def kernel_overlap(kernels: Sequence[tuple[str, float, float]], steps: int) -> dict:
    """Per step: compute kernel time, NCCL kernel time, and the share of the NCCL kernels' time during
    which a compute kernel runs too (1.0: communication fully hidden behind compute). `kernels` are
    (name, start_us, end_us) of every GPU kernel of one rank."""
    comm = [(a, b) for name, a, b in kernels if "nccl" in name.lower()]
    compute = sorted((a, b) for name, a, b in kernels if "nccl" not in name.lower())
    comm_us = sum(b - a for a, b in comm)
    beside = 0.0
    for a, b in comm:
        beside += _union_length([(max(a, x), min(b, y)) for x, y in compute if x < b and y > a])
    return {
        "kernel_ms_per_step": _union_length(compute) / 1e3 / steps,
        "kernels_per_step": len(compute) / steps,
        "nccl_ms_per_step": comm_us / 1e3 / steps,
        "nccl_overlap": beside / comm_us if comm_us else None,
    }


def _profiled_kernels(step: Any, steps: int) -> list[tuple[str, float, float]]:
    """Runs `step` `steps` times under torch.profiler; the GPU kernels it launched."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
            if is_device_event(e) and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]


def units_per_step(spec: ModelSpec, args: argparse.Namespace) -> tuple[int, str]:
    """Tokens (language models) or images one rank trains on per step."""
    cfg = spec.config_for(args.batch, args.tiny)
    return (cfg.batch * cfg.seq, "tokens") if cfg.seq else (cfg.batch, "images")


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def plan_summary(recorder: Any) -> dict:
    """What the nvf backend compiled: graphs per kind, regions, planning failures, and collectives
    (eager with the communication reason, and inside a region, which must never happen)."""
    from dynamo_nvf.ops.registry import COMMUNICATION, deliberate_eager_reason
    from dynamo_nvf.runtime.region import RegionRuntime

    in_regions = 0
    for gm in recorder.graph_modules:
        for node in gm.graph.nodes:
            if isinstance(node.target, RegionRuntime):
                in_regions += sum(1 for inner in node.target.eager.graph.nodes
                                  if inner.op == "call_function" and deliberate_eager_reason(inner.target))
    return {
        "graphs": dict(Counter(p.kind for p in recorder.plans)),
        "regions": sum(len(p.regions) for p in recorder.plans),
        "planning_errors": sum(1 for p in recorder.plans if p.planning_error),
        "communication_eager": sum(1 for p in recorder.plans for n in p.eager_nodes if n.reason == COMMUNICATION),
        "communication_in_regions": in_regions,
        # with cuda_graphs: graphs replayed as CUDA graphs, and why the others were not
        "cuda_graphs_captured": sum(1 for p in recorder.plans if p.cuda_graph.startswith("captured")),
        "cuda_graphs_refused": sorted({p.cuda_graph for p in recorder.plans if p.cuda_graph.startswith("not")}),
    }


def _nvf_stats() -> dict:
    from dynamo_nvf import STATS

    return STATS.snapshot()


def _nvf_recording() -> Any:
    from dynamo_nvf.backend import recording

    return recording()


class _Trainer:
    """One backend's run on this rank: its model, optimizer and batch, and what its steps recorded
    (losses, synchronized step times, and for an nvf backend the plans it compiled and its counters)."""

    def __init__(self, args: argparse.Namespace, spec: ModelSpec, wrapper: str, backend: str,
                 device: torch.device) -> None:
        self.args, self.backend, self.device = args, backend, device
        self.nvf = backend in NVF_BACKENDS
        self.mark = mark_step(get_backend(backend))  # a new CUDA-graph step, or nothing
        torch.manual_seed(args.seed)  # the same initial weights on every rank
        self.model = build_model(spec, args.batch, True, device, torch.float32, args.tiny)
        self.wrapped = wrap(self.model, wrapper, backend, device, args.dtype == "bf16", args.bucket_cap_mb,
                            args.nvf_options)
        self.optimizer = torch.optim.AdamW(self.wrapped.params_module.parameters(), lr=args.lr)
        torch.manual_seed(args.seed + 1 + dist.get_rank())  # each rank its own batch
        self.inputs = model_inputs(spec, args.batch, True, device, torch.float32, args.tiny)
        self.losses: list[torch.Tensor] = []
        self.times: list[float] = []
        self.graph_breaks = 0
        self.recorded = SimpleNamespace(plans=[], graph_modules=[])  # what plan_summary reads
        self.counted: Counter = Counter()  # nvf counters over every step
        self.counted_timed: Counter = Counter()  # and over the steps after the warm-up

    def one_step(self) -> torch.Tensor:
        self.mark()
        with self.wrapped.autocast():
            loss = self.wrapped.step_module(*self.inputs)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        # A CUDA graph's output lives in its pool and is overwritten by the next replay.
        return loss.detach().float().clone()

    def timed_step(self) -> None:
        """One synchronized, timed step; its plans, graph breaks and nvf counters are this run's."""
        breaks = _graph_breaks()
        before = _nvf_stats() if self.nvf else {}
        with _nvf_recording() if self.nvf else contextlib.nullcontext() as recorder:
            _sync(self.device)
            start = time.perf_counter()
            loss = self.one_step()
            _sync(self.device)
            self.times.append(time.perf_counter() - start)
        self.losses.append(loss)
        self.graph_breaks += _graph_breaks() - breaks
        if self.nvf:
            self.recorded.plans += recorder.plans
            self.recorded.graph_modules += recorder.graph_modules
            delta = Counter({k: v - before[k] for k, v in _nvf_stats().items() if isinstance(v, (int, float))})
            self.counted.update(delta)
            if len(self.times) > self.args.warmup:
                self.counted_timed.update(delta)

    def result(self, alone: bool) -> dict:
        """This run's figures (profiling `--profile-steps` more steps first); losses as a tensor. Peak
        memory, profiled steps included, only for a run `alone` on its device (else None)."""
        profiled: dict[str, Any] = {}
        if self.args.profile_steps and self.device.type == "cuda":
            kernels = _profiled_kernels(self.one_step, self.args.profile_steps)
            profiled = {**kernel_overlap(kernels, self.args.profile_steps),
                        "top_kernels": top_kernels(kernels, self.args.profile_steps)}
        result: dict[str, Any] = {
            "losses": torch.stack(self.losses),
            "times_s": self.times,
            "peak_mem_mib": _peak_mib(self.device) if alone else None,
            "graph_breaks": self.graph_breaks,
            "precision": self.wrapped.precision,
            **profiled,
        }
        if self.nvf:
            timed = self.args.steps - self.args.warmup
            result["fallbacks"] = self.counted["fallbacks"]
            # CUDA graphs replay regions without Python: only the warm-up and recording calls count
            result["nvfuser_calls"] = self.counted["nvfuser_calls"]
            result["nvfuser_calls_per_step"] = self.counted_timed["nvfuser_calls"] / timed
            # of those, the calls replayed by direct launch (the rest went through fec.execute)
            result["direct_launches_per_step"] = self.counted_timed["direct_launches"] / timed
            result["eager_region_calls_per_step"] = self.counted_timed["eager_calls"] / timed
            result.update(plan_summary(self.recorded))
        return result


def _peak_mib(device: torch.device) -> Optional[float]:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def train(args: argparse.Namespace, spec: ModelSpec, wrapper: str, backends: Sequence[str],
          device: torch.device) -> dict[str, dict]:
    """One rank's runs of `backends` (one backend, or every one at once with `--interleave`): per-step
    losses (tensors) and times, dynamo_nvf counters, and peak memory where a run is alone on the device.
    Several go round the backends each step, in reverse order every other round, so that whatever the
    machine does meanwhile (clocks, other jobs, the other rank) falls on all of them alike."""
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    config = torch._dynamo.config
    # The backends' compiled graphs share each code object's cache (a block's forward compiled once per
    # backend): its limits grow with their number, so no backend's blocks fall back to eager.
    with config.patch(recompile_limit=config.recompile_limit * len(backends),
                      accumulated_recompile_limit=config.accumulated_recompile_limit * len(backends)):
        trainers = [_Trainer(args, spec, wrapper, backend, device) for backend in backends]
        for step in range(args.steps):
            for trainer in trainers if step % 2 == 0 else trainers[::-1]:
                trainer.timed_step()
        results = {trainer.backend: trainer.result(alone=len(trainers) == 1) for trainer in trainers}
    del trainers
    return results


def _gathered(args: argparse.Namespace, spec: ModelSpec, wrapper: str, backend: str, device: torch.device,
              local: dict, error: Optional[str]) -> dict:
    """One record from this rank's `local` result (or its error) and every other rank's."""
    losses = local.pop("losses") if error is None else torch.zeros(args.steps)
    per_rank = all_gather_json({"local": local, "error": error}, device)
    losses = losses.to(device)
    dist.all_reduce(losses)  # gloo has no AVG
    losses = (losses / dist.get_world_size()).tolist()
    return merge(per_rank, losses, wrapper, backend, spec, args)


def run_everywhere(args: argparse.Namespace, spec: ModelSpec, wrapper: str, backends: Sequence[str],
                   device: torch.device) -> list[dict]:
    """`train` on every rank, merged: one record per backend, with the global loss per step and each
    figure over ranks. One failure fails every backend of an interleaved group (they share each step)."""
    error, results = None, {}
    try:
        results = train(args, spec, wrapper, backends, device)
    except Exception as exc:  # a deterministic failure reaches the gather on every rank
        error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return [_gathered(args, spec, wrapper, backend, device, results.get(backend, {}), error) for backend in backends]


def all_gather_json(obj: Any, device: torch.device) -> list[Any]:
    """Every rank's JSON-serializable ``obj``, in rank order.

    ``dist.all_gather_object`` pickles through numpy, which is no dependency of this project: this
    gathers each rank's byte length, then its JSON bytes padded to the longest, as uint8 tensors."""
    data = torch.tensor(list(json.dumps(obj).encode()), dtype=torch.uint8, device=device)
    world = dist.get_world_size()
    length = torch.tensor([data.numel()], dtype=torch.int64, device=device)
    lengths = [torch.zeros_like(length) for _ in range(world)]
    dist.all_gather(lengths, length)
    sizes = [int(n.item()) for n in lengths]
    padded = torch.zeros(max(sizes), dtype=torch.uint8, device=device)
    padded[:data.numel()] = data
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded)
    return [json.loads(bytes(t[:n].cpu().tolist()).decode()) for t, n in zip(gathered, sizes)]


def merge(per_rank: list[dict], losses: list[float], wrapper: str, backend: str, spec: ModelSpec,
          args: argparse.Namespace) -> dict:
    """One record from every rank's figures (slowest rank's step time, largest memory, summed errors)."""
    errors = [r["error"] for r in per_rank if r["error"]]
    record: dict[str, Any] = {"wrapper": wrapper, "backend": backend, "error": errors[0] if errors else None}
    if errors:
        return record
    ranks = [r["local"] for r in per_rank]
    slowest = [max(step) for step in zip(*(r["times_s"] for r in ranks))]
    step_ms = statistics.median(slowest[args.warmup:]) * 1e3
    units, unit = units_per_step(spec, args)
    mems = [r["peak_mem_mib"] for r in ranks]
    record.update(
        losses=losses,
        step_ms=step_ms,
        step_ms_each=[t * 1e3 for t in slowest],
        first_step_s=slowest[0],
        throughput=units * len(ranks) / (step_ms / 1e3),
        unit=f"{unit}/s",
        peak_mem_mib=None if mems[0] is None else max(mems),
        peak_mem_mib_per_rank=mems,
        graph_breaks=ranks[0]["graph_breaks"],
        precision=ranks[0]["precision"],
    )
    if "kernel_ms_per_step" in ranks[0]:
        overlaps = [r["nccl_overlap"] for r in ranks if r["nccl_overlap"] is not None]
        record.update(top_kernels_rank0=ranks[0]["top_kernels"], kernels_per_step=ranks[0]["kernels_per_step"],
                      kernel_ms_per_step=max(r["kernel_ms_per_step"] for r in ranks),
                      nccl_ms_per_step=max(r["nccl_ms_per_step"] for r in ranks),
                      nccl_overlap=min(overlaps) if overlaps else None)
    if backend in NVF_BACKENDS:
        record.update(
            fallbacks=sum(r["fallbacks"] for r in ranks),
            planning_errors=sum(r["planning_errors"] for r in ranks),
            nvfuser_calls_per_step=statistics.mean(r["nvfuser_calls_per_step"] for r in ranks),
            direct_launches_per_step=statistics.mean(r["direct_launches_per_step"] for r in ranks),
            eager_region_calls_per_step=statistics.mean(r["eager_region_calls_per_step"] for r in ranks),
            communication_in_regions=sum(r["communication_in_regions"] for r in ranks),
            nvfuser_calls=sum(r["nvfuser_calls"] for r in ranks),
            cuda_graphs_captured=min(r["cuda_graphs_captured"] for r in ranks),
            cuda_graphs_refused=sorted({x for r in ranks for x in r["cuda_graphs_refused"]}),
            **{k: ranks[0][k] for k in ("graphs", "regions", "communication_eager")},
        )
    return record


# ------------------------------------------------------------------------------------ comparison


def compare_losses(losses: Sequence[float], reference: Sequence[float], rtol: float, atol: float) -> dict:
    """Largest absolute and relative difference over the steps, and whether every step is within
    `atol + rtol * |reference|` (as torch.testing.assert_close)."""
    if len(losses) != len(reference):
        raise ValueError(f"{len(losses)} losses against {len(reference)} reference losses")
    abs_diffs = [abs(a - b) for a, b in zip(losses, reference)]
    rel_diffs = [d / abs(b) if b else (0.0 if d == 0 else float("inf")) for d, b in zip(abs_diffs, reference)]
    finite = all(x == x and abs(x) != float("inf") for x in losses)
    ok = finite and all(d <= atol + rtol * abs(b) for d, b in zip(abs_diffs, reference))
    return {"loss_max_abs_diff": max(abs_diffs), "loss_max_rel_diff": max(rel_diffs), "losses_match": ok}


def add_comparisons(records: list[dict], rtol: float, atol: float) -> None:
    """Losses against eager's and step time against the backend's reference (``STEP_REFERENCE``:
    inductor's, or inductor reduce-overhead's for nvf_cudagraphs), under the same wrapper."""
    by_key = {(r["wrapper"], r["backend"]): r for r in records if not r.get("error")}
    for r in records:
        if r.get("error"):
            continue
        eager = by_key.get((r["wrapper"], "eager"))
        if eager is not None:
            r.update(compare_losses(r["losses"], eager["losses"], rtol, atol))
        reference = by_key.get((r["wrapper"], STEP_REFERENCE.get(r["backend"], "inductor")))
        if reference is not None and reference is not r:
            r["step_vs_inductor"] = r["step_ms"] / reference["step_ms"]


def failures(records: list[dict]) -> list[str]:
    """What --check rejects: failed runs; an nvf backend's losses out of tolerance, fallbacks, planning
    errors or collectives inside a region. Another backend's losses out of tolerance show in the table
    but pass: the check gates this backend, and a bf16 conv net's losses drift from eager's over tens of
    steps under inductor too (perf/README.md)."""
    found = []
    for r in records:
        name = f"{r['wrapper']}/{r['backend']}"
        if r.get("error"):
            found.append(f"{name}: {r['error']}")
            continue
        if r.get("losses_match") is False and r["backend"] in NVF_BACKENDS:
            found.append(f"{name}: losses differ from eager's (max abs {r['loss_max_abs_diff']:.3g})")
        for key in ("fallbacks", "planning_errors", "communication_in_regions"):
            if r.get(key):
                found.append(f"{name}: {key} = {r[key]}")
    return found


def _fmt(value: Any, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def render_table(records: list[dict]) -> str:
    from tabulate import tabulate

    rows = []
    for r in records:
        if r.get("error"):
            rows.append([r["wrapper"], r["backend"], "FAILED: " + r["error"][:80]] + [""] * 13)
            continue
        graphs = r.get("graphs")
        rows.append([
            r["wrapper"], r["backend"], _fmt(r["step_ms"], ".2f"), _fmt(r.get("step_vs_inductor"), ".2f"),
            f"{r['throughput']:,.0f} {r['unit']}", _fmt(r["peak_mem_mib"], ".0f"),
            _fmt(r.get("loss_max_abs_diff"), ".2e"), _fmt(r.get("loss_max_rel_diff"), ".2e"),
            {True: "yes", False: "NO", None: "-"}[r.get("losses_match")],
            _fmt(r.get("fallbacks"), "d"), _fmt(r.get("nvfuser_calls_per_step"), ".1f"),
            _fmt(r.get("direct_launches_per_step"), ".1f"),
            "-" if graphs is None else " ".join(f"{k[0]}{v}" for k, v in sorted(graphs.items())),
            _fmt(r.get("kernel_ms_per_step"), ".2f"), _fmt(r.get("nccl_ms_per_step"), ".2f"),
            _fmt(r.get("nccl_overlap"), ".0%"),
        ])
    headers = ["wrapper", "backend", "step ms", "vs inductor (ro)", "throughput", "peak MiB/GPU", "loss max abs diff",
               "max rel diff", "match", "fallbacks", "nvFuser calls/step", "direct launches/step", "graphs (b/f/i)", "kernel ms",
               "NCCL ms", "NCCL beside compute"]
    return tabulate(rows, headers=headers, tablefmt="github")


def header(args: argparse.Namespace, spec: ModelSpec, device: torch.device) -> dict:
    from perf.env import collect_env

    cfg = spec.config_for(args.batch, args.tiny)
    return {
        "env": collect_env(),
        "command": "torchrun --nproc-per-node {} -m perf.distributed {}".format(dist.get_world_size(),
                                                                               " ".join(sys.argv[1:])),
        "world_size": dist.get_world_size(),
        "device": str(device.type),
        "dist_backend": dist.get_backend(),
        "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE"),
        "optimize_ddp": str(torch._dynamo.config.optimize_ddp),
        "model": spec.name,
        "config": cfg.__dict__,
        "dtype": args.dtype,
        "steps": args.steps,
        "warmup": args.warmup,
        "optimizer": f"AdamW(lr={args.lr})",
        "tolerance": {"rtol": args.rtol, "atol": args.atol},
        "data": "one fixed batch per rank (seeded by rank), the same every step",
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    spec = model_spec(args.model, args.config)
    device = init_distributed(args.device, args.timeout)
    rank0 = dist.get_rank() == 0
    try:
        doc = header(args, spec, device)
        if rank0:
            print(f"perf.distributed: {spec.name} {doc['config']} on {doc['world_size']} x {device.type} "
                  f"({doc['dist_backend']}), {args.dtype}, {args.steps} steps, NCCL_NVLS_ENABLE="
                  f"{doc['NCCL_NVLS_ENABLE']}", flush=True)
        records: list[dict] = []
        for wrapper in args.wrappers:
            groups = [args.backends] if args.interleave else [[backend] for backend in args.backends]
            for group in groups:
                started = time.perf_counter()
                records += run_everywhere(args, spec, wrapper, group, device)
                add_comparisons(records, args.rtol, args.atol)
                if rank0:
                    failed = [r["error"] for r in records[-len(group):] if r.get("error")]
                    print(f"  {wrapper}/{','.join(group)}: {time.perf_counter() - started:.1f} s"
                          + (f", FAILED: {failed[0]}" if failed else ""), flush=True)
                    if args.json:
                        _write(args.json, doc, records)
        problems = failures(records)
        if rank0:
            print(render_table(records))
            print("vs inductor (ro): each backend's step time over its reference's under the same wrapper: "
                  + ", ".join(f"{b} over {ref}" for b, ref in STEP_REFERENCE.items()))
            for wrapper, precision in {r["wrapper"]: r["precision"] for r in records if r.get("precision")}.items():
                print(f"{wrapper}: {precision}")
            for problem in problems:
                print(f"CHECK: {problem}")
            if args.json:
                _write(args.json, doc, records)
        return 1 if args.check and problems else 0
    finally:
        dist.destroy_process_group()


def _write(path: str, doc: dict, records: list[dict]) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**doc, "runs": records, "problems": failures(records)}, indent=1))


if __name__ == "__main__":
    code = main()
    # Skip interpreter teardown: with gloo, a rank now and then aborted there ("terminate called
    # without an active exception", a joinable C++ thread destroyed at exit) after its work was
    # done and reported, which failed the launch. Nothing is left to clean up after main().
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
