"""nvFuser computes wrong values for a channels-last output when the same fusion writes another output,
pinned row-major (`stride_order`), that is a no-op view (an identity `permute`, a `squeeze`) of what
the first one reads.

**What:** the region dynamo_nvf handed nvFuser for a PoolFormer token mixer in training (f32, [8, 64,
28, 28], `tests/test_group_norm.py::test_gpu_training_steps_match_eager_with_no_fallback`): an average
pool of the row-major GroupNorm output `y` written as nine pads + slices of a [N, C, H, 1, W, 1] view,
summed, squeezed, permuted by the identity, divided by the window counts (iota arithmetic); output 0
is that pool, pinned row-major; output 1 is `x + scale * (pool - y)`, `x` read and written channels-last
(stride_order [3, 0, 2, 1]). `as_found` is the definition as dynamo_nvf printed it under
`verify_regions` (nvFuser prints the row-major pin [3, 2, 1, 0] as `stride_order=[]`).

**Expected:** both outputs equal eager's to f32 rounding.

**Actual (H100):** output 0 is right, output 1 wrong (relative error 1.32). The variants:
- `no_identity_permute` (the permute dropped) and `output0_unpinned` (output 0 not pinned): right;
  `output0_pinned_row_major` (the pin written out as [3, 2, 1, 0]): wrong, as found.
- built from scratch without the identity permute (`built`, `built_pool_pinned`, one output, row-major
  output or residual): right.
- `no_taps_pool_pinned`: no pads at all; output 0 is the squeezed input pinned row-major, output 1
  channels-last: wrong (relative error 1.43). So the pads are not needed: a pinned row-major output
  that is a no-op view beside a channels-last output is.

**Versions:** nvfuser_direct 0.2.36 (nvfuser-cu130-torch210 0.2.36.dev20260301), torch 2.11.0+cu130,
CUDA 13.0, H100 80GB HBM3.

    python scripts/nvfuser_repros/row_major_pin_beside_channels_last_output.py

Exits 1 when `as_found` gives wrong values. dynamo_nvf lowers an identity permute to its input
(`ops/lowerings.py`), which makes `as_found` right.
"""

import argparse
import sys

import torch
from nvfuser_direct import DataType, FusionDefinition

N, C, H, W = 8, 64, 28, 28
CL_ORDER = [3, 0, 2, 1]

AS_FOUND = """
def nvfuser_fusion(fd : FusionDefinition) -> None :
    tv0 = fd.define_tensor(shape=[8, 64, 28, 1, 28, 1], contiguity=[True, True, True, None, True, None], dtype=DataType.Float, is_cpu=False)
    tv1 = fd.define_tensor(shape=[8, 64, 28, 28], contiguity=[True, True, True, True], dtype=DataType.Float, is_cpu=False)
    tv2 = fd.define_tensor(shape=[64, 1, 1], contiguity=[True, None, None], dtype=DataType.Float, is_cpu=False)
    tv3 = fd.define_tensor(shape=[8, 64, 28, 28], contiguity=[True, True, True, True], dtype=DataType.Float, is_cpu=False, stride_order=[3, 0, 2, 1])
    tv4 = fd.ops.pad(tv0, pad_widths=[0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0], value=0.00000)
    tv14 = fd.ops.slice(tv4, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[8, 64, 28, 1, 29, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv24 = fd.ops.slice(tv14, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[8, 64, 28, 1, 28, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv5 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0], value=0.00000)
    tv15 = fd.ops.slice(tv5, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[8, 64, 28, 1, 28, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv30 = fd.ops.add(tv24, tv15)
    tv6 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0], value=0.00000)
    tv16 = fd.ops.slice(tv6, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[8, 64, 28, 1, 29, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv25 = fd.ops.slice(tv16, start_indices=[0, 0, 0, 0, 1, 0], end_indices=[8, 64, 28, 1, 29, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv35 = fd.ops.add(tv30, tv25)
    tv7 = fd.ops.pad(tv0, pad_widths=[0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], value=0.00000)
    tv17 = fd.ops.slice(tv7, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[8, 64, 28, 1, 28, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv38 = fd.ops.add(tv35, tv17)
    tv41 = fd.ops.add(tv38, tv0)
    tv8 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0], value=0.00000)
    tv18 = fd.ops.slice(tv8, start_indices=[0, 0, 0, 0, 1, 0], end_indices=[8, 64, 28, 1, 29, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv44 = fd.ops.add(tv41, tv18)
    tv9 = fd.ops.pad(tv0, pad_widths=[0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0], value=0.00000)
    tv19 = fd.ops.slice(tv9, start_indices=[0, 0, 1, 0, 0, 0], end_indices=[8, 64, 29, 1, 29, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv26 = fd.ops.slice(tv19, start_indices=[0, 0, 0, 0, 0, 0], end_indices=[8, 64, 28, 1, 28, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv46 = fd.ops.add(tv44, tv26)
    tv10 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0], value=0.00000)
    tv20 = fd.ops.slice(tv10, start_indices=[0, 0, 1, 0, 0, 0], end_indices=[8, 64, 29, 1, 28, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv48 = fd.ops.add(tv46, tv20)
    tv11 = fd.ops.pad(tv0, pad_widths=[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0], value=0.00000)
    tv21 = fd.ops.slice(tv11, start_indices=[0, 0, 1, 0, 0, 0], end_indices=[8, 64, 29, 1, 29, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv27 = fd.ops.slice(tv21, start_indices=[0, 0, 0, 0, 1, 0], end_indices=[8, 64, 28, 1, 29, 1], strides=[1, 1, 1, 1, 1, 1], manual_normalization=True)
    tv49 = fd.ops.add(tv48, tv27)
    tv50 = fd.ops.squeeze(tv49, dims=[3, 5])
    tv51 = fd.ops.permute(tv50, dims=[0, 1, 2, 3])
    tv12 = fd.ops.iota(length=28, start=0, step=1)
    tv22 = fd.ops.mul(tv12, 1)
    tv28 = fd.ops.sub(tv22, 1)
    tv31 = fd.ops.add(tv28, 3)
    tv36 = fd.ops.minimum(tv31, 28)
    tv32 = fd.ops.maximum(tv28, 0)
    tv39 = fd.ops.sub(tv36, tv32)
    tv42 = fd.ops.broadcast(tv39, is_broadcast_dim=[False, True])
    tv13 = fd.ops.iota(length=28, start=0, step=1)
    tv23 = fd.ops.mul(tv13, 1)
    tv29 = fd.ops.sub(tv23, 1)
    tv33 = fd.ops.add(tv29, 3)
    tv37 = fd.ops.minimum(tv33, 28)
    tv34 = fd.ops.maximum(tv29, 0)
    tv40 = fd.ops.sub(tv37, tv34)
    tv43 = fd.ops.broadcast(tv40, is_broadcast_dim=[True, False])
    tv45 = fd.ops.mul(tv42, tv43)
    tv47 = fd.ops.cast(tv45, dtype=DataType.Float)
    tv52 = fd.ops.broadcast(tv47, is_broadcast_dim=[True, True, False, False])
    tv53 = fd.ops.div(tv51, tv52)
    tv58 = fd.ops.stride_order(tv53, stride_order=[])
    tv55 = fd.ops.broadcast(tv2, is_broadcast_dim=[True, False, False, False])
    tv54 = fd.ops.sub(tv53, tv1)
    tv56 = fd.ops.mul(tv55, tv54)
    tv57 = fd.ops.add(tv3, tv56)
    tv59 = fd.ops.stride_order(tv57, stride_order=[3, 0, 2, 1])
    fd.add_output(tv58)
    fd.add_output(tv59)
"""


#: Edits of the printed definition: (text, replacement) pairs.
AS_FOUND_EDITS = {
    "as_found": [],
    "no_identity_permute": [("fd.ops.permute(tv50, dims=[0, 1, 2, 3])", "tv50")],
    "output0_unpinned": [("fd.ops.stride_order(tv53, stride_order=[])", "tv53")],
    "output0_pinned_row_major": [("stride_order(tv53, stride_order=[])", "stride_order(tv53, stride_order=[3, 2, 1, 0])")],
    "neither": [("fd.ops.permute(tv50, dims=[0, 1, 2, 3])", "tv50"), ("fd.ops.stride_order(tv53, stride_order=[])", "tv53")],
}


def build_as_found(edits: list[tuple[str, str]]) -> FusionDefinition:
    namespace = {"DataType": DataType, "FusionDefinition": FusionDefinition}
    text = AS_FOUND
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    exec(text, namespace)  # noqa: S102  (the definition as printed)
    with FusionDefinition() as fd:
        namespace["nvfuser_fusion"](fd)
    return fd


def _counts(fd: FusionDefinition, length: int):
    """The window's in-bounds taps per position along one dim (3 wide, padding 1), as float."""
    i = fd.ops.sub(fd.ops.iota(length=length, start=0, step=1), 1)
    return fd.ops.sub(fd.ops.minimum(fd.ops.add(i, 3), length), fd.ops.maximum(i, 0))


def build(taps: bool, residual_cl: bool, output_cl: bool, pool_output: bool, pin_pool: bool) -> FusionDefinition:
    with FusionDefinition() as fd:
        y6 = fd.define_tensor(shape=[N, C, H, 1, W, 1], contiguity=[True, True, True, None, True, None],
                              dtype=DataType.Float, is_cpu=False)
        y = fd.define_tensor(shape=[N, C, H, W], contiguity=[True] * 4, dtype=DataType.Float, is_cpu=False)
        scale = fd.define_tensor(shape=[C, 1, 1], contiguity=[True, None, None], dtype=DataType.Float, is_cpu=False)
        extra = {"stride_order": CL_ORDER} if residual_cl else {}
        x = fd.define_tensor(shape=[N, C, H, W], contiguity=[True] * 4, dtype=DataType.Float, is_cpu=False, **extra)
        total = None
        for dh in (-1, 0, 1):
            for dw in (-1, 0, 1):
                if not taps and (dh, dw) != (0, 0):
                    continue
                tap = y6
                if (dh, dw) != (0, 0):
                    pads = [0, 0, int(dw < 0), int(dw > 0), 0, 0, int(dh < 0), int(dh > 0), 0, 0, 0, 0]
                    tap = fd.ops.pad(y6, pad_widths=pads, value=0.0)
                    start = [0, 0, int(dh > 0), 0, int(dw > 0), 0]
                    end = [N, C, H + int(dh > 0), 1, W + int(dw > 0), 1]
                    tap = fd.ops.slice(tap, start_indices=start, end_indices=end, strides=[1] * 6)
                total = tap if total is None else fd.ops.add(total, tap)
        total = fd.ops.squeeze(total, dims=[3, 5])
        if taps:
            counts = fd.ops.mul(fd.ops.broadcast(_counts(fd, H), is_broadcast_dim=[False, True]),
                                fd.ops.broadcast(_counts(fd, W), is_broadcast_dim=[True, False]))
            counts = fd.ops.broadcast(fd.ops.cast(counts, dtype=DataType.Float), is_broadcast_dim=[True, True, False, False])
            pool = fd.ops.div(total, counts)
        else:
            pool = total
        out = fd.ops.add(x, fd.ops.mul(fd.ops.broadcast(scale, is_broadcast_dim=[True, False, False, False]),
                                       fd.ops.sub(pool, y)))
        if pool_output:
            fd.add_output(fd.ops.stride_order(pool, stride_order=[3, 2, 1, 0]) if pin_pool else pool)
        fd.add_output(fd.ops.stride_order(out, stride_order=CL_ORDER) if output_cl else out)
    return fd


VARIANTS = {  # name: (taps, residual channels-last, output channels-last, pool output, pool output pinned)
    "built": (True, True, True, True, False),
    "built_pool_pinned": (True, True, True, True, True),
    "one_output": (True, True, True, False, False),
    "row_major_output": (True, True, False, True, False),
    "row_major_residual": (True, False, True, True, False),
    "no_taps_pool_pinned": (False, True, True, True, True),
}


def check(name: str, fd: FusionDefinition, pool_output: bool, residual_cl: bool, taps: bool = True) -> bool:
    """Runs fd on fresh inputs; prints each output's max relative error; True when within 1e-4."""
    torch.manual_seed(0)
    y = torch.randn(N, C, H, W, device="cuda")
    x = torch.randn(N, C, H, W, device="cuda")
    x = x.to(memory_format=torch.channels_last) if residual_cl else x
    scale = torch.rand(C, 1, 1, device="cuda")
    pool = torch.nn.functional.avg_pool2d(y, 3, 1, 1, count_include_pad=False) if taps else y
    expected = [pool, x + scale * (pool - y)] if pool_output else [x + scale * (pool - y)]
    outs = fd.execute([y.view(N, C, H, 1, W, 1), y, scale, x])
    torch.cuda.synchronize()
    errors = [((o - e).abs().max() / e.abs().max()).item() for o, e in zip(outs, expected)]
    good = all(e < 1e-4 for e in errors)
    print(f"{name}: relative errors {[f'{e:.3g}' for e in errors]} strides {[o.stride() for o in outs]}"
          f" -> {'right' if good else 'WRONG'}")
    return good


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    found_right = check("as_found", build_as_found([]), True, True)
    for name, edits in AS_FOUND_EDITS.items():
        if edits:
            check(name, build_as_found(edits), True, True)
    for name, (taps, residual_cl, output_cl, pool_output, pin_pool) in VARIANTS.items():
        try:
            check(name, build(taps, residual_cl, output_cl, pool_output, pin_pool), pool_output, residual_cl, taps)
        except Exception as exc:  # noqa: BLE001  (report and go on)
            print(f"{name}: FAILED {str(exc)[:300]!r}")
    print("as_found runs right: does not reproduce" if found_right else "as_found gives wrong values: reproduces")
    return 0 if found_right else 1


if __name__ == "__main__":
    sys.exit(main())
