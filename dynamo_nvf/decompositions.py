"""Decompositions applied while aot_autograd traces: composite ops nvFuser lacks become ops it has.

Matmuls (mm, bmm, addmm), dropout (RNG) and embedding are not listed: they stay whole; matmuls run
in ATen; dropout is lowered whole with nvFuser's Philox (or left to ATen with fuse_dropout=False);
embedding is lowered whole as a row gather (or left to ATen with fuse_embedding=False).
Convolutions stay in ATen, but their bias is peeled off into an add (and its gradient into a sum)
that the neighbouring regions take in.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

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
    # Autograd detaches what it saves; a detach is opaque to the min-cut partitioner, so a saved
    # softmax output could never be recomputed from its input (one more full-size write and read per
    # softmax in training). As an alias it can, as inductor's table has it.
    aten.detach,
]


def _convolution_without_bias(x: torch.Tensor, weight: torch.Tensor, bias: Any, stride: Sequence[int],
                              padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                              output_padding: Sequence[int], groups: int, *, any_device: bool) -> Any:
    """A convolution's bias as an add after it, which joins the region that follows.

    With a bias, cuDNN launches its convolution and then ATen's add kernel (one more kernel and a
    full read and write per convolution); as inductor does on GPUs, the bias is peeled off and
    added where the next elementwise or norm region reads the output anyway.
    """
    if bias is None or not (any_device or x.device.type == "cuda"):
        return NotImplemented
    out = aten.convolution.default(x, weight, None, stride, padding, dilation, transposed, output_padding, groups)
    if out.shape[1] == 0:
        return out
    return out + bias.view([out.shape[1]] + [1] * (out.dim() - 2))


def _convolution_backward_bias_as_sum(grad_output: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                                      bias_sizes: Any, stride: Sequence[int], padding: Sequence[int],
                                      dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                                      groups: int, output_mask: Sequence[bool], *, any_device: bool) -> Any:
    """The bias gradient of a convolution as a sum over all but the channel dim (a region's
    reduction), the convolution's own backward asked only for the input and weight gradients."""
    if not output_mask[2] or not (any_device or grad_output.device.type == "cuda"):
        return NotImplemented
    grad_bias = aten.sum.dim_IntList(grad_output, [0] + list(range(2, grad_output.dim())))
    grad_x, grad_weight, _ = aten.convolution_backward.default(
        grad_output, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
        [output_mask[0], output_mask[1], False])
    return grad_x, grad_weight, grad_bias


def decomposition_table(plan_cpu_as_cuda: bool = False) -> dict[Any, Callable[..., Any]]:
    """The table handed to aot_autograd.

    Convolution biases are peeled off on CUDA tensors only (on other devices the add would be one
    more kernel); `plan_cpu_as_cuda` peels them on any device, so a CPU plan is the CUDA plan.
    """
    table = get_decompositions(DECOMPOSED_OPS)
    table[aten.convolution.default] = functools.partial(_convolution_without_bias, any_device=plan_cpu_as_cuda)
    table[aten.convolution_backward.default] = functools.partial(_convolution_backward_bias_as_sum,
                                                                 any_device=plan_cpu_as_cuda)
    return table
