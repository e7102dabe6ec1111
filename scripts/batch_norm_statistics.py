"""A training BatchNorm + ReLU forward over channels-last bf16 activations, compiled three ways: nvf_bookend
with its statistics in one `var_mean`, nvf_bookend with them in two stages (passes/two_stage_statistics.py,
its rule replaced so that every shape gets it), and inductor. The measurements behind the pass's rule.

    python scripts/batch_norm_statistics.py [--shape 64,64,112,112 ...] [--calls 20] [--row-widths 4096,32768]

Prints, per shape, the GPU kernel time per call (torch.profiler, after 3 warm-up calls) and the kernels per
call of each, and which of the two nvFuser forms the pass's rule picks for that shape. `--row-widths`
measures the two-stage form once per width of its rows (the pass's `ROW_WIDTH`) instead of at its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynamo_nvf.passes import two_stage_statistics as pass_module  # noqa: E402  (registers the backend too)
from perf.measure import profile_counts  # noqa: E402

#: ResNet-50's BatchNorm inputs at batch 64, and MobileNet-style narrow ones.
SHAPES = ["64,64,112,112", "64,64,56,56", "64,128,56,56", "64,256,56,56", "64,128,28,28", "64,512,28,28",
          "64,256,14,14", "64,1024,14,14", "64,2048,7,7", "64,16,112,112", "64,32,112,112", "64,96,112,112"]


def kernel_us(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """(GPU µs per call, kernels per call) over `calls` calls after 3 warm-up calls."""
    for _ in range(3):
        fn()
    kernels, memops, device_us = profile_counts(fn, calls)
    return device_us, kernels + memops


def two_stage_forms(widths: list[int]) -> list[tuple[str, int]]:
    """(name, row width) of each two-stage form measured: one per width asked for, else the pass's own."""
    return [(f"nvf two stages @{w}", w) for w in widths] or [("nvf two stages", pass_module.ROW_WIDTH)]


def measure(shape: list[int], calls: int, widths: list[int]) -> dict[str, tuple[float, float]]:
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(shape[1]).cuda().to(torch.bfloat16)
    model = torch.nn.Sequential(bn, torch.nn.ReLU()).train()
    x = (torch.randn(shape, device="cuda") * 2 + 3).to(torch.bfloat16).to(memory_format=torch.channels_last)
    rule, width = pass_module.splits, pass_module.ROW_WIDTH
    forms = [("nvf one var_mean", lambda rows, channels: False, width)]
    forms += [(name, lambda rows, channels: pass_module.rows_per_block(rows, channels) >= 2, w)
              for name, w in two_stage_forms(widths)]
    results = {}
    try:
        for name, splits, rows_wide in forms:
            pass_module.splits, pass_module.ROW_WIDTH = splits, rows_wide
            torch._dynamo.reset()
            compiled = torch.compile(model, backend="nvf_bookend")
            with torch.no_grad():
                results[name] = kernel_us(lambda: compiled(x), calls)
    finally:
        pass_module.splits, pass_module.ROW_WIDTH = rule, width
    torch._dynamo.reset()
    compiled = torch.compile(model)
    with torch.no_grad():
        results["inductor"] = kernel_us(lambda: compiled(x), calls)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", nargs="*", default=SHAPES, help="N,C,H,W of each activation")
    parser.add_argument("--calls", type=int, default=20, help="calls profiled per form")
    parser.add_argument("--row-widths", default="", help="comma-separated widths of the two-stage form's rows")
    args = parser.parse_args()
    widths = [int(w) for w in args.row_widths.split(",") if w]
    torch._dynamo.config.cache_size_limit = 64
    forms = ["nvf one var_mean", *[name for name, _ in two_stage_forms(widths)], "inductor"]
    print(f"{'shape':>22} | " + " | ".join(f"{f.removeprefix('nvf '):>16}" for f in forms) + " | pass picks")
    for text in args.shape:
        shape = [int(s) for s in text.split(",")]
        r = measure(shape, args.calls, widths)
        picks = "two stages" if pass_module.splits(shape[0] * shape[2] * shape[3], shape[1]) else "one var_mean"
        cells = [f"{r[k][0]:8.1f} us {r[k][1]:3.0f} k" for k in forms]
        print(f"{str(tuple(shape)):>22} | " + " | ".join(cells) + f" | {picks}", flush=True)


if __name__ == "__main__":
    main()
