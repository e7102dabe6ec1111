"""Seed 000's fusion12 (GELU that also outputs the view of its input), run raw in nvFuser with and
without that output, against the same program compiled with and without trimming.

Question it answers: does nvFuser copy a view-of-input output (the 82 us case in the bookend issue),
and does any compiled variant hand nvFuser such an output? GPU time per call by CUDA events, kernels
by torch.profiler, aliasing by data_ptr.
"""

from __future__ import annotations

import statistics

import torch
import torch._dynamo

import dynamo_nvf
from dynamo_nvf import nvf as nvf_env


def gpu_us(fn, iters: int = 50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def kernels(fn) -> int:
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and "memcpy" not in e.name.lower() and "memset" not in e.name.lower())


def fusion12(nvf, with_view_output: bool):
    dt = nvf.DataType
    with nvf.FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt.Float)
        t1 = fd.ops.reshape(t0, [64, 128, 3072])
        t3 = fd.ops.mul(t1, fd.define_scalar(0.5, dtype=dt.Double))
        t6 = fd.ops.erf(fd.ops.mul(t1, fd.define_scalar(0.7071067811865476, dtype=dt.Double)))
        t9 = fd.ops.mul(t3, fd.ops.add(t6, fd.define_scalar(1.0, dtype=dt.Double)))
        t10 = fd.ops.reshape(t9, [8192, 3072])
        if with_view_output:
            fd.add_output(t1)
        fd.add_output(t10)
    return fd


def program(x):
    y = x.view(64, 128, 3072)
    g = y * 0.5 * (1.0 + torch.erf(y * 0.7071067811865476))
    return g.view(8192, 3072), y


def main() -> None:
    nvf = nvf_env.nvfuser_module()
    x = torch.randn(8192, 3072, device="cuda")
    print(f"device: {torch.cuda.get_device_name()}, nvfuser_direct {getattr(nvf, '__version__', '?')}")
    for with_view in (True, False):
        fd = fusion12(nvf, with_view)
        outs = fd.execute([x])
        alias = with_view and outs[0].data_ptr() == x.data_ptr()
        print(f"raw fusion12, view output {'yes' if with_view else 'no '}: {gpu_us(lambda: fd.execute([x])):7.1f} us, "
              f"{kernels(lambda: fd.execute([x]))} kernel(s)" + (f", view output aliases the input: {alias}" if with_view else ""))
    for bookend in (True, False):
        torch._dynamo.reset()
        compiled = torch.compile(program, backend="nvf_bookend", options={"bookend": bookend, "strict": True})
        with dynamo_nvf.recording() as rec:
            out, view = compiled(x)
        (plan,) = rec.plans
        region = plan.regions[0]
        print(f"compiled bookend={bookend}: {gpu_us(lambda: compiled(x)):7.1f} us, {kernels(lambda: compiled(x))} kernel(s), "
              f"region outputs {[o.name for o in region.outputs]}, view aliases the input: {view.data_ptr() == x.data_ptr()}")
        print(f"  aot_autograd graph:{plan.code.rstrip()}")
        print(f"  FusionDefinition:\n{region.definition}")


if __name__ == "__main__":
    main()
