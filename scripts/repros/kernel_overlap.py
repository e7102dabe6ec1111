"""Do profiler kernel sums double-count overlapping kernels? (issue #11's "GPU kernel time per step")

Answer (H100, session 20, gpu_evidence s20b): no. Over BERT-, GPT-2- and LLaMA-style forwards and
the LLaMA-style training step, the union of the kernels' intervals equals their sum (0.0 us of
overlap per step, either backend), so perf's "GPU kernel ms" stands; with the host hidden the steps
take 23-40% longer than their kernels (launch gaps) and keep the same order. The [256, 768]
LayerNorm fusion alone: profiler median 2.34 us, 2.19 us per call by CUDA events back to back
(inductor 1.73): nvFuser's norm kernel is slower in fact, not in the measurement.

nvFuser's persistent (norm) kernels use programmatic dependent launch on Hopper: the kernel is
launched with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, starts before the kernel ahead
of it has finished, and waits at `griddepcontrol.wait` before its first load; nvFuser's own kernels
also release their dependents before their last store. torch.profiler (CUPTI) then reports the
waiting as part of the kernel's duration, so a sum of durations counts the overlap twice.

    python scripts/repros/kernel_overlap.py                 # both parts
    python scripts/repros/kernel_overlap.py models [WORKLOAD ...]   # model steps only
    python scripts/repros/kernel_overlap.py norm            # the LayerNorm fusion alone

models: per perf workload and backend, over 10 steady-state steps, per step: the sum of kernel
durations (what perf's "GPU kernel ms" reports), the union of the kernels' busy intervals (overlap
counted once, gaps left out), their difference, and the GPU time of a step with the host hidden
behind a spin kernel (CUDA events: busy time plus the gaps between kernels). The kernels that start
before the one ahead of them ends are listed with the overlap they carry.

norm: the add + LayerNorm fusion of norm_weight_early.py at [256, 768] and [4096, 1024] bf16, 200
calls back to back behind a spin: the profiler's median duration per kernel against CUDA events'
elapsed time per call, for nvFuser and for inductor.
"""

from __future__ import annotations

import collections
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODELS = ["bert_fwd_bf16_small", "gpt_fwd_bf16_small", "llama_fwd_bf16_small", "llama_train_bf16_small",
          "bert_train_bf16_small", "gpt_train_bf16_small"]
BACKENDS = ["nvf_bookend", "inductor"]


def _device_events(prof) -> list:
    return sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                  key=lambda e: e.time_range.start)


def busy_and_overlap(events) -> tuple[float, float, dict[str, float]]:
    """(sum of durations, union of intervals, overlap per kernel name) of time-sorted events, in us."""
    total = sum(e.time_range.end - e.time_range.start for e in events)
    union, reach = 0.0, None
    overlap: dict[str, float] = collections.defaultdict(float)
    for e in events:
        start, end = e.time_range.start, e.time_range.end
        if reach is None or start >= reach:
            union += end - start
            reach = end
            continue
        overlap[e.name[:90]] += min(end, reach) - start
        if end > reach:
            union += end - reach
            reach = end
    return total, union, overlap


def spin_cycles(us: float) -> int:
    """perf's calibrated spin length (the nominal clock rate overestimates a boosted GPU's cycles)."""
    from perf.measure import sleep_cycles_for

    return sleep_cycles_for(us)


def hidden_gpu_us(call, calls: int, spin_us: float, reps: int = 5) -> float:
    """GPU us per call of `calls` calls enqueued behind a spin kernel (host time hidden), by CUDA events."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(spin_cycles(spin_us))
        begin.record()
        for _ in range(calls):
            call()
        end.record()
        torch.cuda.synchronize()
        out.append(begin.elapsed_time(end) * 1e3 / calls)
    return statistics.median(out)


def models(names: list[str]) -> None:
    from perf.backends import get_backend, reset_compile_state
    from perf.workloads import REGISTRY

    print(f"{'workload':<24} {'backend':<12} {'kernels':>7} {'sum us':>8} {'union us':>9} {'overlap':>8} {'hidden us':>10}")
    details = []
    for name in names:
        for backend_name in BACKENDS:
            reset_compile_state()
            inst = REGISTRY[name].instantiate("cuda", tiny=False)
            fn = get_backend(backend_name).wrap(inst.fn)
            step = lambda: inst.call(fn)  # noqa: E731
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            steps = 10
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(steps):
                    step()
                torch.cuda.synchronize()
            events = _device_events(prof)
            total, union, overlap = busy_and_overlap(events)
            hidden = hidden_gpu_us(step, 1, 20000.0)
            print(f"{name:<24} {backend_name:<12} {len(events) / steps:7.0f} {total / steps:8.1f} {union / steps:9.1f} "
                  f"{(total - union) / steps:8.1f} {hidden:10.1f}", flush=True)
            top = sorted(overlap.items(), key=lambda kv: -kv[1])[:6]
            details.append((name, backend_name, [(k, v / steps) for k, v in top]))
    print()
    for name, backend_name, top in details:
        print(f"== {name} / {backend_name}: overlap per step by the later kernel")
        for kernel, us in top:
            print(f"   {us:6.2f}  {kernel}")


def norm() -> None:
    import norm_weight_early as nwe

    print(f"{'shape':<12} {'backend':<9} {'profiler median us':>18} {'union us/call':>14} {'events us/call':>15}")
    for kind, rows, d in [("layernorm", 256, 768), ("layernorm", 4096, 1024)]:
        x, r = (torch.randn(rows, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        w, b = (torch.randn(d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        args = [x, r, w, b]
        fd = nwe.fusion(kind, "", d)
        torch._dynamo.reset()
        ind = torch.compile(lambda *a: nwe.add_norm(kind, *a), dynamic=False)
        for label, call in (("nvfuser", lambda: fd.execute(args)), ("inductor", lambda: ind(*args))):
            calls = 200
            for _ in range(5):
                call()
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                torch.cuda._sleep(spin_cycles(calls * 40.0))
                for _ in range(calls):
                    call()
                torch.cuda.synchronize()
            events = [e for e in _device_events(prof) if not any(k in e.name.lower() for k in ("sleep", "spin"))]
            median = statistics.median(e.time_range.end - e.time_range.start for e in events)
            _, union, _ = busy_and_overlap(events)
            hidden = hidden_gpu_us(call, calls, calls * 40.0)
            print(f"{rows}x{d:<7} {label:<9} {median:18.2f} {union / calls:14.2f} {hidden:15.2f}", flush=True)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("all", "norm"):
        norm()
    if what in ("all", "models"):
        models(sys.argv[2:] or MODELS)
