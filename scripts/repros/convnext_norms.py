"""ConvNeXt's LayerNorms alone, forward and backward, spelled and planned several ways: nvFuser's kernels
against inductor's (issue #11; ConvNeXt training ran 1.24x inductor's GPU time in session 21).

* `ln_rows`: the blocks' LayerNorm over C of a row-major NHWC tensor, [2, 56, 56, 96] bf16 (6272 rows),
  with the column sums (weight and bias gradients) in the norm backward's region (the default at
  this size, graphs or not) or in a region of their own (`split_norm_backward_rows`).
* `ln2d_permuted`: the stem's LayerNorm2d, as the model writes it (permute an NCHW-contiguous tensor to
  NHWC, LayerNorm over C, permute back): nvFuser reduces over a dimension 3136 elements apart.
* `ln2d_dim1`: the same function written over dim 1 of the NCHW tensor (memory order), f32 inside as
  ATen's LayerNorm computes it.

    python scripts/repros/convnext_norms.py
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

DEV, DT, C, EPS = "cuda", torch.bfloat16, 96, 1e-6


def ln_rows(x, w, b):
    return F.layer_norm(x, (C,), w, b, EPS)


def ln2d_permuted(x, w, b):
    return F.layer_norm(x.permute(0, 2, 3, 1), (C,), w, b, EPS).permute(0, 3, 1, 2)


def ln2d_dim1(x, w, b):
    xf = x.float()
    var, mean = torch.var_mean(xf, dim=1, correction=0, keepdim=True)
    y = (xf - mean) * torch.rsqrt(var + EPS)
    return (y * w.float()[:, None, None] + b.float()[:, None, None]).to(x.dtype)


def inputs(name):
    shape = (2, 56, 56, C) if name == "ln_rows" else (2, C, 56, 56)
    x = torch.randn(shape, device=DEV, dtype=DT, requires_grad=True)
    w = (torch.rand(C, device=DEV, dtype=DT) + 0.5).requires_grad_()
    b = torch.randn(C, device=DEV, dtype=DT, requires_grad=True)
    return x, w, b


def main() -> None:
    cases = {
        "ln_rows": ln_rows,
        "ln2d_permuted": ln2d_permuted,
        "ln2d_dim1": ln2d_dim1,
    }
    backends = {
        "nvf": dict(backend="nvf_bookend"),
        "nvf split": dict(backend="nvf_bookend", options={"split_norm_backward_rows": 1 << 22}),
        "nvf graphs-plan": dict(backend="nvf_bookend", options={"cuda_graphs": True}),
        "inductor": dict(backend="inductor"),
    }
    reference = None
    print(f"{'case':<16}{'plan':<18}{'fwd us':>9}{'k':>4}{'fwd+bwd us':>12}{'k':>4}  max |diff| vs eager")
    for name, fn in cases.items():
        x, w, b = inputs(name)
        gy = torch.randn_like(fn(x, w, b))
        expected = fn(x, w, b)
        expected.backward(gy)
        reference = [t.grad.clone() for t in (x, w, b)]
        for label, kw in backends.items():
            torch._dynamo.reset()
            compiled = torch.compile(fn, **kw)

            def fwd():
                with torch.no_grad():
                    return compiled(x.detach(), w.detach(), b.detach())

            def step():
                for t in (x, w, b):
                    t.grad = None
                compiled(x, w, b).backward(gy)

            try:
                out = compiled(x, w, b)
                out.backward(gy)
                diff = max((out.float() - expected.float()).abs().max().item(),
                           *((t.grad.float() - r.float()).abs().max().item() for t, r in zip((x, w, b), reference)))
                step()
                f_us, f_k = kernel_us(fwd)
                s_us, s_k = kernel_us(step)
                print(f"{name:<16}{label:<18}{f_us:9.2f}{f_k:4d}{s_us:12.2f}{s_k:4d}  {diff:.3g}", flush=True)
            except Exception as exc:  # a repro reports, it does not stop
                print(f"{name:<16}{label:<18} failed: {str(exc).splitlines()[0][:120]}", flush=True)


if __name__ == "__main__":
    main()
