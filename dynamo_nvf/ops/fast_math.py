"""Which regions nvFuser compiles with fast math (NVRTC's `--use_fast_math`, nvFuser's `fast_math`
enable option): the `fast_math` setting.

Why: inductor's Triton kernels compute `exp` with the approximate `ex2.approx` instruction and divide
with the approximate `div.full`, while nvFuser's kernels call the precise `expf` and IEEE division.
At the sizes of a small-batch transformer every kernel is latency-bound, and the precise `expf` is a
long dependent chain: on an H100 (`scripts/region_scoreboard.py llama_train_bf16_small`, 2026-11-24,
bf16, [256, 1376]) LLaMA's SwiGLU forward took 2.28 us precise and 1.54 with fast math (inductor 1.57),
its backward 2.35 and 1.87 (inductor 1.95); the outputs were bit-identical in bf16 and differed by
2e-9 in f32. Regions without an exponential gained nothing measurable (within 0.05 us).

What fast math changes, per NVRTC: `expf`, `logf`, `sinf`, `cosf`, `tanf`, `powf` become their
approximate intrinsics, division and square root become approximate (2 ulp), and float32 denormals
flush to zero. The approximate exp and log are the ones Triton uses, so results stay as close to eager
as inductor's are. The approximate sine, cosine and tangent lose accuracy far from zero (RoPE angles
reach thousands of radians), the approximate power amplifies its log's error, and tanh may become
`tanh.approx` (11 bits): regions with those ops stay precise.

"auto" (the default) turns fast math on for a region that computes an exponential (`GAINS`) and none of
the imprecise ops (`IMPRECISE`); "on" for every region without an imprecise op; "off" for none.
"""

from __future__ import annotations

from typing import Sequence

#: Values of the `fast_math` setting.
MODES = ("auto", "on", "off")

#: Op packets (an aten op without its overload) whose kernels compute an exponential or a logarithm:
#: what fast math speeds up.
GAINS = frozenset({
    "aten.exp", "aten.exp2", "aten.expm1", "aten.sigmoid", "aten.silu", "aten.silu_backward",
    "aten._softmax", "aten._log_softmax", "aten.logsumexp", "aten.softplus", "aten.softplus_backward",
    "aten.elu", "aten.elu_backward", "aten.log_sigmoid_forward", "aten.log_sigmoid_backward", "aten.mish",
    "aten.log", "aten.log2", "aten.log10", "aten.log1p",
})

#: Op packets whose fast-math code is less accurate than inductor's: trigonometric intrinsics lose
#: accuracy away from zero, `__powf` amplifies its log's error, tanh may become `tanh.approx` (GELU's
#: tanh form uses it).
IMPRECISE = frozenset({
    "aten.sin", "aten.cos", "aten.tan", "aten.tanh", "aten.gelu", "aten.gelu_backward",
    "aten.pow", "aten.float_power", "aten.sinh", "aten.cosh", "aten.atan", "aten.atan2",
    "aten.asin", "aten.acos",
})

#: nvFuser's enable option.
ENABLE_OPTION = "fast_math"


def packet(op: str) -> str:
    """`aten.mul.Tensor` -> `aten.mul`: the op without its overload (region plans list overloads)."""
    parts = op.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else op


def region_fast_math(ops: Sequence[str], mode: str) -> tuple[bool, str]:
    """(on, why) for a region whose ops (op names as in RegionPlan.ops) are `ops`."""
    if mode == "off":
        return False, "fast_math is off"
    packets = {packet(op) for op in ops}
    imprecise = sorted(packets & IMPRECISE)
    if imprecise:
        return False, f"precise math: {', '.join(imprecise)} would lose accuracy under fast math"
    gains = sorted(packets & GAINS)
    if mode == "on":
        return True, "fast_math is on"
    if not gains:
        return False, "precise math: no exponential or logarithm to speed up"
    return True, f"fast math for {', '.join(gains)} (approximate exp/log and division, as Triton's)"
