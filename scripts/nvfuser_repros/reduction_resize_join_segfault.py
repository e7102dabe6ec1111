"""nvFuser crashes the process (SIGSEGV) compiling a fusion that resizes what a reduction feeds and
joins the result with another value the reduction feeds.

**What:** the key gradient of grouped-query attention summed over the 4 query heads of each of 2 key
heads (a reshape and a sum), multiplied by a broadcast `cos`, rounded to bf16 as under autocast, then
RoPE's backward: `rotate_half` as two slices padded back to full width and added, plus the `sin` term
(a LLaMA-style training step under DDP hands dynamo_nvf this region).

**Expected:** the fusion compiles and runs.

**Actual:** the process dies with signal 11 inside `FusionDefinition.execute`. Variants, each in a
child process: `as_found` and `no_join` (without the `sin` term: the two padded slices alone are
joined) crash; `no_cos_multiply` (no multiplication by the broadcast `cos` before the slices) and
`no_rounding` (no bf16 rounding) run. Slice bounds computed from the input's sizes (`fd.ops.size`)
and a permute of the result crash alike.

**Versions:** nvfuser_direct 0.2.36 (nvfuser-cu130-torch210 0.2.36.dev20260301), torch 2.11.0+cu130,
CUDA 13.0, H100 80GB HBM3 (2026-11-26).

    python scripts/nvfuser_repros/reduction_resize_join_segfault.py            # every variant
    python scripts/nvfuser_repros/reduction_resize_join_segfault.py --variant as_found

Prints each variant's outcome; exits 1 when `as_found` crashes. dynamo_nvf cuts such regions after
their reductions (`dynamo_nvf/passes/known_bugs.py`).
"""

import argparse
import subprocess
import sys

import torch
from nvfuser_direct import DataType, FusionDefinition


def define(fd: FusionDefinition, variant: str) -> None:
    grad = fd.define_tensor(shape=[1, -1, -1, -1], contiguity=[None, True, True, True],
                            dtype=DataType.BFloat16, is_cpu=False)
    cos = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)
    sin = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)

    def bf16_round(t):
        if variant == "no_rounding":
            return t
        return fd.ops.cast(fd.ops.cast(t, dtype=DataType.BFloat16), dtype=DataType.Float)

    x = fd.ops.cast(grad, dtype=DataType.Float)
    summed = fd.ops.sum(fd.ops.reshape(x, new_shape=[1, 2, 4, 256, 64]), dims=[2], dtype=DataType.Float)
    if variant == "no_cos_multiply":
        scaled = summed
    else:
        scaled = fd.ops.mul(summed, fd.ops.broadcast(cos, is_broadcast_dim=[True, True, False, False]))
    scaled = bf16_round(scaled)
    high = fd.ops.slice(scaled, start_indices=[0, 0, 0, 32], end_indices=[1, 2, 256, 64], strides=[1, 1, 1, 1])
    low = fd.ops.slice(scaled, start_indices=[0, 0, 0, 0], end_indices=[1, 2, 256, 32], strides=[1, 1, 1, 1])
    rotated = fd.ops.add(fd.ops.pad(high, pad_widths=[0, 32, 0, 0, 0, 0, 0, 0], value=0.0),
                         fd.ops.pad(fd.ops.neg(low), pad_widths=[32, 0, 0, 0, 0, 0, 0, 0], value=0.0))
    if variant != "no_join":
        other = bf16_round(fd.ops.mul(summed, fd.ops.broadcast(sin, is_broadcast_dim=[True, True, False, False])))
        rotated = fd.ops.add(rotated, other)
    fd.add_output(fd.ops.cast(rotated, dtype=DataType.BFloat16))


def run(variant: str) -> None:
    grad = torch.randn(1, 8, 256, 64, device="cuda", dtype=torch.bfloat16)
    cos, sin = torch.randn(256, 64, device="cuda"), torch.randn(256, 64, device="cuda")
    with FusionDefinition() as fd:
        define(fd, variant)
    (out,) = fd.execute([grad, cos, sin])
    torch.cuda.synchronize()
    print(f"{variant}: ran, output {tuple(out.shape)}")


VARIANTS = ("as_found", "no_cos_multiply", "no_rounding", "no_join")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=VARIANTS, help="run this variant in this process")
    args = parser.parse_args()
    if args.variant:
        run(args.variant)
        return 0
    crashed = False
    for variant in VARIANTS:
        proc = subprocess.run([sys.executable, __file__, "--variant", variant], capture_output=True, text=True,
                              timeout=300)
        outcome = "SIGSEGV" if proc.returncode == -11 else f"exit {proc.returncode}"
        crashed |= variant == "as_found" and proc.returncode != 0
        print(f"{variant:16s} {outcome}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
