"""Registry of nvFuser lowerings keyed by aten overload, in the manner of torch/_inductor/lowering.py.

Both the partitioner (is this node supported?) and the fusion builder (how is it lowered?) ask this
one table, so the two can never disagree.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

import torch
from torch.fx import Node

from dynamo_nvf.ops.deliberate_eager import COMMUNICATION, deliberate_eager_reason  # noqa: F401 (re-exported)
from dynamo_nvf.ops.dtypes import SUPPORTED_DTYPES

if TYPE_CHECKING:
    from dynamo_nvf.ops.context import LoweringContext
    from dynamo_nvf.settings import Settings

#: Lowers one FX node into nvFuser values; returns a value or a tuple of values.
LowerFn = Callable[["LoweringContext", Node], Any]
#: Op-specific capability check: None when supported, else the reason.
CheckFn = Callable[[Node], Optional[str]]

MAX_RANK = 8


@dataclass(frozen=True)
class Lowering:
    target: Any
    lower: LowerFn
    check: Optional[CheckFn] = None
    #: A Settings flag that must be on for this lowering to be used (ops ATen does as well by default).
    opt_in: Optional[str] = None


LOWERINGS: dict[Any, Lowering] = {}

def register_lowering(*targets: Any, check: Optional[CheckFn] = None,
                      opt_in: Optional[str] = None) -> Callable[[LowerFn], LowerFn]:
    """Registers `fn` as the lowering of every overload in `targets`."""

    def decorate(fn: LowerFn) -> LowerFn:
        for target in targets:
            if target in LOWERINGS:
                raise ValueError(f"duplicate lowering for {target}")
            LOWERINGS[target] = Lowering(target, fn, check, opt_in)
        return fn

    return decorate


def op_name(target: Any) -> str:
    """An op's display name: `aten.mul.Tensor` for overloads, `operator.getitem` for Python callables."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", repr(target))
    return f"{module.replace('_operator', 'operator')}.{name}" if module else name


def _tensor_vals(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensor_vals(v)


def _arg_nodes(node: Node) -> list[Node]:
    return list(node.all_input_nodes)


def _check_tensor(t: torch.Tensor, settings: "Settings", is_input: bool) -> Optional[str]:
    if t.dtype not in SUPPORTED_DTYPES:
        return f"dtype: {t.dtype} is not mapped to nvFuser"
    device = t.device.type
    cuda_like = device == "cuda" or (settings.plan_cpu_as_cuda and device == "cpu")
    if not cuda_like:
        if not (is_input and device == "cpu" and t.dim() == 0):
            return f"device: {device} tensor (nvFuser runs CUDA tensors and 0-dim CPU scalars)"
    if t.dim() > MAX_RANK:
        return f"rank: {t.dim()} > {MAX_RANK}"
    return None


_SCALAR_TYPES = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


#: Why an op common in models has no lowering (overload packet name -> what it is), so that explain()
#: says more than that it has none.
WHY_NO_LOWERING: dict[str, str] = {
    "aten.copy_": "an input mutation: the graph writes a new value back into its input (a buffer such as "
                  "BatchNorm's running statistics) after the regions",
    **{f"aten.{name}": "the graph's buffer updates in one launch (passes/batch_buffer_updates.py)"
       for name in ("_foreach_copy_", "_foreach_add_")},
    **{f"aten.{name}": "a sliding-window op (pooling)" for name in (
        "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "max_pool3d_with_indices",
        "max_pool3d_with_indices_backward", "avg_pool3d",
        "avg_pool3d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
        "_adaptive_avg_pool3d", "_adaptive_avg_pool3d_backward", "adaptive_max_pool2d",
        "adaptive_max_pool2d_backward")},
    **{f"aten.{name}": ("a sliding-window op (pooling); option avg_pool_taps runs 2-D average pools as "
                        "their window's taps in regions, by default in inference graphs only, where it "
                        "takes the geometry") for name in ("avg_pool2d", "avg_pool2d_backward")},
    **{f"aten.{name}": "a scan along a dim" for name in ("cumprod", "cummax", "cummin", "logcumsumexp")},
    **{f"aten.{name}": "a reduction that returns indices" for name in (
        "argmax", "argmin", "sort", "topk", "kthvalue", "median")},
    **{f"aten.{name}": f"values with indices (`{name}.dim`), or an overload that a{name} does not cover"
       for name in ("max", "min")},
    **{f"aten.{name}": "a data-dependent gather or scatter" for name in (
        "index", "_unsafe_index", "index_put", "_unsafe_index_put", "scatter", "scatter_add", "scatter_reduce",
        "index_select", "index_add", "masked_select", "nonzero")},
    "aten.flip": "a reversal of a dim",
    **{f"aten.{name}": "an accumulating scatter of rows, which nvfuser_direct does not bind"
       for name in ("embedding_dense_backward", "embedding_backward")},
    **{f"aten.{name}": "an allocation of uninitialized memory, no kernel" for name in (
        "empty", "empty_like", "empty_strided", "new_empty_strided")},
}


def why_no_lowering(target: Any) -> str:
    """What an op without a lowering is (WHY_NO_LOWERING), as a suffix of its reason, or ''."""
    packet = getattr(target, "overloadpacket", target)
    qualified = getattr(packet, "_qualified_op_name", "")
    namespace, _, name = qualified.partition("::")
    why = WHY_NO_LOWERING.get(f"{namespace}.{name}")
    return f" ({why})" if why else ""


#: node.meta key of a node a rewrite leaves to ATen although nvFuser could run it (the value: why, for
#: explain()): a layout copy that would leave the regions around it in mixed layouts.
LEFT_TO_ATEN_KEY = "nvf_left_to_aten"


def unsupported_reason(node: Node, settings: "Settings") -> Optional[str]:
    """None when nvFuser can take this node, else a reason string that explain() shows."""
    try:
        return _unsupported_reason(node, settings)
    except Exception as exc:  # a check that cannot decide keeps the node in eager
        return f"unsupported: capability check failed ({type(exc).__name__}: {exc})"


def _unsupported_reason(node: Node, settings: "Settings") -> Optional[str]:
    if node.op != "call_function":
        return f"not an op ({node.op})"
    if LEFT_TO_ATEN_KEY in node.meta:
        return node.meta[LEFT_TO_ATEN_KEY]
    deliberate = deliberate_eager_reason(node.target)
    if deliberate is not None:
        return deliberate
    lowering = LOWERINGS.get(node.target)
    if lowering is None and isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return f"size arithmetic ({op_name(node.target)} of symbolic sizes): computed on the host, not a tensor op"
    if lowering is None:
        return f"unsupported op: {op_name(node.target)} has no nvFuser lowering{why_no_lowering(node.target)}"
    if lowering.opt_in is not None and not getattr(settings, lowering.opt_in):
        return f"left to ATen: {op_name(node.target)} is fused only with {lowering.opt_in}=True"
    if node.target is operator.getitem:
        # Follows its producer: only results of supported ops are indexed inside a region.
        src = node.args[0]
        if not isinstance(src, Node) or unsupported_reason(src, settings) is not None:
            return "unsupported op: getitem of an op that stays in eager"
    for inp in _arg_nodes(node):
        val = inp.meta.get("val")
        if isinstance(val, torch.Tensor):
            reason = _check_tensor(val, settings, is_input=True)
            if reason:
                return reason
        elif isinstance(val, (list, tuple)) and node.target is operator.getitem:
            continue
        elif not isinstance(val, _SCALAR_TYPES):
            return f"unsupported input: {inp.name} has no tensor or scalar value"
    out = node.meta.get("val")
    outs = list(_tensor_vals(out))
    if not outs:
        return "not a tensor op (its result is not a tensor)"
    for t in outs:
        reason = _check_tensor(t, settings, is_input=False)
        if reason:
            return reason
    if lowering is not None and lowering.check is not None:
        return lowering.check(node)
    return None
