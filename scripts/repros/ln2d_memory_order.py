"""ConvNeXt's stem LayerNorm2d over an NCHW-contiguous convolution output, planned several ways (issue #10:
convnext_fwd_f32_large's stem norm took 121 us against inductor's 75 in session 23).

The model normalises `(conv + bias).permute(0, 2, 3, 1)` over C and permutes back; eager's result is
NHWC-contiguous (channels-last once permuted back). Variants, each compiled alone:

* `nvf`: the function as the model writes it (dynamo_nvf's default plan: the strided view hoisted,
  nvFuser reduces over C along 3136-element strides);
* `nvf mem cl`: the same math written over dim 1 of the NCHW tensor (var_mean over C in memory order),
  the result made channels-last inside the region;
* `nvf mem nchw`: the same, the result left NCHW (a lower bound: not eager's layout);
* `nvf stats + norm`: two compiled functions, the statistics over dim 1, then the normalisation with the
  channels-last result;
* `inductor`: the model's spelling.

GPU time per call: CUDA events around each call, L2 flushed before it, median of 30.

    python scripts/repros/ln2d_memory_order.py [f32|bf16] [batch]
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import dynamo_nvf  # noqa: E402,F401
from kernel_timing import cold_us  # noqa: E402

EPS = 1e-6


def model_spelling(x, bias, w, b):
    y = (x + bias.view(1, -1, 1, 1)).permute(0, 2, 3, 1)
    return F.layer_norm(y, (y.shape[-1],), w, b, EPS).permute(0, 3, 1, 2)


def memory_order(x, bias, w, b, channels_last=True):
    y = x + bias.view(1, -1, 1, 1)
    var, mean = torch.var_mean(y, dim=1, keepdim=True, correction=0)
    out = (y - mean) * torch.rsqrt(var + EPS) * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1)
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out


def memory_order_nchw(x, bias, w, b):
    return memory_order(x, bias, w, b, channels_last=False)


def stats(x, bias):
    y = x + bias.view(1, -1, 1, 1)
    var, mean = torch.var_mean(y, dim=1, keepdim=True, correction=0)
    return mean, torch.rsqrt(var + EPS)


def normalise(x, bias, mean, rstd, w, b):
    y = (x + bias.view(1, -1, 1, 1) - mean) * rstd * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1)
    return y.contiguous(memory_format=torch.channels_last)


def main() -> None:
    dtype = torch.bfloat16 if "bf16" in sys.argv[1:] else torch.float32
    batch = next((int(a) for a in sys.argv[1:] if a.isdigit()), 64)
    c = 96
    x = torch.randn(batch, c, 56, 56, device="cuda", dtype=dtype)
    bias, w, b = (torch.randn(c, device="cuda", dtype=dtype) for _ in range(3))
    args = (x, bias, w, b)
    with torch.no_grad():
        ref = model_spelling(*(a.double() for a in args)).to(dtype)
        nvf = lambda f: torch.compile(f, backend="nvf_bookend", dynamic=False)  # noqa: E731
        stats_fn, norm_fn = nvf(stats), nvf(normalise)

        def two_step():
            mean, rstd = stats_fn(x, bias)
            return norm_fn(x, bias, mean, rstd, w, b)

        variants = {
            "eager": lambda: model_spelling(*args),
            "nvf": (lambda f: lambda: f(*args))(nvf(model_spelling)),
            "nvf mem cl": (lambda f: lambda: f(*args))(nvf(memory_order)),
            "nvf mem nchw": (lambda f: lambda: f(*args))(nvf(memory_order_nchw)),
            "nvf stats + norm": two_step,
            "inductor": (lambda f: lambda: f(*args))(torch.compile(model_spelling, dynamic=False)),
        }
        print(f"LayerNorm2d [{batch}, {c}, 56, 56] {dtype}")
        for name, call in variants.items():
            try:
                out = call()
                err = (out.float() - ref.float()).abs().max().item()
                us = cold_us(call)
                print(f"  {name:18s} {us:8.1f} us  max err {err:.2e}  strides {tuple(out.stride())}")
            except Exception as exc:  # a variant nvFuser refuses: say so and go on
                print(f"  {name:18s} failed: {type(exc).__name__}: {str(exc)[:200]}")


if __name__ == "__main__":
    main()
