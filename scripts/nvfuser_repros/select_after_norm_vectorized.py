"""nvFuser fails to compile a LayerNorm whose output is read only at one token (a ViT's class-token
pooling): validation.cpp:1559, a vectorized access of the `select`'s result.

**What:** the region dynamo_nvf hands nvFuser at the end of timm's DeiT-S / ViT-B inference (bf16,
[64, 197, 384]): the last block's residual add, the final LayerNorm over the last dim (f32), its bf16
cast, then `x[:, 0]` (`aten.select.int(x, 1, 0)`), as the backend's fallback dump printed it
(`python scripts/fallback_repro.py zoo_timm_deit_small_fwd_bf16 --calls 1`).

**Expected:** it compiles and returns eager's values.

**Actual:** `as_found` raises at execution: "Detected exception while compiling fusion segments in
parallel ... validation.cpp:1559 ... Expected def == nullptr || def->isA<LoadStoreOp>() ||
def->isA<SliceOp>() || ..." (the vectorized tensor is defined by a SelectOp, which that list leaves
out). The other variants show which part matters: `slice_squeeze` takes the token with a unit slice
and a squeeze instead of `select`; `whole` returns the normalised tensor without picking a token.

**Status:** reproduces. The script ran on an H200 (2026-11-29): `as_found` failed with the assert
above; `slice_squeeze` and `whole` ran and matched eager (rc 1).

**Versions:** nvfuser_direct 0.2.36, torch 2.11.0+cu130, CUDA 13.0, H200 (2026-11-29).

    python scripts/nvfuser_repros/select_after_norm_vectorized.py

Prints each variant's outcome and whether it matches eager; exits 1 when `as_found` fails.
dynamo_nvf runs the region as pieces after the error (runtime/split_region.py, one warning).
"""

import argparse
import sys

import torch
from nvfuser_direct import DataType, FusionDefinition

BATCH, TOKENS, WIDTH, EPS = 64, 197, 384, 1e-6


def build(variant: str) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16, is_cpu=False)
        residual = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16,
                                    is_cpu=False)
        weight = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16, is_cpu=False)
        bias = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16, is_cpu=False)
        h = fd.ops.add(fd.ops.cast(residual, dtype=DataType.Float), fd.ops.cast(x, dtype=DataType.Float))
        mean, var_sum, _ = fd.ops.welford(h, dims=[2])
        var = fd.ops.div(var_sum, float(WIDTH))
        centred = fd.ops.sub(h, fd.ops.broadcast(mean, is_broadcast_dim=[False, False, True]))
        inv_std = fd.ops.rsqrt(fd.ops.add(fd.ops.broadcast(var, is_broadcast_dim=[False, False, True]), EPS))
        y = fd.ops.mul(fd.ops.mul(centred, inv_std),
                       fd.ops.broadcast(fd.ops.cast(weight, dtype=DataType.Float), is_broadcast_dim=[True, True, False]))
        y = fd.ops.add(y, fd.ops.broadcast(fd.ops.cast(bias, dtype=DataType.Float), is_broadcast_dim=[True, True, False]))
        y = fd.ops.cast(fd.ops.cast(y, dtype=DataType.BFloat16), dtype=DataType.Float)
        if variant == "as_found":
            y = fd.ops.select(y, fd.define_scalar(0, dtype=DataType.Int), dim=1)
        elif variant == "slice_squeeze":
            y = fd.ops.squeeze(fd.ops.slice(y, [0, 0, 0], [BATCH, 1, WIDTH], [1, 1, 1]), [1])
        fd.add_output(fd.ops.cast(y, dtype=DataType.BFloat16))
    return fd


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    x, residual = (torch.randn(BATCH, TOKENS, WIDTH, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    weight, bias = (torch.randn(WIDTH, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    normed = torch.nn.functional.layer_norm((residual.float() + x.float()), (WIDTH,), weight.float(), bias.float(),
                                            EPS).to(torch.bfloat16)
    failed = False
    for variant in ("as_found", "slice_squeeze", "whole"):
        expected = normed if variant == "whole" else normed[:, 0]
        try:
            out = build(variant).execute([x, residual, weight, bias])[0]
            ok = out.shape == expected.shape and torch.allclose(out.float(), expected.float(), rtol=1.6e-2, atol=1e-2)
            print(f"{variant}: ran, {'matches' if ok else 'DIFFERS from'} eager")
            failed = failed or not ok
        except Exception as exc:  # noqa: BLE001  (the defect: report it and go on)
            text = str(exc)
            at = text.find("validation.cpp")
            print(f"{variant}: FAILED: {(text[at:at + 200] if at >= 0 else text[:300])!r}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
