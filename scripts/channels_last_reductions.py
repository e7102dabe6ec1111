"""nvFuser's reductions over N, H and W of a channels-last [N, C, H, W] tensor (BatchNorm's statistics
and its backward's bias and weight sums), as written (reduced dims in logical order) and reduced from
a permute into memory order. The measurements behind passes/memory_order_reductions.py.

    python scripts/channels_last_reductions.py [--shape 64,64,112,112 ...]

Prints microseconds per call of nvfuser_direct alone (CUDA events, 20 calls after 3 warm-up calls) and
ATen's var_mean for scale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import torch
from nvfuser_direct import DataType, FusionDefinition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.measure import mean_time_us  # noqa: E402

CHANNELS_LAST = [3, 0, 2, 1]


def time_us(fn: Callable[[], object]) -> float:
    return mean_time_us(fn, calls=20, warmup=3)


def _input(fd: FusionDefinition, memory_order: bool):
    t = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=DataType.BFloat16, is_cpu=False,
                         stride_order=CHANNELS_LAST)
    t = fd.ops.cast(t, DataType.Float)
    return (fd.ops.permute(t, [0, 2, 3, 1]), [0, 1, 2]) if memory_order else (t, [0, 2, 3])


def statistics(memory_order: bool) -> FusionDefinition:
    with FusionDefinition() as fd:
        t, dims = _input(fd, memory_order)
        var, mean, _ = fd.ops.welford(t, dims=dims)
        fd.add_output(var)
        fd.add_output(mean)
    return fd


def backward_sums(memory_order: bool) -> FusionDefinition:
    with FusionDefinition() as fd:
        g, dims = _input(fd, memory_order)
        x, _ = _input(fd, memory_order)
        fd.add_output(fd.ops.sum(g, dims=dims))
        fd.add_output(fd.ops.sum(fd.ops.mul(g, x), dims=dims))
    return fd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", help="N,C,H,W (repeatable)")
    args = parser.parse_args()
    shapes = [tuple(int(s) for s in arg.split(",")) for arg in (args.shape or ["64,64,112,112", "64,256,56,56"])]
    print(f"{'shape':20} {'stats us':>9} {'in order':>9} {'bwd sums':>9} {'in order':>9} {'ATen var_mean':>14}")
    for shape in shapes:
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        g = torch.randn_like(x)
        cols = []
        for build, inputs in ((statistics, [x]), (backward_sums, [g, x])):
            for memory_order in (False, True):
                fd = build(memory_order)
                cols.append(time_us(lambda: fd.execute(inputs)))
        aten = time_us(lambda: torch.var_mean(x.float(), dim=[0, 2, 3]))
        print(f"{str(shape):20} " + " ".join(f"{c:9.1f}" for c in cols) + f" {aten:14.1f}")


if __name__ == "__main__":
    main()
