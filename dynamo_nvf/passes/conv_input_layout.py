"""Patch-embedding pass: a patchifying convolution (kernel = stride >= `MIN_PATCH`, no padding) of an
NCHW image gets its input converted to channels-last in the graph, `convolution(clone(x,
memory_format=channels_last), w, ...)`, a region of its own (nvFuser's transpose scheduler), so cuDNN
neither converts the image itself nor converts its output back to NCHW.

Why: ViT's patch embedding (16x16, stride 16, 3 -> 384 channels). For an NCHW f32 image batch cuDNN
picks its NHWC tensor-op kernel anyway and wraps it in its own layout copies: on an H100 (2026-11-25,
batch 64, 224 px; scripts/repros/conv_stems.py at commit 2828583) nchwToNhwc took 144 us and nhwcToNchw 12, where
nvFuser's copy of the image into channels-last took 27 us and cuDNN then only pads it (63 us, as under
inductor, whose layout optimisation converts the image the same way in 58 us). The convolution kernel
is the same one, so its values are too; the output is channels-last, which the tokens' flatten and
transpose then read row-major.

Not for small images: at batch 2 the conversion made ViT's step slower (`MIN_ELEMENTS`). Not for
small patches: ConvNeXt's 4x4 stem runs cuDNN's NCHW kernel in f32, which a channels-last
input would swap for a TF32 one (other values), and in bf16 it was slower that way (183 against 163
us). In a training step the pass runs on the joint graph: the convolution backward reads the same
converted image (one conversion for both), and a weight gradient the new layout made channels-last is
copied back to the contiguous layout eager returns (a weight-sized copy). Its tokens then come out
row-major in training too: MLP-Mixer's residual stream had stayed transposed in memory, and its
LayerNorms read it strided or from row-major copies (row_major_norm_inputs). The conversion stays
only where every other node of the graph accepts the new layout: the graph's fake values are
propagated again, and a view that would fail, or a graph output whose strides would change, undoes
it. A graph with an `as_strided` (memory read by explicit strides, which that check cannot judge)
keeps NCHW.

Pure: GraphModule in (aot_autograd's aten graph, before partitioning), GraphModule out.
"""

from __future__ import annotations

import logging
import math
import operator
from typing import Any

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import reads_explicit_strides, restore_vals, save_vals, static_sizes, tensor_val
from dynamo_nvf.passes import add_note, call_like

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: The smallest patch (kernel = stride) converted: ViT's 16 is measured, ConvNeXt's 4 is left alone.
MIN_PATCH = 8
#: The smallest image batch converted (elements): ViT's at batch 64 has 9.6 million and gained; at
#: batch 2 (301 thousand, bf16) the step's kernels took 0.185 ms against 0.127 without the conversion
#: (H100, 2026-11-25, vit_fwd_bf16_small).
MIN_ELEMENTS = 1 << 22


NOTE = ("{conv}: input {x} converted to channels-last in a region of its own (a {k}x{k} patch "
        "embedding: cuDNN runs it channels-last and would convert the image and its output itself)")


def _is_patch_embedding(node: Node) -> bool:
    if node.op != "call_function" or node.target is not aten.convolution.default or len(node.args) < 9:
        return False
    x, w, _bias, stride, padding, dilation, transposed, _out_pad, groups = node.args[:9]
    x_val, w_val = tensor_val(x), tensor_val(w)
    if x_val is None or w_val is None or x_val.dim() != 4 or w_val.dim() != 4:
        return False
    if transposed or groups != 1 or any(p != 0 for p in padding) or any(d != 1 for d in dilation):
        return False
    kernel, sizes = static_sizes(w_val), static_sizes(x_val)
    if kernel is None or list(stride) != kernel[2:] or min(kernel[2:]) < MIN_PATCH:
        return False
    if sizes is None or math.prod(sizes) < MIN_ELEMENTS:
        return False
    return x_val.is_contiguous() and not x_val.is_contiguous(memory_format=torch.channels_last)


def _output_strides(gm: GraphModule) -> list[Any]:
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    args = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    return [tuple(v.stride()) if (v := tensor_val(a)) is not None else None for a in args]


def _propagate(gm: GraphModule, mode: Any) -> None:
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    inputs = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*inputs)


def _restore_weight_gradients(gm: GraphModule, strides: list[Any], after: list[Any], backwards: set[Node],
                              mode: Any) -> None:
    """A joint graph's weight gradient that the channels-last image made channels-last is copied back to
    the contiguous layout eager returns (a weight-sized copy)."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outs = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    for i, (was, now) in enumerate(zip(strides, after)):
        node = outs[i]
        if was == now or not isinstance(node, Node) or node.target is not operator.getitem:
            continue
        if node.args[0] not in backwards or not tensor_val(node).is_contiguous(memory_format=torch.channels_last):
            continue
        with gm.graph.inserting_before(output):
            dense = call_like(gm, aten.clone.default, (node,), node, mode, {"memory_format": torch.contiguous_format})
        if tuple(tensor_val(dense).stride()) == was:
            output.replace_input_with(node, dense)
        else:
            gm.graph.erase_node(dense)
    gm.recompile()


def channels_last_patch_inputs(gm: GraphModule, cuda_ok: bool = False) -> GraphModule:
    """Converts each patch embedding's NCHW input to channels-last in the graph (module docstring).
    `cuda_ok` plans CPU tensors as CUDA ones (Settings.plan_cpu_as_cuda)."""
    convs = [n for n in gm.graph.nodes if _is_patch_embedding(n)]
    convs = [n for n in convs if cuda_ok or tensor_val(n.args[0]).device.type == "cuda"]
    if not convs or not torch.backends.cudnn.enabled:
        return gm
    if reads_explicit_strides(gm):
        return gm  # they read memory by explicit strides, which fake propagation cannot judge
    saved = save_vals(gm)
    strides = _output_strides(gm)
    mode = tensor_val(convs[0].args[0]).fake_mode
    images = [(conv, conv.args[0]) for conv in convs]
    made: dict[Node, Node] = {}  # one conversion per image, however many convolutions read it
    backwards: list[tuple[Node, Node]] = []
    for conv, x in images:
        if x not in made:
            with gm.graph.inserting_before(conv):
                made[x] = call_like(gm, aten.clone.default, (x,), conv, mode, {"memory_format": torch.channels_last})
            made[x].meta.pop("stack_trace", None)
        conv.replace_input_with(x, made[x])
        for user in list(x.users):  # a joint graph's convolution backward reads the image the forward read
            if user.target is aten.convolution_backward.default and user.args[1] is x and user.args[2] is conv.args[1]:
                user.replace_input_with(x, made[x])
                backwards.append((user, x))
    try:
        gm.recompile()
        _propagate(gm, mode)
        after = _output_strides(gm)
        if after != strides and backwards:
            _restore_weight_gradients(gm, strides, after, {b for b, _ in backwards}, mode)
            after = _output_strides(gm)
        undo = after != strides
        changed = [i for i, (a, b) in enumerate(zip(after, strides)) if a != b]
        why = (f"a graph output's strides would change (outputs {changed[:4]}: "
               f"{[strides[i] for i in changed[:2]]} -> {[after[i] for i in changed[:2]]})")
    except Exception as exc:  # a view the new layout cannot take, or any op that refuses it
        undo, why = True, f"{type(exc).__name__}: {str(exc)[:120]}"
    if undo:
        for conv, x in images + backwards:
            conv.replace_input_with(made[x], x)
        for clone in made.values():
            gm.graph.erase_node(clone)
        restore_vals(saved)
        gm.recompile()
        log.debug("dynamo_nvf: patch-embedding inputs left NCHW: %s", why)
        return gm
    for conv, x in images:
        k = tensor_val(conv.args[1]).shape[-1]
        add_note(gm, NOTE.format(conv=conv.name, x=x.name, k=k))
    gm.graph.lint()  # the code was recompiled before the propagation, and the graph is unchanged since
    return gm
