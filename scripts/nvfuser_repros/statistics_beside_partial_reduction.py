"""nvFuser writes out of bounds in a BatchNorm training forward that also pools its output: a fusion
that writes the squeezed statistics of a reduction over [N, H, W] and also reduces the normalised
tensor over [H, W] after it.

**What:** timm regnety_016's bf16 training forward (a squeeze-excitation net): BatchNorm's
statistics over [0, 2, 3] of a [64, 48, 56, 56] activation, the running mean and variance updated
from them ([48] bf16 outputs, as eager updates them), the normalised ReLU output, and the SE block's
mean over [2, 3] ([64, 48, 1, 1]). As the backend's region dump printed it, the outputs made fewer.

**Expected:** the fusion writes its outputs and nothing else.

**Actual:** compute-sanitizer's memcheck reports 738 invalid 2-byte global writes from
`nvfuser_reduction_f0_c1_r0_g2` for `as_found`: thread 0 of many blocks writes a [48] bf16 output
at offsets up to about 1 KB past (or before) its 96-byte allocation. Under PyTorch's caching
allocator these writes land in other tensors silently (a training step of the model faulted with an
illegal memory access in one run out of several). `one_statistic` (the running variance alone beside
the pooled mean) and `no_pool` (both statistics, no pooled mean) are clean.

**Status:** reproduces. The script ran on an H200 (2026-11-26, rc 1): `as_found` 738 errors,
`one_statistic` and `no_pool` 0.

**Versions:** nvfuser_direct 0.2.36 (nvfuser-cu130-torch210 0.2.36.dev20260301), torch 2.11.0+cu130,
CUDA 13.0, H100 80GB HBM3 and H200 (2026-11-26).

    python scripts/nvfuser_repros/statistics_beside_partial_reduction.py

Runs each variant in a child process under compute-sanitizer (memcheck, with
`PYTORCH_NO_CUDA_MEMORY_CACHING=1` so that each tensor is an allocation of its own) and prints its
error count; exits 1 when `as_found` has errors. Without compute-sanitizer it runs the variants
unchecked. dynamo_nvf moves the second reduction to a region of its own (`dynamo_nvf/passes/known_bugs.py`).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

import torch
from nvfuser_direct import DataType, FusionDefinition

N, C, H, W = 64, 48, 56, 56
VARIANTS = ("as_found", "one_statistic", "no_pool")
SANITIZER_PATHS = ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda-13.0/bin/compute-sanitizer")


def define(fd: FusionDefinition, variant: str) -> None:
    x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.BFloat16, is_cpu=False)
    running_mean = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16, is_cpu=False)
    running_var = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16, is_cpu=False)
    weight = fd.define_tensor(shape=[-1, 1, 1], contiguity=[True, None, None], dtype=DataType.BFloat16, is_cpu=False)
    bias = fd.define_tensor(shape=[-1, 1, 1], contiguity=[True, None, None], dtype=DataType.BFloat16, is_cpu=False)
    xf = fd.ops.cast(x, dtype=DataType.Float)
    avg, var_sum, _ = fd.ops.welford(xf, dims=[0, 2, 3])
    mean = fd.ops.broadcast(avg, is_broadcast_dim=[True, False, True, True])
    count = fd.ops.mul(fd.ops.mul(fd.ops.cast(fd.ops.size(x, dim=0), dtype=DataType.Double),
                                  fd.ops.cast(fd.ops.size(x, dim=2), dtype=DataType.Double)),
                       fd.ops.cast(fd.ops.size(x, dim=3), dtype=DataType.Double))
    var = fd.ops.broadcast(fd.ops.mul(var_sum, fd.ops.reciprocal(count)), is_broadcast_dim=[True, False, True, True])

    def updated(stat, running, scale):
        new = fd.ops.add(fd.ops.mul(fd.ops.mul(fd.ops.squeeze(stat, dims=[0, 2, 3]), scale), 0.1),
                         fd.ops.mul(fd.ops.cast(running, dtype=DataType.Float), 0.9))
        return fd.ops.cast(new, dtype=DataType.BFloat16)

    y = fd.ops.mul(fd.ops.sub(xf, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5)))
    y = fd.ops.mul(y, fd.ops.broadcast(fd.ops.cast(weight, dtype=DataType.Float), is_broadcast_dim=[True, False, False, False]))
    y = fd.ops.add(y, fd.ops.broadcast(fd.ops.cast(bias, dtype=DataType.Float), is_broadcast_dim=[True, False, False, False]))
    relu = fd.ops.relu(fd.ops.cast(fd.ops.cast(y, dtype=DataType.BFloat16), dtype=DataType.Float))
    pooled = fd.ops.div(fd.ops.broadcast(fd.ops.sum(relu, dims=[2, 3], dtype=DataType.Float),
                                         is_broadcast_dim=[False, False, True, True]),
                        fd.ops.cast(fd.ops.mul(fd.ops.size(x, dim=2), fd.ops.size(x, dim=3)), dtype=DataType.Float))
    if variant != "one_statistic":
        fd.add_output(updated(mean, running_mean, 1.0))
    fd.add_output(updated(var, running_var, 1.0000049824865598))
    if variant != "no_pool":
        fd.add_output(fd.ops.cast(pooled, dtype=DataType.BFloat16))
    else:
        fd.add_output(fd.ops.cast(relu, dtype=DataType.BFloat16))


def run(variant: str) -> None:
    torch.manual_seed(0)
    with FusionDefinition() as fd:
        define(fd, variant)
    args = [torch.randn(N, C, H, W, device="cuda", dtype=torch.bfloat16),
            torch.randn(C, device="cuda", dtype=torch.bfloat16), torch.rand(C, device="cuda", dtype=torch.bfloat16),
            torch.randn(C, 1, 1, device="cuda", dtype=torch.bfloat16), torch.randn(C, 1, 1, device="cuda", dtype=torch.bfloat16)]
    fd.execute(args)
    torch.cuda.synchronize()


def sanitizer() -> str:
    return shutil.which("compute-sanitizer") or next((p for p in SANITIZER_PATHS if os.path.exists(p)), "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=VARIANTS, help="run this variant in this process")
    args = parser.parse_args()
    if args.variant:
        run(args.variant)
        return 0
    tool = sanitizer()
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    failed = False
    for variant in VARIANTS:
        command = [sys.executable, __file__, "--variant", variant]
        if tool:
            command = [tool, "--tool", "memcheck", "--print-limit", "1", *command]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        found = re.search(r"ERROR SUMMARY: (\d+) error", proc.stdout + proc.stderr)
        errors = int(found.group(1)) if found else None
        outcome = f"{errors} memcheck errors" if errors is not None else "ran unchecked (no compute-sanitizer)"
        print(f"{variant:14s} exit {proc.returncode}, {outcome}")
        failed |= variant == "as_found" and (proc.returncode != 0 or bool(errors))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
