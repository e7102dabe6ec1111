"""ConvNeXt's LayerNorms alone, forward and backward, spelled and planned several ways: nvFuser's kernels
against inductor's (issue #11; ConvNeXt training ran 1.24x inductor's GPU time in session 21).

* `ln_rows96`, `ln_rows192`: the blocks' LayerNorm over C of a row-major NHWC tensor, [2, 56, 56, 96]
  and [2, 28, 28, 192] bf16 (6272 and 1568 rows). Plans: `nvf` the default (narrow rows: the column
  sums behind a segment boundary, NARROW_NORM_COLS), `nvf whole` one inner-outer kernel
  (`split_norm_backward_rows=0`, the default before session 21), `nvf cut` the column sums in a region
  of their own (what CUDA graphs get).
* `ln2d_permuted`: the stem's LayerNorm2d, as the model writes it (permute an NCHW-contiguous tensor to
  NHWC, LayerNorm over C, permute back): nvFuser reduces over a dimension 3136 elements apart.
* `ln2d_bias`: the stem's region as the model's graph has it: the convolution's bias added in NCHW
  order, then LayerNorm2d. `nvf` hoists the permute onto the input (hoist_permutes' strided rule,
  forward graphs), `nvf no hoist` keeps it inside the fusion.

Session 21 also timed that LayerNorm2d written over dim 1 of the NCHW tensor: nvFuser 0.2.36 failed
its backward (INTERNAL ASSERT, internal_nodes.cpp:1568 and fusion_kernel_runtime.cpp:476), so it ran in
eager; it is not kept here.

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
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def ln2d_permuted(x, w, b):
    return F.layer_norm(x.permute(0, 2, 3, 1), (C,), w, b, EPS).permute(0, 3, 1, 2)


def ln2d_bias(x, w, b):
    return ln2d_permuted(x + b.view(C, 1, 1), w, b)


SHAPES = {"ln_rows96": (2, 56, 56, 96), "ln_rows192": (2, 28, 28, 192), "ln2d_permuted": (2, C, 56, 56),
          "ln2d_bias": (2, C, 56, 56)}


def inputs(name):
    shape = SHAPES[name]
    c = shape[-1] if name.startswith("ln_rows") else shape[1]
    x = torch.randn(shape, device=DEV, dtype=DT, requires_grad=True)
    w = (torch.rand(c, device=DEV, dtype=DT) + 0.5).requires_grad_()
    b = torch.randn(c, device=DEV, dtype=DT, requires_grad=True)
    return x, w, b


def _relative(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float() - expected.float()).abs().max() / expected.float().abs().max().clamp_min(1e-12)).item()


def main() -> None:
    cases = {"ln_rows96": ln_rows, "ln_rows192": ln_rows, "ln2d_permuted": ln2d_permuted, "ln2d_bias": ln2d_bias}
    plans = {
        "nvf": dict(backend="nvf_bookend"),
        "nvf whole": dict(backend="nvf_bookend", options={"split_norm_backward_rows": 0}),
        "nvf cut": dict(backend="nvf_bookend", options={"split_norm_backward_rows": 1 << 22}),
        "nvf no hoist": dict(backend="nvf_bookend", options={"hoist_permutes": False}),
        "inductor": dict(backend="inductor"),
    }
    per_case = {"ln2d_bias": ("nvf", "nvf no hoist", "inductor")}
    print(f"{'case':<16}{'plan':<18}{'fwd us':>9}{'k':>4}{'fwd+bwd us':>12}{'k':>4}  max |diff| / max |eager|")
    for name, fn in cases.items():
        x, w, b = inputs(name)
        gy = torch.randn_like(fn(x, w, b))
        expected = fn(x, w, b).detach()
        fn(x, w, b).backward(gy)
        reference = [t.grad.clone() for t in (x, w, b)]
        for label in per_case.get(name, ("nvf", "nvf whole", "nvf cut", "inductor")):
            kw = plans[label]
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
                for t in (x, w, b):
                    t.grad = None
                out = compiled(x, w, b)
                out.backward(gy)
                diff = max(_relative(out, expected), *(_relative(t.grad, r) for t, r in zip((x, w, b), reference)))
                step()
                f_us, f_k = kernel_us(fwd)
                s_us, s_k = kernel_us(step)
                print(f"{name:<16}{label:<18}{f_us:9.2f}{f_k:4d}{s_us:12.2f}{s_k:4d}  {diff:.3g}", flush=True)
            except Exception as exc:  # a repro reports, it does not stop
                print(f"{name:<16}{label:<18} failed: {str(exc).splitlines()[0][:120]}", flush=True)


if __name__ == "__main__":
    main()
