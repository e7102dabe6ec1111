"""nvFuser fails to compile a LayerNorm backward whose input arrives transposed in memory: "Vectorized
dim for producer has to be from an inner most position".

**What:** MLP-Mixer's token-mixing LayerNorm backward (timm mixer_b16, bf16 training): the normalised
input x is [32, 196, 768] logically but [32, 768, 196] in memory (a transpose the model made), while
the gradient and the saved statistics are row-major; the fusion reduces over C (the row sums of dx)
and over B and T (the weight and bias gradients). As the backend's fallback dump printed it (`python
scripts/fallback_repro.py zoo_timm_mixer_train_bf16`), made smaller.

**Expected:** it compiles and returns eager's gradients.

**Actual:** `as_found` raises at execution: "validation.cpp:1266 ... Expected last_alloc_dim ==
vec_alloc_id. Vectorized dim for producer has to be from an inner most position" (the segment
vectorises x along C, its logical innermost dim, though C is not innermost in its allocation).
`row_major` passes the same x copied row-major.

**Status:** reproduces. The script ran on an H100 (2026-11-26): `as_found` failed ("Vectorized dim
for producer has to be from an inner most position"); `row_major` ran and matched eager (rc 1).

**Versions:** nvfuser_direct 0.2.36 (nvfuser-cu130-torch210 0.2.36.dev20260301), torch 2.11.0+cu130,
CUDA 13.0, H100 80GB HBM3 (2026-11-26).

    python scripts/nvfuser_repros/transposed_input_norm_backward.py

Prints each variant's outcome and whether it matches eager; exits 1 when `as_found` fails. dynamo_nvf
ran such a region as pieces after the error (runtime/split_region.py): six regions per Mixer training
step; one inner-persistent kernel family of them took 879 us over 6 calls per step, inductor's
largest LayerNorm-backward kernel 209 us over 4 (`scripts/block_kernels.py zoo_timm_mixer_train_bf16`,
H200, 2026-11-28). It now builds the region again for row-major copies of its transposed inputs first
(runtime/region.py, LAYOUT_ERRORS), as `row_major` does here; pieces only if that fails too.
"""

import argparse
import sys

import torch
from nvfuser_direct import DataType, FusionDefinition

B, T, C = 32, 196, 768


def build(transposed: bool) -> FusionDefinition:
    with FusionDefinition() as fd:
        grad = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16, is_cpu=False)
        if transposed:
            x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16,
                                 is_cpu=False, stride_order=[2, 0, 1])
        else:
            x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16, is_cpu=False)
        weight = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16, is_cpu=False)
        rstd = fd.define_tensor(shape=[-1, -1, 1], contiguity=[True, True, None], dtype=DataType.Float, is_cpu=False)
        mean = fd.define_tensor(shape=[-1, -1, 1], contiguity=[True, True, None], dtype=DataType.Float, is_cpu=False)
        g = fd.ops.cast(grad, dtype=DataType.Float)
        xhat = fd.ops.mul(fd.ops.sub(fd.ops.cast(x, dtype=DataType.Float), mean), rstd)
        gw = fd.ops.mul(g, fd.ops.broadcast(fd.ops.cast(weight, dtype=DataType.Float), is_broadcast_dim=[True, True, False]))
        c = fd.define_scalar(float(C), dtype=DataType.Float)
        row_g = fd.ops.broadcast(fd.ops.sum(gw, dims=[2], dtype=DataType.Float), is_broadcast_dim=[False, False, True])
        row_gx = fd.ops.broadcast(fd.ops.sum(fd.ops.mul(gw, xhat), dims=[2], dtype=DataType.Float),
                                  is_broadcast_dim=[False, False, True])
        dx = fd.ops.mul(fd.ops.div(rstd, c), fd.ops.sub(fd.ops.sub(fd.ops.mul(gw, c), row_g), fd.ops.mul(xhat, row_gx)))
        fd.add_output(fd.ops.cast(dx, dtype=DataType.BFloat16))
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(g, xhat), dims=[0, 1], dtype=DataType.Float), dtype=DataType.BFloat16))
        fd.add_output(fd.ops.cast(fd.ops.sum(g, dims=[0, 1], dtype=DataType.Float), dtype=DataType.BFloat16))
    return fd


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    x_t = torch.randn(B, C, T, device="cuda", dtype=torch.bfloat16).transpose(1, 2)  # [B, T, C], C not innermost
    grad = torch.randn(B, T, C, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(C, device="cuda", dtype=torch.bfloat16)
    var, mean = torch.var_mean(x_t.float(), dim=2, keepdim=True, correction=0)
    rstd = torch.rsqrt(var + 1e-6)
    x_ref = x_t.float().requires_grad_()
    w_ref = weight.float().requires_grad_()
    out = (x_ref - mean) * rstd * w_ref
    out.backward(grad.float())
    failed = False
    for variant, x in (("as_found", x_t), ("row_major", x_t.contiguous())):
        try:
            dx, dw, db = build(variant == "as_found").execute([grad, x, weight, rstd, mean])
            ok = torch.allclose(dw.float(), w_ref.grad, rtol=2e-2, atol=2e-1) and \
                torch.allclose(db.float(), grad.float().sum((0, 1)), rtol=2e-2, atol=2e-1)
            print(f"{variant}: ran, weight and bias gradients {'match' if ok else 'DIFFER from'} eager's")
        except Exception as exc:  # noqa: BLE001  (the defect: report it and go on)
            text = str(exc)
            at = text.find("Vectorized dim")
            print(f"{variant}: FAILED: {(text[at:at + 120] if at >= 0 else text[:300])!r}")
            failed = failed or variant == "as_found"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
