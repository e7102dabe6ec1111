"""nvFuser fails to compile a fusion that slices one element off a dim and lets a binary op
broadcast it against the full dim.

**What:** `x[..., :1] < 0` masks whole rows of `x` (the spelling HF's attention masks and our
`_safe_softmax` tests use): `fd.ops.slice` keeps the dim with extent 1, then `fd.ops.where` /
`fd.ops.lt` combine it with the full `[rows, cols]` tensor, as aten broadcasts a size-1 dim.

**Expected:** the fusion compiles and returns eager's values, or `define` rejects the mismatched
extents.

**Actual:** `as_found`: the definition is accepted and execution raises "No potential
concrete_id's" (compute_at_map.cpp:1239). `select_broadcast` (the element taken with
`fd.ops.select`, the dim put back with `fd.ops.broadcast`) raises an internal assert in
compiled_kernel.cpp:1394. `slice_as_input` (the `[rows, 1]` slice handed in as a second input, a
broadcast dim) runs and matches eager.

**Versions:** nvfuser_direct 0.2.36 (nvfuser-cu130-torch210 0.2.36.dev20260301), torch 2.11.0+cu130,
CUDA 13.0, H100 80GB HBM3 (2026-11-26).

    python scripts/nvfuser_repros/size_one_slice_broadcast.py

Prints each variant's outcome and whether it matches eager; exits 1 when `as_found`
fails. dynamo_nvf leaves a one-element slice that a later op broadcasts out of its fusions
(`dynamo_nvf/ops/lowerings.py`, `_check_slice`) as `slice_as_input` does: the slice runs as a
PyTorch view and the next fusion takes it as a broadcast input.
"""

import argparse
import sys

import torch
from nvfuser_direct import DataType, FusionDefinition

ROWS, COLS = 6, 12


def build(variant: str) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)
        if variant == "slice_as_input":
            first = fd.define_tensor(shape=[-1, 1], contiguity=[False, None], dtype=DataType.Float, is_cpu=False)
        elif variant == "as_found":
            first = fd.ops.slice(x, [0, 0], [ROWS, 1], [1, 1])
        else:
            first = fd.ops.broadcast(fd.ops.select(x, fd.define_scalar(0, dtype=DataType.Int), 1), [False, True])
        neg = fd.ops.lt(first, fd.define_scalar(0.0, dtype=DataType.Double))
        out = fd.ops.where(neg, fd.define_scalar(float("-inf"), dtype=DataType.Double), x)
        fd.add_output(out)
    return fd


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    x = torch.randn(ROWS, COLS, device="cuda")
    expected = x.masked_fill(x[..., :1] < 0, float("-inf"))
    failed = False
    for variant in ("as_found", "select_broadcast", "slice_as_input"):
        try:
            (out,) = build(variant).execute([x, x[..., :1]] if variant == "slice_as_input" else [x])
            same = torch.equal(out, expected)
            print(f"{variant}: ran, {'matches eager' if same else 'DIFFERS from eager'}")
            failed |= variant == "as_found" and not same
        except Exception as exc:  # noqa: BLE001
            print(f"{variant}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            failed |= variant == "as_found"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
