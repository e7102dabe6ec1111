"""nvFuser's reduction scheduler fails on a standardized convolution weight written channels-last.

**What:** timm's StdConv2d weight, `batch_norm(w.reshape(1, O, -1), training=True).reshape_as(w)`
(BiT, NFNets): mean and variance over a reshape of the weight, the normalised values reshaped back to
[O, I, kh, kw] and written out with a channels-last `stride_order`, or as a logical permute to
[O, kh, kw, I], or row-major. The same without the reshape (statistics over dims 1, 2, 3) beside it.

**Expected:** each spelling runs; the channels-last one writes the weight in the layout cuDNN wants.

**Actual:** the reshape with the channels-last `stride_order` fails ("Could not find axis ...
requested in replaying consumer ... as producer", transform_replay.cpp:740); the logical permute and
the spellings without the reshape run.

**Versions:** nvfuser_direct 0.2.36, torch 2.11.0+cu130, CUDA 13.0, H200 (2026-11-29).

    python scripts/nvfuser_repros/std_weight_channels_last_output.py

Prints per spelling: ok and the output's strides, or the error's first line. dynamo_nvf writes a
computed weight as the logical permute (passes/conv_weight_layout.py).
"""

from __future__ import annotations

import argparse

import torch
from nvfuser_direct import DataType, FusionDefinition

BF16, F32 = DataType.BFloat16, DataType.Float
O, I, K = 64, 64, 3


def standardized(reshape: bool, layout: str):
    """The weight's standardization; `layout`: "stride_order" (channels-last), "permute" or "row-major"."""
    with FusionDefinition() as fd:
        w = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=BF16)
        x = fd.ops.cast(w, F32)
        if reshape:
            flat = fd.ops.reshape(x, [1, O, I * K * K])
            var, mean = fd.ops.var_mean(flat, [0, 2], 0, True)
            y = fd.ops.mul(fd.ops.sub(flat, mean), fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-6))))
            y = fd.ops.reshape(y, [O, I, K, K])
        else:
            var, mean = fd.ops.var_mean(x, [1, 2, 3], 0, True)
            y = fd.ops.mul(fd.ops.sub(x, mean), fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-6))))
        y = fd.ops.cast(y, BF16)
        if layout == "stride_order":
            y = fd.ops.stride_order(y, [3, 0, 2, 1])
        elif layout == "permute":
            y = fd.ops.permute(y, dims=[0, 2, 3, 1])
        fd.add_output(y)
    return fd


def main() -> None:
    w = torch.randn(O, I, K, K, device="cuda", dtype=torch.bfloat16)
    expected = torch.nn.functional.batch_norm(w.float().reshape(1, O, -1), None, None, training=True,
                                              eps=1e-6).reshape_as(w)
    for reshape in (True, False):
        for layout in ("stride_order", "permute", "row-major"):
            try:
                (out,) = standardized(reshape, layout).execute([w])
                value = out.permute(0, 3, 1, 2) if layout == "permute" else out
                close = torch.allclose(value.float(), expected, atol=2e-2, rtol=2e-2)
                result = f"ok, strides {tuple(value.stride())}, matches eager: {close}"
            except RuntimeError as exc:
                result = "failed: " + " ".join(str(exc).split())[:200]
            print(f"reshape={reshape!s:5} {layout:12} {result}")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    main()
