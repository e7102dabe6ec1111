"""Conv-weight pass: under CUDA graphs, a convolution that cuDNN runs channels-last gets its weight
converted to channels-last in the graph, `convolution(x, clone(w, memory_format=channels_last), ...)`,
so the conversion is a region (nvFuser's transpose scheduler) instead of ATen's copy inside the call.

Why: ATen runs a convolution in channels-last when its input is channels-last
(`cudnn_conv_suggest_memory_format`), and then copies an NCHW weight into that layout on every call
(`weight.contiguous(memory_format)` in cudnn_convolution). For ConvNeXt's downsampling convolution
([192, 96, 2, 2], bf16) that copy was ATen's generic strided-copy kernel, 2.3-2.4 us on an H100; the
same copy as an nvFuser region made the convolution 0.7 us faster (H100, 2026-11-25, scripts/repros/
convnext_head.py `down` at commit 2828583), as inductor's layout optimisation converts such weights in a Triton kernel.
A depthwise weight ([C, 1, k, k]) is channels-last already and is left alone.

Under CUDA graphs only: without them the region's host time (7-12 us through direct launch) would
cost more than the copy's 1 us of GPU time saves. Forward, inference and backward graphs
(`convolution_backward` converts the weight the same way); the weights a graph saves for the backward
are the originals, so no saved tensor changes. Values and output layouts are unchanged (cuDNN reads
the same weight, in the layout it would have made).

Pure: GraphModule in (aot_autograd's aten graph, before partitioning), GraphModule out.
"""

from __future__ import annotations

import logging

import torch
from torch._prims_common import suggest_memory_format
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import tensor_val
from dynamo_nvf.passes import add_note, call_like

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: Convolution ops and the positions of their input and weight arguments.
CONVOLUTIONS = {aten.convolution.default: (0, 1), aten.convolution_backward.default: (1, 2)}

#: The note explain() shows for each converted weight (graph plan's `rewrites`).
NOTE = ("{conv}: weight {weight} converted to channels-last in a region of its own (the layout cuDNN "
        "copies it to on every call; CUDA graphs)")


def _runs_channels_last(x: torch.Tensor, w: torch.Tensor, cuda_ok: bool) -> bool:
    """Whether ATen's cuDNN convolution would copy `w` into channels-last for input `x`."""
    if x.dim() != 4 or w.dim() != 4 or (x.device.type != "cuda" and not cuda_ok):
        return False
    if not torch.backends.cudnn.enabled:
        return False
    return suggest_memory_format(x) == torch.channels_last and \
        not w.is_contiguous(memory_format=torch.channels_last)


def channels_last_conv_weights(gm: GraphModule, cuda_ok: bool = False) -> GraphModule:
    """Converts each such convolution's weight to channels-last in the graph (module docstring).
    `cuda_ok` plans CPU tensors as CUDA ones (Settings.plan_cpu_as_cuda)."""
    converted: dict[Node, Node] = {}
    for node in list(gm.graph.nodes):
        positions = CONVOLUTIONS.get(node.target) if node.op == "call_function" else None
        if positions is None:
            continue
        x, w = (node.args[i] if len(node.args) > i else None for i in positions)
        if not isinstance(x, Node) or not isinstance(w, Node):
            continue
        x_val, w_val = tensor_val(x), tensor_val(w)
        if x_val is None or w_val is None or getattr(w_val, "fake_mode", None) is None:
            continue
        if not _runs_channels_last(x_val, w_val, cuda_ok):
            continue
        clone = converted.get(w)
        if clone is None:
            with gm.graph.inserting_before(node):
                clone = call_like(gm, aten.clone.default, (w,), w, w_val.fake_mode,
                                  {"memory_format": torch.channels_last})
            clone.meta.pop("stack_trace", None)
            converted[w] = clone
            add_note(gm, NOTE.format(conv=node.name, weight=w.name))
        args = list(node.args)
        args[positions[1]] = clone
        node.args = tuple(args)
    if converted:
        gm.graph.lint()
        gm.recompile()
        log.debug("dynamo_nvf: %d convolution weight(s) converted to channels-last in the graph", len(converted))
    return gm
