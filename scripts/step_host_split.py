"""Where a steady step's host time goes: nvFuser regions against everything else (issue #10).

    python scripts/step_host_split.py convnext_train_bf16_small [--backend nvf_bookend] [--steps 40] [--ops]

For one perf workload it prints, per step in steady state:
- the wall time of a step (no sync inside; one at the end), untimed and with every region timed;
- the host time spent inside region calls (RegionRuntime.__call__, which is fec.execute plus ~1 us),
  their count, and the rest (Dynamo's guards, aot_autograd's wrappers, autograd, eager ops, views);
- per region (its graph and name): calls per step, host us per call, the share of its calls that went
  through fec.execute rather than direct launch, nvFuser kernels (from fec.get_cuda_kernel), inputs
  and outputs;
- with --ops, torch.profiler's CPU-only table (no CUPTI): the ops with the most own host time per step.
  Profiling inflates each op's time, so read it for counts and proportions.

Other backends (eager, inductor) print the wall time and the --ops table only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from perf.backends import get_backend, reset_compile_state  # noqa: E402
from perf.measure import backend_step, device_sync, timed_batches  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402


_sync = device_sync()


def _wall_us(step, steps: int, rounds: int = 5) -> float:
    """Median over rounds of the mean step time of `steps` back-to-back steps (perf's timed_batches:
    each round starts and ends synchronized, the garbage collector off)."""
    spans = timed_batches(step, rounds, steps, _sync, time.perf_counter)
    return statistics.median((synced - start) / steps * 1e6 for start, _, synced in spans)


def _kernels_of(runtime, args) -> str:
    """Kernel count of the region's compiled fusion for `args`, or '-' when unknown."""
    entry = getattr(runtime, "_fast", None)
    if entry is None:
        entries = list(getattr(runtime, "_by_descriptor", {}).values())
        entry = entries[-1] if entries else None
    fec = getattr(entry, "fec", None)
    if fec is None:
        return "-"
    try:
        device = next(a.device.index for a in args if isinstance(a, torch.Tensor) and a.is_cuda)
        return str(fec.get_cuda_kernel(list(args), device=device).count("__global__"))
    except Exception as exc:  # noqa: BLE001 - a diagnostic only
        return f"? ({type(exc).__name__})"


def split_regions(step, steps: int) -> None:
    from dynamo_nvf.runtime import region as region_module
    from dynamo_nvf.runtime.region import RegionRuntime

    # keyed by runtime: region names repeat across a step's graphs (forward, backward)
    totals: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    executes: dict[int, int] = defaultdict(int)  # calls that went through fec.execute, not direct launch
    last_args: dict[int, tuple] = {}
    runtimes: dict[int, object] = {}
    active: list[int] = []
    original, original_execute = RegionRuntime.__call__, region_module._execute

    def timed(self, *args):
        key = id(self)
        active.append(key)
        start = time.perf_counter()
        try:
            return original(self, *args)
        finally:
            totals[key] += time.perf_counter() - start
            counts[key] += 1
            last_args[key] = args
            runtimes[key] = self
            active.pop()

    def counted_execute(runner, args, enable_options):
        if active:
            executes[active[-1]] += 1
        return original_execute(runner, args, enable_options)

    untimed = _wall_us(step, steps)
    RegionRuntime.__call__, region_module._execute = timed, counted_execute
    try:
        for _ in range(3):
            step()
        _sync()
        totals.clear()
        counts.clear()
        executes.clear()
        rounds = 5
        timed_wall = _wall_us(step, steps, rounds)
    finally:
        RegionRuntime.__call__, region_module._execute = original, original_execute
    n = steps * rounds
    region_us = sum(totals.values()) / n * 1e6
    calls = sum(counts.values()) / n
    print(f"step wall us: {untimed:.1f} untimed, {timed_wall:.1f} with regions timed")
    print(f"region calls per step: {calls:.1f}; host us in region calls per step: {region_us:.1f} "
          f"({region_us / timed_wall:.0%} of the timed step); the rest: {timed_wall - region_us:.1f}")
    print(f"{'region':<36} {'calls/step':>10} {'us/call':>8} {'us/step':>8} {'fec.exec':>8} {'kernels':>8} "
          f"{'in':>4} {'out':>4}  launch")
    for key in sorted(totals, key=lambda k: -totals[k]):
        per_call = totals[key] / counts[key] * 1e6
        runtime = runtimes[key]
        plan = runtime.plan
        label = runtime.profile_label.removeprefix("dynamo_nvf ")
        print(f"{label[:36]:<36} {counts[key] / n:>10.2f} {per_call:>8.1f} {totals[key] / n * 1e6:>8.1f} "
              f"{executes[key] / counts[key]:>8.0%} {_kernels_of(runtime, last_args[key]):>8} "
              f"{len(plan.inputs):>4} {len(plan.outputs):>4}  {plan.launch[:90]}")


def op_table(step, steps: int, top: int) -> None:
    from torch.profiler import ProfilerActivity, profile

    _sync()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
        _sync()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    print(f"{'op (torch.profiler, CPU only)':<60} {'calls/step':>10} {'self us/step':>12}")
    for evt in rows:
        print(f"{evt.key[:60]:<60} {evt.count / steps:>10.1f} {evt.self_cpu_time_total / steps:>12.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload")
    parser.add_argument("--backend", default="nvf_bookend")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--ops", action="store_true", help="also torch.profiler's CPU-only op table")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    reset_compile_state()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = get_backend(args.backend)
    step = backend_step(backend, REGISTRY[args.workload].instantiate(device, tiny=device == "cpu"))
    for _ in range(10):
        step()
    _sync()
    print(f"=== {args.workload} {args.backend}")
    if args.backend.startswith("nvf"):
        split_regions(step, args.steps)
    else:
        print(f"step wall us: {_wall_us(step, args.steps):.1f}")
    if args.ops:
        op_table(step, 5, args.top)


if __name__ == "__main__":
    main()
