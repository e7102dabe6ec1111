"""nvFuser's inner-persistent heuristics for the transformer norms, swept by hand against inductor
(issue #11: the LayerNorm and RMSNorm forwards take 2.3-2.7 us per kernel on an H100 against
inductor's 1.7-2.1, and 10.6 against 7.8 at 4096 x 1024; the weight's late load explains only a tenth).

    python scripts/repros/norm_heuristics.py

Per shape: the heuristic nvFuser picks (persistent batch, bdimx, bdimy), then the same fusion scheduled
with the persistent batch size (elements per thread / vector width: fewer threads per row) and rows
per block (bdimy) overridden, through `schedule.compute_heuristics` / `schedule.schedule` /
`manual_execute`. GPU us per call (torch.profiler, median of 30 calls); every variant's output is
checked against the default's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nvfuser_direct import FusionGuard, ParallelType, SchedulerType, schedule  # noqa: E402

from norm_weight_early import add_norm, fusion, kernel_us  # noqa: E402

SHAPES = [("layernorm", 256, 768), ("layernorm", 512, 768), ("rmsnorm", 256, 512), ("layernorm", 4096, 1024),
          ("rmsnorm", 4096, 4096)]
#: (persistent batch size, rows per block); None keeps the heuristic's.
VARIANTS = [(None, None), (None, 2), (None, 4), (1, 1), (2, 1), (3, 1), (4, 1), (2, 2), (3, 2), (3, 4), (4, 4),
            (6, 4), (8, 4), (4, 2), (8, 1), (16, 1)]


def set_rows_per_block(params, bdimy: int) -> None:
    """An inner-persistent heuristic changed to normalise `bdimy` rows per block (threadIdx.y)."""
    params.multiple_reds_per_blk = bdimy > 1
    if bdimy > 1:
        params.block_dim_iter_dom = ParallelType.block_y
    lp = params.lparams
    lp.bdimy = bdimy
    params.lparams = lp


def scheduled(kind: str, d: int, args, pbs, bdimy):
    fd = fusion(kind, "", d)
    guard = FusionGuard(fd.fusion)  # fusion() closed its definition; scheduling adds IR to it
    params = schedule.compute_heuristics(fd.fusion, SchedulerType.inner_persistent, args)
    if pbs is not None:
        params.batches_per_block_inner_reduction = pbs
    if bdimy is not None:
        set_rows_per_block(params, bdimy)
    schedule.schedule(fd.fusion, SchedulerType.inner_persistent, params)
    del guard
    return fd, params


def main() -> None:
    torch.manual_seed(0)
    for kind, rows, d in SHAPES:
        x, r = (torch.randn(rows, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        w, b = (torch.randn(d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        args = [x, r, w, b]
        base = fusion(kind, "", d)
        want = base.execute(args)[1]
        base_us = kernel_us(lambda: base.execute(args))
        torch._dynamo.reset()
        ind = torch.compile(lambda *a: add_norm(kind, *a), dynamic=False)
        ind_us = kernel_us(lambda: ind(*args))
        print(f"== {kind} {rows}x{d}: fec {base_us:.2f} us, inductor {ind_us:.2f} us", flush=True)
        for pbs, bdimy in VARIANTS:
            label = f"pbs={pbs} bdimy={bdimy}"
            try:
                fd, params = scheduled(kind, d, args, pbs, bdimy)
                out = fd.manual_execute(args, params)[1]
                us = kernel_us(lambda: fd.manual_execute(args, params))
                diff = float((out.float() - want.float()).abs().max())
                lp = params.lparams
                print(f"  {label:20s} {us:6.2f} us  pbs {params.batches_per_block_inner_reduction} "
                      f"block ({lp.bdimx}, {lp.bdimy}) diff {diff:.3g}", flush=True)
            except Exception as exc:  # noqa: BLE001  (a sweep: report and go on)
                print(f"  {label:20s} failed: {str(exc).splitlines()[0][:150] if str(exc) else repr(exc)}", flush=True)


if __name__ == "__main__":
    main()
