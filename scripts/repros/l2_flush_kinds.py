"""Is a block's loss to inductor in its kernel or around it, and does it need a dirty L2? (issue #11)

perf's `gpu_us` zeroes a 256 MB buffer before each call (`flush.zero_()`), which leaves the L2 full of
dirty lines, then hides the host behind a spin. Under that metric nvFuser's f32 norm/softmax blocks lose
3-4% to inductor while the profiler's kernel times (no flush) tie. This times each backend's compiled
block per call, side by side in one process, in four ways:

* events, no flush;
* events, after a zeroing flush (dirty L2: perf's metric);
* events, after a reading flush (`flush.sum()`: the L2 holds clean lines);
* the profiler's kernel durations after a zeroing flush (the kernel alone, no launch latency).

    python scripts/repros/l2_flush_kinds.py layernorm_fwd_f32 embedding_scale_add_bf16 --backends inductor,nvf_bookend

Answer on an H100 (session 21; scripts/repros/README.md has the table): the gap is in nvFuser's kernel
and appears after either flush, clean or dirty; without a flush the two tie.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from perf.backends import get_backend, reset_compile_state  # noqa: E402
from perf.measure import backend_step, hide_host_sleep_cycles  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402
from kernel_timing import cuda_kernels  # noqa: E402

FLUSH_BYTES = 256 << 20


def event_us(step, flush_kind: str, flush: torch.Tensor, sink: torch.Tensor, cycles: int, iters: int) -> float:
    """Median CUDA-event time of one call after the given flush and a spin that hides the host."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        _flush(flush_kind, flush, sink)
        torch.cuda._sleep(cycles)
        starts[i].record()
        step()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))


def _flush(flush_kind: str, flush: torch.Tensor, sink: torch.Tensor) -> None:
    if flush_kind == "zero":
        flush.zero_()
    elif flush_kind == "read":
        torch.sum(flush, dim=(0,), out=sink)


def kernel_us_after_flush(step, flush_kind: str, flush: torch.Tensor, sink: torch.Tensor, iters: int) -> float:
    """The profiler's kernel time per call after the given flush; the flush's own kernels (their exact
    names, from a profile of the flush alone) are left out, the workload's are all counted."""
    flush_names = {e.name for e in cuda_kernels(lambda: _flush(flush_kind, flush, sink), 3)}
    per_kernel: dict[str, list[float]] = {}
    for e in cuda_kernels(lambda: (_flush(flush_kind, flush, sink), step()), iters):
        if e.name not in flush_names:
            per_kernel.setdefault(e.name, []).append(e.device_time)
    return sum(statistics.median(v) * len(v) / iters for v in per_kernel.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--backends", default="inductor,nvf_bookend")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda").fill_(1.0)
    sink = torch.empty((), dtype=torch.float32, device="cuda")
    for name in args.workloads:
        steps = {}
        for backend_name in args.backends.split(","):
            reset_compile_state()
            step = backend_step(get_backend(backend_name), REGISTRY[name].instantiate("cuda", tiny=False))
            for _ in range(5):
                step()
            steps[backend_name] = (step, hide_host_sleep_cycles(step))
        results: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):  # rotated rounds: drift lands on every backend alike
            for backend_name, (step, cycles) in steps.items():
                for kind in ("none", "zero", "read"):
                    results.setdefault((backend_name, f"events {kind}"), []).append(
                        event_us(step, kind, flush, sink, cycles, args.iters))
                for kind in ("zero", "read"):
                    results.setdefault((backend_name, f"kernels {kind}"), []).append(
                        kernel_us_after_flush(step, kind, flush, sink, args.iters))
        print(f"== {name}: median over {args.rounds} rounds of per-call medians, us")
        columns = ["events none", "events zero", "events read", "kernels zero", "kernels read"]
        print(f"{'backend':<16}" + "".join(f"{c:>14}" for c in columns))
        for backend_name in steps:
            print(f"{backend_name:<16}" + "".join(
                f"{statistics.median(results[(backend_name, c)]):14.2f}" for c in columns))


if __name__ == "__main__":
    main()
