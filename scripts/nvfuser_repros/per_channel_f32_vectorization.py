"""nvFuser's pointwise kernel for a channels-last bf16 activation scaled and shifted per channel runs
about 25% slower when the per-channel values are f32 than when they are bf16: one f32 operand of
C values caps the vectorisation of the whole kernel, the [N, H, W, C] activation's loads and stores
included, at 4 elements.

**What:** `relu(x * scale + shift)` rounded to bf16 (the fusion applies the relu before the
rounding: the same values), x [N, H, W, C] bf16 contiguous (a channels-last NCHW activation as
dynamo_nvf's regions see it), scale and shift [1, 1, 1, C] broadcast over N, H and W. This is a
training BatchNorm's normalisation with its four f32 per-channel operands (mean, reciprocal std,
weight, bias) folded into two; eager computes it with f32 statistics. Variants: `f32` (scale and
shift f32), `bf16` (both bf16, cast to f32 in the kernel), `copy` (relu(x * 2): no per-channel
operand, the bandwidth this kernel should reach).

**Expected:** `f32` about as fast as `bf16` and `copy`: the per-channel operands are C values read
once per block; the kernel moves 2 x N x H x W x C x 2 bytes.

**Actual:** this script on an H200 (2026-11-28), µs per call f32 / bf16 / copy: [64, 112, 112, 64]
64.0 / 51.4 / 51.0; [64, 56, 56, 128] 33.6 / 27.2 / 26.8; [64, 28, 28, 512] 34.2 / 27.5 / 27.5. With
`NVFUSER_DUMP=scheduler_params` the f32 variant's kernel has vectorization_factor 4
(max_dtype_size_bit_for_vectorization 32), the others 8; its code loads the activation as 4-wide bf16
vectors beside 4-wide f32 per-channel ones. The same fusion compiled by dynamo_nvf from
`torch.relu((x.float() * s + t).to(torch.bfloat16))` took 63.2 / 50.9 / 50.4 µs (inductor 48.9 with
f32 operands); viewing x as [N x H x W, C] or [N x H, W, C] changed nothing (62.5, 63.1 µs).

**Versions:** nvfuser_direct 0.2.36 (nvfuser-cu130-torch210 0.2.36.dev20260301), torch 2.11.0+cu130,
CUDA 13.0, H200 (2026-11-28).

    python scripts/nvfuser_repros/per_channel_f32_vectorization.py [--shape 64,112,112,64]

Prints each variant's time per call (CUDA events, 50 calls after 5) and exits 1 when `f32` takes more
than 1.15x `bf16`'s. With `NVFUSER_DUMP=scheduler_params` nvFuser prints each kernel's vectorisation.
"""

import argparse
import sys

import torch
from nvfuser_direct import DataType, FusionDefinition

VARIANTS = ("f32", "bf16", "copy")


def define(fd: FusionDefinition, variant: str) -> None:
    x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.BFloat16, is_cpu=False)
    xf = fd.ops.cast(x, dtype=DataType.Float)
    if variant == "copy":
        y = fd.ops.mul(xf, 2.0)
    else:
        dtype = DataType.Float if variant == "f32" else DataType.BFloat16
        scale, shift = (fd.define_tensor(shape=[1, 1, 1, -1], contiguity=[None, None, None, True], dtype=dtype,
                                         is_cpu=False) for _ in range(2))
        y = fd.ops.add(fd.ops.mul(xf, fd.ops.cast(scale, dtype=DataType.Float)),
                       fd.ops.cast(shift, dtype=DataType.Float))
    # relu before the rounding (the same values): nvFuser 0.2.36 emits relu(__bfloat), which NVRTC rejects
    fd.add_output(fd.ops.cast(fd.ops.relu(y), dtype=DataType.BFloat16))


def time_variant(variant: str, shape: list[int]) -> float:
    """Microseconds per call."""
    torch.manual_seed(0)
    with FusionDefinition() as fd:
        define(fd, variant)
    args = [torch.randn(shape, device="cuda", dtype=torch.bfloat16)]
    if variant != "copy":
        dtype = torch.float32 if variant == "f32" else torch.bfloat16
        args += [torch.randn(1, 1, 1, shape[3], device="cuda", dtype=dtype) for _ in range(2)]
    for _ in range(5):
        fd.execute(args)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(50):
        fd.execute(args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 50 * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="64,112,112,64", help="N,H,W,C of the channels-last activation")
    args = parser.parse_args()
    shape = [int(v) for v in args.shape.split(",")]
    times = {variant: time_variant(variant, shape) for variant in VARIANTS}
    for variant, us in times.items():
        print(f"{variant:5s} {us:8.1f} us per call")
    return 1 if times["f32"] > 1.15 * times["bf16"] else 0


if __name__ == "__main__":
    sys.exit(main())
