"""GPU kernel time of a callable under torch.profiler, shared by the repros and scripts/region_scoreboard.py
(torch only, so a repro stays standalone)."""

from __future__ import annotations

import collections
import statistics
from typing import Any, Callable

import torch


def cuda_kernels(call: Callable[[], Any], iters: int) -> list[Any]:
    """The CUDA kernel events of `iters` calls of `call` (after 3 warm-up calls), in launch order."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            call()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def kernel_us(call: Callable[[], Any], iters: int = 20) -> tuple[float, int]:
    """(GPU us per call: each kernel's median time times its launches per call, summed; kernels per call)."""
    times: dict[str, list[float]] = collections.defaultdict(list)
    for e in cuda_kernels(call, iters):
        times[e.name].append(e.device_time)
    per_call = sum(statistics.median(v) * len(v) / iters for v in times.values())
    return per_call, round(sum(len(v) for v in times.values()) / iters)



def event_us(call: Callable[[], Any], iters: int, before: Callable[[], Any], warmup: int = 3) -> float:
    """Median GPU time of one call by CUDA events around it, `before()` enqueued ahead of each (a cache
    flush, or a spin that hides the host's launch)."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def cold_us(call: Callable[[], Any], iters: int = 30) -> float:
    """Median GPU time of one call, L2 flushed before it (CUDA events around the call): as perf's
    block table times a block (`perf.interleave --gpu`), without its host spin."""
    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    return event_us(call, iters, flush.zero_)
