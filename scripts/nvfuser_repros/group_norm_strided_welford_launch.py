"""nvFuser fails to launch the statistics of a GroupNorm(32) over a channels-last activation when
each group has 4 or more channels at 56x56: "CUDA_ERROR_INVALID_VALUE ... invalid argument"
(executor.cpp:1343).

**What:** the region dynamo_nvf hands nvFuser for BiT's (timm `resnetv2_50x1_bit`) GroupNorm(32) +
ReLU over a bf16 channels-last activation [64, 128, 56, 56]: the activation read row-major NHWC
[64, 56, 56, 128], viewed [N, H*W, G, C/G] = [64, 3136, 32, 4], Welford over dims [1, 3] (H*W and
C/G: strided, not adjacent), normalised, scaled, shifted, ReLU (`channels_last_regions`; the dump
of `python scripts/fallback_repro.py zoo_timm_resnetv2_bit_fwd_bf16`).

**Expected:** it runs and matches eager's `F.group_norm(...).relu()`.

**Actual:** `as_found` raises at its first launch: "Error from segmentation group 0 ... executor.cpp:1343
... CUDA_ERROR_INVALID_VALUE". The variants show which part matters: `two_channels` (C/G = 2, as
BiT's 64-channel GroupNorm) and `small_image` (28x28) run.

**Status:** see the closing line of a run; the script prints each variant's outcome.

**Versions:** nvfuser_direct 0.2.36 (nvfuser-cu130-torch210 0.2.36.dev20260301), torch 2.11.0+cu130,
CUDA 13.0, H100 80GB HBM3.

    python scripts/nvfuser_repros/group_norm_strided_welford_launch.py [--dump]

`--dump` sets NVFUSER_DUMP=launch_param,scheduler_params for the `as_found` variant. Exits 1 when
`as_found` fails. dynamo_nvf runs the region as pieces after the error (runtime/split_region.py,
one warning); its statistics piece fails the same way and runs in eager.
"""

import argparse
import os
import sys

import torch
from nvfuser_direct import DataType, FusionDefinition

GROUPS = 32
VARIANTS = {  # name: (N, H, W, C)
    "as_found": (64, 56, 56, 128),
    "eight_channels": (64, 56, 56, 256),
    "two_channels": (64, 56, 56, 64),
    "small_image": (64, 28, 28, 128),
    "small_batch": (8, 56, 56, 128),
}


def build(n: int, h: int, w: int, c: int) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.BFloat16, is_cpu=False)
        weight = fd.define_tensor(shape=[1, 1, 1, -1], contiguity=[None, None, None, True], dtype=DataType.BFloat16,
                                  is_cpu=False)
        bias = fd.define_tensor(shape=[1, 1, 1, -1], contiguity=[None, None, None, True], dtype=DataType.BFloat16,
                                is_cpu=False)
        xf = fd.ops.reshape(fd.ops.cast(x, dtype=DataType.Float), new_shape=[n, h * w, GROUPS, c // GROUPS])
        mean, m2, _ = fd.ops.welford(xf, dims=[1, 3])
        var = fd.ops.mul(m2, 1.0 / (h * w * (c // GROUPS)))
        rstd = fd.ops.rsqrt(fd.ops.add(fd.ops.broadcast(var, is_broadcast_dim=[False, True, False, True]), 1e-5))
        centred = fd.ops.sub(xf, fd.ops.broadcast(mean, is_broadcast_dim=[False, True, False, True]))
        y = fd.ops.reshape(fd.ops.mul(centred, rstd), new_shape=[n, h, w, c])
        y = fd.ops.add(fd.ops.mul(y, fd.ops.cast(weight, dtype=DataType.Float)), fd.ops.cast(bias, dtype=DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.relu(y), dtype=DataType.BFloat16))
    return fd


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", action="store_true")
    parser.add_argument("--only", nargs="*", default=list(VARIANTS))
    args = parser.parse_args()
    if args.dump:
        os.environ["NVFUSER_DUMP"] = "launch_param,scheduler_params"
    torch.manual_seed(0)
    failed = False
    for variant in args.only:
        n, h, w, c = VARIANTS[variant]
        x = torch.randn(n, c, h, w, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        weight = torch.rand(c, device="cuda", dtype=torch.bfloat16) + 0.5
        bias = torch.randn(c, device="cuda", dtype=torch.bfloat16)
        expected = torch.nn.functional.group_norm(x.float(), GROUPS, weight.float(), bias.float()).relu()
        nhwc = x.permute(0, 2, 3, 1)  # row-major NHWC: the channels-last memory as it lies
        try:
            out = build(n, h, w, c).execute([nhwc, weight.view(1, 1, 1, c), bias.view(1, 1, 1, c)])[0]
            torch.cuda.synchronize()
            err = (out.float().permute(0, 3, 1, 2) - expected).abs().max().item()
            print(f"{variant} {[n, c, h, w]}: ran, max abs error {err:.3g} against f32 eager")
        except Exception as exc:  # noqa: BLE001  (the defect: report it and go on)
            text = str(exc)
            at = text.find("CUDA error")
            print(f"{variant} {[n, c, h, w]}: FAILED: {(text[at:at + 120] if at >= 0 else text[:300])!r}")
            failed = failed or variant == "as_found"
    print("as_found fails: reproduces" if failed else "as_found runs: does not reproduce")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
