"""Decompositions applied while aot_autograd traces: composite ops nvFuser lacks become ops it has.

Matmuls (mm, bmm, addmm), dropout (RNG) and embedding are not listed: they stay whole; matmuls run
in ATen; dropout is lowered whole with nvFuser's Philox (or left to ATen with fuse_dropout=False);
embedding is lowered whole as a row gather (or left to ATen with fuse_embedding=False).
Convolutions stay in ATen, but their bias is peeled off into an add (and its gradient into a sum)
that the neighbouring regions take in.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Optional, Sequence

import torch
from torch._decomp import get_decompositions
from torch._prims_common import get_computation_dtype


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
    # BatchNorm in training and evaluation and its backward, through every entry point a graph holds
    # (ATen's, cuDNN's, the functional form aot_autograd's functionalization writes, which returns the
    # new running statistics, and the with/no-update forms of torch.export): var_mean, rsqrt and
    # pointwise ops that join the ops around them, as inductor's table has them. Running statistics
    # are updated as eager updates them (momentum, unbiased variance; the graph's own copy_ writes
    # them back).
    aten.native_batch_norm, aten.cudnn_batch_norm,
    aten._native_batch_norm_legit, aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit_functional,
    aten._batch_norm_with_update, aten._batch_norm_with_update_functional, aten._batch_norm_no_update,
    aten.native_batch_norm_backward, aten.batch_norm_backward,
    aten.isneginf, aten.isposinf,
    aten.mish_backward, aten.std_mean,
    aten._prelu_kernel, aten._prelu_kernel_backward,
    aten.smooth_l1_loss, aten.smooth_l1_loss_backward,
    aten.tril, aten.triu,
    aten.log_sigmoid_forward, aten.log_sigmoid_backward, aten.binary_cross_entropy_with_logits,
    aten.pixel_shuffle, aten.pixel_unshuffle,
    # Autograd detaches what it saves; a detach is opaque to the min-cut partitioner, so a saved
    # softmax output could never be recomputed from its input (one more full-size write and read per
    # softmax in training). As an alias it can, as inductor's table has it.
    aten.detach,
]


def _on_gpu(t: torch.Tensor, any_device: bool) -> bool:
    """Where the CUDA-only rewrites apply: CUDA tensors, or any device when planning as CUDA."""
    return any_device or t.device.type == "cuda"


def _convolution_without_bias(x: torch.Tensor, weight: torch.Tensor, bias: Any, stride: Sequence[int],
                              padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                              output_padding: Sequence[int], groups: int, *, any_device: bool) -> Any:
    """A convolution's bias as an add after it, which joins the region that follows.

    With a bias, cuDNN launches its convolution and then ATen's add kernel (one more kernel and a
    full read and write per convolution); as inductor does on GPUs, the bias is peeled off and
    added where the next elementwise or norm region reads the output anyway.
    """
    if bias is None or not _on_gpu(x, any_device):
        return NotImplemented
    out = aten.convolution.default(x, weight, None, stride, padding, dilation, transposed, output_padding, groups)
    if out.shape[1] == 0:
        return out
    return out + bias.view([out.shape[1]] + [1] * (out.dim() - 2))


_UNDECOMPOSED = threading.local()


def _undecomposed() -> bool:
    """Whether a decomposition below is calling the op it decomposes (`_call_undecomposed`)."""
    return getattr(_UNDECOMPOSED, "active", False)


def _call_undecomposed(op: Any, *args: Any) -> Any:
    """`op(*args)` traced as the op itself from inside the decomposition of that op."""
    _UNDECOMPOSED.active = True
    try:
        return op(*args)
    finally:
        _UNDECOMPOSED.active = False


def _max_pool_backward_reading_sizes(op: Any, grad_output: torch.Tensor, x: torch.Tensor, *args: Any) -> Any:
    """A max pool's backward given a fresh tensor of its input's sizes and strides, not the input.

    ATen's kernels read the input only for its sizes and memory format (the indices say where each
    gradient goes), but the argument makes the forward save the pool's input for the backward:
    ResNet's first activation, [N, 64, 112, 112]. Inductor's lowering reads only its size too, and its
    partition recomputes that activation where the backward needs it (its ReLU's mask) instead.
    Where the input is saved anyway (a graph input), the backward holds one more tensor of its size.
    """
    if _undecomposed() or torch.are_deterministic_algorithms_enabled():
        # deterministic mode fills empty tensors with NaN (a kernel)
        return NotImplemented
    sizes = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return _call_undecomposed(op, grad_output, sizes, *args)


def _convolution_backward_bias_as_sum(grad_output: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                                      bias_sizes: Any, stride: Sequence[int], padding: Sequence[int],
                                      dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                                      groups: int, output_mask: Sequence[bool], *, any_device: bool) -> Any:
    """The bias gradient of a convolution as a sum over all but the channel dim (a region's
    reduction), the convolution's own backward asked only for the input and weight gradients."""
    if not output_mask[2] or not _on_gpu(grad_output, any_device) or (
            grad_output.shape[1] != bias_sizes[0]):  # no input channels: ATen's zeros of the bias' size
        return NotImplemented
    grad_bias = aten.sum.dim_IntList(grad_output, [0] + list(range(2, grad_output.dim())))
    grad_x, grad_weight, _ = aten.convolution_backward.default(
        grad_output, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
        [output_mask[0], output_mask[1], False])
    return grad_x, grad_weight, grad_bias


#: `reduction` values of nll_loss (torch's Reduction enum).
_REDUCTION_NONE, _REDUCTION_MEAN, _REDUCTION_SUM = 0, 1, 2


def _class_hits(logits: torch.Tensor, target: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """(N, C) bool: column c of row i is row i's target class (never for an ignored target).

    The class indices come from one `arange`, which the region computes in its kernel (nvFuser iota).
    """
    classes = torch.arange(logits.shape[1], device=logits.device)
    # -1 marks an ignored row, in int64 (a uint8 target would wrap it to 255, a real class).
    counted = torch.where(target != ignore_index, target.to(torch.int64),
                          torch.scalar_tensor(-1, dtype=torch.int64, device=target.device))
    return classes.unsqueeze(0) == counted.unsqueeze(1)


def _zero_like(t: torch.Tensor) -> torch.Tensor:
    """A 0-dim zero of `t`'s dtype, for `where(mask, t, zero)`: `aten.where.self`, which min-cut knows
    as pointwise (the scalar overloads decompose to prims.where, which it treats as opaque and saves
    its inputs across)."""
    return torch.scalar_tensor(0, dtype=t.dtype, device=t.device)


def _plain_nll(logits: torch.Tensor, target: torch.Tensor, weight: Any, reduction: int, any_device: bool) -> bool:
    return (logits.dim() == 2 and target.dim() == 1 and weight is None and reduction in
            (_REDUCTION_NONE, _REDUCTION_MEAN, _REDUCTION_SUM) and _on_gpu(logits, any_device))


def _nll_loss_forward_as_masked_sum(logits: torch.Tensor, target: torch.Tensor, weight: Any, reduction: int,
                                    ignore_index: int, *, any_device: bool) -> Any:
    """-logits[i, target[i]] as a row sum of a class mask (exact: one term is not zero), so it joins
    the log-softmax's row reductions; ATen's gather would need the log-probabilities written out."""
    if not _plain_nll(logits, target, weight, reduction, any_device):
        return NotImplemented
    picked = torch.where(_class_hits(logits, target, ignore_index), logits, _zero_like(logits)).sum(1)
    # Masked by the valid-token mask: an ignored token's loss is +0.0, as ATen's (-picked is -0.0).
    valid = target != ignore_index
    losses = torch.where(valid, -picked, _zero_like(picked))
    if reduction == _REDUCTION_NONE:
        return losses, logits.new_zeros(())
    # Counted in int64 and cast, as ATen. The sum reads the masked losses, so both sums of the mean
    # read one producer, the mask: nvFuser 0.2.36 joins the count, the sum and the division in one
    # kernel only then. Read apart, they ran as three kernels after the row kernel, 4 in all against
    # inductor's 2 (counting in float32 kept 4 too); masked, the loss region is 2 kernels, 6.8
    # against 8.6 us at 256 x 8192 bf16 (scripts/nvfuser_repros/unrelated_sums_split_kernels.py, H100, 2026-11-24; a
    # LLaMA-style training step's kernel table went from 99 to 97 kernels).
    total_weight = valid.sum().to(logits.dtype)
    loss = losses.sum()
    return (loss / total_weight if reduction == _REDUCTION_MEAN else loss), total_weight


def _nll_loss_backward_as_mask(grad_output: torch.Tensor, logits: torch.Tensor, target: torch.Tensor, weight: Any,
                               reduction: int, ignore_index: int, total_weight: torch.Tensor, *,
                               any_device: bool) -> Any:
    """-grad at each row's target class, zero elsewhere: a pointwise mask that joins the log-softmax
    backward's region, where ATen writes zeros and scatters into them (two kernels, a full write)."""
    if not _plain_nll(logits, target, weight, reduction, any_device):
        return NotImplemented
    if reduction == _REDUCTION_MEAN:
        grad_output = grad_output / total_weight
    if reduction == _REDUCTION_NONE:
        grad_output = grad_output.unsqueeze(1)
    grad = -grad_output.to(logits.dtype)
    return torch.where(_class_hits(logits, target, ignore_index), grad, _zero_like(grad))


def _padded_like_aten(grad_output: torch.Tensor, any_device: bool, ints: Sequence[Any]) -> bool:
    """A pad gives ATen's (contiguous) gradient: static sizes, and a gradient whose layout suggests
    no channels-last result (constant_pad_nd keeps a channels-last input's memory format), on CUDA
    or when planning as CUDA."""
    from torch._prims_common import suggest_memory_format

    return (all(isinstance(v, int) for v in ints)
            and suggest_memory_format(grad_output) == torch.contiguous_format
            and _on_gpu(grad_output, any_device))


def _slice_backward_as_pad(grad_output: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int, end: int,
                           step: int, *, any_device: bool) -> Any:
    """The gradient of a unit-step slice as a zero pad of the slice's gradient (a region's resize op),
    where ATen writes a zeros tensor and copies into it (two kernels and a full write; RoPE's
    backward has two per layer)."""
    sizes = list(input_sizes)
    if step != 1 or not _padded_like_aten(grad_output, any_device, (*sizes, dim, start, end)):
        return NotImplemented
    dim = dim % len(sizes)
    size = sizes[dim]
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    if grad_output.shape[dim] != end - start:
        return NotImplemented
    pad = [0, 0] * (len(sizes) - 1 - dim) + [start, size - end]
    return aten.constant_pad_nd.default(grad_output, pad, 0.0)


def _select_backward_as_pad(grad_output: torch.Tensor, input_sizes: Sequence[int], dim: int, index: int, *,
                            any_device: bool) -> Any:
    """The gradient of `x.select(dim, index)` (a ViT's class token, an unbind): the gradient of the
    one-wide slice `index:index+1`, with the gradient unsqueezed at `dim`."""
    if not all(isinstance(v, int) for v in (*input_sizes, dim, index)):
        return NotImplemented
    dim = dim % len(input_sizes)
    index = index + input_sizes[dim] if index < 0 else index
    return _slice_backward_as_pad(grad_output.unsqueeze(dim), input_sizes, dim, index, index + 1, 1,
                                  any_device=any_device)


def _roll_as_slices(x: torch.Tensor, shifts: Sequence[int], dims: Sequence[int] = (), *, any_device: bool) -> Any:
    """`roll` as a cat of two slices per rolled dim (nvFuser's resize ops, which join the region
    around them), where ATen launches its roll kernel; torch's own decomposition gathers
    (`index_select`), which no region takes. CUDA's roll returns a contiguous tensor, so does this.
    Without dims, the flattened tensor is rolled, as ATen does."""
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if (not _on_gpu(x, any_device) or x.dim() == 0 or not all(isinstance(v, int) for v in (*x.shape, *shifts))
            or x.numel() == 0 or len(shifts) != max(len(dims), 1)):
        return NotImplemented
    if not dims:
        return _roll_as_slices(x.reshape(-1), shifts, [0], any_device=any_device).view(x.shape)
    out = x
    for shift, dim in zip(shifts, dims):
        size = x.shape[dim]
        start = (size - shift) % size  # ATen's: the element at `start` moves to index 0
        if start:
            out = torch.cat([out.narrow(dim, start, size - start), out.narrow(dim, 0, start)], dim)
    return out.clone(memory_format=torch.contiguous_format) if out is x or not out.is_contiguous() else out


def _trailing_ones(t: torch.Tensor, rank: int) -> torch.Tensor:
    """`t` unsqueezed at the end up to `rank` (unsqueezes: a view's size-1 dims do not broadcast in nvFuser)."""
    while t.dim() < rank:
        t = t.unsqueeze(-1)
    return t


def _per_channel(t: torch.Tensor, rank: int) -> torch.Tensor:
    """A [C] tensor unsqueezed to broadcast over dim 1 of a tensor of `rank`."""
    return _trailing_ones(t.unsqueeze(0), rank)


def _group_norm_as_var_mean(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], n: int,
                            channels: int, inner: int, groups: int, eps: float, *, any_device: bool) -> Any:
    """GroupNorm as a var_mean and pointwise ops, in the form torch's reference gives CUDA tensors
    (its CPU form writes the scale and shift through `as_strided`, which no region takes), so that a
    CPU plan is the CUDA plan: statistics of `x` viewed `[N, G, C/G, H*W]`, float32 as ATen's. One
    group (PoolFormer's, and every "LayerNorm over channels" of a conv net) and one group per channel
    reduce dims of `x` itself: no view, so a channels-last region reduces the activation as it lies."""
    if not _on_gpu(x, any_device) or x.dim() < 2 or not all(isinstance(v, int) for v in (n, channels, inner, groups)):
        return NotImplemented
    compute = get_computation_dtype(x.dtype)
    if groups == 1 or (groups == channels and x.dim() > 2):  # per channel, [N, C] has no dims to reduce
        dims = list(range(1 if groups == 1 else 2, x.dim()))
        var, mean = torch.var_mean(x.to(compute), dim=dims, correction=0, keepdim=True)
        rstd = torch.rsqrt(var + eps)
        out = (x.to(compute) - mean) * rstd
        stats_dims = [d for d in dims if d >= 2]
    else:
        grouped = x.to(compute).reshape(n, groups, channels // groups, inner)
        var, mean = torch.var_mean(grouped, dim=[2, 3], correction=0, keepdim=True)
        rstd = torch.rsqrt(var + eps)
        out = ((grouped - mean) * rstd).view(x.shape)
        stats_dims = [2, 3]
    if weight is not None:
        out = out * _per_channel(weight, x.dim())
    if bias is not None:
        out = out + _per_channel(bias, x.dim())
    return out.to(x.dtype), mean.to(x.dtype).squeeze(stats_dims), rstd.to(x.dtype).squeeze(stats_dims)


def _group_norm_backward_without_views(grad_out: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                                       gamma: Optional[torch.Tensor], n: int, channels: int, inner: int, groups: int,
                                       output_mask: Sequence[bool], *, general: Callable[..., Any]) -> Any:
    """GroupNorm's backward for one group, or one per channel, as sums over the activation's own dims
    and pointwise ops (the general form, `general`, views the activation `[N, G, C/G, H*W]`),
    computed in float32 and returned in ATen's dtypes: the input's for its gradient, the weight's for
    the weight's and the bias's. The statistics ([N, G]) broadcast against [N, C] as they are."""
    if groups not in (1, channels) or x.dim() < 2 or not all(isinstance(v, int) for v in (n, channels, inner)):
        return general(grad_out, x, mean, rstd, gamma, n, channels, inner, groups, output_mask)
    compute = get_computation_dtype(x.dtype)
    go, xf = grad_out.to(compute), x.to(compute)
    mean, rstd = mean.to(compute), rstd.to(compute)
    dims = list(range(2, x.dim()))
    ds = (go * xf).sum(dims) if dims else go * xf  # [N, C]
    db = go.sum(dims) if dims else go
    one_group = groups == 1 and channels > 1
    d_input = d_gamma = d_bias = None
    if output_mask[0]:
        scale = 1.0 / (inner * (channels // groups))
        g = gamma.to(compute) if gamma is not None else None
        ds_val = ds * g if g is not None else ds
        db_val = db * g if g is not None else db
        if one_group:
            ds_val, db_val = ds_val.sum(1, keepdim=True), db_val.sum(1, keepdim=True)
        c1 = rstd * g if g is not None else rstd
        c2 = (db_val * mean - ds_val) * rstd * rstd * rstd * scale
        c3 = -c2 * mean - db_val * rstd * scale
        d_input = (go * _trailing_ones(c1, x.dim()) + xf * _trailing_ones(c2, x.dim())
                   + _trailing_ones(c3, x.dim())).to(x.dtype)
    param_dtype = gamma.dtype if gamma is not None else x.dtype
    if output_mask[1]:
        d_gamma = ((ds - db * mean) * rstd).sum(0).to(param_dtype)
    if output_mask[2]:
        d_bias = db.sum(0).to(param_dtype)
    return d_input, d_gamma, d_bias


def _safe_softmax_as_masked(x: torch.Tensor, dim: int, dtype: Optional[torch.dtype] = None) -> Any:
    """`_safe_softmax` (SDPA's masked softmax: a row of only -inf gives zeros, not NaN) as the
    softmax's own ops. ATen masks the rows where `all(x == -inf)`; a row is all -inf exactly when
    its max is -inf (a NaN makes both false), so the mask reads the row max the softmax computes
    anyway instead of a reduction of its own."""
    if x.dim() == 0:
        return NotImplemented
    if dtype is not None:
        x = x.to(dtype)
    compute = get_computation_dtype(x.dtype)
    xc = x.contiguous().to(compute)
    row_max = torch.amax(xc, dim, keepdim=True)
    unnormalized = torch.exp(xc - row_max)
    out = unnormalized / torch.sum(unnormalized, dim, keepdim=True)
    return torch.where(row_max == float("-inf"), _zero_like(out), out).to(x.dtype)


#: ATen's embedding backward accumulates with its direct kernel up to this many indices and sorts
#: them beyond (`embedding_dense_backward_cuda`'s threshold, aten/src/ATen/native/cuda/Embedding.cu).
ATEN_EMBEDDING_BACKWARD_DIRECT_MAX = 3072
#: The fewest indices an atomic embedding gradient takes by default: where ATen starts sorting.
ATOMIC_EMBEDDING_MIN_INDICES = ATEN_EMBEDDING_BACKWARD_DIRECT_MAX + 1


def _embedding_dense_backward_as_index_add(grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int,
                                           padding_idx: int, scale_grad_by_freq: bool, *,
                                           any_device: bool, min_indices: int = ATOMIC_EMBEDDING_MIN_INDICES
                                           ) -> Any:
    """An embedding's weight gradient as atomic adds into zeros (`index_add`), as inductor computes it.

    Past 3072 indices ATen sorts them: on an H100 a BERT-style training step (4096 tokens, vocab
    8192, d 768) spent 112 us in the sort's 12 kernels, against 30 us for inductor's atomic adds
    (scripts/block_kernels.py, 2026-11-24). Accumulates in f32 (bf16/f16 gradients are rounded
    once, at the end, as ATen's acc_type does). Nondeterministic in the order of the adds, so
    under `torch.use_deterministic_algorithms(True)` ATen's kernel runs, as it would for inductor.
    """
    numel = indices.numel()
    if (scale_grad_by_freq or not isinstance(numel, int) or numel < min_indices
            or not grad_output.dtype.is_floating_point or torch.are_deterministic_algorithms_enabled()
            or not _on_gpu(grad_output, any_device)):
        return NotImplemented
    width = grad_output.shape[-1]
    compute_dtype = get_computation_dtype(grad_output.dtype)
    grad = grad_output.reshape(numel, width).to(compute_dtype)
    flat = indices.reshape(numel)
    if padding_idx >= 0:
        grad = torch.where((flat == padding_idx).unsqueeze(1), _zero_like(grad), grad)
    weight_grad = aten.index_add.default(grad.new_zeros((num_weights, width)), 0, flat, grad)
    return weight_grad.to(grad_output.dtype)


#: Gradient dtypes whose embedding gradient `matmul_embedding_backward` takes: cuBLAS multiplies
#: them exactly (0/1 times a value) and accumulates in f32, as ATen's kernel does. An f32 matmul may
#: run in TF32, which would round the gradient.
MATMUL_EMBEDDING_DTYPES = (torch.bfloat16, torch.float16)
#: The fewest indices whose gradient over a larger vocabulary is computed as row sums. On an H100
#: (2026-11-24, LLaMA-style training at 256 indices, scripts/block_kernels.py) the zeros, equality
#: matrix, matmul and scatter took 12.1 us against 11.9 for ATen's zeros and kernel: a tie, where ATen's
#: one op costs less host time; at BERT's 512, 11.5 against 17 (scripts/repros/embedding_grad_forms.py
#: at commit 2828583 times the forms alone).
ROW_SUMS_MIN_INDICES = 384


def _embedding_dense_backward_as_matmul(grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int,
                                        padding_idx: int, scale_grad_by_freq: bool, *, any_device: bool) -> Any:
    """An embedding's weight gradient over at most 3072 half-precision indices as a matmul.

    ATen's direct kernel (`embedding_backward_feature_kernel`) runs one block per 32 features, each
    looping over every index: 24 blocks of an H100's 132 for d 768, 14 us per embedding for BERT's 512
    tokens, plus a fill of the [vocab, d] zeros. As matmuls on the tensor cores, with every row sum
    accumulated in f32 and rounded once, as ATen's:

    * vocab at most the indices (position embeddings): `one_hot(ids)^T @ grad`, [vocab, n] @ [n, d];
      every row of the result is written, so no zeros;
    * a larger vocab, from ROW_SUMS_MIN_INDICES indices: each token's row sum `same @ grad` ([n, n] @
      [n, d], `same[i, j]`: tokens i and j are one id), written into zeros at the tokens' ids
      (`index_put`: tokens of one id write one value; reinplaced onto the fresh zeros).

    Padding tokens' columns match no id, so their gradient is dropped as ATen drops it. Under
    `torch.use_deterministic_algorithms(True)` ATen's kernel runs (index_put with repeated ids).
    """
    numel = indices.numel()
    if (scale_grad_by_freq or not isinstance(numel, int) or not 0 < numel <= ATEN_EMBEDDING_BACKWARD_DIRECT_MAX
            or grad_output.dtype not in MATMUL_EMBEDDING_DTYPES or not isinstance(num_weights, int)
            or torch.are_deterministic_algorithms_enabled() or not _on_gpu(grad_output, any_device)
            or num_weights > numel and numel < ROW_SUMS_MIN_INDICES):
        return NotImplemented
    width = grad_output.shape[-1]
    grad = grad_output.reshape(numel, width)
    flat = indices.reshape(numel)
    # -1 marks a padding token's column: no id equals it.
    counted = flat if padding_idx < 0 else torch.where(
        flat == padding_idx, torch.scalar_tensor(-1, dtype=flat.dtype, device=flat.device), flat)
    if num_weights <= numel:
        ids = torch.arange(num_weights, device=flat.device, dtype=flat.dtype)
        one_hot = (ids.unsqueeze(1) == counted.unsqueeze(0)).to(grad.dtype)
        return aten.mm.default(one_hot, grad)
    same = (flat.unsqueeze(1) == counted.unsqueeze(0)).to(grad.dtype)
    row_sums = aten.mm.default(same, grad)
    # The scatter copies whole rows, so it moves them as 8-byte words where they divide into them: ATen's
    # index_put kernel computes an offset per element (3.9 us for BERT's 512 x 768 bf16 rows, H100).
    word = torch.int64 if (width * grad.element_size()) % 8 == 0 else grad.dtype
    words = width * grad.element_size() // word.itemsize
    out = aten.index_put.default(grad.new_zeros((num_weights, words), dtype=word), [flat.to(torch.int64)],
                                 row_sums.view(word), False)
    return out.view(grad.dtype)


def _embedding_dense_backward(grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int,
                              padding_idx: int, scale_grad_by_freq: bool, *, any_device: bool,
                              atomic: bool, min_indices: int, matmul: bool) -> Any:
    """The embedding gradient the options choose: atomic adds from `min_indices` indices, else a
    matmul (half precision, at most 3072 indices), else ATen's."""
    args = (grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
    out = (_embedding_dense_backward_as_index_add(*args, any_device=any_device, min_indices=min_indices)
           if atomic else NotImplemented)
    if out is NotImplemented and matmul:
        out = _embedding_dense_backward_as_matmul(*args, any_device=any_device)
    return out


#: With `fuse_data_movement`, torch's own decompositions of these copies: `stack` (an unbind's
#: gradient: qkv.unbind in ViTs) becomes a cat the next region takes in, not ATen's copy kernel.
DATA_MOVEMENT_OPS: list[Any] = [aten.stack]


def decomposition_table(plan_cpu_as_cuda: bool = False, fuse_cross_entropy: bool = False,
                        fuse_data_movement: bool = False,
                        atomic_embedding_backward: bool = False,
                        atomic_embedding_min_indices: int = ATOMIC_EMBEDDING_MIN_INDICES,
                        matmul_embedding_backward: bool = False,
                        ) -> dict[Any, Callable[..., Any]]:
    """The table handed to aot_autograd.

    Convolution biases are peeled off (and, with the options, nll_loss becomes masks, a slice's or a
    select's gradient a pad) on CUDA tensors only, where regions take the new ops in;
    `plan_cpu_as_cuda` does it on any device, so that a CPU plan is the CUDA plan. `stack` (with
    `fuse_data_movement`) becomes a cat on any device. With `atomic_embedding_backward`, an
    embedding's gradient over more than 3072 indices is an `index_add` into zeros; with
    `matmul_embedding_backward`, a half-precision one over fewer is a matmul.
    """
    table = get_decompositions(DECOMPOSED_OPS)
    table[aten.convolution.default] = functools.partial(_convolution_without_bias, any_device=plan_cpu_as_cuda)
    table[aten.convolution_backward.default] = functools.partial(_convolution_backward_bias_as_sum,
                                                                 any_device=plan_cpu_as_cuda)
    table[aten.roll.default] = functools.partial(_roll_as_slices, any_device=plan_cpu_as_cuda)
    table[aten._safe_softmax.default] = _safe_softmax_as_masked
    table[aten.native_group_norm.default] = functools.partial(_group_norm_as_var_mean, any_device=plan_cpu_as_cuda)
    table[aten.native_group_norm_backward.default] = functools.partial(
        _group_norm_backward_without_views, general=table[aten.native_group_norm_backward.default])
    for pool_backward in (aten.max_pool2d_with_indices_backward.default, aten.max_pool3d_with_indices_backward.default):
        table[pool_backward] = functools.partial(_max_pool_backward_reading_sizes, pool_backward)
    if fuse_cross_entropy:
        table[aten.nll_loss_forward.default] = functools.partial(_nll_loss_forward_as_masked_sum,
                                                                 any_device=plan_cpu_as_cuda)
        table[aten.nll_loss_backward.default] = functools.partial(_nll_loss_backward_as_mask,
                                                                  any_device=plan_cpu_as_cuda)
    if fuse_data_movement:
        table.update(get_decompositions(DATA_MOVEMENT_OPS))
        table[aten.slice_backward.default] = functools.partial(_slice_backward_as_pad, any_device=plan_cpu_as_cuda)
        table[aten.select_backward.default] = functools.partial(_select_backward_as_pad, any_device=plan_cpu_as_cuda)
    if atomic_embedding_backward or matmul_embedding_backward:
        table[aten.embedding_dense_backward.default] = functools.partial(
            _embedding_dense_backward, any_device=plan_cpu_as_cuda, atomic=atomic_embedding_backward,
            min_indices=atomic_embedding_min_indices, matmul=matmul_embedding_backward)
    return table


def table_for(settings: Any) -> dict[Any, Callable[..., Any]]:
    """`decomposition_table` with the options a backend's Settings choose."""
    return decomposition_table(settings.plan_cpu_as_cuda, settings.fuse_cross_entropy, settings.fuse_data_movement,
                               settings.atomic_embedding_backward,
                               settings.atomic_embedding_min_indices(), settings.matmul_embedding_backward)
