"""nvFuser splits two sums of unrelated producers after a persistent kernel into three kernels.

**What:** cross-entropy's loss region: log-softmax rows over [256, 8192] bf16 logits, the target's
log-probability by a class mask, then the mean over valid tokens (the count of the valid mask, the sum
of the per-row losses, their quotient). The two sums read unrelated producers (the per-row losses
and the valid mask).

**Expected:** two kernels: the row kernel, then one reduction kernel for both sums and the division
(the tail alone, its losses masked by the valid mask, is one 1.7 us kernel).

**Actual:** four kernels, 8.6 us: the row kernel, one reduction per sum and a kernel for the
division. A `segment_set` in front of the tail keeps 4; one sum over a stacked [2, n] tensor ("C")
gives 3 (7.4 us). With the losses masked by the valid mask before their sum ("M", exact: the losses
are zero where the mask is false), both sums read one producer and the region is 2 kernels, 6.8 us.
The tail as a fusion of its own reading the losses and the mask apart ("R1") is 3 kernels, 1 once the
losses are masked ("R2", "R3"). The variant "G" (both sums as keepdim reductions of a [1, n] row, then
a reshape to 0-dim) hit an INTERNAL ASSERT (fusion_kernel_runtime.cpp:476) and is not run.

**Versions:** nvfuser_direct 0.2.36, torch 2.11.0+cu130, CUDA 13.0, H100 80GB HBM3 (2026-11-24).

    python scripts/nvfuser_repros/unrelated_sums_split_kernels.py

Prints per variant: kernels per call, GPU us per call (torch.profiler, 30 calls), the difference from
torch's loss and the kernels' names. dynamo_nvf writes the mean as "M"
(`decompositions._nll_loss_forward_as_masked_sum`).
"""


from __future__ import annotations

import argparse
from typing import Any, Callable

import torch
import torch.nn.functional as F

from nvfuser_direct import DataType, FusionDefinition

ROWS, VOCAB, IGNORE = 256, 8192, -100


def cuda_kernels(call: Callable[[], Any], iters: int) -> list[Any]:
    """The CUDA kernel events of `iters` calls of `call` (after 3 warm-up calls), in launch order."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            call()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def _tail(fd, nll, valid, variant: str):
    """(count, loss) of per-row losses `nll` (f32, zero where invalid) and the bool mask `valid`."""
    if variant == "SA":  # A behind segment_set: the tail's reductions start their own kernel
        return _tail(fd, fd.ops.segment_set(nll), fd.ops.segment_set(valid), "A")
    if variant == "SN":  # only the per-row losses behind segment_set
        return _tail(fd, fd.ops.segment_set(nll), valid, "A")
    if variant == "A":
        count = fd.ops.cast(fd.ops.sum(fd.ops.cast(valid, DataType.Int), [0], False, DataType.Null), DataType.Float)
        total = fd.ops.sum(nll, [0], False, DataType.Null)
        return count, fd.ops.div(total, count)
    if variant == "B":
        count = fd.ops.sum(fd.ops.cast(valid, DataType.Float), [0], False, DataType.Null)
        total = fd.ops.sum(nll, [0], False, DataType.Null)
        return count, fd.ops.div(total, count)
    if variant == "G":
        row_nll = fd.ops.broadcast(nll, [True, False])
        row_valid = fd.ops.broadcast(fd.ops.cast(valid, DataType.Float), [True, False])
        count = fd.ops.sum(row_valid, [1], True, DataType.Null)  # [1, 1]
        total = fd.ops.sum(row_nll, [1], True, DataType.Null)
        loss = fd.ops.div(total, count)
        return fd.ops.reshape(count, []), fd.ops.reshape(loss, [])
    if variant == "C":
        both = fd.ops.cat([fd.ops.broadcast(nll, [True, False]),
                           fd.ops.broadcast(fd.ops.cast(valid, DataType.Float), [True, False])], 0)
        sums = fd.ops.sum(both, [1], False, DataType.Null)  # [2]
        total = fd.ops.reshape(fd.ops.slice(sums, [0], [1], [1]), [])
        count = fd.ops.reshape(fd.ops.slice(sums, [1], [2], [1]), [])
        return count, fd.ops.div(total, count)
    raise ValueError(variant)


def tail_alone(variant: str) -> FusionDefinition:
    with FusionDefinition() as fd:
        nll = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        target = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        valid = fd.ops.ne(target, fd.define_scalar(IGNORE, dtype=DataType.Int))
        count, loss = _tail(fd, fd.ops.where(valid, nll, fd.define_scalar(0.0, dtype=DataType.Float)), valid, variant)
        fd.add_output(count)
        fd.add_output(loss)
    return fd


def whole_loss(variant: str) -> FusionDefinition:
    """The loss region as the lowering builds it (log-softmax rows, the target's value by a class mask,
    outputs amax and log-sum-exp for the backward), with the tail spelled as `variant`."""
    with FusionDefinition() as fd:
        logits = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        target = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        x = fd.ops.cast(logits, DataType.Float)
        amax = fd.ops.max(x, [1], True, DataType.Null)
        shifted = fd.ops.sub(x, amax)
        lse = fd.ops.log(fd.ops.sum(fd.ops.exp(shifted), [1], True, DataType.Null))
        logp = fd.ops.sub(shifted, lse)
        valid = fd.ops.ne(target, fd.define_scalar(IGNORE, dtype=DataType.Int))
        picked = fd.ops.where(valid, target, fd.define_scalar(-1, dtype=DataType.Int))
        classes = fd.ops.iota(fd.define_scalar(VOCAB, dtype=DataType.Int), fd.define_scalar(0, dtype=DataType.Int),
                              fd.define_scalar(1, dtype=DataType.Int), DataType.Int)
        hit = fd.ops.eq(fd.ops.broadcast(classes, [True, False]), fd.ops.broadcast(picked, [False, True]))
        nll = fd.ops.neg(fd.ops.sum(fd.ops.where(hit, logp, fd.define_scalar(0.0, dtype=DataType.Float)),
                                    [1], False, DataType.Null))
        if variant == "M":  # the losses masked by the mask the count sums: both sums read one producer
            count, loss = _tail(fd, fd.ops.where(valid, nll, fd.define_scalar(0.0, dtype=DataType.Float)), valid, "A")
        else:
            count, loss = _tail(fd, nll, valid, variant)
        fd.add_output(amax)
        fd.add_output(lse)
        fd.add_output(count)
        fd.add_output(loss)
    return fd


def split_tail(variant: str) -> FusionDefinition:
    """The tail as a fusion of its own (a cut dynamo_nvf tried and dropped for M), reading what
    the row region writes:
    R1: the per-row losses and the valid mask (bool) as inputs, the sums apart (as cut first);
    R2: the same inputs, the losses masked by the valid mask before their sum (both sums read the mask);
    R3: the per-row losses and the target, the mask computed inside (repro A's inputs)."""
    with FusionDefinition() as fd:
        nll = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        if variant == "R3":
            target = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
            valid = fd.ops.ne(target, fd.define_scalar(IGNORE, dtype=DataType.Int))
        else:
            valid = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Bool)
        if variant != "R1":
            nll = fd.ops.where(valid, nll, fd.define_scalar(0.0, dtype=DataType.Float))
        count, loss = _tail(fd, nll, valid, "A")
        fd.add_output(count)
        fd.add_output(loss)
    return fd


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    torch.manual_seed(0)
    logits = torch.randn(ROWS, VOCAB, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, VOCAB, (ROWS,), device="cuda")
    target[::7] = IGNORE
    want = F.cross_entropy(logits.float(), target, ignore_index=IGNORE)
    nll = F.cross_entropy(logits.float(), target, ignore_index=IGNORE, reduction="none")
    print(f"{'form':<8} {'variant':<3} {'kernels':>7} {'us':>7} {'diff':>9}  kernels")
    valid = target != IGNORE
    for variant in ("R1", "R2", "R3"):
        fd = split_tail(variant)
        args = [nll, target if variant == "R3" else valid]
        out = fd.execute(args)
        events = cuda_kernels(lambda: fd.execute(args), 30)
        names = sorted({e.name.split("(")[0].replace("nvf::", "") for e in events})
        print(f"{'split':<8} {variant:<3} {len(events) / 30:7.1f} {sum(e.device_time for e in events) / 30:7.2f} "
              f"{float((out[-1] - want).abs()):9.2e}  {' '.join(names)}", flush=True)
    for form, build, args in (("tail", tail_alone, [nll, target]), ("whole", whole_loss, [logits, target])):
        for variant in (("A", "C") if form == "tail" else ("A", "C", "M")):
            try:
                fd = build(variant)
                out = fd.execute(args)
                events = cuda_kernels(lambda: fd.execute(args), 30)
                names = sorted({e.name.split("(")[0].replace("nvf::", "") for e in events})
                us = sum(e.device_time for e in events) / 30
                diff = float((out[-1].float() - want).abs())
                print(f"{form:<8} {variant:<3} {len(events) / 30:7.1f} {us:7.2f} {diff:9.2e}  {' '.join(names)}", flush=True)
            except Exception as exc:  # noqa: BLE001  (a diagnostic: report and go on)
                print(f"{form:<8} {variant:<3} error: {str(exc).splitlines()[0][:150]}", flush=True)


if __name__ == "__main__":
    main()
