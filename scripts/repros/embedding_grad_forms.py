"""An embedding's weight gradient computed four ways, GPU time per call (issue #11: BERT-style training
spent 28 us of its step in ATen's `embedding_backward_feature_kernel` plus 6 us of zero fills):

    python scripts/repros/embedding_grad_forms.py

- aten:     `aten.embedding_dense_backward` (its direct kernel up to 3072 indices, a sort beyond);
- atomic:   f32 zeros, `index_add_`, a cast (inductor's form; `atomic_embedding_backward`);
- one_hot:  `one_hot(ids)^T @ grad` ([vocab, n] @ [n, d]);
- row_sums: `(ids == ids^T) @ grad` ([n, n] @ [n, d]) written into zeros at the ids (`index_put_`);
- row_sums_words: the same, its scatter moving 8-byte words (int64 views of the rows).

one_hot and row_sums_words are `decompositions._embedding_dense_backward_as_matmul`'s two forms. GPU us per call from
torch.profiler (median over 20 calls of the kernels' summed time), and each form's largest error against
an f64 reference beside aten's.
"""

from __future__ import annotations

import statistics
import sys

import torch

from kernel_timing import cuda_kernels

aten = torch.ops.aten

#: (tokens, vocab, d): BERT's words and positions, GPT's and LLaMA's, then larger ones.
SHAPES = [(512, 8192, 768), (512, 256, 768), (256, 8192, 768), (256, 256, 768), (256, 8192, 512),
          (2048, 32000, 1024), (3072, 8192, 768), (3072, 50257, 768), (64, 50000, 4096), (1024, 128, 64)]


def aten_form(grad, ids, vocab):
    return aten.embedding_dense_backward(grad, ids, vocab, -1, False)


def atomic_form(grad, ids, vocab):
    g = grad.reshape(-1, grad.shape[-1]).float()
    out = torch.zeros(vocab, g.shape[1], device=g.device, dtype=torch.float32)
    return out.index_add_(0, ids.reshape(-1), g).to(grad.dtype)


def one_hot_form(grad, ids, vocab):
    flat = ids.reshape(-1)
    g = grad.reshape(flat.numel(), -1)
    hits = (torch.arange(vocab, device=flat.device).unsqueeze(1) == flat.unsqueeze(0)).to(g.dtype)
    return hits @ g


def row_sums_form(grad, ids, vocab):
    flat = ids.reshape(-1)
    g = grad.reshape(flat.numel(), -1)
    same = (flat.unsqueeze(1) == flat.unsqueeze(0)).to(g.dtype)
    out = torch.zeros(vocab, g.shape[1], device=g.device, dtype=g.dtype)
    return out.index_put_((flat,), same @ g)


def row_sums_words_form(grad, ids, vocab):
    """row_sums with the scatter moving 8-byte words (the decomposition's form)."""
    flat = ids.reshape(-1)
    g = grad.reshape(flat.numel(), -1)
    same = (flat.unsqueeze(1) == flat.unsqueeze(0)).to(g.dtype)
    out = torch.zeros(vocab, g.shape[1] * g.element_size() // 8, device=g.device, dtype=torch.int64)
    return out.index_put_((flat,), (same @ g).view(torch.int64)).view(g.dtype)


FORMS = {"aten": aten_form, "atomic": atomic_form, "one_hot": one_hot_form, "row_sums": row_sums_form,
         "row_sums_words": row_sums_words_form}


def kernel_us(call, iters: int = 20) -> float:
    """Median over calls of the call's kernels' summed time."""
    kernels = cuda_kernels(call, iters)
    per_call = len(kernels) // iters
    sums = [sum(e.device_time for e in kernels[i * per_call:(i + 1) * per_call]) for i in range(iters)]
    return statistics.median(sums)


def main() -> None:
    dtype = torch.bfloat16 if len(sys.argv) < 2 else getattr(torch, sys.argv[1])
    print(f"{'tokens':>6} {'vocab':>6} {'d':>5} " + " ".join(f"{k:>16}" for k in FORMS))
    for n, vocab, d in SHAPES:
        torch.manual_seed(0)
        ids = torch.randint(0, vocab, (n,), device="cuda")
        ids[: n // 8] = ids[0]  # one id many times (a padding or frequent token)
        grad = torch.randn(n, d, device="cuda", dtype=dtype)
        exact = aten.embedding_dense_backward(grad.double(), ids, vocab, -1, False)
        cells = []
        for form in FORMS.values():
            us = kernel_us(lambda: form(grad, ids, vocab))
            err = (form(grad, ids, vocab).double() - exact).abs().max().item()
            cells.append(f"{us:7.1f}us {err:7.1e}")
        print(f"{n:6d} {vocab:6d} {d:5d} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
