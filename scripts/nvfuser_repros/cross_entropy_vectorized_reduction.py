"""nvFuser fails to compile the forward of a cross-entropy over a 50257-word vocabulary (GPT-2's):
"Vectorized accesses cannot be inline with computation".

**What:** the region dynamo_nvf hands nvFuser for `F.cross_entropy(logits.float(), labels)` with bf16
logits [8, 512, 50257] (aot_autograd's decomposition: log-softmax by amax / exp / sum / log, the
label's term picked by `iota == label`, mean over the labels that are not -100), as the backend's
fallback dump printed it (`python scripts/fallback_repro.py zoo_hf_gpt2_train_bf16`).

**Expected:** it compiles and returns eager's loss.

**Actual:** `as_found` raises at execution: "Detected exception while compiling fusion segments in
parallel ... validation.cpp:1559 ... Vectorized accesses cannot be inline with computation" (one
segment's reduction is vectorised over a tensor computed in the same loop). The other variants show
which part matters: `flat` hands in the logits as a 2-D tensor (no reshape), `aligned_vocab` takes a
vocabulary of 50264 (a multiple of 8).

**Status:** reproduces. The script ran on an H100 (2026-11-26): `as_found` failed with the assert
above; `flat` and `aligned_vocab` ran and matched eager (rc 1).

**Versions:** nvfuser_direct 0.2.36 (nvfuser-cu130-torch210 0.2.36.dev20260301), torch 2.11.0+cu130,
CUDA 13.0, H100 80GB HBM3 (2026-11-26).

    python scripts/nvfuser_repros/cross_entropy_vectorized_reduction.py

Prints each variant's outcome and whether it matches eager; exits 1 when `as_found` fails. dynamo_nvf
runs the region as pieces after the error (runtime/split_region.py, one warning).
"""

import argparse
import sys

import torch
from nvfuser_direct import DataType, FusionDefinition

BATCH, SEQ, VOCAB = 8, 512, 50257


def build(variant: str, vocab: int) -> FusionDefinition:
    rows = BATCH * SEQ
    with FusionDefinition() as fd:
        if variant == "flat":
            logits = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16, is_cpu=False)
        else:
            logits = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16,
                                      is_cpu=False)
        labels = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int, is_cpu=False)
        valid = fd.ops.ne(labels, -100)
        iota = fd.ops.broadcast(fd.ops.iota(length=vocab, start=0, step=1), is_broadcast_dim=[True, False])
        minus_one = fd.ops.broadcast(fd.ops.full(shape=[], fill_value=-1, dtype=DataType.Int), is_broadcast_dim=[True])
        target = fd.ops.broadcast(fd.ops.where(valid, labels, minus_one), is_broadcast_dim=[False, True])
        picked = fd.ops.eq(iota, target)
        x = fd.ops.cast(logits, dtype=DataType.Float)
        if variant != "flat":
            x = fd.ops.reshape(x, new_shape=[rows, vocab])
        amax = fd.ops.broadcast(fd.ops.max(x, dims=[1]), is_broadcast_dim=[False, True])
        shifted = fd.ops.sub(x, amax)
        log_sum = fd.ops.log(fd.ops.broadcast(fd.ops.sum(fd.ops.exp(shifted), dims=[1], dtype=DataType.Float),
                                              is_broadcast_dim=[False, True]))
        log_probs = fd.ops.sub(shifted, log_sum)
        zero = fd.ops.full(shape=[], fill_value=fd.define_scalar(0.0, dtype=DataType.Float), dtype=DataType.Float)
        nll = fd.ops.neg(fd.ops.sum(fd.ops.where(picked, log_probs, fd.ops.broadcast(zero, is_broadcast_dim=[True, True])),
                                    dims=[1], dtype=DataType.Float))
        total = fd.ops.sum(fd.ops.where(valid, nll, fd.ops.broadcast(zero, is_broadcast_dim=[True])), dims=[0],
                           dtype=DataType.Float)
        count = fd.ops.cast(fd.ops.sum(fd.ops.cast(valid, dtype=DataType.Int), dims=[0], dtype=DataType.Int),
                            dtype=DataType.Float)
        fd.add_output(valid)
        fd.add_output(amax)
        fd.add_output(count)
        fd.add_output(log_sum)
        fd.add_output(fd.ops.div(total, count))
    return fd


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    failed = False
    for variant in ("as_found", "flat", "aligned_vocab"):
        vocab = 50264 if variant == "aligned_vocab" else VOCAB
        logits = torch.randn(BATCH, SEQ, vocab, device="cuda", dtype=torch.bfloat16)
        labels = torch.randint(0, vocab, (BATCH * SEQ,), device="cuda")
        expected = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), labels)
        args = [logits.view(-1, vocab) if variant == "flat" else logits, labels]
        try:
            loss = build(variant, vocab).execute(args)[-1]
            ok = torch.allclose(loss, expected, rtol=1e-4, atol=1e-4)
            print(f"{variant}: ran, {'matches' if ok else 'DIFFERS from'} eager ({loss.item():.5f} vs {expected.item():.5f})")
        except Exception as exc:  # noqa: BLE001  (the defect: report it and go on)
            text = str(exc)
            at = text.find("Vectorized")
            print(f"{variant}: FAILED: {(text[at:at + 160] if at >= 0 else text[:300])!r}")
            failed = failed or variant == "as_found"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
