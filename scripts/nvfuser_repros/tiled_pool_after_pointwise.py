"""nvFuser fails to schedule a tiled pool (a reshape, then a reduction over the phase dims) whose input
is computed in the same fusion.

**What:** VGG's 2x2 max pool after the convolution's bias and ReLU, channels-last: `x + b` (b broadcast
over [N, H, W]), relu, reshape [N, H, W, C] -> [N, H/2, 2, W/2, 2, C], max over dims 2 and 4. Beside
it: the same handed x and b already split (views of the same memory), a relu alone before the
reshape, no pointwise op before it, and each with a sum in place of the max.

**Expected:** each spelling runs and matches eager.

**Actual:** where the reshape follows the add and relu inside the fusion, execution fails ("BFS
traversal could not visit some nodes", bfs.h:261); handed the inputs split, it runs.

**Versions:** nvfuser_direct 0.2.36, torch 2.11.0+cu130, CUDA 13.0, H200 (2026-11-29).

    python scripts/nvfuser_repros/tiled_pool_after_pointwise.py [--shape N H W C]

Prints per spelling: ok and whether it matches eager, or the error's first line. dynamo_nvf hands
such a region its inputs split, as views (passes/views_to_edges.py moves the split above the add).
"""

from __future__ import annotations

import argparse

import torch
from nvfuser_direct import DataType, FusionDefinition

BF16, F32 = DataType.BFloat16, DataType.Float


def pooled(shape: list[int], spelling: str, reduction: str):
    """`spelling`: "reshape-mid" (reshape after add+relu), "relu-only" (reshape after a relu of x),
    "split-inputs" (x and b handed over split, as views), "no-pointwise" (x reshaped and reduced)."""
    n, h, w, c = shape
    split = [n, h // 2, 2, w // 2, 2, c]
    with FusionDefinition() as fd:
        if spelling == "split-inputs":
            x = fd.define_tensor(shape=[-1] * 6, contiguity=[True] * 6, dtype=BF16)
            b = fd.define_tensor(shape=[1] * 5 + [-1], contiguity=[None] * 5 + [True], dtype=BF16)
        else:
            x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=BF16)
            b = fd.define_tensor(shape=[1, 1, 1, -1], contiguity=[None, None, None, True], dtype=BF16)
        y = fd.ops.cast(x, F32)
        if spelling in ("reshape-mid", "split-inputs"):
            y = fd.ops.relu(fd.ops.add(y, fd.ops.cast(b, F32)))
        elif spelling == "relu-only":
            y = fd.ops.relu(y)
        if spelling != "split-inputs":
            y = fd.ops.reshape(y, split)
        y = fd.ops.max(y, dims=[2, 4]) if reduction == "max" else fd.ops.sum(y, dims=[2, 4])
        fd.add_output(fd.ops.cast(y, BF16))
    return fd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=4, default=[64, 224, 224, 64], metavar=("N", "H", "W", "C"))
    n, h, w, c = parser.parse_args().shape
    x = torch.randn(n, h, w, c, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1, 1, 1, c, device="cuda", dtype=torch.bfloat16)
    for spelling in ("reshape-mid", "relu-only", "split-inputs", "no-pointwise"):
        v = {"no-pointwise": x.float(), "relu-only": torch.relu(x.float())}.get(spelling, torch.relu(x.float() + b.float()))
        v = v.view(n, h // 2, 2, w // 2, 2, c)
        inputs = [x.view(n, h // 2, 2, w // 2, 2, c), b.view(1, 1, 1, 1, 1, c)] if spelling == "split-inputs" else [x, b]
        for reduction in ("max", "sum"):
            expected = v.amax((2, 4)) if reduction == "max" else v.sum((2, 4))
            try:
                (out,) = pooled([n, h, w, c], spelling, reduction).execute(inputs)
                close = torch.allclose(out.float(), expected.bfloat16().float(), atol=5e-2, rtol=2e-2)
                result = f"ok, matches eager: {close}"
            except RuntimeError as exc:
                result = "failed: " + " ".join(str(exc).split())[:160]
            print(f"{spelling:15} {reduction:4} {result}")


if __name__ == "__main__":
    main()
