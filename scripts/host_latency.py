"""Host microseconds per call of a one-region function on a 16x16 input: compiled with nvf_bookend,
the raw nvFuser fusion it built (fd.execute and fec.execute), inductor and eager, in one run."""

from __future__ import annotations

import statistics
import time

import torch
import torch._dynamo

import dynamo_nvf
from dynamo_nvf.runtime.region import RegionRuntime


def f(x):
    return torch.sigmoid(x) * 2.0 + 1.0


def per_call_us(fn, x, calls=2000, repeats=7):
    for _ in range(200):
        fn(x)
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def main():
    x = torch.randn(16, 16, device="cuda")
    torch._dynamo.reset()
    with dynamo_nvf.recording() as rec:
        nvf = torch.compile(f, backend="nvf_bookend")
        nvf(x)
    (gm,) = rec.graph_modules
    (runtime,) = [n.target for n in gm.graph.nodes if isinstance(n.target, RegionRuntime)]
    (entry,) = list(runtime._by_descriptor.values())
    fd, fec = entry.fd, entry.fec
    assert len(rec.plans[0].regions) == 1
    inductor = torch.compile(f)
    results = {
        "nvf_bookend (torch.compile)": per_call_us(nvf, x),
        "raw fd.execute": per_call_us(lambda t: fd.execute([t]), x),
        "raw fec.execute": per_call_us(lambda t: fec.execute([t]), x),
        "RegionRuntime call": per_call_us(lambda t: runtime(t), x),
        "inductor (torch.compile)": per_call_us(inductor, x),
        "Dynamo floor (backend='eager')": per_call_us(torch.compile(f, backend="eager"), x),
        "eager": per_call_us(f, x),
    }
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, us in results.items():
        print(f"{name:32s} {us:8.2f} us/call")


if __name__ == "__main__":
    main()
