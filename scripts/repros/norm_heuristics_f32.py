"""nvFuser's inner-persistent heuristics for the f32 block norms and softmax at [8192, 4096], swept by
hand against inductor (issue #11: layernorm_fwd_f32 and rmsnorm_fwd_f32 took 1.039x inductor's GPU
time in session 23's block table, softmax_fwd_f32 1.029x).

Per fusion: nvFuser's own heuristic through its executor cache, then the same fusion scheduled by
hand (`schedule.compute_heuristics`, fields changed, `schedule.schedule`, `manual_execute`) with
other persistent batch sizes, rows per block, vector widths and register caps. GPU us per call:
profiled kernel time (warm) and CUDA events with L2 flushed (cold, as the block table), medians.

    python scripts/repros/norm_heuristics_f32.py
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nvfuser_direct import DataType, FusionDefinition, FusionGuard, SchedulerType, schedule  # noqa: E402

from kernel_timing import cold_us, kernel_us  # noqa: E402
from norm_heuristics import set_rows_per_block  # noqa: E402

ROWS, D = 8192, 4096

#: name -> field changes (None: nvFuser's heuristic as computed).
VARIANTS: dict[str, dict] = {
    "heuristic": {},
    "pbs 2": {"pbs": 2}, "pbs 4": {"pbs": 4}, "pbs 8": {"pbs": 8}, "pbs 16": {"pbs": 16},
    "rows 2": {"bdimy": 2}, "rows 4": {"bdimy": 4},
    "pbs 8 rows 2": {"pbs": 8, "bdimy": 2},
    "vec 2": {"vec": 2}, "regs 64": {"regs": 64}, "regs 128": {"regs": 128},
    "persistent grid": {"persistent_kernel": True},
}


def define(kind: str, d: int = D) -> FusionDefinition:
    """The fusion over rows of `d` features (the width only enters RMSNorm's mean)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        wb, bb = fd.ops.broadcast(w, [True, False]), fd.ops.broadcast(b, [True, False])
        if kind == "layernorm":
            var, mean = fd.ops.var_mean(x, dims=[1], correction=0, keepdim=False)
            rstd = fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-5, dtype=DataType.Double)))
            y = fd.ops.mul(fd.ops.sub(x, fd.ops.broadcast(mean, [False, True])), fd.ops.broadcast(rstd, [False, True]))
            y = fd.ops.add(fd.ops.mul(y, wb), bb)
        elif kind == "rmsnorm":
            ms = fd.ops.mul(fd.ops.sum(fd.ops.mul(x, x), [1], False), 1.0 / d)
            rstd = fd.ops.rsqrt(fd.ops.add(ms, fd.define_scalar(1e-6, dtype=DataType.Double)))
            y = fd.ops.mul(fd.ops.mul(x, fd.ops.broadcast(rstd, [False, True])), wb)
        else:
            m = fd.ops.broadcast(fd.ops.max(x, [1], False), [False, True])
            e = fd.ops.exp(fd.ops.sub(x, m))
            y = fd.ops.div(e, fd.ops.broadcast(fd.ops.sum(e, [1], False), [False, True]))
        fd.add_output(y)
    return fd


def reference(kind: str, x, w, b):
    if kind == "layernorm":
        return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    if kind == "rmsnorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return x.softmax(-1)


def scheduled(kind: str, args, change: dict):
    fd = define(kind)
    guard = FusionGuard(fd.fusion)
    params = schedule.compute_heuristics(fd.fusion, SchedulerType.inner_persistent, args)
    if "pbs" in change:
        params.batches_per_block_inner_reduction = change["pbs"]
    if "bdimy" in change:
        set_rows_per_block(params, change["bdimy"])
    if "vec" in change:
        params.unroll_factor_inner_reduction = change["vec"]
    if "regs" in change:
        cp = params.cparams
        cp.maxrregcount = change["regs"]
        params.cparams = cp
    if "persistent_kernel" in change:
        params.persistent_kernel = True
    schedule.schedule(fd.fusion, SchedulerType.inner_persistent, params)
    del guard
    return fd, params


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(ROWS, D, device="cuda")
    w, b = torch.randn(D, device="cuda"), torch.randn(D, device="cuda")
    args = [x, w, b]
    for kind in ("layernorm", "rmsnorm", "softmax"):
        want = reference(kind, x, w, b)
        fec = define(kind)
        torch._dynamo.reset()
        ind = torch.compile(lambda *a: reference(kind, *a), dynamic=False)
        print(f"== {kind} {ROWS}x{D} f32: executor cache {kernel_us(lambda: fec.execute(args))[0]:.1f} us warm, "
              f"{cold_us(lambda: fec.execute(args)):.1f} cold; inductor {kernel_us(lambda: ind(*args))[0]:.1f} warm, "
              f"{cold_us(lambda: ind(*args)):.1f} cold", flush=True)
        for label, change in VARIANTS.items():
            try:
                fd, params = scheduled(kind, args, change)
                run = lambda: fd.manual_execute(args, params)  # noqa: E731
                err = float((run()[0] - want).abs().max())
                lp = params.lparams
                print(f"  {label:16s} {kernel_us(run)[0]:7.1f} warm {cold_us(run):7.1f} cold  pbs "
                      f"{params.batches_per_block_inner_reduction} block ({lp.bdimx}, {lp.bdimy}) "
                      f"vec {params.unroll_factor_inner_reduction} err {err:.2e}", flush=True)
            except Exception as exc:  # noqa: BLE001  (a sweep: report and go on)
                print(f"  {label:16s} failed: {str(exc).splitlines()[0][:150] if str(exc) else repr(exc)}", flush=True)


if __name__ == "__main__":
    main()
