"""nvFuser returns wrong values from a fusion whose divisor is a tensor of ones (`fd.ops.full`) shifted
by pads and slices, as a 3x3 average pool without count_include_pad counts the taps inside its input.

**What:** the exact definition dynamo_nvf built for a 3x3, stride-1, padding-1 average pool with
count_include_pad=False, minus its input, on an NCHW f32 tensor [2, 8, 14, 14] split into its phase
planes ([2, 14, 1, 14, 1, 8]): nine shifted taps of the input summed (pad then slice), divided by
nine shifted taps of `full([1, 14, 1, 14, 1, 1], 1.0)` summed, squeezed, permuted to NCHW, minus the
second input.

**Expected:** the values the same ops give in PyTorch (this script interprets the definition's ops
with torch: pad, slice, add, div, ... on real tensors).

**Actual:** `as_found`: 560 of the 3,136 values differ, up to 0.184, at the borders and next to them
(H200, 2026-11-28). `ones_as_input`, the same definition with the tensor of ones handed in as an
input instead of made by `fd.ops.full`: all values match.

**Versions:** nvfuser_direct 0.2.36 (nvfuser-cu130-torch210 0.2.36.dev20260301), torch 2.11.0+cu130,
CUDA 13.0, H200 (2026-11-28).

    python scripts/nvfuser_repros/shifted_full_divisor.py

Prints each variant's mismatches against the interpreted definition; exits 1 when `as_found` is
wrong. dynamo_nvf's average pool as taps builds the divisor as ATen does, an outer product of two
aranges of the taps inside the input per row and per column (`pool_windows.py`), not shifts of a
tensor of ones.
"""

import argparse
import sys

import torch
import torch.nn.functional as F
from nvfuser_direct import DataType, FusionDefinition

DEFINITION = '''
def nvfuser_fusion(fd : FusionDefinition) -> None :
    tv0 = fd.define_tensor(shape=[2, 14, 1, 14, 1, 8], contiguity=[True, True, None, True, None, True], dtype=DataType.Float, is_cpu=False)
    tv1 = fd.define_tensor(shape=[2, 8, 14, 14], contiguity=[True, True, True, True], dtype=DataType.Float, is_cpu=False, stride_order=[3, 0, 2, 1])
    tv2 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0], value=0.00000)
    tv11 = fd.ops.slice(tv2, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[2, 14, 1, 15, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv27 = fd.ops.slice(tv11, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[2, 14, 1, 14, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv3 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], value=0.00000)
    tv12 = fd.ops.slice(tv3, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[2, 14, 1, 14, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv39 = fd.ops.add(tv27, tv12)
    tv4 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0], value=0.00000)
    tv13 = fd.ops.slice(tv4, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[2, 14, 1, 15, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv28 = fd.ops.slice(tv13, start_indices=[0, 0, 0, 1, 0, 0], end_indices=[2, 14, 1, 15, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv44 = fd.ops.add(tv39, tv28)
    tv5 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], value=0.00000)
    tv14 = fd.ops.slice(tv5, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[2, 14, 1, 14, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv46 = fd.ops.add(tv44, tv14)
    tv48 = fd.ops.add(tv46, tv0)
    tv6 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0], value=0.00000)
    tv15 = fd.ops.slice(tv6, start_indices=[0, 0, 0, 1, 0, 0], end_indices=[2, 14, 1, 15, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv50 = fd.ops.add(tv48, tv15)
    tv7 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0], value=0.00000)
    tv16 = fd.ops.slice(tv7, start_indices=[0, 1, 0, 0, 0, 0], end_indices=[2, 15, 1, 15, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv29 = fd.ops.slice(tv16, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[2, 14, 1, 14, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv52 = fd.ops.add(tv50, tv29)
    tv8 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0], value=0.00000)
    tv17 = fd.ops.slice(tv8, start_indices=[0, 1, 0, 0, 0, 0], end_indices=[2, 15, 1, 14, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv54 = fd.ops.add(tv52, tv17)
    tv9 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0], value=0.00000)
    tv18 = fd.ops.slice(tv9, start_indices=[0, 1, 0, 0, 0, 0], end_indices=[2, 15, 1, 15, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv30 = fd.ops.slice(tv18, start_indices=[0, 0, 0, 1, 0, 0], end_indices=[2, 14, 1, 15, 1, 8], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv56 = fd.ops.add(tv54, tv30)
    c251 = fd.define_scalar(1.00000, dtype=DataType.Float)
    tv10 = fd.ops.full(shape=[1, 14, 1, 14, 1, 1], fill_value=c251, dtype=DataType.Float)
    tv19 = fd.ops.pad(tv10, pad_widths=[0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0], value=0.00000)
    tv31 = fd.ops.slice(tv19, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[1, 14, 1, 15, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv40 = fd.ops.slice(tv31, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[1, 14, 1, 14, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv20 = fd.ops.pad(tv10, pad_widths=[0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], value=0.00000)
    tv32 = fd.ops.slice(tv20, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[1, 14, 1, 14, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv45 = fd.ops.add(tv40, tv32)
    tv21 = fd.ops.pad(tv10, pad_widths=[0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0], value=0.00000)
    tv33 = fd.ops.slice(tv21, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[1, 14, 1, 15, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv41 = fd.ops.slice(tv33, start_indices=[0, 0, 0, 1, 0, 0], end_indices=[1, 14, 1, 15, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv47 = fd.ops.add(tv45, tv41)
    tv22 = fd.ops.pad(tv10, pad_widths=[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], value=0.00000)
    tv34 = fd.ops.slice(tv22, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[1, 14, 1, 14, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv49 = fd.ops.add(tv47, tv34)
    tv51 = fd.ops.add(tv49, tv10)
    tv23 = fd.ops.pad(tv10, pad_widths=[0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0], value=0.00000)
    tv35 = fd.ops.slice(tv23, start_indices=[0, 0, 0, 1, 0, 0], end_indices=[1, 14, 1, 15, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv53 = fd.ops.add(tv51, tv35)
    tv24 = fd.ops.pad(tv10, pad_widths=[0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0], value=0.00000)
    tv36 = fd.ops.slice(tv24, start_indices=[0, 1, 0, 0, 0, 0], end_indices=[1, 15, 1, 15, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv42 = fd.ops.slice(tv36, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[1, 14, 1, 14, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv55 = fd.ops.add(tv53, tv42)
    tv25 = fd.ops.pad(tv10, pad_widths=[0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0], value=0.00000)
    tv37 = fd.ops.slice(tv25, start_indices=[0, 1, 0, 0, 0, 0], end_indices=[1, 15, 1, 14, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv57 = fd.ops.add(tv55, tv37)
    tv26 = fd.ops.pad(tv10, pad_widths=[0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0], value=0.00000)
    tv38 = fd.ops.slice(tv26, start_indices=[0, 1, 0, 0, 0, 0], end_indices=[1, 15, 1, 15, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv43 = fd.ops.slice(tv38, start_indices=[0, 0, 0, 1, 0, 0], end_indices=[1, 14, 1, 15, 1, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv58 = fd.ops.add(tv57, tv43)
    tv59 = fd.ops.div(tv56, tv58)
    tv60 = fd.ops.squeeze(tv59, dims=[2, 4])
    tv61 = fd.ops.permute(tv60, dims=[0, 3, 1, 2])
    tv62 = fd.ops.sub(tv61, tv1)
    tv63 = fd.ops.cast(tv62, dtype=DataType.Float)
    tv64 = fd.ops.stride_order(tv63, stride_order=[])
    fd.add_output(tv64)
'''


class TorchOps:
    """The definition's ops on torch tensors, as nvFuser documents them."""

    def pad(self, t, pad_widths, value=0.0):
        return F.pad(t, list(pad_widths), value=value)

    def slice(self, t, start_indices, end_indices, strides, manual_normalization=True):
        return t[tuple(slice(s, e, k) for s, e, k in zip(start_indices, end_indices, strides))]

    def full(self, shape, fill_value, dtype):
        return torch.full(shape, fill_value, device="cuda")

    def add(self, a, b):
        return a + b

    def sub(self, a, b):
        return a - b

    def mul(self, a, b):
        return a * b

    def div(self, a, b):
        return a / b

    def cast(self, t, dtype):
        return t

    def squeeze(self, t, dims):
        for d in sorted(dims, reverse=True):
            t = t.squeeze(d)
        return t

    def permute(self, t, dims):
        return t.permute(dims)

    def stride_order(self, t, stride_order):
        return t


class TorchDefinition:
    def __init__(self, inputs):
        self.ops, self._inputs, self.outputs = TorchOps(), list(inputs), []

    def define_tensor(self, **kwargs):
        return self._inputs.pop(0)

    def define_scalar(self, value, dtype=None):
        return value

    def add_output(self, t):
        self.outputs.append(t)


def variant_text(variant: str) -> str:
    if variant == "as_found":
        return DEFINITION
    lines = DEFINITION.splitlines()
    at = next(i for i, line in enumerate(lines) if "fd.ops.full(" in line)
    name = lines[at].split("=")[0].strip()
    lines[at] = (f"    {name} = fd.define_tensor(shape=[1, 14, 1, 14, 1, 1], contiguity=[None, True, None, True, None, None], "
                 "dtype=DataType.Float, is_cpu=False)")
    return "\n".join(lines)


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    x = torch.randn(2, 8, 14, 14, device="cuda")
    planes = x.permute(0, 2, 3, 1).contiguous().reshape(2, 14, 1, 14, 1, 8)  # [1568, 112, 112, 8, 8, 1]
    other = torch.randn(2, 8, 14, 14, device="cuda").contiguous(memory_format=torch.channels_last)
    ones = torch.ones(1, 14, 1, 14, 1, 1, device="cuda")
    failed = False
    for variant in ("as_found", "ones_as_input"):
        inputs = [planes, other] + ([ones] if variant == "ones_as_input" else [])
        scope = {"FusionDefinition": FusionDefinition, "DataType": DataType}
        exec(variant_text(variant), scope)
        reference = TorchDefinition(inputs)
        scope["nvfuser_fusion"](reference)
        with FusionDefinition() as fd:
            scope["nvfuser_fusion"](fd)
        (out,) = fd.execute(inputs)
        off = (out - reference.outputs[0]).abs() > 1e-5
        where = off.nonzero()[:4].tolist()
        print(f"{variant}: {int(off.sum())} of {off.numel()} values off (max {float((out - reference.outputs[0]).abs().max()):.3g}); first at {where}")
        failed |= variant == "as_found" and bool(off.any())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
