"""ConvNeXt's channels-last LayerNorm on nvFuser at each stage's shape, against inductor and against the
same normalisation written as a plain row-major [rows, C] fusion (issue #11: stage 2's LayerNorm took
5.4 us against inductor's 1.85 on an H100 in session 9).

    python scripts/repros/ln_shapes.py

Per shape (bf16), GPU us per call from torch.profiler (median kernel time over 20 calls, summed over
the call's kernels):
- nvf:      torch.compile(backend="nvf_bookend") of `layer_norm((x + bias).permute(0, 2, 3, 1))`, x
            channels-last (what ConvNeXt's regions get);
- inductor: the same function under inductor;
- nvf_2d:   a hand-written nvFuser definition of the same math on x viewed as a contiguous
            [N*H*W, C] tensor (the best layout nvFuser could be handed), output [N*H*W, C];
- nvf_2d_ln_only: nvf_2d without the bias add.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dynamo_nvf  # noqa: E402,F401
from kernel_timing import kernel_us  # noqa: E402
from nvfuser_direct import DataType, FusionDefinition  # noqa: E402

SHAPES = [(2, 96, 56, 56), (2, 192, 28, 28), (2, 384, 14, 14), (2, 768, 7, 7), (8, 192, 28, 28)]


def bias_permute_layer_norm(x, bias, w, b):
    y = (x + bias.view(-1, 1, 1)).permute(0, 2, 3, 1)
    return torch.nn.functional.layer_norm(y, (y.shape[-1],), w, b, 1e-6)


def permute_first_layer_norm(x, bias, w, b):
    """The same function with the permute first: the region then reads x's NHWC view, a zero-copy alias."""
    y = x.permute(0, 2, 3, 1) + bias
    return torch.nn.functional.layer_norm(y, (y.shape[-1],), w, b, 1e-6)


def head_permute_first(inp, y, gamma, w, b):
    x = inp.permute(0, 2, 3, 1) + y * gamma
    pooled = x.mean([1, 2])
    return torch.nn.functional.layer_norm(pooled, (pooled.shape[-1],), w, b, 1e-6)


def head(inp, y, gamma, w, b):
    """ConvNeXt's last residual add, global average pool and head LayerNorm."""
    x = inp + (y * gamma).permute(0, 3, 1, 2)
    pooled = x.mean([-2, -1])
    return torch.nn.functional.layer_norm(pooled, (pooled.shape[-1],), w, b, 1e-6)


def fusion_2d(rows: int, c: int, with_bias: bool) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        bias = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16) if with_bias else None
        w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        if with_bias:
            xf = fd.ops.add(xf, fd.ops.broadcast(fd.ops.cast(bias, DataType.Float), [True, False]))
        var, mean = fd.ops.var_mean(xf, dims=[1], correction=0, keepdim=False)
        rstd = fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-6, dtype=DataType.Double)))
        xhat = fd.ops.mul(fd.ops.sub(xf, fd.ops.broadcast(mean, [False, True])), fd.ops.broadcast(rstd, [False, True]))
        y = fd.ops.add(fd.ops.mul(xhat, fd.ops.broadcast(fd.ops.cast(w, DataType.Float), [True, False])),
                       fd.ops.broadcast(fd.ops.cast(b, DataType.Float), [True, False]))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


def main() -> None:
    torch.manual_seed(0)
    print(f"{'shape':<20} {'nvf us':>8} {'k':>2} {'inductor':>8} {'k':>2} {'nvf_2d':>8} {'k':>2} {'2d_ln':>8} {'k':>2} "
          f"{'nvf_pf':>8} {'k':>2}  max err nvf, nvf_pf")
    for shape in SHAPES:
        n, c, h, w_ = shape
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        bias, w, b = (torch.randn(c, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        torch._dynamo.reset()
        nvf = torch.compile(bias_permute_layer_norm, backend="nvf_bookend", dynamic=False)
        ind = torch.compile(bias_permute_layer_norm, dynamic=False)
        want = bias_permute_layer_norm(x, bias, w, b)
        err = float((nvf(x, bias, w, b).float() - want.float()).abs().max())
        pf = torch.compile(permute_first_layer_norm, backend="nvf_bookend", dynamic=False)
        err_pf = float((pf(x, bias, w, b).float() - want.float()).abs().max())
        pf_us, pf_k = kernel_us(lambda: pf(x, bias, w, b))
        nvf_us, nvf_k = kernel_us(lambda: nvf(x, bias, w, b))
        ind_us, ind_k = kernel_us(lambda: ind(x, bias, w, b))
        x2 = x.permute(0, 2, 3, 1).reshape(n * h * w_, c)  # channels-last storage: a view
        fd2, fd1 = fusion_2d(n * h * w_, c, True), fusion_2d(n * h * w_, c, False)
        d2_us, d2_k = kernel_us(lambda: fd2.execute([x2, bias, w, b]))
        d1_us, d1_k = kernel_us(lambda: fd1.execute([x2, w, b]))
        print(f"{str(shape):<20} {nvf_us:8.2f} {nvf_k:2d} {ind_us:8.2f} {ind_k:2d} {d2_us:8.2f} {d2_k:2d} "
              f"{d1_us:8.2f} {d1_k:2d} {pf_us:8.2f} {pf_k:2d}  {err:.3g}, {err_pf:.3g}", flush=True)


def main_head() -> None:
    print(f"{'head shape':<20} {'nvf us':>8} {'k':>2} {'inductor':>8} {'k':>2} {'nvf_pf':>8} {'k':>2}  max err nvf, nvf_pf")
    for shape in [(2, 192, 28, 28), (2, 768, 7, 7), (8, 192, 28, 28)]:
        n, c, h, w_ = shape
        inp = torch.randn(shape, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        y = torch.randn(n, h, w_, c, device="cuda", dtype=torch.bfloat16)
        gamma, w, b = (torch.randn(c, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        torch._dynamo.reset()
        nvf = torch.compile(head, backend="nvf_bookend", dynamic=False)
        ind = torch.compile(head, dynamic=False)
        err = float((nvf(inp, y, gamma, w, b).float() - head(inp, y, gamma, w, b).float()).abs().max())
        nvf_us, nvf_k = kernel_us(lambda: nvf(inp, y, gamma, w, b))
        ind_us, ind_k = kernel_us(lambda: ind(inp, y, gamma, w, b))
        pf = torch.compile(head_permute_first, backend="nvf_bookend", dynamic=False)
        err_pf = float((pf(inp, y, gamma, w, b).float() - head(inp, y, gamma, w, b).float()).abs().max())
        pf_us, pf_k = kernel_us(lambda: pf(inp, y, gamma, w, b))
        print(f"{str(shape):<20} {nvf_us:8.2f} {nvf_k:2d} {ind_us:8.2f} {ind_k:2d} {pf_us:8.2f} {pf_k:2d}  {err:.3g}, {err_pf:.3g}",
              flush=True)


if __name__ == "__main__":
    main()
    main_head()
