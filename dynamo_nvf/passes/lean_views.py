"""Lean views pass: each view the eager part of a graph keeps becomes one `_reinterpret_tensor` call.

Why: after partitioning, the glue between regions is mostly views around matmuls and attention
(`t`, `view`, `_unsafe_view`, `transpose`, `slice`, `unsqueeze`), each a `torch.ops.aten.*` call that
costs 2-4 us of host time through the op-overload path; the LLaMA-style model ran about 90 of them
per inference call. With static shapes every such view's sizes, strides and offset are known at
compile time, relative to the tensor the chain starts from (its root), so the chain collapses into
one call of torch's `_reinterpret_tensor` (what inductor's `reinterpret_tensor` is, about 1 us),
and intermediate views that nothing else reads are dropped.

This is sound only where the root's real layout at run time is the traced one. Trusted roots:
 - graph inputs, except backward tangents (Dynamo guards the sizes and strides of the forward's
   inputs; saved activations are the forward's own outputs; a tangent is whatever layout autograd
   hands in);
 - nvFuser region outputs (the runtime gives every output eager's traced strides);
 - cuBLAS matmul outputs (always new, contiguous tensors).
Views of anything else (SDPA, convolutions, other ATen ops whose output layout a meta function only
predicts) keep their aten calls. A view eager would not make without a copy (a reshape of a
non-viewable layout) is never rewritten. Symbolic sizes keep the aten calls too.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.passes import is_tangent
from dynamo_nvf.ops.metadata import METADATA_OPS, MULTI_OUTPUT_METADATA_OPS, alias_violation, static_layout

aten = torch.ops.aten


#: torch's own `_reinterpret_tensor` (None on a torch without it: the views then go through dispatch).
raw_reinterpret: Optional[Callable[..., torch.Tensor]] = getattr(
    getattr(torch._C, "_dynamo", None) and torch._C._dynamo.guards, "_reinterpret_tensor", None)
#: Tensor types the raw call serves (a subclass would lose its type through it).
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
#: Number of active dispatch modes (a fake tensor mode while tracing counts): the raw call bypasses them.
dispatch_modes = torch._C._len_torch_dispatch_stack


def reinterpret_tensor(base: torch.Tensor, size: tuple, stride: tuple, offset_increment: int) -> torch.Tensor:
    """A view of `base` with these sizes and strides, `offset_increment` elements further in.

    Plain tensors with no dispatch mode active take torch's `_reinterpret_tensor` (what inductor's
    generated code calls: no dispatcher, about 1 us); it would bypass a tensor subclass or mode (a
    fake tensor while tracing, a functional tensor), so those take `as_strided` through dispatch.
    """
    if raw_reinterpret is not None and type(base) in PLAIN_TENSORS and not dispatch_modes():
        return raw_reinterpret(base, size, stride, offset_increment)
    return base.as_strided(size, stride, base.storage_offset() + offset_increment)

#: Ops whose outputs are always fresh tensors with the traced (contiguous) layout.
_FRESH_CONTIGUOUS = frozenset({aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default})

def _view_step(node: Node) -> Optional[Node]:
    """The tensor `node` views, when `node` is a zero-copy view eager would make; else None."""
    if node.op != "call_function" or node.target not in METADATA_OPS:
        return None
    if node.target is operator.getitem:
        src = node.args[0]
        if isinstance(src, Node) and src.op == "call_function" and src.target in MULTI_OUTPUT_METADATA_OPS:
            return src.args[0] if isinstance(src.args[0], Node) else None
        return None
    if node.target in MULTI_OUTPUT_METADATA_OPS or alias_violation(node) is not None:
        return None
    return node.args[0] if node.args and isinstance(node.args[0], Node) else None


def _trusted_root(node: Node, is_region: Callable[[Any], bool]) -> bool:
    if node.op == "placeholder":
        return not is_tangent(node)
    if node.op != "call_function":
        return False
    if node.target in _FRESH_CONTIGUOUS or is_region(node.target):
        return True
    return node.target is operator.getitem and isinstance(node.args[0], Node) and is_region(node.args[0].target)


def _static_tensor(node: Node) -> Optional[torch.Tensor]:
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) and static_layout(val) else None


def reinterpret_views(gm: GraphModule, is_region: Callable[[Any], bool]) -> GraphModule:
    """Rewrites every view whose chain starts at a trusted root into one `reinterpret_tensor` of the
    root; `is_region(target)` tells a region's runtime. Returns `gm`, recompiled."""
    graph = gm.graph
    rewritten = 0
    chain_members: set[Node] = set()
    for node in list(graph.nodes):
        src = _view_step(node)
        val = _static_tensor(node)
        if src is None or val is None:
            continue
        root, members = src, [node]
        while (step := _view_step(root)) is not None:
            members.append(root)
            root = step
        members += [m.args[0] for m in members if m.target is operator.getitem]  # their split/unbind
        if root.op == "call_function" and root.target is reinterpret_tensor:
            members.append(root)
            root = root.args[0]  # an earlier rewrite: its root is trusted, and the chain goes on from it
        root_val = _static_tensor(root)
        if root_val is None or not _trusted_root(root, is_region):
            continue
        with graph.inserting_before(node):
            lean = graph.call_function(reinterpret_tensor, (
                root, tuple(val.shape), tuple(val.stride()), val.storage_offset() - root_val.storage_offset()))
        lean.meta = dict(node.meta)
        node.replace_all_uses_with(lean)
        chain_members.update(members)
        rewritten += 1
    for node in reversed(list(graph.nodes)):
        if node in chain_members and not node.users:
            graph.erase_node(node)
    if rewritten:
        gm.recompile()
    return gm
