"""2-D max and average pooling as ops a region takes in: the maximum or the mean over the window's taps.

Where nothing reads a max pool's indices (inference), ATen still runs its forward kernel, writing
int64 indices beside the values (ResNet-50's stem pool, [64, 64, 112, 112] bf16 channels-last on an
H100: 221 us); as a region this takes 55 us, and it joins the region around it. Each window tap
reads the input at `stride * o - padding + k`. With the spatial size a multiple of the stride, that
is `stride * (o + q) + r`: row `o + q` of the input's phase plane `r` (a strided view,
`x.view(.., H // s, s, ..)[.., r:r + 1, ..]`, which PyTorch passes to a region as it is), shifted by
`q` with a pad of -inf and a unit-step slice (nvFuser's resize ops).

Where the indices are read (training), ATen's kernels stay: computing ATen's indices this way (the
first tap equal to the maximum) made the region 10 times slower and nvFuser's compile take 40 s, and
the backward written as a gather took nvFuser 24 to 59 s to compile and ran slower than ATen's
kernel (docs/design.md).

An average pool is the same taps summed with a pad of zeros (in f32 for half-precision inputs, as
ATen accumulates), divided by the window's size, by `divisor_override`, or (without
`count_include_pad`) by the number of taps inside the input, computed from two aranges; a pool
whose windows tile the input (stride = kernel, no padding) is one sum over the phase dims (a max
pool's, one maximum). Its gradient runs the taps backwards: each phase plane of the input's
gradient sums the output's gradient (over that divisor) shifted the other way, and the planes are
concatenated back into the input's positions.

It keeps ATen's memory format (channels-last in, channels-last out), and declines for a dilation,
a spatial size the stride does not divide, a `ceil_mode` that changes the output size, symbolic
sizes, other ranks or dtypes, and windows of more than `MAX_TAPS` taps.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch._prims_common import suggest_memory_format

aten = torch.ops.aten

#: The largest window (kernel height x width) decomposed: each tap is a few ops of the region.
MAX_TAPS = 25
#: Memory order of an NCHW tensor's dims, per memory format ATen keeps for a pool's results.
_ORDERS = {torch.contiguous_format: (0, 1, 2, 3), torch.channels_last: (0, 2, 3, 1)}


def pair(value: Any) -> Optional[tuple[int, int]]:
    """A pooling argument (an int or a list of one or two) as (height, width); None for anything else."""
    values = [value] if isinstance(value, int) else list(value)
    if len(values) == 1:
        values = values * 2
    return (values[0], values[1]) if len(values) == 2 and all(isinstance(v, int) for v in values) else None


class Window:
    """A 2-D max pool's static geometry, and its tensors in the split layout: the input's memory order
    with H and W each split into (H / stride, stride), [N, H', sh, W', sw, C] for channels-last."""

    def __init__(self, x: torch.Tensor, kernel: tuple[int, int], stride: tuple[int, int],
                 padding: tuple[int, int], out_size: tuple[int, int]) -> None:
        self.kernel, self.stride, self.padding, self.out_size = kernel, stride, padding, out_size
        self.in_size = (int(x.shape[2]), int(x.shape[3]))
        self.order = _ORDERS[suggest_memory_format(x)]
        #: the permute from the memory order's dims back to NCHW's
        self.to_nchw = [self.order.index(d) for d in range(4)]
        hd, wd = self.order.index(2), self.order.index(3)  # H before W in both memory orders
        #: the split layout's dims of H' and W' (each followed by its phase dim)
        self.dims = (hd, wd + 1)
        self.plane_size = tuple(size // s for size, s in zip(self.in_size, stride))

    def taps(self, axis: int) -> list[tuple[int, int]]:
        """Per kernel offset k along `axis`: (phase r, shift q) with s*o - p + k == s*(o + q) + r."""
        s, p = self.stride[axis], self.padding[axis]
        return [((k - p) % s, (k - p) // s) for k in range(self.kernel[axis])]

    def split(self, t: torch.Tensor) -> torch.Tensor:
        """NCHW `t` in the split layout (a view)."""
        t = t.permute(self.order)
        shape = list(t.shape)
        for dim, phase in zip(reversed(self.dims), reversed(self.stride)):
            dim -= 1 if dim == self.dims[1] else 0  # W's place before H is split
            shape[dim:dim + 1] = [shape[dim] // phase, phase]
        return t.view(shape)

    def merge(self, t: torch.Tensor) -> torch.Tensor:
        """A split-layout tensor back to NCHW dims, in the memory format of the input."""
        shape = list(t.shape)
        for dim in reversed(self.dims):
            shape[dim:dim + 2] = [shape[dim] * shape[dim + 1]]
        return t.contiguous().view(shape).permute(self.to_nchw)

    def tiles_input(self) -> bool:
        """Whether the windows tile the input (stride = kernel, no padding: DenseNet's transition
        pools, VGG's and U-Net's 2x2 max pools). Such a pool is one reduction over the phase dims:
        as a slice per phase plane, nvFuser 0.2.36 ran DenseNet-121's transition region as 9
        segments (5 kernels) rather than one (H200, 2026-11-29)."""
        return self.stride == self.kernel and not any(self.padding)

    def phase_dims(self) -> list[int]:
        """The split layout's phase dims (sh, sw)."""
        return [d + 1 for d in self.dims]

    def phases_reduced(self, t: torch.Tensor) -> torch.Tensor:
        """A split-layout tensor with its phase dims reduced away, back to NCHW dims in the input's
        memory format (a permute; no reshape follows the reduction)."""
        return t.permute(self.to_nchw)

    def plane(self, t: torch.Tensor, phase: tuple[int, int]) -> torch.Tensor:
        """The positions of one phase of a split-layout tensor: unit-step slices of the phase dims,
        kept one wide (nvFuser vectorises a slice's result, not a select's)."""
        for dim, s, r in zip(self.dims, self.stride, phase):
            if s > 1:
                t = aten.slice.Tensor(t, dim + 1, r, r + 1)
        return t

    def shifted(self, t: torch.Tensor, shifts: tuple[int, int], lengths: tuple[int, int], fill: Any) -> torch.Tensor:
        """t[.., o + q, .., w + q', ..] over [0, length) per spatial dim, `fill` outside t."""
        rank = t.dim()
        pad = [0, 0] * rank
        starts = []
        for dim, q, length in zip(self.dims, shifts, lengths):
            size = int(t.shape[dim])
            front, back = max(0, -q), max(0, length + q - size)
            pad[2 * (rank - 1 - dim):2 * (rank - 1 - dim) + 2] = [front, back]
            starts.append(q + front)
        if any(pad):
            t = aten.constant_pad_nd.default(t, pad, fill)
        for dim, start, length in zip(self.dims, starts, lengths):
            if start != 0 or int(t.shape[dim]) != length:
                t = aten.slice.Tensor(t, dim, start, start + length)
        return t


def pool_window(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                ceil_mode: bool = False, *, any_device: bool) -> Optional[Window]:
    """The pool's geometry where the decomposition applies, else None (ATen's kernels run)."""
    if not (any_device or x.device.type == "cuda") or x.dim() != 4 or not x.dtype.is_floating_point:
        return None
    if not all(isinstance(v, int) for v in x.shape) or x.numel() == 0:
        return None
    kernel, dil = pair(kernel_size), pair(dilation)
    strides = pair(stride) if (isinstance(stride, int) or len(stride)) else kernel
    pads = pair(padding)
    if None in (kernel, dil, strides, pads) or dil != (1, 1) or kernel[0] * kernel[1] > MAX_TAPS:
        return None
    if suggest_memory_format(x) not in _ORDERS:
        return None
    out_size = []
    for size, k, s, p in zip(x.shape[2:], kernel, strides, pads):
        if s < 1 or k < 1 or p < 0 or 2 * p > k or size % s:
            return None
        out = (size + 2 * p - k) // s + 1
        if ceil_mode:
            ceil = -(-(size + 2 * p - k) // s) + 1
            if (ceil - 1) * s >= size + p:
                ceil -= 1
            if ceil != out:
                return None
        if out < 1:
            return None
        out_size.append(out)
    return Window(x, kernel, strides, pads, (out_size[0], out_size[1]))


def max_pool2d_values(x: torch.Tensor, kernel_size: Sequence[int], stride: Sequence[int] = (), padding: Any = 0,
                      dilation: Any = 1, ceil_mode: bool = False, *, any_device: bool) -> Optional[torch.Tensor]:
    """`max_pool2d_with_indices(...)[0]` as the maximum over the window's taps; None where declined."""
    w = pool_window(x, kernel_size, stride, padding, dilation, ceil_mode, any_device=any_device)
    if w is None:
        return None
    xs = w.split(x)
    if w.tiles_input():
        return w.phases_reduced(torch.amax(xs, dim=w.phase_dims()))
    out = None
    for rh, qh in w.taps(0):
        for rw, qw in w.taps(1):
            # a tap past the input reads the pad's -inf, which never wins (windows hold an input position)
            value = w.shifted(w.plane(xs, (rh, rw)), (qh, qw), w.out_size, float("-inf"))
            out = value if out is None else torch.maximum(out, value)
    return w.merge(out)


def avg_pool2d_values(x: torch.Tensor, kernel_size: Sequence[int], stride: Sequence[int] = (), padding: Any = 0,
                      ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Optional[int] = None,
                      *, any_device: bool) -> Optional[torch.Tensor]:
    """`avg_pool2d(...)` as the mean over the window's taps; None where declined."""
    w = pool_window(x, kernel_size, stride, padding, 1, ceil_mode, any_device=any_device)
    if w is None or not _divisor_override_taken(divisor_override):
        return None
    acc = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    xs = w.split(x).to(acc)
    if w.tiles_input():
        total = xs.sum(dim=w.phase_dims())
        return w.phases_reduced(_divided(w, total, x, acc, True, divisor_override).to(x.dtype))
    total = None
    for rh, qh in w.taps(0):
        for rw, qw in w.taps(1):
            value = w.shifted(w.plane(xs, (rh, rw)), (qh, qw), w.out_size, 0.0)
            total = value if total is None else total + value
    return w.merge(_divided(w, total, x, acc, count_include_pad, divisor_override).to(x.dtype))


def _divisor_override_taken(divisor_override: Any) -> bool:
    """None, or a positive int: the divisors the taps divide by (anything else stays ATen's to judge)."""
    return divisor_override is None or (isinstance(divisor_override, int) and divisor_override >= 1)


def _divided(w: Window, t: torch.Tensor, x: torch.Tensor, acc: torch.dtype, count_include_pad: bool,
             divisor_override: Optional[int]) -> torch.Tensor:
    """`t` (split layout, the output's positions) over each window's divisor, as ATen divides."""
    if divisor_override is not None:
        return t / divisor_override
    if count_include_pad or not any(w.padding):
        return t / (w.kernel[0] * w.kernel[1])
    # the taps inside the input per output position and axis, min(o*s - p + k, size) - max(o*s - p, 0)
    # (ATen's divide factor), as an outer product of two aranges in the split layout's shape. Counting
    # them with the taps' shifts of a tensor of ones made nvFuser return wrong values at the border
    # (scripts/nvfuser_repros/shifted_full_divisor.py)
    count = None
    for axis, dim in enumerate(w.dims):
        s, p, k = w.stride[axis], w.padding[axis], w.kernel[axis]
        start = torch.arange(w.out_size[axis], device=x.device) * s - p
        inside = ((start + k).clamp_max(w.in_size[axis]) - start.clamp_min(0)).to(acc)
        shape = [1] * t.dim()
        shape[dim] = w.out_size[axis]
        inside = inside.view(shape)
        count = inside if count is None else count * inside
    return t / count


def avg_pool2d_grad(grad: torch.Tensor, x: torch.Tensor, kernel_size: Sequence[int], stride: Sequence[int] = (),
                    padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                    divisor_override: Optional[int] = None, *, any_device: bool) -> Optional[torch.Tensor]:
    """`avg_pool2d_backward(grad, x, ...)` as the taps run backwards; None where declined. Reads only
    `x`'s geometry."""
    w = pool_window(x, kernel_size, stride, padding, 1, ceil_mode, any_device=any_device)
    if w is None or grad.dim() != 4 or tuple(grad.shape[2:]) != w.out_size or grad.dtype != x.dtype:
        return None
    if not _divisor_override_taken(divisor_override):
        return None
    acc = grad.dtype if grad.dtype in (torch.float32, torch.float64) else torch.float32
    hd, wd = w.dims
    g = grad.permute(w.order).unsqueeze(hd + 1).unsqueeze(wd + 1).to(acc)  # the split layout, phases of one
    g = _divided(w, g, x, acc, count_include_pad, divisor_override)
    planes: dict[tuple[int, int], torch.Tensor] = {}
    for rh, qh in w.taps(0):
        for rw, qw in w.taps(1):
            value = w.shifted(g, (-qh, -qw), w.plane_size, 0.0)
            planes[(rh, rw)] = value + planes[(rh, rw)] if (rh, rw) in planes else value
    zero = None
    rows = []
    for rh in range(w.stride[0]):
        row = []
        for rw in range(w.stride[1]):
            if (rh, rw) not in planes:  # a phase no tap reads: its gradient is zero
                if zero is None:
                    zero = torch.zeros_like(next(iter(planes.values())))
                planes[(rh, rw)] = zero
            row.append(planes[(rh, rw)])
        rows.append(torch.cat(row, wd + 1) if len(row) > 1 else row[0])
    full = torch.cat(rows, hd + 1) if len(rows) > 1 else rows[0]
    return w.merge(full.to(grad.dtype))
