"""Decompositions applied while aot_autograd traces: composite ops nvFuser lacks become ops it has.

Matmuls (mm, bmm, addmm), dropout (RNG) and embedding are not listed: they stay whole; matmuls run
in ATen; dropout is lowered whole with nvFuser's Philox (or left to ATen with fuse_dropout=False);
embedding is lowered whole as a row gather (or left to ATen with fuse_embedding=False).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

#: The ops (packets or overloads) rewritten before partitioning.
DECOMPOSED_OPS: list[Any] = [
    aten.gelu, aten.gelu_backward,
    aten._softmax, aten._softmax_backward_data,
    aten._log_softmax, aten._log_softmax_backward_data,
    aten.logsumexp,
    aten.native_layer_norm, aten.native_layer_norm_backward,
    aten._fused_rms_norm, aten._fused_rms_norm_backward,
    aten.native_group_norm, aten.native_group_norm_backward,
    aten.silu, aten.silu_backward,
    aten.sigmoid_backward, aten.tanh_backward, aten.threshold_backward,
    aten.leaky_relu, aten.leaky_relu_backward,
    aten.elu, aten.elu_backward,
    aten.hardtanh, aten.hardtanh_backward,
    aten.hardsigmoid, aten.hardsigmoid_backward,
    aten.hardswish, aten.hardswish_backward,
    aten.mish, aten.softplus, aten.softplus_backward,
    aten.glu, aten.logit, aten.xlogy, aten.hypot, aten.nan_to_num, aten.sgn,
    aten.logical_xor, aten.fmin, aten.fmax,
    aten.rsub, aten.addcmul, aten.addcdiv,
    aten.std, aten.linalg_vector_norm,
    aten.mse_loss, aten.mse_loss_backward,
    aten.masked_fill, aten.fill,
    aten.zeros_like, aten.ones_like, aten.new_zeros, aten.new_ones, aten.new_full,
    aten.native_dropout_backward,
    aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar,
]


def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """The table handed to aot_autograd."""
    return get_decompositions(DECOMPOSED_OPS)
