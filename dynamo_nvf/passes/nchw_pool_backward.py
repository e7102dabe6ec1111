"""`avg_pool2d_backward` left to ATen runs on NCHW tensors where its input is channels_last and padded.

Why: PyTorch's channels_last CUDA kernel for this gradient (`avg_pool2d_backward_out_cuda_frame_nhwc`)
leaves out the padding offset when it maps an input pixel to the windows that read it, so with
padding > 0 it returns wrong input gradients, silently (pytorch/pytorch#188344). On an H200 with torch
2.11, a 1x1 convolution followed by `avg_pool2d(y, 3, 1, 1, count_include_pad=False) - y` on a
channels_last input got a convolution-weight gradient 11.1 off the float64 one in eager; the NCHW kernel
and the average pool as taps (passes/avg_pool_taps.py) were within 7e-6. This pass gives the NCHW kernel
an NCHW gradient and an NCHW stand-in for the input (the kernel reads only its shape), then copies the
result back to the traced channels_last layout that later ops and eager's strides expect.

Cost: two copies of a pool-sized tensor per such gradient (they may join the regions next to it),
only where the taps do not run it: the geometries `avg_pool2d_grad` declines (a ceil_mode that changes
the size, a stride that does not divide the input), or with `avg_pool_taps` off. PoolFormer's bf16
training step, whose 12 token mixers pool channels-last activations with padding 1: 5.90 ms of GPU time
with this pass (H200, 2026-11-28, docs/options.md `avg_pool_taps`), against 3.96 ms with eager's wrong
kernel in an earlier, contended run (the copies' layout changes in the regions around them have not been
profiled).
"""

from __future__ import annotations

import torch
from torch._prims_common import suggest_memory_format
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.registry import LEFT_TO_ATEN_KEY
from dynamo_nvf.passes import add_note, call_like
from dynamo_nvf.pool_windows import pair

aten = torch.ops.aten


def _padded_channels_last(node: Node, plan_cpu_as_cuda: bool) -> bool:
    """Whether ATen would run this gradient in its channels_last CUDA kernel with padding."""
    grad, inp = node.args[0], node.args[1]
    padding = pair(node.args[4] if len(node.args) > 4 else node.kwargs.get("padding", 0))
    vals = [x.meta.get("val") if isinstance(x, Node) else None for x in (grad, inp)]
    if not all(isinstance(v, torch.Tensor) and getattr(v, "fake_mode", None) is not None for v in vals):
        return False
    if vals[1].device.type != "cuda" and not plan_cpu_as_cuda:
        return False  # the CPU kernels are right
    return (vals[1].dim() == 4 and padding is not None and any(p > 0 for p in padding)
            and suggest_memory_format(vals[1]) == torch.channels_last)


#: Why the two layout copies stay in ATen (explain()). Taken into the regions next to them, each of
#: those regions mixed NCHW and channels-last tensors: PoolFormer's bf16 training step took 5.86 ms of
#: GPU time against 4.08 ms with ATen's copies (docs/design.md).
COPY_REASON = ("left to ATen: a layout copy around ATen's NCHW average-pool gradient, kept out of the "
               "regions so that they stay in one layout")


def nchw_avg_pool_backward(gm: GraphModule, plan_cpu_as_cuda: bool) -> GraphModule:
    """Each channels_last, padded `avg_pool2d_backward` as the same gradient of NCHW tensors, copied
    back to channels_last by ATen's copies."""
    rewrites = 0
    for node in list(gm.graph.find_nodes(op="call_function", target=aten.avg_pool2d_backward.default)):
        if not _padded_channels_last(node, plan_cpu_as_cuda):
            continue
        grad, inp = node.args[0], node.args[1]
        mode = inp.meta["val"].fake_mode
        with gm.graph.inserting_before(node):
            nchw_grad = call_like(gm, aten.clone.default, (grad,), node, mode, {"memory_format": torch.contiguous_format})
            nchw_inp = call_like(gm, aten.empty_like.default, (inp,), node, mode, {"memory_format": torch.contiguous_format})
            pooled = call_like(gm, aten.avg_pool2d_backward.default, (nchw_grad, nchw_inp, *node.args[2:]), node, mode,
                               dict(node.kwargs))
            back = call_like(gm, aten.clone.default, (pooled,), node, mode, {"memory_format": torch.channels_last})
        nchw_grad.meta[LEFT_TO_ATEN_KEY] = back.meta[LEFT_TO_ATEN_KEY] = COPY_REASON
        node.replace_all_uses_with(back)
        gm.graph.erase_node(node)
        rewrites += 1
    if rewrites:
        add_note(gm, f"average pool gradient: {rewrites} channels_last, padded avg_pool2d_backward(s) run on NCHW "
                     "copies (PyTorch's channels_last CUDA kernel gives wrong gradients with padding: "
                     "pytorch/pytorch#188344)")
        gm.graph.lint()
        gm.recompile()
    return gm
