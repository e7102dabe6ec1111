"""Seed programs shared by perf/ workloads and the tests (one definition each)."""

from __future__ import annotations

import torch


def seed001_bias_gelu_backward(s0, s1, s2, s3, t4, t5, t6):
    """Seed 001 (NVIDIA/Fuser #785): bias-GELU backward with a sum over dims 0 and 1 beside it."""
    t8 = 0.5 * t6
    t10 = t6**3.0
    t13 = t6 + 0.044715 * t10
    t16 = torch.tanh(0.797885 * t13)
    t18 = 1.0 + t16
    t19 = t4.sum(dim=(0, 1))
    t20 = t5 * t18
    t23 = 1.0 * (t5 * t8)
    t26 = 1.0 - t16 * t16
    t27 = t23 * t26
    t30 = 1.0 * (t27 * s3)
    t32 = (t30 * s2) * s1
    t35 = t32 * t6**2.0
    t38 = (t30 + t35) + t20 * s0
    return t19, t38
