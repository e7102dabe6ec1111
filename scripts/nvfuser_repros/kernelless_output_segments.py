"""nvFuser adds a kernel-less segment (host time, no kernel) for some spellings of a fusion's output.

**What:** ConvNeXt's LayerNorm region (bias add on a channels-last bf16 input, permute to NHWC,
LayerNorm over C) and LLaMA's GQA `clone(expand(k))`, each with its output spelled several ways: an
explicit bf16 -> f32 -> bf16 cast round trip at the output, a `stride_order` on the output, or neither.

**Expected:** the same kernels and one segment for every spelling: the round trip is exact and a
row-major `stride_order` is the layout nvFuser would allocate anyway.

**Actual:** the cast round trip or the `stride_order` adds a `no kernel` segment to the LayerNorm
region, with its host cost: 27.2 us per `fec.execute` with the round trip against 20.0 without, and
20.0 pinned against 13.1 not pinned. The GQA clone's spellings (an f32 upcast, a multiply by ones,
a `stride_order`) are printed beside it: LLaMA's RoPE regions showed two such segments each.

**Versions:** nvfuser_direct 0.2.36, torch 2.11.0+cu130, CUDA 13.0, H100 80GB HBM3 (2026-11-23).

    python scripts/nvfuser_repros/kernelless_output_segments.py

Prints, per spelling: nvFuser's segment count, kernels, host us per `fec.execute` (median of 7 rounds
of 200 calls), the output's strides and whether it shares the input's storage. dynamo_nvf works
around it by not writing the round trip (`ops/context.py`) and pinning only non-row-major outputs
(`lowering.py`).
"""


from __future__ import annotations

import argparse
import statistics
import time

import torch
from nvfuser_direct import DataType, FusionDefinition, PythonProfiler

BF16, F32 = DataType.BFloat16, DataType.Float


def layer_norm_region(round_trip: bool, stride_order: bool):
    """region 1 of ConvNeXt's inference graph: bias add, permute to NHWC, LayerNorm over C."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=BF16, stride_order=[3, 0, 2, 1])
        bias = fd.define_tensor(shape=[-1, 1, 1], contiguity=[True, None, None], dtype=BF16)
        w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=BF16)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=BF16)
        y = fd.ops.add(fd.ops.cast(x, F32), fd.ops.broadcast(fd.ops.cast(bias, F32), [True, False, False, False]))
        y = fd.ops.permute(y, dims=[0, 2, 3, 1])
        var, mean = fd.ops.var_mean(y, [3], 0, True)
        out = fd.ops.mul(fd.ops.sub(y, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-6)))
        out = fd.ops.add(fd.ops.mul(out, fd.ops.broadcast(fd.ops.cast(w, F32), [True, True, True, False])),
                         fd.ops.broadcast(fd.ops.cast(b, F32), [True, True, True, False]))
        out = fd.ops.cast(out, BF16)
        if round_trip:
            out = fd.ops.cast(fd.ops.cast(out, F32), BF16)
        if stride_order:
            out = fd.ops.stride_order(out, [3, 2, 1, 0])
        fd.add_output(out)
    x = torch.randn(2, 96, 56, 56, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    args = [x, torch.randn(96, 1, 1, device="cuda", dtype=torch.bfloat16),
            torch.randn(96, device="cuda", dtype=torch.bfloat16), torch.randn(96, device="cuda", dtype=torch.bfloat16)]
    return fd, args


def gqa_clone(upcast: bool, ones: bool, stride_order: bool):
    """clone(expand(k)) of LLaMA's repeat_kv, as a region output (eager gives it fresh storage)."""
    with FusionDefinition() as fd:
        k = fd.define_tensor(shape=[1, -1, 1, -1, -1], contiguity=[None, True, None, True, True], dtype=BF16)
        v = fd.ops.cast(k, F32) if upcast else k
        v = fd.ops.expand(v, shape=[1, 2, 4, 256, 64])
        if ones:
            v = fd.ops.mul(v, fd.ops.full([1, 2, 4, 256, 64], fd.define_scalar(1.0, dtype=F32 if upcast else BF16),
                                          F32 if upcast else BF16))
        if upcast:
            v = fd.ops.cast(v, BF16)
        if stride_order:
            v = fd.ops.stride_order(v, [4, 3, 2, 1, 0])
        fd.add_output(v)
    k = torch.randn(1, 2, 1, 256, 64, device="cuda", dtype=torch.bfloat16)
    return fd, [k]


def measure(name: str, fd, args) -> None:
    out = fd.execute(args)
    with PythonProfiler() as prof:
        fd.execute(args)
    profile = prof.profile
    kernels = [str(k.name) for k in profile.kernel_profiles if str(k.name)]
    fec = fd.fec
    for _ in range(50):
        fec.execute(args)
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(200):
            fec.execute(args)
        times.append((time.perf_counter() - start) / 200 * 1e6)
        torch.cuda.synchronize()
    o = out[0]
    print(f"{name:45s} segments {profile.segments}  kernels {len(kernels)}  host {statistics.median(times):6.1f} us"
          f"  out strides {tuple(o.stride())}  shares input storage "
          f"{o.untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr()}", flush=True)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    for round_trip in (True, False):
        for stride_order in (True, False):
            measure(f"layer_norm round_trip={round_trip} stride_order={stride_order}",
                    *layer_norm_region(round_trip, stride_order))
    for upcast in (True, False):
        for ones in (True, False):
            for stride_order in (True, False):
                measure(f"gqa_clone upcast={upcast} ones={ones} stride_order={stride_order}",
                        *gqa_clone(upcast, ones, stride_order))


if __name__ == "__main__":
    main()
