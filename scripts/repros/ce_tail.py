"""Cross-entropy's mean over tokens: how many kernels nvFuser makes of the loss's tail (issue #11).

A training step's loss region (log-softmax rows, the target's log-probability, then the mean over
valid tokens) ran as 4 kernels on an H100 (nvFuser 0.2.36): the persistent row kernel, a reduction
for the count of valid tokens, one for the sum of losses and a 1.3 us kernel for the division;
inductor runs 2. Session 17 counted the divisor in float32 and still got 4. Spellings of the tail
(`_tail`; in `tail_alone` the losses reach it masked by the valid mask, as in M below):

- A:  as the lowering wrote it: sum(ne(target, -100)) as int64, cast, sum(losses), div;
- B:  the count summed in float32;
- G:  both sums as inner reductions of a [1, n] row (keepdim), then the division, then a reshape
      to a 0-dim tensor (not run: alone it hit an INTERNAL ASSERT in fusion_kernel_runtime.cpp:476);
- C:  one sum over the rows of a [2, n] stack (losses, then the valid mask as float32), then the
      division of its two values;
- SA, SN: A with its inputs (both, or the losses only) read through segment_set, a kernel boundary
      in front of the tail as segment_norm_backward uses (run in session 20, since removed from main());
- M:  (whole region) A with the losses masked by the valid mask before their sum, so that both sums
      read one producer, as decompositions._nll_loss_forward_as_masked_sum now writes it;
- R1-R3 (`split_tail`): the tail as a fusion of its own reading what the row region would write.

Session 20 (H100, gpu_evidence s20e/s20g): the masked tail alone is one kernel (A, B: 1.7 us); the
whole region is 4 kernels unmasked (A, B, SA, SN; 8.6-9.0 us), 3 as C (7.4) and 2 as M (6.8). As a
fusion of its own, the tail reading the losses and the mask apart (R1) is 3 kernels, 1 once the
losses are masked (R2, R3). A region cut for the tail (tried, dropped) launched no fewer kernels
than M uncut (perf.interleave's profile of a LLaMA-style step: 93 either way) and cost host time.

    python scripts/repros/ce_tail.py

Per variant: kernels per call, their names and GPU us per call (torch.profiler, 30 calls), and the
largest difference from the eager loss.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvfuser_direct import DataType, FusionDefinition  # noqa: E402

import kernel_timing  # noqa: E402

ROWS, VOCAB, IGNORE = 256, 8192, -100


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
    """The tail as a region of its own (a pass tried in session 20, dropped for M below), reading what
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
        events = kernel_timing.cuda_kernels(lambda: fd.execute(args), 30)
        names = sorted({e.name.split("(")[0].replace("nvf::", "") for e in events})
        print(f"{'split':<8} {variant:<3} {len(events) / 30:7.1f} {sum(e.device_time for e in events) / 30:7.2f} "
              f"{float((out[-1] - want).abs()):9.2e}  {' '.join(names)}", flush=True)
    for form, build, args in (("tail", tail_alone, [nll, target]), ("whole", whole_loss, [logits, target])):
        for variant in (("A", "C") if form == "tail" else ("A", "C", "M")):
            try:
                fd = build(variant)
                out = fd.execute(args)
                events = kernel_timing.cuda_kernels(lambda: fd.execute(args), 30)
                names = sorted({e.name.split("(")[0].replace("nvf::", "") for e in events})
                us = sum(e.device_time for e in events) / 30
                diff = float((out[-1].float() - want).abs())
                print(f"{form:<8} {variant:<3} {len(events) / 30:7.1f} {us:7.2f} {diff:9.2e}  {' '.join(names)}", flush=True)
            except Exception as exc:  # noqa: BLE001  (a diagnostic: report and go on)
                print(f"{form:<8} {variant:<3} error: {str(exc).splitlines()[0][:150]}", flush=True)


if __name__ == "__main__":
    main()
