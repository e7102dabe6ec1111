"""nvFuser runs the pointwise segment of a fusion that normalises two BatchNorms' activations many
times slower when the fusion also writes values derived from both variances (the reciprocal std
beside the variance).

**What:** a ResNet-50 bottleneck's training forward at its first downsampling stage, channels-last
([64, 56, 56, 256] bf16, as dynamo_nvf's regions see it): two BatchNorms' statistics (Welford over
N, H, W), each activation normalised with its weight and bias, the add of the two and the ReLU.
The variants differ only in which per-channel values ([1, 1, 1, 256] f32) the fusion also writes:
`means_vars` (the two means and the two variances), `means_rstds` (the two means and the two
reciprocal stds, rsqrt(var + eps)), `as_found` (means, variances and reciprocal stds), and
`one_norm` (as_found for the first BatchNorm only, a second normalised tensor beside it).

**Expected:** every variant about as fast as `means_vars`: the pointwise segment reads two
activations and writes one, and the per-channel outputs are 256 values each.

**Actual:** measured on an H100 (2026-11-27) with the fusion as dynamo_nvf's region dump printed it
(same ops, the running-statistics updates beside them): `means_vars` 332 us, `means_rstds` 335 us,
`as_found` 2744 us; 2914 us with the [256] running statistics written as well; 206 us with one
BatchNorm and all its outputs. With `NVFUSER_DUMP=segmented_fusion,scheduler_params` the slow fusion
has the same segments as a fast one (two Welford reductions, one pointwise), but its pointwise
segment gets a 1D schedule without vectorisation (vectorize_factor 1, no 2D break point) where the
fast one's gets a 2D schedule. This script spells that fusion by hand and has not yet run on a GPU as
written.

**Versions:** nvfuser_direct 0.2.36 (nvfuser-cu130-torch210 0.2.36.dev20260301), torch 2.11.0+cu130,
CUDA 13.0, H100 80GB HBM3 (2026-11-27).

    python scripts/nvfuser_repros/two_batch_norm_slow_pointwise.py

Prints each variant's time per call (CUDA events, 20 calls after 3) and exits 1 when `as_found`
takes more than twice `means_vars`'s. dynamo_nvf writes only the statistics from such a fusion and
computes the rest in a second, small one (`dynamo_nvf/passes/split_channel_statistics.py`).
"""

import argparse
import sys

import torch
from nvfuser_direct import DataType, FusionDefinition

N, H, W, C = 64, 56, 56, 256
EPS = 1e-5
VARIANTS = ("means_vars", "means_rstds", "as_found", "one_norm")
BCAST = [True, True, True, False]  # [1, 1, 1, C] against [N, H, W, C]


def _norm(fd: FusionDefinition, x, weight, bias):
    """Welford statistics over N, H, W and the normalised, affine activation (rounded to bf16)."""
    xf = fd.ops.cast(x, dtype=DataType.Float)
    avg, var_sum, _ = fd.ops.welford(xf, dims=[0, 1, 2])
    count = fd.ops.cast(fd.ops.mul(fd.ops.mul(fd.ops.size(x, dim=0), fd.ops.size(x, dim=1)), fd.ops.size(x, dim=2)),
                        dtype=DataType.Double)
    mean = fd.ops.broadcast(avg, is_broadcast_dim=BCAST)
    var = fd.ops.broadcast(fd.ops.mul(var_sum, fd.ops.reciprocal(count)), is_broadcast_dim=BCAST)
    rstd = fd.ops.rsqrt(fd.ops.add(var, EPS))
    y = fd.ops.mul(fd.ops.sub(xf, mean), rstd)
    y = fd.ops.add(fd.ops.mul(y, fd.ops.cast(weight, dtype=DataType.Float)), fd.ops.cast(bias, dtype=DataType.Float))
    return mean, var, rstd, fd.ops.cast(fd.ops.cast(y, dtype=DataType.BFloat16), dtype=DataType.Float)


def define(fd: FusionDefinition, variant: str) -> None:
    def act():
        return fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.BFloat16, is_cpu=False)

    def per_channel():
        return fd.define_tensor(shape=[1, 1, 1, -1], contiguity=[None, None, None, True], dtype=DataType.BFloat16,
                                is_cpu=False)

    x1, x2 = act(), act()
    w1, b1, w2, b2 = per_channel(), per_channel(), per_channel(), per_channel()
    m1, v1, r1, y1 = _norm(fd, x1, w1, b1)
    m2, v2, r2, y2 = _norm(fd, x2, w2, b2)
    outputs = {"means_vars": [m1, v1, m2, v2], "means_rstds": [m1, r1, m2, r2],
               "as_found": [m1, v1, r1, m2, v2, r2], "one_norm": [m1, v1, r1, m2]}[variant]
    for value in outputs:
        fd.add_output(value)
    fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.add(y1, y2)), dtype=DataType.BFloat16))


def time_variant(variant: str) -> float:
    """Microseconds per call."""
    torch.manual_seed(0)
    with FusionDefinition() as fd:
        define(fd, variant)
    args = [torch.randn(N, H, W, C, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    args += [torch.randn(1, 1, 1, C, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    for _ in range(3):
        fd.execute(args)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(20):
        fd.execute(args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 20 * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    args = parser.parse_args()
    times = {}
    for variant in args.variants:
        times[variant] = time_variant(variant)
        print(f"{variant:12s} {times[variant]:8.1f} us per call")
    slow = "as_found" in times and "means_vars" in times and times["as_found"] > 2 * times["means_vars"]
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
