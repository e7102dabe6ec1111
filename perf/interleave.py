"""Side-by-side step times: backends of one workload compiled once each, then timed in alternating rounds.

    python -m perf.interleave llama_train_bf16_small --backends inductor_ro,nvf_cudagraphs,nvf_aten_glue_cudagraphs

Why: a model step at a small batch is host-bound, and the GPU machines' host speed drifts within a
run (perf's host floor grew 46% over one 18-pair run on an H100, 2026-11-23) and from minute to
minute.  ``python -m perf`` measures pair after pair, so two backends of one workload are timed
minutes apart and their ratio carries the drift: the same nvf_cudagraphs/inductor_ro ratio read
1.01x, then 1.32x in two runs on one day (H100, 2026-11-23).  Here every backend of a workload stays
compiled (each with its own model instance), and each round times one batch of every backend, in an
order rotated per round; the drift then lands on all of them alike.

Reported per backend: the median over rounds of the step time (ms, wall clock with host, batches
start synchronized), and against the reference backend the median of the per-round ratios with
their spread (lowest and highest round).  With ``--acceptance``, issue #10's criteria are read
from the per-round ratios (:func:`acceptance_document`, :mod:`perf.acceptance`).  Compile times are
not comparable here (backends after the first may reuse Dynamo's and dynamo_nvf's process caches);
``python -m perf`` measures them.

``--gpu`` times GPU time per call instead, as ``python -m perf`` does for blocks (``gpu_us``: CUDA
events around each call, the L2 flushed and the host hidden behind a spin kernel before it; a
round's value is the median of ``--calls`` calls), in the same rotated rounds: the GPU's clocks
drift too, and a block within 1% of another backend needs both timed in one stretch. With
``--acceptance`` it reads issue #11's block criteria (:data:`GPU_CRITERIA`) from the per-round
ratios.

A workload that fails (a backend's compile, a step's error) is recorded with its error (the JSON's
``failed``) and the run goes on to the next; the exit status is then 1.

``--per-gpu K`` (``--gpus N``, ``--isolate S``) runs each workload in a process of its own, K per GPU
at once (perf/isolate.py): their compiles overlap, their warm-ups, rounds and profiles take turns on
the GPU (perf/gpu_turn.py); the parent joins the processes' JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from tabulate import tabulate

from .backends import get_backend, reset_compile_state
from .gpu_turn import gpu_turn
from .measure import (DEFAULT_CONFIG, backend_step, device_sync, event_times_us, hide_host_sleep_cycles,
                      profile_counts, steps_per_batch, timed_batches)
from .workloads import REGISTRY, select


@dataclass
class InterleavedResult:
    """Step times (ms) or GPU times (us, ``--gpu``) per backend, one per round, and the per-round
    ratios against ``reference``."""

    workload: str
    reference: str
    #: Steps per timed batch, per backend: each backend's batch lasts about ``batch_s`` at its own step
    #: time. (One count for all, sized by the slowest backend, gave a CUDA-graph backend 3 ms batches
    #: beside eager's 50 ms, and per-round ratios spread +-10%: H100, 2026-11-24.)
    steps_per_batch: dict[str, int] = field(default_factory=dict)
    step_ms: dict[str, list[float]] = field(default_factory=dict)
    #: Host enqueue ms per step (until the batch's last call returned), one per round.
    enqueue_ms: dict[str, list[float]] = field(default_factory=dict)
    #: GPU kernel ms per step and kernels per step (torch.profiler, after the timed rounds; CUDA only).
    kernel_ms: dict[str, float] = field(default_factory=dict)
    kernels: dict[str, float] = field(default_factory=dict)
    #: With ``--gpu``: GPU us per call, one per round (each the median of the round's calls); then
    #: the rounds' metric, and step_ms is empty.
    gpu_us: dict[str, list[float]] = field(default_factory=dict)
    #: The timed metric: "step_ms" (wall time per step, host included) or "gpu_us".
    metric: str = "step_ms"

    def series(self) -> dict[str, list[float]]:
        return getattr(self, self.metric)

    def median_ms(self, backend: str) -> float:
        """The median over rounds of the timed metric (ms for step_ms, us for gpu_us)."""
        return statistics.median(self.series()[backend])

    def ratios(self, backend: str, reference: Optional[str] = None, metric: Optional[str] = None) -> list[float]:
        """Per-round ratio backend / reference (each round's batches ran back to back)."""
        series = getattr(self, metric or self.metric)
        return [a / b for a, b in zip(series[backend], series[reference or self.reference])]

    def summary(self) -> dict:
        out = {}
        for name in self.series():
            r = self.ratios(name)
            out[name] = {
                "median_ms": self.median_ms(name),  # in `unit` (us for gpu_us)
                "unit": "us" if self.metric == "gpu_us" else "ms",
                "ratio_median": statistics.median(r),
                "ratio_low": min(r),
                "ratio_high": max(r),
                "kernel_ms": self.kernel_ms.get(name),
                "kernels": self.kernels.get(name),
            }
        return out


def rotated(names: Sequence[str], round_index: int) -> list[str]:
    """The order of one round: the list rotated by the round's index (no backend always goes first)."""
    k = round_index % len(names)
    return list(names[k:]) + list(names[:k])


def _compiled_steps(workload: str, backends: Sequence[str], device: str) -> dict[str, Callable[[], object]]:
    """One step per backend, each on its own instance of ``workload``, called once (the first call
    compiles and, with graphs, records). Outside the GPU's turn (perf/gpu_turn.py): with several
    processes per GPU (``--per-gpu``) the compiles overlap."""
    if len(set(backends)) != len(backends) or not backends:
        raise ValueError(f"need distinct backends, got {list(backends)}")
    wl = REGISTRY[workload]
    reset_compile_state()
    steps: dict[str, Callable[[], object]] = {}
    for name in backends:
        step = backend_step(get_backend(name), wl.instantiate(device, tiny=device == "cpu"))
        step()
        steps[name] = step
    return steps


def _warm(steps: dict[str, Callable[[], object]], warmup: int) -> None:
    """``warmup`` more steps of each backend (inside the GPU's turn: they run the GPU)."""
    for step in steps.values():
        for _ in range(warmup):
            step()


def _profile_into(result: InterleavedResult, steps: dict[str, Callable[[], object]], profile_steps: int) -> None:
    """Kernels and GPU kernel ms per step of each backend (torch.profiler), into ``result``."""
    if profile_steps <= 0:
        return
    for name, step in steps.items():
        kernels, _, dev_us = profile_counts(step, profile_steps)
        result.kernels[name] = kernels
        result.kernel_ms[name] = dev_us / 1e3


def interleaved_steps(
    workload: str,
    backends: Sequence[str],
    *,
    rounds: int = 15,
    batch_s: float = 0.05,
    min_steps: int = 3,
    max_steps: int = 200,
    warmup: int = 5,
    device: Optional[str] = None,
    sync: Optional[Callable[[], None]] = None,
    profile_steps: int = 3,
) -> InterleavedResult:
    """Compiles ``workload`` once per backend, then times ``rounds`` rounds of one batch each; then,
    on CUDA, profiles ``profile_steps`` steps of each (kernel ms and kernels per step)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    sync = device_sync() if sync is None else sync
    steps = _compiled_steps(workload, backends, device)
    with gpu_turn():
        _warm(steps, warmup)
        counts: dict[str, int] = {}
        for name, step in steps.items():
            span = timed_batches(step, 1, 3, sync, time.perf_counter)[0]
            counts[name] = steps_per_batch((span[2] - span[0]) / 3, batch_s, min_steps, max_steps)
        result = InterleavedResult(workload=workload, reference=backends[0], steps_per_batch=counts,
                                   step_ms={name: [] for name in backends}, enqueue_ms={name: [] for name in backends})
        for r in range(rounds):
            for name in rotated(backends, r):
                n = counts[name]
                start, returned, end = timed_batches(steps[name], 1, n, sync, time.perf_counter)[0]
                result.step_ms[name].append((end - start) / n * 1e3)
                result.enqueue_ms[name].append((returned - start) / n * 1e3)
        if device == "cuda":  # after the timing: a profile leaves CUPTI behind
            _profile_into(result, steps, profile_steps)
    steps.clear()
    reset_compile_state()
    return result


def interleaved_gpu(
    workload: str,
    backends: Sequence[str],
    *,
    rounds: int = 9,
    calls: int = 10,
    warmup: int = 5,
    flush_mib: int = DEFAULT_CONFIG.flush_mib,
    profile_steps: int = 3,
) -> InterleavedResult:
    """Compiles ``workload`` once per backend, then times ``rounds`` rounds of GPU time per call
    (CUDA only): each round, every backend in rotated order, ``calls`` calls each, every one after an
    L2 flush and behind a spin as long as 1.5 of its synchronized wall time (python -m perf's
    gpu_us); then profiles each backend (kernels per call)."""
    steps = _compiled_steps(workload, backends, "cuda")
    with gpu_turn():
        _warm(steps, warmup)
        sleeps = {name: hide_host_sleep_cycles(step) for name, step in steps.items()}
        flush = torch.empty(flush_mib * 2**20, dtype=torch.int8, device="cuda")
        result = InterleavedResult(workload=workload, reference=backends[0], metric="gpu_us",
                                   gpu_us={name: [] for name in backends})
        for r in range(rounds):
            for name in rotated(backends, r):
                result.gpu_us[name].append(statistics.median(event_times_us(steps[name], calls, flush, sleeps[name])))
        del flush
        _profile_into(result, steps, profile_steps)
    steps.clear()
    reset_compile_state()
    return result


#: Issue #11's block criteria, read from interleaved GPU-time rounds: (text, subject, reference,
#: aggregate over the blocks, limit) on the medians of per-round ratios.
GPU_CRITERIA: tuple[tuple[str, str, str, str, float], ...] = (
    ("every block's GPU time <= inductor", "nvf_bookend", "inductor", "max", 1.0),
    ("geomean GPU time <= 0.95x inductor", "nvf_bookend", "inductor", "geomean", 0.95),
    ("no block loses to untrimmed", "nvf_bookend", "nvf_untrimmed", "max", 1.0),
    ("no block loses to eager", "nvf_bookend", "eager", "max", 1.0),
)


def gpu_acceptance(results: Sequence[InterleavedResult]) -> tuple[str, bool]:
    """Issue #11's block criteria over interleaved GPU-time results: a table and whether all pass.
    A criterion missing a backend or a workload's ratio is INCOMPLETE, which fails."""
    from .report import geomean

    rows, ok = [], True
    workloads = {res.workload for res in results}
    for text, subject, reference, aggregate, limit in GPU_CRITERIA:
        ratios = {res.workload: statistics.median(res.ratios(subject, reference))
                  for res in results if subject in res.gpu_us and reference in res.gpu_us}
        worst = max(ratios, key=ratios.__getitem__) if ratios else ""
        value = (ratios[worst] if aggregate == "max" else geomean(ratios.values())) if ratios else None
        if set(ratios) != workloads or value is None:
            rows.append([text, f"{subject}/{reference}", "-", "-", f"<= {limit:.2f}x", "INCOMPLETE"])
            ok = False
            continue
        status = "PASS" if value <= limit else "FAIL"
        ok &= status == "PASS"
        over = sorted((wl for wl, r in ratios.items() if r > limit), key=lambda wl: -ratios[wl])
        rows.append([text, f"{subject}/{reference}", f"{value:.3f}x", ", ".join(f"{wl} {ratios[wl]:.3f}x" for wl in over)
                     or (worst if aggregate == "max" else "-"), f"<= {limit:.2f}x", status])
    table_text = tabulate(rows, headers=["criterion", "ratio", "value", "over the limit (median of rounds)",
                                         "limit", "status"], tablefmt="github")
    return table_text + f"\n\nacceptance: {'PASS' if ok else 'NOT MET'}", ok


def acceptance_document(results: Sequence[InterleavedResult]) -> dict:
    """A result document that perf.acceptance reads (issue #10's criteria), from interleaved rounds.

    Each workload's ratios are the medians of its per-round ratios (``round_ratios``), which carry
    no drift between backends; the step and enqueue times beside them are medians over rounds.
    """
    doc: dict = {"results": {}, "workloads": {}, "round_ratios": {}, "backends": [], "config": {}}
    for res in results:
        if res.metric != "step_ms":
            continue
        doc["workloads"][res.workload] = {"timing": "step"}
        doc["results"][res.workload] = {
            name: {"step_ms": statistics.median(res.step_ms[name]),
                   "enqueue_ms": statistics.median(res.enqueue_ms[name]) if res.enqueue_ms.get(name) else None}
            for name in res.step_ms}
        doc["round_ratios"][res.workload] = {
            metric: {f"{a}/{b}": statistics.median(res.ratios(a, b, metric))
                     for a in res.step_ms for b in res.step_ms if a != b and getattr(res, metric).get(a)}
            for metric in ("step_ms", "enqueue_ms")}
        doc["backends"] += [name for name in res.step_ms if name not in doc["backends"]]
    return doc


def write_json(path: str, results: Sequence[InterleavedResult], failed: Optional[dict[str, str]] = None) -> None:
    """The per-round results, their acceptance document (what ``--from-json`` reads back) and the
    workloads that failed, each with its error."""
    with open(path, "w") as f:
        json.dump({"interleaved": [{**asdict(r), "summary": r.summary()} for r in results],
                   "failed": dict(failed or {}),
                   "acceptance_document": acceptance_document(results)}, f, indent=1)


def read_json(path: str) -> tuple[list[InterleavedResult], dict[str, str]]:
    """The InterleavedResults a ``--json`` file holds and the workloads it records as failed, each
    with its error (one read of the file)."""
    with open(path) as f:
        doc = json.load(f)
    names = set(InterleavedResult.__dataclass_fields__)
    results = [InterleavedResult(**{k: v for k, v in entry.items() if k in names}) for entry in doc["interleaved"]]
    return results, dict(doc.get("failed", {}))


def failure_reason(error: BaseException) -> str:
    """An error's type and first line: what a table row of a failed workload says."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:300] if lines else ''}"


def table(results: Sequence[InterleavedResult]) -> str:
    """One metric's results as a table (a column holds one unit: main prints one table per metric)."""
    if len({res.metric for res in results}) > 1:
        raise ValueError("one table per metric: step times and GPU times do not share a column")
    gpu = bool(results) and results[0].metric == "gpu_us"
    rows = []
    for res in results:
        for name, s in res.summary().items():
            ratio = "-" if name == res.reference else (
                f"{s['ratio_median']:.3f}x [{s['ratio_low']:.3f}, {s['ratio_high']:.3f}]")
            kernel_ms = "-" if s["kernel_ms"] is None else f"{s['kernel_ms']:.3f}"
            kernels = "-" if s["kernels"] is None else f"{s['kernels']:g}"
            rows.append([res.workload, name, f"{s['median_ms']:.3f}", ratio, kernel_ms, kernels,
                         res.steps_per_batch.get(name, "-")])
    return tabulate(rows, headers=["workload", "backend",
                                   "GPU us per call (median of rounds)" if gpu else "step ms (median of rounds)",
                                   "/ first backend: median [low, high] of rounds", "GPU kernel ms", "kernels",
                                   "steps/batch"], tablefmt="github")


def workload_names(spec: str, tags: Sequence[str] = ()) -> list[str]:
    """The comma-separated names of `spec` (fnmatch patterns expanded over the registry, in its order),
    then every workload (python -m perf --all) with one of `tags` not named already."""
    names: list[str] = []
    for entry in (w.strip() for w in spec.split(",") if w.strip()):
        if any(c in entry for c in "*?["):
            hits = [n for n in REGISTRY if fnmatchcase(n, entry)]
            if not hits:
                raise KeyError(f"no workload matches {entry!r}")  # a typo must not time nothing
            names += [n for n in hits if n not in names]
        elif entry not in names:
            names.append(entry)
    if tags:
        names += [w.name for w in select(tags=list(tags), all_=True) if w.name not in names]
    return names


def child_command(workload: str, args: argparse.Namespace, json_path: Path) -> list[str]:
    """``python -m perf.interleave`` of one workload with the parent's backends and settings."""
    cmd = [sys.executable, "-m", "perf.interleave", workload, "--backends", args.backends,
           "--rounds", str(args.rounds), "--batch-s", str(args.batch_s), "--json", str(json_path)]
    return cmd + (["--gpu", "--calls", str(args.calls)] if args.gpu else [])


def run_isolated(workloads: Sequence[str], args: argparse.Namespace,
                 checkpoint: Callable[[list[InterleavedResult], dict[str, str]], None]) -> tuple[
                     list[InterleavedResult], dict[str, str]]:
    """Each workload interleaved in a process of its own (perf/isolate.py's children: a crash or hang
    costs only its row), ``--gpus`` x ``--per-gpu`` at a time: with several per GPU their compiles
    overlap while their warm-ups, timed rounds and profiles take turns on the GPU
    (perf/gpu_turn.py), each workload's backends still timed side by side. ``checkpoint`` gets the
    results so far after each child."""
    from .isolate import DEFAULT_TIMEOUT_S, describe_exit, kill_children_on_sigterm, run_children

    results: list[InterleavedResult] = []
    failed: dict[str, str] = {}
    timeout_s = args.isolate or DEFAULT_TIMEOUT_S

    def done(run) -> None:
        try:
            got, failures = read_json(str(run.out))
        except (OSError, ValueError, KeyError, TypeError):  # no file, or one cut off by the kill
            got, failures = [], {}
        results.extend(got)
        failed.update(failures)
        if not got and run.name not in failed:
            failed[run.name] = describe_exit(run.code, run.timed_out, timeout_s)
        print(f"{run.name}: {'ok' if got else failed[run.name]} ({run.took:.0f} s; log {run.log})", flush=True)
        if got:
            print(table(got), flush=True)
        else:
            for line in run.log_tail():
                print(f"    | {line[:300]}", flush=True)
        checkpoint(results, failed)

    kill_children_on_sigterm()
    run_children([(name, REGISTRY[name].cost) for name in workloads],
                 lambda name, out: child_command(name, args, out), timeout_s=timeout_s, gpus=args.gpus,
                 per_gpu=args.per_gpu, on_done=done)
    order = {name: i for i, name in enumerate(workloads)}
    results.sort(key=lambda r: order.get(r.workload, len(order)))
    return results, failed


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.interleave", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="?", default="",
                   help="comma-separated perf workload names or fnmatch patterns (see python -m perf --list)")
    p.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="every workload (python -m perf --all) with this tag, after the named ones")
    p.add_argument("--backends", help="comma-separated; the first is the reference of the ratios")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--gpu", action="store_true",
                   help="GPU time per call (python -m perf's gpu_us) instead of step time; with --acceptance, "
                        "issue #11's block criteria (backends inductor, nvf_bookend, nvf_untrimmed, eager)")
    p.add_argument("--calls", type=int, default=10, help="with --gpu: timed calls per backend per round")
    p.add_argument("--batch-s", type=float, default=0.05,
                   help="target seconds per batch, each backend at its own step time (default 0.05)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--acceptance", action="store_true",
                   help="issue #10's criteria from the per-round ratios (backends eager, inductor, inductor_ro, "
                        "nvf_bookend, nvf_cudagraphs); exit 1 when not met")
    p.add_argument("--isolate", type=float, metavar="S",
                   help="each workload in a process of its own, killed after S seconds (default 900 with "
                        "--per-gpu or --gpus)")
    p.add_argument("--gpus", type=int, default=1, help="with --isolate: workload processes on N GPUs at once")
    p.add_argument("--per-gpu", type=int, default=1, metavar="K",
                   help="with --isolate: K workload processes per GPU, compiling at once and timing in turns")
    p.add_argument("--from-json", metavar="PATH[,PATH...]",
                   help="measure nothing: read the results of earlier runs' --json files (one device call "
                        "each, when all workloads do not fit in one) and print their tables and acceptance")
    args = p.parse_args(argv)
    failed: dict[str, str] = {}
    if args.from_json:
        results = []
        for path in (path for path in args.from_json.split(",") if path):
            got, failures = read_json(path)
            results += got
            failed.update(failures)
    else:
        if not (args.workloads or args.tag) or not args.backends:
            p.error("workloads (or --tag) and --backends are required unless --from-json is given")
        names = [b for b in args.backends.split(",") if b]
        workloads = workload_names(args.workloads, args.tag)
        results = []
        isolated = args.isolate is not None or args.gpus > 1 or args.per_gpu > 1
        if isolated:
            def checkpoint(so_far: list[InterleavedResult], failures: dict[str, str]) -> None:
                if args.json:
                    write_json(args.json, so_far, failures)

            results, failed = run_isolated(workloads, args, checkpoint)
        for workload in ([] if isolated else workloads):
            try:
                if args.gpu:
                    res = interleaved_gpu(workload, names, rounds=args.rounds, calls=args.calls)
                else:
                    res = interleaved_steps(workload, names, rounds=args.rounds, batch_s=args.batch_s)
            except Exception as error:  # one workload's failure (a backend's, the model's) ends only its row
                failed[workload] = failure_reason(error)
                traceback.print_exc()
                print(f"{workload}: failed: {failed[workload]}", flush=True)
            else:
                results.append(res)
                print(table([res]), flush=True)
            if args.json:  # after each workload: a call cut off by its time limit keeps what it measured
                write_json(args.json, results, failed)
    steps = [res for res in results if res.metric == "step_ms"]
    gpu = [res for res in results if res.metric == "gpu_us"]
    for group in (steps, gpu):  # one table per metric: a column holds one unit
        if group:
            print()
            print(table(group))
    if failed:
        print()
        print(tabulate(sorted(failed.items()), headers=["workload", "failed"], tablefmt="github"))
    doc = acceptance_document(results)
    verdict_ok = not failed
    if args.acceptance and steps:
        from .acceptance import passed, render_acceptance

        print()
        print(render_acceptance(doc))
        verdict_ok = passed(doc)
    if args.acceptance and gpu:
        text, gpu_ok = gpu_acceptance(gpu)
        print()
        print(text)
        verdict_ok = verdict_ok and gpu_ok
    if args.json:
        write_json(args.json, results, failed)
    return 0 if verdict_ok else 1


if __name__ == "__main__":
    sys.exit(main())
