"""ConvNeXt inference's kernels that lose to inductor under CUDA graphs (issue #10: convnext_fwd_bf16_small
is GPU-bound there, 0.184 against inductor reduce-overhead's 0.179 ms of kernels in session 21), each
alone, bf16, forward, spelled and planned several ways; nvFuser's kernels against inductor's.

* `head`: the last block's residual add, the mean over H and W of a channels-last [2, 192, 28, 28]
  tensor, and the final LayerNorm over C (one region: a 5.6 us reduction plus a 2.7 us norm in
  session 21, against inductor's three kernels of 4.5 us). `nvf` the default plan (the mean reads its
  input in memory order: passes/memory_order_reductions.py); `nvf logical` without that
  (memory_order_reductions=False: nvFuser schedules an inner reduction over strided memory); `nvf H,W`
  the mean as a sum over H then over W (of the NCHW-ordered sum); `nvf NHWC two-stage` the same on the
  row-major NHWC view (the residual added there); `nvf chunks` (on the NHWC view) as a sum over 16
  chunks of 49 positions, then over the chunks (inductor's split reduction, spelled out); `mean only` the
  residual and the mean without the norm (compared with its own eager).
  Session 22 (H100): `nvf` 7.4 us in 3 kernels (the mean as a grid reduction, 4.3-4.5 us, its
  semaphore's fill, the norm), `nvf logical` 7.5-8.2, `nvf NHWC two-stage` 5.8, `nvf mean only` 3.2
  in one kernel, inductor 4.5. A segment boundary at the mean's result (the region's own cut, made
  explicit) left `nvf` at 7.36: nvFuser schedules the mean that way only when the norm follows.
* `down`: the downsampling convolution (2x2, stride 2, 96 -> 192 channels, with bias) on a
  channels-last input. ATen converts its NCHW weight to channels-last on every call (a 2.3 us copy),
  and without CUDA graphs the bias add stays in eager (a lone op: a 2.7 us ATen broadcast kernel).
  `nvf` the plan without graphs; `nvf graphs` under CUDA graphs (the bias add a region, the weight
  converted in a region: passes/conv_weight_layout.py), inputs marked static so that no input copy
  is timed; `nvf graphs, ATen weight` with channels_last_conv_weights=False; `nvf min1` without
  graphs but min_region_size=1; `nvf min1 cl-weight` also converting the weight in the program.

    python scripts/repros/convnext_head.py
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import dynamo_nvf  # noqa: E402,F401
from kernel_timing import kernel_us  # noqa: E402

DEV, DT, EPS = "cuda", torch.bfloat16, 1e-6
B, C, H = 2, 192, 28


def head(x, gamma, y, w, b):
    z = x + (gamma * y).permute(0, 3, 1, 2)
    return F.layer_norm(z.mean((2, 3)), (C,), w, b, EPS)


def head_hw(x, gamma, y, w, b):
    z = x + (gamma * y).permute(0, 3, 1, 2)
    pooled = (z.float().sum(2).sum(2) / (H * H)).to(z.dtype)
    return F.layer_norm(pooled, (C,), w, b, EPS)


def head_chunks(x, gamma, y, w, b):
    z = (x.permute(0, 2, 3, 1) + gamma * y).reshape(B, 16, H * H // 16, C)
    pooled = (z.float().sum(2).sum(1) / (H * H)).to(z.dtype)
    return F.layer_norm(pooled, (C,), w, b, EPS)


def head_nhwc_two_stage(x, gamma, y, w, b):
    z = x.permute(0, 2, 3, 1) + gamma * y  # row-major NHWC
    pooled = (z.float().sum(1).sum(1) / (H * H)).to(z.dtype)
    return F.layer_norm(pooled, (C,), w, b, EPS)


def head_mean_only(x, gamma, y, w, b):
    return (x + (gamma * y).permute(0, 3, 1, 2)).mean((2, 3))


def head_inputs():
    x = torch.randn(B, C, H, H, device=DEV, dtype=DT).to(memory_format=torch.channels_last)
    gamma = torch.rand(C, device=DEV, dtype=DT)
    y = torch.randn(B, H, H, C, device=DEV, dtype=DT)
    w = torch.rand(C, device=DEV, dtype=DT) + 0.5
    b = torch.randn(C, device=DEV, dtype=DT)
    return x, gamma, y, w, b


def down(x, w, b):
    return F.conv2d(x, w, b, stride=2)


def down_cl_weight(x, w, b):
    return F.conv2d(x, w.contiguous(memory_format=torch.channels_last), b, stride=2)


def down_inputs():
    x = torch.randn(B, C // 2, 2 * H, 2 * H, device=DEV, dtype=DT).to(memory_format=torch.channels_last)
    w = torch.randn(C, C // 2, 2, 2, device=DEV, dtype=DT) / 14
    b = torch.randn(C, device=DEV, dtype=DT)
    return x, w, b


def _relative(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float() - expected.float()).abs().max() / expected.float().abs().max().clamp_min(1e-12)).item()


CASES = {
    "head": (head_inputs, head, {
        "nvf": (head, dict(backend="nvf_bookend")),
        "nvf logical": (head, dict(backend="nvf_bookend", options={"memory_order_reductions": False})),
        "nvf H,W": (head_hw, dict(backend="nvf_bookend")),
        "nvf chunks": (head_chunks, dict(backend="nvf_bookend")),
        "nvf NHWC two-stage": (head_nhwc_two_stage, dict(backend="nvf_bookend")),
        "nvf mean only": (head_mean_only, dict(backend="nvf_bookend")),
        "inductor mean only": (head_mean_only, dict(backend="inductor")),
        "inductor": (head, dict(backend="inductor")),
    }),
    "down": (down_inputs, down, {
        "eager": (down, None),
        "nvf": (down, dict(backend="nvf_bookend")),
        "nvf graphs": (down, dict(backend="nvf_bookend", options={"cuda_graphs": True})),
        "nvf graphs, ATen weight": (down, dict(backend="nvf_bookend", options={
            "cuda_graphs": True, "channels_last_conv_weights": False})),
        "nvf min1": (down, dict(backend="nvf_bookend", options={"min_region_size": 1})),
        "nvf min1 cl-weight": (down_cl_weight, dict(backend="nvf_bookend", options={"min_region_size": 1})),
        "inductor": (down, dict(backend="inductor")),
    }),
}


def main() -> None:
    print(f"{'case':<8}{'plan':<26}{'fwd us':>9}{'k':>4}  max |diff| / max |eager|  strides ok")
    for name, (make_inputs, reference_fn, plans) in CASES.items():
        args = make_inputs()
        for t in args:  # a graph plan's inputs stay where they are: no copy into the graph's buffers
            torch._dynamo.mark_static_address(t)
        expected = reference_fn(*args)
        for label, (fn, kw) in plans.items():
            torch._dynamo.reset()
            compiled = fn if kw is None else torch.compile(fn, **kw)
            want = head_mean_only(*args) if fn is head_mean_only else expected
            try:
                with torch.no_grad():
                    out = compiled(*args).clone()  # a graph replay overwrites its outputs
                    us, k = kernel_us(lambda: compiled(*args))
                print(f"{name:<8}{label:<26}{us:9.2f}{k:4d}  {_relative(out, want):.3g}"
                      f"  {out.stride() == want.stride()}", flush=True)
            except Exception as exc:  # a repro reports, it does not stop
                print(f"{name:<8}{label:<26} failed: {str(exc).splitlines()[0][:120]}", flush=True)


if __name__ == "__main__":
    main()
