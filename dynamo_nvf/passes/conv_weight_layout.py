"""Conv-weight pass: a convolution that cuDNN runs channels-last gets its weight converted to
channels-last in the graph, `convolution(x, clone(w, memory_format=channels_last), ...)`, so the
conversion is nvFuser's instead of ATen's copy inside the call: a region of its own for a parameter
(under CUDA graphs only), the last step of the region that computes a computed weight (always).

Why: ATen runs a convolution in channels-last when its input is channels-last
(`cudnn_conv_suggest_memory_format`), and then copies an NCHW weight into that layout on every call
(`weight.contiguous(memory_format)` in cudnn_convolution). For ConvNeXt's downsampling convolution
([192, 96, 2, 2], bf16) that copy was ATen's generic strided-copy kernel, 2.3-2.4 us on an H100; the
same copy as an nvFuser region made the convolution 0.7 us faster (H100, 2026-11-25, scripts/repros/
convnext_head.py `down` at commit 2828583), as inductor's layout optimisation converts such weights in a Triton kernel.
A depthwise weight ([C, 1, k, k]) is channels-last already and is left alone.

A parameter's weight under CUDA graphs only: without them the region's host time (7-12 us through
direct launch) would cost more than the copy's 1 us of GPU time saves. A weight that ops nvFuser
takes compute (weight standardization: timm's StdConv2d in BiT and NFNets; a cast or scaling of a
weight) is converted with or without graphs: a copy of it in [O, kh, kw, I] order joins the region that
computes it, and the permute back to [O, I, kh, kw] is a zero-copy view with channels-last strides,
so cuDNN's copy (a kernel and its launch) is gone at no cost, as inductor's layout optimisation lays
out such a buffer. Forward, inference and backward graphs
(`convolution_backward` converts the weight the same way); the weights a graph saves for the backward
are the originals, so no saved tensor changes. Values and output layouts are unchanged (cuDNN reads
the same weight, in the layout it would have made).

Pure: GraphModule in (aot_autograd's aten graph, before partitioning), GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch._prims_common import suggest_memory_format
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import is_metadata, tensor_val
from dynamo_nvf.ops.registry import unsupported_reason
from dynamo_nvf.passes import add_note, call_like
from dynamo_nvf.settings import Settings

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: Convolution ops and the positions of their input and weight arguments.
CONVOLUTIONS = {aten.convolution.default: (0, 1), aten.convolution_backward.default: (1, 2)}
#: [O, I, kh, kw] to [O, kh, kw, I] and back.
NHWC = [0, 2, 3, 1]
NCHW_FROM_NHWC = [0, 3, 1, 2]

#: The notes explain() shows for each converted weight (graph plan's `rewrites`).
NOTE = ("{conv}: weight {weight} converted to channels-last in a region of its own (the layout cuDNN "
        "copies it to on every call; CUDA graphs)")
COMPUTED_NOTE = ("{conv}: weight {weight} written channels-last by the region that computes it (the layout "
                 "cuDNN would copy it to on every call)")


def _runs_channels_last(x: torch.Tensor, w: torch.Tensor, cuda_ok: bool) -> bool:
    """Whether ATen's cuDNN convolution would copy `w` into channels-last for input `x`."""
    if x.dim() != 4 or w.dim() != 4 or (x.device.type != "cuda" and not cuda_ok):
        return False
    if not torch.backends.cudnn.enabled:
        return False
    return suggest_memory_format(x) == torch.channels_last and \
        not w.is_contiguous(memory_format=torch.channels_last)


def computed_in_a_region(weight: Node, settings: Settings) -> bool:
    """Whether `weight` is, through views, the result of an op nvFuser takes (so a clone of it joins
    that op's region), rather than a graph input or an op that stays in ATen."""
    node = weight
    while is_metadata(node) and isinstance(node.args[0], Node):
        node = node.args[0]
    return node.op == "call_function" and not is_metadata(node) and unsupported_reason(node, settings) is None


def _channels_last_clone(gm: GraphModule, w: Node, mode: Any) -> Node:
    """`clone(w, memory_format=channels_last)`: a region of its own writes it channels-last."""
    clone = call_like(gm, aten.clone.default, (w,), w, mode, {"memory_format": torch.channels_last})
    clone.meta.pop("stack_trace", None)
    return clone


def _nhwc_permuted_copy(gm: GraphModule, w: Node, mode: Any) -> Node:
    """`permute(clone(permute(w, NHWC)), back)`: the region computing `w` writes a row-major [O, kh, kw, I]
    tensor, and the bookend pass leaves the permute back to [O, I, kh, kw] (channels-last strides) as a
    zero-copy alias. Not a channels-last clone in the region: for a weight standardized through a
    reshape (timm's StdConv2d, `batch_norm(w.reshape(1, O, -1))`) nvFuser 0.2.36's reduction scheduler
    fails on an output whose allocation order differs from its logical one ("Could not find axis",
    transform_replay.cpp:740, H200, 2026-11-29: the region then ran as two pieces), and takes the
    logical permute (scripts/nvfuser_repros/std_weight_channels_last_output.py)."""
    value = w
    for target, args, kwargs in ((aten.permute.default, (NHWC,), {}),
                                 (aten.clone.default, (), {"memory_format": torch.contiguous_format}),
                                 (aten.permute.default, (NCHW_FROM_NHWC,), {})):
        value = call_like(gm, target, (value, *args), w, mode, kwargs)
        value.meta.pop("stack_trace", None)
    return value


def channels_last_conv_weights(gm: GraphModule, settings: Settings) -> GraphModule:
    """Converts each such convolution's weight to channels-last in the graph (module docstring): every
    weight under CUDA graphs, computed weights only without them. `settings.plan_cpu_as_cuda` plans
    CPU tensors as CUDA ones."""
    cuda_ok, every_weight = settings.plan_cpu_as_cuda, settings.cuda_graphs
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
        computed = computed_in_a_region(w, settings)
        if not (every_weight or computed):
            continue
        clone = converted.get(w)
        if clone is None:
            with gm.graph.inserting_before(node):
                clone = (_nhwc_permuted_copy if computed else _channels_last_clone)(gm, w, w_val.fake_mode)
            converted[w] = clone
            add_note(gm, (COMPUTED_NOTE if computed else NOTE).format(conv=node.name, weight=w.name))
        args = list(node.args)
        args[positions[1]] = clone
        node.args = tuple(args)
    if converted:
        gm.graph.lint()
        gm.recompile()
        log.debug("dynamo_nvf: %d convolution weight(s) converted to channels-last in the graph", len(converted))
    return gm
