"""An embedding's forward scaled and added to positions (`emb(tokens) * sqrt(d) + pos`), written in
nvFuser several ways, GPU time per call with L2 flushed (issue #11: embedding_scale_add_bf16 took 17.5 us
against inductor's 16.6 in session 23's block table).

- `index_select`: the rows picked by `index_select(weight, ids, 0)` (dynamo_nvf's lowering);
- `take_along_axis`: the ids broadcast over d and expanded, `take_along_axis(weight, ids, 0)`;
- `nvf`: the torch function compiled with backend="nvf_bookend"; `inductor`: with inductor.

    python scripts/repros/embedding_forward_forms.py [f32|bf16]
"""

from __future__ import annotations

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import dynamo_nvf  # noqa: E402,F401
from kernel_timing import cold_us  # noqa: E402

#: (batch, seq, vocab, d): perf's embedding_scale_add block, then BERT's and LLaMA's small models.
SHAPES = [(16, 512, 32000, 1024), (2, 256, 8192, 768), (2, 128, 8192, 512)]


def direct(form: str, ids, weight, pos, scale):
    from nvfuser_direct import DataType, FusionDefinition

    b, s = ids.shape
    d = weight.shape[1]
    with FusionDefinition() as fd:
        t_ids, t_w, t_pos = fd.from_pytorch(ids), fd.from_pytorch(weight), fd.from_pytorch(pos)
        flat = fd.ops.reshape(t_ids, [b * s])
        if form == "index_select":
            rows = fd.ops.index_select(t_w, flat, 0)
        else:
            idx = fd.ops.broadcast_in_dim(flat, [b * s, d], [0])
            rows = fd.ops.take_along_axis(t_w, idx, 0)
        rows = fd.ops.reshape(fd.ops.cast(rows, DataType.Float), [b, s, d])
        out = fd.ops.add(fd.ops.mul(rows, fd.define_scalar(scale, dtype=DataType.Double)),
                         fd.ops.cast(t_pos, DataType.Float))
        fd.add_output(fd.ops.cast(out, DataType.BFloat16 if weight.dtype == torch.bfloat16 else DataType.Float))
    return lambda: fd.execute([ids, weight, pos])[0]


def main() -> None:
    dtype = torch.bfloat16 if "bf16" in sys.argv[1:] else torch.float32
    for b, s, v, d in SHAPES:
        ids = torch.randint(0, v, (b, s), device="cuda")
        weight = torch.randn(v, d, device="cuda", dtype=dtype)
        pos = torch.randn(s, d, device="cuda", dtype=dtype)
        scale = math.sqrt(d)

        def fn(ids):
            return torch.nn.functional.embedding(ids, weight) * scale + pos

        ref = fn(ids)
        print(f"[{b}, {s}] ids, vocab {v}, d {d}, {dtype}")
        calls = {
            "index_select": direct("index_select", ids, weight, pos, scale),
            "take_along_axis": direct("take_along_axis", ids, weight, pos, scale),
            "nvf": (lambda f: lambda: f(ids))(torch.compile(fn, backend="nvf_bookend", dynamic=False)),
            "inductor": (lambda f: lambda: f(ids))(torch.compile(fn, dynamic=False)),
        }
        for name, call in calls.items():
            try:
                err = (call().float() - ref.float()).abs().max().item()
                print(f"  {name:16s} {cold_us(call):8.2f} us  max err {err:.2e}")
            except Exception as exc:
                print(f"  {name:16s} failed: {type(exc).__name__}: {str(exc)[:200]}")


if __name__ == "__main__":
    main()
