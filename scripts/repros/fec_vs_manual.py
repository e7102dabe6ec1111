"""The same f32 norm fusion run through nvFuser's executor cache and scheduled by hand with the
heuristic nvFuser computes for it (session 24: the hand-scheduled kernel ran 88-90 us where the
executor cache's took 92-93 at [8192, 4096], inductor 90.5): which kernels, launch parameters and
scheduler parameters each path uses. Set NVFUSER_DUMP=launch_param,scheduler_params,cuda_to_file
to see nvFuser's own account.

    python scripts/repros/fec_vs_manual.py [layernorm|rmsnorm|softmax] [rows] [d]   (float32)
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nvfuser_direct import FusionGuard, SchedulerType, schedule  # noqa: E402

import norm_heuristics_f32 as sweep  # noqa: E402
from kernel_timing import cuda_kernels  # noqa: E402


def describe(label: str, call) -> None:
    events = cuda_kernels(call, 20)
    names: dict[str, list[float]] = {}
    for e in events:
        names.setdefault(e.name, []).append(e.device_time)
    print(f"-- {label}: {len(events) / 20:g} kernels per call", flush=True)
    for name, times in names.items():
        times.sort()
        print(f"   {times[len(times) // 2]:7.2f} us x{len(times) / 20:g}  {name[:150]}", flush=True)


def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else "rmsnorm"
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
    d = int(sys.argv[3]) if len(sys.argv) > 3 else sweep.D
    torch.manual_seed(0)
    x = torch.randn(rows, d, device="cuda")
    w, b = torch.randn(d, device="cuda"), torch.randn(d, device="cuda")
    args = [x, w, b]
    fec = sweep.define(kind, d)
    describe("executor cache", lambda: fec.execute(args))
    print("   executor cache scheduled IR (head):", flush=True)
    try:
        print("\n".join(fec.fec.get_most_recent_scheduled_ir().splitlines()[:6]), flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"   (no scheduled IR: {exc})")
    fd = sweep.define(kind, d)
    guard = FusionGuard(fd.fusion)
    params = schedule.compute_heuristics(fd.fusion, SchedulerType.inner_persistent, args)
    print("   hand heuristic:", str(params).replace("\n", " | ")[:1500], flush=True)
    schedule.schedule(fd.fusion, SchedulerType.inner_persistent, params)
    del guard
    describe("by hand", lambda: fd.manual_execute(args, params))
    print("   PDL by hand:", fd.ke.is_programmatic_dependent_launch_enabled(), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), f"fec_{kind}_{rows}x{d}.cu"), "w") as f:
        f.write(fec.fec.get_cuda_kernel(args))


if __name__ == "__main__":
    main()
