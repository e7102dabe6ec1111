"""Conv-net layout plan: where a graph's 2-D convolutions would run faster channels-last (inductor's
`decide_layout_opt` heuristics), each convolution (and `convolution_backward`) reads its activations
converted to channels-last once in the graph, `convolution(clone(x, memory_format=channels_last), ...)`,
so the convolutions' outputs, the regions between them (BatchNorm, ReLU, residual adds: their fake
values are propagated again) and the gradients all come out channels-last; the graph's user-visible
outputs get eager's strides back with one copy each where their layout changed.

Why: a conv net kept NCHW makes cuDNN convert every activation to NHWC and back around each
convolution: 146 nchwToNhwc and 66 nhwcToNchw kernels per ResNet-50 bf16 training step on an H100
(1.1 ms; issue 42). Inductor runs such nets channels-last throughout and has none.

Forward graphs of a training step: the tensors saved for the backward stay channels-last (they pass
only between our own forward and backward graphs). Their strides are reported to aot_autograd
(`TracingContext.output_strides`, as inductor reports its own), which restrides the backward's example
inputs; the backward compiler adopts them (`adopt_input_strides`) before this pass plans the backward.
The backward is decided on its `convolution_backward`s (the forward's weights and inputs, so the
same answer); each reads its output gradient and input channels-last, and cuDNN writes both gradients
channels-last, so the weights' gradients get the parameters' layout back as graph outputs. (This is
why conv_input_layout's inference-only reason, a backward seeing other layouts, does not hold here.)
A max pool's backward reads a stand-in of its input's sizes (decompositions.py), traced NCHW: it
takes its gradient's channels-last layout, so ATen runs the NHWC kernel and no conversion follows.
The partitioner runs before this pass, so a forward saves the image NCHW and its backward converts it
again (one copy). Were the forward's planning to fail after this pass, it runs aot_autograd's graph as it is and saves
NCHW tensors: the backward still runs them (regions compile per input layout, ATen takes any; the
graph was traced on NCHW, so every view in it holds). Where the backward cannot take the saved
tensors' new layout, it copies them back into the traced one first (`adopt_input_strides`): ops traced
NCHW would otherwise run on channels-last tensors, and a view of a convolution's gradient (cuDNN
writes it in its input's layout) then raises.

Weights are left NCHW here: cuDNN copies them to channels-last per call, which conv_weight_layout makes
a region under CUDA graphs (without them a region's host time outweighs the 1 us copy). The patch
embedding of a ViT (one convolution among hundreds of nodes, which inductor's heuristics leave NCHW) is
conv_input_layout's. A view that cannot take the new layout reads a copy in the traced one (StdConv2d's
weight standardisation views its weight gradient: inductor copies there too). The plan is undone for
the graph where an op refuses the new layout, a user-visible output that changed layout is a view or
has neither eager's contiguous nor channels-last strides, or the graph reads memory by explicit
strides (`as_strided`).

Pure: GraphModule in (aot_autograd's aten graph, before partitioning), GraphModule out.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

import torch
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg

from dynamo_nvf.ops.metadata import (RESHAPE_OPS, is_metadata, reads_explicit_strides, restore_vals, save_vals,
                                     static_layout, tensor_val)
from dynamo_nvf.passes import add_note, call_like

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: Convolution ops -> positions of (activation args converted, input, weight, groups).
CONVOLUTIONS = {
    aten.convolution.default: ((0,), 0, 1, 8),
    aten.convolution_backward.default: ((0, 1), 1, 2, 9),
}
#: Inductor's measured channels-last speedups (< 1 faster) per kind of convolution, inference graphs
#: (torch/_inductor/graph.py decide_layout_opt, from TorchBench's convolution inputs).
MULTIPLIERS = {"grouped": 1.358, "default": 0.823, "in_out": 0.725, "small": 0.783}
#: Inductor's rule: a graph of more than this many nodes per convolution keeps NCHW (few convolutions).
NODES_PER_CONV = 300


NOTE = ("channels-last convolutions: {convs} convolution(s) run channels-last; {inputs} activation(s) "
        "converted, {outputs} output(s) given eager's strides back{saved}")


def _is_conv(node: Node) -> bool:
    return node.op == "call_function" and node.target in CONVOLUTIONS


def _weight(node: Node) -> Optional[torch.Tensor]:
    return tensor_val(node.args[CONVOLUTIONS[node.target][2]])


def _groups(node: Node) -> int:
    return node.args[CONVOLUTIONS[node.target][3]]


def _is_grouped(node: Node) -> bool:
    return _groups(node) > 1 and _weight(node).size(1) > 1


def _is_in_out_channel(node: Node) -> bool:
    w = _weight(node)
    return w.size(0) * 2 <= w.size(1) and w.size(2) > 1


def _is_small_channel(node: Node) -> bool:
    w = _weight(node)
    return w.size(0) <= 64 and w.size(1) <= 64


def _flops(node: Node) -> float:
    from torch.utils.flop_counter import conv_flop_count

    x = tensor_val(node.args[CONVOLUTIONS[node.target][1]])
    w, transposed = _weight(node), node.args[6]
    out = tensor_val(node.args[0]) if node.target is aten.convolution_backward.default else tensor_val(node)
    return float(conv_flop_count(list(x.shape), list(w.shape), list(out.shape), transposed=transposed))


def runs_channels_last(gm: GraphModule, kind: str, cuda_ok: bool = False) -> bool:
    """Inductor's decision (`decide_layout_opt`) for this graph's convolutions: in inference graphs,
    when the measured speedups weighted by each convolution's flops favour channels-last; in training
    graphs, unless a grouped convolution (more than one input channel per group), one that shrinks
    channels at least 2x with a kernel over 1x1, or only small ones (64 channels or fewer) is there."""
    convs = [n for n in gm.graph.nodes if _is_conv(n)]
    if not convs or not torch.backends.cudnn.enabled:
        return False
    for conv in convs:
        _, x_at, w_at, _ = CONVOLUTIONS[conv.target]
        x, w = tensor_val(conv.args[x_at]), tensor_val(conv.args[w_at])
        if x is None or w is None or x.dim() != 4 or w.dim() != 4 or not (static_layout(x) and static_layout(w)):
            return False  # inductor: slower with dynamic shapes (pytorch#102670); 2-D convolutions only
        if x.device.type != "cuda" and not cuda_ok:
            return False
    if len(gm.graph.nodes) >= NODES_PER_CONV * len(convs):
        return False
    if kind == "inference":
        flops = {k: 0.0 for k in MULTIPLIERS}
        for conv in convs:
            kind_of = ("grouped" if _is_grouped(conv) else "small" if _is_small_channel(conv)
                       else "in_out" if _is_in_out_channel(conv) else "default")
            flops[kind_of] += _flops(conv)
        return sum(flops[k] * MULTIPLIERS[k] for k in flops) <= sum(flops.values())
    if any(map(_is_grouped, convs)) or any(map(_is_in_out_channel, convs)):
        return False
    return not all(map(_is_small_channel, convs))


def _is_channels_last(val: torch.Tensor) -> bool:
    return val.is_contiguous(memory_format=torch.channels_last)


def _significant_strides(val: torch.Tensor) -> list[int]:
    return [s for s, n in zip(val.stride(), val.shape) if n > 1]


def _output_node(gm: GraphModule) -> Node:
    return next(n for n in reversed(gm.graph.nodes) if n.op == "output")


def _output_args(gm: GraphModule) -> list[Any]:
    args = _output_node(gm).args[0]
    return list(args) if isinstance(args, (list, tuple)) else [args]


def _saved_outputs(kind: str, n_outputs: int) -> range:
    """Positions of a forward graph's outputs that are saved for its backward (aot_autograd's
    metadata in the TracingContext); none for other graphs or without that metadata."""
    if kind != "forward":
        return range(0)
    try:
        from torch._guards import TracingContext

        context = TracingContext.try_get()
        saved = context.fw_metadata.tensors_saved_for_backwards_slice  # type: ignore[union-attr]
        return range(n_outputs)[saved]
    except Exception:  # no context, or another torch's metadata: every output is the user's
        return range(0)


def _report_output_strides(gm: GraphModule) -> None:
    """Tells aot_autograd the forward's output strides, so that it restrides the backward's inputs."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    if context is None or context.output_strides is None or context.output_strides:
        return
    context.output_strides.extend(
        tuple(v.stride()) if (v := tensor_val(a)) is not None else None for a in _output_args(gm))


def _cudnn_grad_layout(node: Node, result: Any) -> Any:
    """cuDNN's gradients are channels-last when its input or weight suggests it (not in f64:
    `cudnn_conv_suggest_memory_format`); older meta functions said contiguous (pytorch#171622)."""
    from torch._prims_common import suggest_memory_format

    x, w = tensor_val(node.args[1]), tensor_val(node.args[2])
    if x is None or w is None or x.device.type != "cuda" or torch.float64 in (x.dtype, w.dtype):
        return result
    if torch.channels_last not in (suggest_memory_format(x), suggest_memory_format(w)):
        return result
    fixed = []
    for grad in result:
        if isinstance(grad, torch.Tensor) and grad.dim() == 4 and not _is_channels_last(grad):
            grad = grad.as_strided(grad.shape, torch._prims_common.make_channels_last_strides_for(grad.shape))
        fixed.append(grad)
    return tuple(fixed)


def adopt_input_strides(gm: GraphModule, example_inputs: Sequence[Any]) -> GraphModule:
    """Gives the graph's placeholders the strides of the example inputs where they differ (aot_autograd
    restrides a backward's saved activations to the layout its forward reported) and propagates them;
    the outputs' strides from before are kept for channels_last_convs, which gives them back."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    saved = {n: n.meta["val"] for n in gm.graph.nodes if "val" in n.meta}
    changed: set[Node] = set()
    view_copies: list[Node] = []
    try:
        for node, example in zip(placeholders, example_inputs):
            val = tensor_val(node)
            if val is None or not isinstance(example, torch.Tensor):
                continue
            if not (static_layout(val) and static_layout(example)):  # comparing SymInts would guard
                continue
            if val.shape != example.shape or val.stride() == example.stride():
                continue
            node.meta["val"] = val.as_strided(val.shape, example.stride(), val.storage_offset())
            changed.add(node)
        if not changed:
            return gm
        gm.meta[EAGER_OUTPUTS_KEY] = [saved[a] if isinstance(a, Node) and a in saved else tensor_val(a)
                                      for a in _output_args(gm)]
        mode = next(v.fake_mode for n in placeholders if (v := tensor_val(n)) is not None
                    and getattr(v, "fake_mode", None) is not None)
        _propagate(gm, mode, changed, traced=saved, view_copies=view_copies)
    except Exception as exc:  # the graph as traced, its inputs copied into the traced layouts
        for copy in view_copies:
            copy.replace_all_uses_with(copy.args[0])
            gm.graph.erase_node(copy)
        for node, val in saved.items():
            node.meta["val"] = val
        gm.meta.pop(EAGER_OUTPUTS_KEY, None)
        copied = _copy_into_traced_layouts(gm, changed)
        log.debug("dynamo_nvf: input strides not adopted (%d input(s) copied back): %s: %s", copied,
                  type(exc).__name__, str(exc)[:120])
    return gm


def _copy_into_traced_layouts(gm: GraphModule, placeholders: set[Node]) -> int:
    """Copies each of `placeholders` (inputs that come in another layout than traced) into its traced
    layout at the graph's start, so that every op of the graph as traced holds (a view of a
    convolution's gradient does not hold for the channels-last one cuDNN writes from a channels-last
    input). Returns the number of copies."""
    copies = 0
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    for node in [n for n in gm.graph.nodes if n in placeholders and n.op == "placeholder"]:
        val = tensor_val(node)
        fmt = _restore_format(val) if val is not None else None
        if fmt is None or not node.users:
            continue
        with gm.graph.inserting_before(first):
            copy = call_like(gm, aten.clone.default, (node,), first, val.fake_mode, {"memory_format": fmt})
        copy.meta.pop("stack_trace", None)
        node.replace_all_uses_with(copy, delete_user_cb=lambda user: user is not copy)
        copies += 1
    if copies:
        gm.graph.lint()
        gm.recompile()
    return copies


#: gm.meta key: the graph's output values as eager lays them out, before adopt_input_strides.
EAGER_OUTPUTS_KEY = "nvf_eager_outputs"


def _restore_format(old: torch.Tensor) -> Optional[torch.memory_format]:
    if old.is_contiguous():
        return torch.contiguous_format
    if old.dim() == 4 and _is_channels_last(old):
        return torch.channels_last
    return None


def channels_last_convs(gm: GraphModule, kind: str, cuda_ok: bool = False) -> GraphModule:
    """Runs the graph's convolutions channels-last where inductor would (module docstring). `kind`:
    "inference", "forward" or "backward"; `cuda_ok` plans CPU tensors as CUDA ones."""
    eager_outputs = gm.meta.pop(EAGER_OUTPUTS_KEY, None)
    if eager_outputs is None:
        eager_outputs = [tensor_val(a) for a in _output_args(gm)]
    planned = runs_channels_last(gm, kind, cuda_ok)
    if planned and reads_explicit_strides(gm):
        planned = False  # they read memory by explicit strides, which fake propagation cannot judge
    convs = [n for n in gm.graph.nodes if _is_conv(n)] if planned else []
    if not convs:
        return _restore_or_leave(gm, kind, eager_outputs)
    saved_vals = save_vals(gm)
    mode = next(v.fake_mode for n in gm.graph.nodes if (v := tensor_val(n)) is not None
                and getattr(v, "fake_mode", None) is not None)
    made: dict[Node, Node] = {}
    restrided: dict[Node, tuple] = {}
    view_copies: list[Node] = []
    try:
        _propagate(gm, mode, set(), made, restrided, saved_vals, view_copies)
        gm.graph.lint()
        gm.recompile()
        return _restore_outputs(gm, kind, eager_outputs, converted=len(made), convs=len(convs))
    except _Undo as exc:
        why = str(exc)
    except Exception as exc:  # a view the new layout cannot take, or any op that refuses it
        why = f"{type(exc).__name__}: {str(exc)[:120]}"
    for clone in [*made.values(), *view_copies]:
        clone.replace_all_uses_with(clone.args[0])
        gm.graph.erase_node(clone)
    for node, args in restrided.items():
        node.args = args
    restore_vals(saved_vals)
    gm.recompile()
    log.debug("dynamo_nvf: convolutions left NCHW: %s", why)
    return _restore_or_leave(gm, kind, eager_outputs)


def _layout(val: Any) -> Any:
    if isinstance(val, torch.Tensor):
        return tuple(val.stride())
    if isinstance(val, (list, tuple)):
        return tuple(_layout(v) for v in val)
    return None


def _restride_pool_input(node: Node, mode: Any, restrided: dict[Node, tuple]) -> Optional[Node]:
    """A max pool backward reading a fresh `empty_strided` for its input's sizes and memory format
    (decompositions._max_pool_backward_reading_sizes), traced NCHW, while its gradient now comes
    channels-last: the empty tensor takes channels-last strides, so ATen runs its NHWC kernel on the
    gradient as it is (not a conversion of the gradient, the NCHW kernel, and an NCHW gradient of the
    input that the next convolution's backward converts back). The node changed, or None."""
    grad, x = tensor_val(node.args[0]), node.args[1]
    if not (isinstance(x, Node) and x.op == "call_function" and x.target is aten.empty_strided.default
            and len(x.users) == 1 and grad is not None and grad.dim() == 4 and _is_channels_last(grad)):
        return None
    val = tensor_val(x)
    if val is None or _is_channels_last(val) or not static_layout(val):
        return None
    with mode:
        new = torch.empty(val.shape, dtype=val.dtype, device=val.device, memory_format=torch.channels_last)
    restrided[x] = x.args
    x.args = (x.args[0], list(new.stride()), *x.args[2:])
    x.meta["val"] = new
    return x


def _view_copy(gm: GraphModule, node: Node, mode: Any, traced: dict[Node, Any]) -> Optional[Node]:
    """A view whose source came in a new layout it cannot view (StdConv2d's weight standardization
    views its weight's gradient, which cuDNN writes channels-last): reads a copy of the source in its
    traced layout instead. The copy (a clone), or None where the view takes the new layout or the traced
    one is neither contiguous nor channels-last."""
    src = node.args[0]
    new, old = tensor_val(src), traced.get(src)
    if node.target not in RESHAPE_OPS or new is None or not isinstance(old, torch.Tensor):
        return None
    try:
        with mode:
            node.target(new, *map_arg(node.args[1:], lambda a: a.meta["val"]))
        return None
    except (RuntimeError, ValueError):  # fake tensors raise ValueError where ATen raises RuntimeError
        pass
    fmt = _restore_format(old)
    if fmt is None:
        return None
    with gm.graph.inserting_before(node):
        copy = call_like(gm, aten.clone.default, (src,), node, mode, {"memory_format": fmt})
    copy.meta.pop("stack_trace", None)
    node.args = (copy, *node.args[1:])
    return copy


def _propagate(gm: GraphModule, mode: Any, changed: set[Node], made: Optional[dict[Node, Node]] = None,
               restrided: Optional[dict[Node, tuple]] = None, traced: Optional[dict[Node, Any]] = None,
               view_copies: Optional[list[Node]] = None) -> None:
    """Walks the graph in order; every node downstream of a `changed` one gets its fake value again,
    where a CUDA `convolution_backward`'s gradients take cuDNN's layout (channels-last when its input
    or weight is) whatever this torch's meta function says. With `made`, each convolution's activation
    that is not channels-last by then is converted once first (a clone after it; before the first
    reader for a placeholder), recorded in `made` (activation -> its conversion); with `restrided`, a
    max pool backward's stand-in input follows its gradient's layout (`_restride_pool_input`),
    recorded there (node -> its arguments before); with `traced` (each node's value as traced) and
    `view_copies`, a view that cannot take its source's new layout reads a copy in the traced one
    (`_view_copy`), recorded there."""
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if restrided is not None and node.target is aten.max_pool2d_with_indices_backward.default:
            stand_in = _restride_pool_input(node, mode, restrided)
            if stand_in is not None:
                changed.add(stand_in)
        if made is not None and _is_conv(node):
            args = list(node.args)
            for i in CONVOLUTIONS[node.target][0]:
                x = args[i]
                val = tensor_val(x)
                if not isinstance(x, Node) or val is None or val.dim() != 4 or _is_channels_last(val):
                    continue
                if x not in made:
                    where = gm.graph.inserting_before(node) if x.op == "placeholder" else gm.graph.inserting_after(x)
                    with where:
                        made[x] = call_like(gm, aten.clone.default, (x,), node, mode,
                                            {"memory_format": torch.channels_last})
                    made[x].meta.pop("stack_trace", None)
                    changed.add(made[x])
                args[i] = made[x]
            node.args = tuple(args)
        if (made is not None and node in made.values()) or not any(a in changed for a in node.all_input_nodes):
            continue
        if traced is not None and view_copies is not None and node.args and node.args[0] in changed:
            copy = _view_copy(gm, node, mode, traced)
            if copy is not None:
                view_copies.append(copy)
        before = _layout(node.meta.get("val"))
        args, kwargs = map_arg((node.args, node.kwargs), lambda a: a.meta["val"])
        with mode:
            val = node.target(*args, **kwargs)
        if node.target is aten.convolution_backward.default:
            val = _cudnn_grad_layout(node, val)
        node.meta["val"] = val
        if _layout(val) != before:
            changed.add(node)


class _Undo(Exception):
    """The plan cannot give an output eager's layout back."""


def _restore_outputs(gm: GraphModule, kind: str, eager_outputs: list[Optional[torch.Tensor]], converted: int,
                     convs: int) -> GraphModule:
    """Copies each user-visible output whose layout differs from eager's into eager's layout; a
    forward's saved tensors keep theirs and their strides are reported to aot_autograd. Raises _Undo
    (the graph unchanged) where an output cannot get eager's layout back by a copy."""
    output = _output_node(gm)
    args = _output_args(gm)
    saved = set(_saved_outputs(kind, len(args)))
    wanted: dict[int, torch.memory_format] = {}
    saved_changed = 0
    for i, (arg, old) in enumerate(zip(args, eager_outputs)):
        new = tensor_val(arg)
        if new is None or old is None or _significant_strides(new) == _significant_strides(old):
            continue
        if i in saved:
            saved_changed += 1
            continue
        fmt = _restore_format(old)
        if fmt is None or is_metadata(arg) or arg.op == "placeholder":
            raise _Undo(f"output {i} ({arg.name}) cannot get eager's strides {old.stride()} back by a copy")
        wanted[i] = fmt
    copies: dict[tuple[Node, Any], Node] = {}
    for i, fmt in wanted.items():
        arg = args[i]
        if (arg, fmt) not in copies:
            with gm.graph.inserting_before(output):
                copies[(arg, fmt)] = call_like(gm, aten.clone.default, (arg,), arg, tensor_val(arg).fake_mode,
                                               {"memory_format": fmt})
            copies[(arg, fmt)].meta.pop("stack_trace", None)
        args[i] = copies[(arg, fmt)]
    if copies:
        output.args = (type(output.args[0])(args) if isinstance(output.args[0], (list, tuple)) else args[0],)
        gm.graph.lint()
        gm.recompile()
    if saved_changed:
        _report_output_strides(gm)
    if converted or copies or saved_changed:
        add_note(gm, NOTE.format(convs=convs, inputs=converted, outputs=len(copies),
                                 saved=f"; {saved_changed} saved tensor(s) stay channels-last" if saved_changed else ""))
    return gm


def _restore_or_leave(gm: GraphModule, kind: str, eager_outputs: list[Optional[torch.Tensor]]) -> GraphModule:
    """The graph without the plan: outputs whose layout its inputs changed (a backward's adopted
    strides) get eager's back where a copy can; otherwise they are left as they come."""
    try:
        return _restore_outputs(gm, kind, eager_outputs, converted=0, convs=0)
    except _Undo as exc:
        log.debug("dynamo_nvf: %s", exc)
        return gm
