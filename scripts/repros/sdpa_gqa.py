"""SDPA over repeated K/V (repeat_kv: expand + reshape) against SDPA(enable_gqa=True) on K/V as they are:
which ATen attention op each picks (traced under aot_autograd's decomposition, as the backend sees
it), exactness, and GPU time per call (forward, forward+backward), at LLaMA-style shapes.

    python scripts/repros/sdpa_gqa.py
"""

import sys

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from kernel_timing import event_us


def repeat_kv(x, n_rep):
    b, n_kv, s, d = x.shape
    return x[:, :, None].expand(b, n_kv, n_rep, s, d).reshape(b, n_kv * n_rep, s, d)


def repeated(q, k, v):
    return F.scaled_dot_product_attention(q, repeat_kv(k, q.shape[1] // k.shape[1]),
                                          repeat_kv(v, q.shape[1] // k.shape[1]), is_causal=True)


def gqa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def gpu_us(fn, reps=50):
    """GPU time per call, the host's launch hidden behind a 200k-cycle spin."""
    return event_us(fn, reps, lambda: torch.cuda._sleep(200_000), warmup=5)


def ops_of(fn, *args):
    gm = make_fx(fn, decomposition_table={})(*args)
    return sorted({str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "attention" in str(n.target)})


def main():
    dev = "cuda"
    for dtype in (torch.bfloat16, torch.float32):
        for (b, h, kv, s, d) in ((2, 8, 2, 128, 64), (2, 8, 2, 512, 64), (8, 32, 8, 1024, 128)):
            torch.manual_seed(0)
            q = torch.randn(b, s, h, d, device=dev, dtype=dtype).transpose(1, 2).requires_grad_()
            k = torch.randn(b, s, kv, d, device=dev, dtype=dtype).transpose(1, 2).requires_grad_()
            v = torch.randn(b, s, kv, d, device=dev, dtype=dtype).transpose(1, 2).requires_grad_()
            g = torch.randn(b, h, s, d, device=dev, dtype=dtype)
            out_r, out_g = repeated(q, k, v), gqa(q, k, v)
            gr = torch.autograd.grad(out_r, (q, k, v), g)
            gg = torch.autograd.grad(out_g, (q, k, v), g)
            err = max([(out_r - out_g).abs().max().item()] + [(a - c).abs().max().item() for a, c in zip(gr, gg)])
            row = f"{str(dtype)[6:]:9} b{b} h{h} kv{kv} s{s} d{d}: max|diff| {err:.2e}"
            for name, fn in (("repeat", repeated), ("gqa", gqa)):
                fwd = gpu_us(lambda: fn(q, k, v))
                def step():
                    o = fn(q, k, v)
                    torch.autograd.grad(o, (q, k, v), g)
                tr = gpu_us(step)
                with torch.no_grad():
                    names = ops_of(fn, q.detach(), k.detach(), v.detach())
                row += f" | {name}: fwd {fwd:7.1f} us, fwd+bwd {tr:7.1f} us, ops {names}"
            print(row, flush=True)


if __name__ == "__main__":
    sys.exit(main())
