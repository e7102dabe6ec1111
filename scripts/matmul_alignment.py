"""cuBLAS half-precision matmuls with a misaligned dim against the same product padded to a multiple
of 64: a language model's head (tokens x hidden x vocabulary), forward, input gradient and weight
gradient, and a copy of the logits for scale. The measurements behind passes/pad_matmuls.py.

    python scripts/matmul_alignment.py [--tokens 4096] [--hidden 768] [--vocab 50257] [--dtype bf16]

Prints microseconds per call (CUDA events over 30 calls after 5 warm-up calls).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.measure import mean_time_us  # noqa: E402


def time_us(fn: Callable[[], object]) -> float:
    return mean_time_us(fn, calls=30, warmup=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    m, k, v = args.tokens, args.hidden, args.vocab
    vp = (v + 63) // 64 * 64
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(v, k, device="cuda", dtype=dtype)
    g = torch.randn(m, v, device="cuda", dtype=dtype)
    wp, gp = F.pad(w, (0, 0, 0, vp - v)), F.pad(g, (0, vp - v))
    rows = [
        ("forward x @ w.T", lambda: x @ w.t(), lambda: x @ wp.t()),
        ("input grad g @ w", lambda: g @ w, lambda: gp @ wp),
        ("weight grad g.T @ x", lambda: g.t() @ x, lambda: gp.t() @ x),
    ]
    print(f"{m} x {k} x {v} ({args.dtype}), padded to {vp}; {torch.cuda.get_device_name()}")
    print(f"{'product':24} {'misaligned us':>14} {'padded us':>10}")
    for name, plain, padded in rows:
        print(f"{name:24} {time_us(plain):14.1f} {time_us(padded):10.1f}")
    print(f"{'copy of g':24} {time_us(lambda: g.clone()):14.1f}")


if __name__ == "__main__":
    main()
