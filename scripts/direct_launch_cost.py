"""What direct launch saves, measured in one process (issue #10): per region call and per step.

    python scripts/direct_launch_cost.py bert_fwd_bf16_small [more workloads] [--rounds 9] [--steps 40]

For each perf workload under nvf_bookend (direct_launch on, the default), after warm-up:
- per region that launches directly, host us per call of: the direct (C) launcher alone, the region's
  whole call (RegionRuntime, which then launches directly), fec.execute alone (the same inputs), and
  the output allocation alone from Python; medians of interleaved rounds; and its work buffers;
- the step's wall time with every region's launcher on against all of them off (the regions then
  call fec.execute, as with direct_launch=False), rounds alternating in the same process, so that
  the host's drift between processes and over time cancels in the per-round ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from perf.backends import get_backend, reset_compile_state  # noqa: E402
from perf.measure import backend_step, device_sync, summarize_steps, timed_batches  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402

_sync = device_sync()


def _per_call_us(fn, calls: int) -> float:
    """Host us per call of `calls` back-to-back calls (perf.measure.timed_batches' enqueue span)."""
    ((start, returned, _),) = timed_batches(fn, 1, calls, _sync, time.perf_counter)
    return (returned - start) / calls * 1e6


def _runtimes_with_args(step):
    """Every RegionRuntime the step calls, with the arguments of its last call."""
    from dynamo_nvf.runtime.region import RegionRuntime

    seen: dict[int, tuple] = {}
    original = RegionRuntime.__call__

    def record(self, *args):
        seen[id(self)] = (self, args)
        return original(self, *args)

    RegionRuntime.__call__ = record
    try:
        step()
        _sync()
    finally:
        RegionRuntime.__call__ = original
    return list(seen.values())


def measure(workload: str, rounds: int, steps: int, calls: int) -> None:
    reset_compile_state()
    step = backend_step(get_backend("nvf_bookend"), REGISTRY[workload].instantiate("cuda", tiny=False))
    for _ in range(10):
        step()
    _sync()
    runtimes = _runtimes_with_args(step)
    direct = [(rt, args) for rt, args in runtimes if rt._direct is not None]
    print(f"=== {workload}: {len(runtimes)} regions called, {len(direct)} launch directly")
    for rt, _ in runtimes:
        if rt._direct is None:
            print(f"  {rt.plan.name}: {rt.plan.launch or '(no steady fast path)'}")
    if direct:
        print(f"  {'region':<16} {'direct us':>9} {'call us':>9} {'fec us':>9} {'alloc us':>9} kernels/work  "
              f"(median of {rounds} rounds x {calls} calls; call: the region's whole call, direct)")
    for rt, args in direct:
        kernel, fec = rt._direct, rt._fast.fec
        shapes = [(o.shape, o.stride(), o.dtype, o.device) for o in kernel(args)]
        d, c, f, a = [], [], [], []
        for _ in range(rounds):
            d.append(_per_call_us(lambda: kernel(args), calls))
            c.append(_per_call_us(lambda: rt(*args), calls))
            f.append(_per_call_us(lambda: fec.execute(args), calls))
            a.append(_per_call_us(lambda: [torch.empty_strided(s, st, dtype=dt, device=dev)
                                           for s, st, dt, dev in shapes], calls))
        print(f"  {rt.plan.name:<16} {statistics.median(d):>9.1f} {statistics.median(c):>9.1f} "
              f"{statistics.median(f):>9.1f} {statistics.median(a):>9.1f} {len(kernel.dims):>3}/{kernel.work_buffers}")
    saved = {id(rt): rt._direct for rt, _ in direct}
    on, off, ratios = [], [], []
    for r in range(rounds):
        walls = {}
        for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
            for rt, _ in direct:
                rt._direct = saved[id(rt)] if mode == "on" else None
            spans = timed_batches(step, 3, steps, _sync, time.perf_counter)
            walls[mode] = summarize_steps(spans, steps).step_ms_median * 1e3
        on.append(walls["on"])
        off.append(walls["off"])
        ratios.append(walls["on"] / walls["off"])
    for rt, _ in direct:
        rt._direct = saved[id(rt)]
    print(f"  step wall us, direct on: {statistics.median(on):.1f}, off (fec.execute): {statistics.median(off):.1f}; "
          f"on/off per round: median {statistics.median(ratios):.3f}x, range [{min(ratios):.3f}, {max(ratios):.3f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    for workload in args.workloads:
        measure(workload, args.rounds, args.steps, args.calls)


if __name__ == "__main__":
    main()
