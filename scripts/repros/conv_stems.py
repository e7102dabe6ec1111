"""The image models' stems at the large batch (issue #10: GPU-bound inference, f32 and bf16, batch 64,
224 px), each alone: the patch convolution on NCHW images and what follows it, nvFuser's plan against
inductor's (which converts the images to channels-last first: its layout optimisation).

* `vit`: ViT-S/16's patch embedding (16x16 stride-16 conv, 3 -> 384), flatten, transpose to tokens,
  the CLS token concatenated, the position embedding added, the first LayerNorm. Session 23 (H100,
  f32): cuDNN converted the NCHW images itself (nchwToNhwc, about 140 us) and returned NCHW, and the
  region after it read the conv output transposed (88 us, then 45 us for the norm) where inductor's two
  kernels took 39 us.
* `convnext`: ConvNeXt's stem (4x4 stride-4 conv, 3 -> 96) and its LayerNorm2d. Session 23 (H100,
  f32): an NCHW fp32 conv of 151 us and a norm over strided channels of 122 us, against inductor's
  channels-last conversion (56 us), NHWC conv (67 us) and norm (76 us).

Variants: `eager`; `nvf` (the default plan, no CUDA graphs; from session 23 it converts the ViT image
to channels-last, conv_input_layout.py, and writes its tokens in a region of their own,
split_transposes.py); `nvf nchw` without the conversion; `nvf one region` without either (session 23's
first plan); `nvf cl-input` the program with `images.contiguous(memory_format=torch.channels_last)`
before the conv (the conversion as a region of its own when `min_region_size=1`); `nvf split` (ViT) the
tokens made contiguous in a first compiled function (conv, flatten, transpose, copy) and the CLS
concat, position add and norm in a second; `inductor`. With `--kernels`, each variant's kernels.

Session 23, H100, f32 (before the two passes): ViT `nvf` 544 us, `nvf cl-input` 464 (the region after
the conv still 75 + 41 us), `nvf split` 446 (a 12 us transpose kernel and a 19 us norm), inductor 397;
ConvNeXt `nvf` 270, `nvf cl-input` 263 (a TF32 conv), inductor 217-286 (two runs).

    python scripts/repros/conv_stems.py [f32|bf16] [--kernels]
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import dynamo_nvf  # noqa: E402,F401
from kernel_timing import cuda_kernels, kernel_us  # noqa: E402

DEV = "cuda"
B, IMG = 64, 224


def vit_stem(x, w, b, cls, pos, lw, lb, channels_last=False):
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = F.conv2d(x, w, b, stride=16).flatten(2).transpose(1, 2)
    y = torch.cat([cls.expand(y.shape[0], -1, -1), y], dim=1) + pos
    return F.layer_norm(y, (y.shape[-1],), lw, lb, 1e-6)


def vit_tokens(x, w, b):
    return F.conv2d(x, w, b, stride=16).flatten(2).transpose(1, 2).contiguous()


def vit_after_tokens(y, cls, pos, lw, lb):
    y = torch.cat([cls.expand(y.shape[0], -1, -1), y], dim=1) + pos
    return F.layer_norm(y, (y.shape[-1],), lw, lb, 1e-6)


def convnext_stem(x, w, b, lw, lb, channels_last=False):
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = F.conv2d(x, w, b, stride=4).permute(0, 2, 3, 1)
    return F.layer_norm(y, (y.shape[-1],), lw, lb, 1e-6).permute(0, 3, 1, 2)


def _inputs(name, dt):
    r = lambda *s: torch.randn(*s, device=DEV, dtype=dt)  # noqa: E731
    if name == "vit":
        d = 384
        return [r(B, 3, IMG, IMG), r(d, 3, 16, 16) * 0.05, r(d), r(1, 1, d), r(1, 197, d), r(d), r(d)]
    d = 96
    return [r(B, 3, IMG, IMG), r(d, 3, 4, 4) * 0.1, r(d), r(d), r(d)]


def _split_vit():
    opts = {"strict": True, "min_region_size": 1}
    first = torch.compile(vit_tokens, backend="nvf_bookend", options=opts)
    second = torch.compile(vit_after_tokens, backend="nvf_bookend", options=opts)
    return lambda x, w, b, *rest: second(first(x, w, b), *rest)


def main() -> None:
    dt = torch.bfloat16 if "bf16" in sys.argv[1:] else torch.float32
    show_kernels = "--kernels" in sys.argv[1:]
    torch.manual_seed(0)
    for name, fn in (("vit", vit_stem), ("convnext", convnext_stem)):
        inputs = _inputs(name, dt)
        want = fn(*inputs)
        variants = {
            "eager": lambda x, *a: fn(x, *a),
            "nvf": torch.compile(fn, backend="nvf_bookend", options={"strict": True}),
            "nvf nchw": torch.compile(fn, backend="nvf_bookend",
                                      options={"strict": True, "channels_last_patch_inputs": False}),
            "nvf one region": torch.compile(fn, backend="nvf_bookend", options={
                "strict": True, "channels_last_patch_inputs": False, "split_transposes": False}),
            "nvf cl-input": torch.compile(lambda x, *a: fn(x, *a, channels_last=True), backend="nvf_bookend",
                                          options={"strict": True, "min_region_size": 1}),
        }
        if name == "vit":
            variants["nvf split"] = _split_vit()
        variants["inductor"] = torch.compile(fn)
        for label, call in variants.items():
            with torch.no_grad():
                got = call(*inputs)
                err = (got.float() - want.float()).abs().max().item()
                us, kernels = kernel_us(lambda: call(*inputs), 20)
            print(f"{name:9s} {str(dt)[6:]:9s} {label:14s} {us:8.1f} us  {kernels:2d} kernels  "
                  f"max err {err:.2e}  strides {tuple(got.stride())}")
            if show_kernels:
                with torch.no_grad():
                    for e in cuda_kernels(lambda: call(*inputs), 1):
                        print(f"      {e.device_time:8.1f}  {e.name[:110]}")


if __name__ == "__main__":
    main()
