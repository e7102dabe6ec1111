"""Max pools whose indices nothing reads (inference graphs) become the maximum over their window's
taps (dynamo_nvf/pool_windows.py): views, pads and slices that the region around them takes in,
where ATen's kernel would also write the int64 indices."""

from __future__ import annotations

import logging
import operator
from typing import Callable, Optional

import torch
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

from dynamo_nvf.passes import add_note
from dynamo_nvf.passes.partition import READS_MEMORY_KEY
from dynamo_nvf.pool_windows import max_pool2d_values

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: Why taps that pad or slice read the pool's input from memory (partition.READS_MEMORY_KEY). A pool
#: whose windows tile its input (one reduction over the phase dims, no pads or slices) joins the ops
#: that compute its input.
READS_INPUT = ("a pool's taps read its input from memory: after the ops that compute it in one region, "
               "nvFuser splits the region at the pads and keeps an f32 copy of the whole input between its "
               "kernels (ResNet-50 inference, H100: peak memory 1.9x inductor's, first call 2x)")


#: The ops of traced taps that make nvFuser split a region after the ops computing the pool's input.
_RESIZES = frozenset({aten.constant_pad_nd.default, aten.slice.Tensor, aten.cat.default})


def _values_only(pool: Node) -> list[Node]:
    """The pool's `getitem(_, 0)` users, or [] when anything else reads it (its indices)."""
    users = list(pool.users)
    if not users or not all(u.op == "call_function" and u.target is operator.getitem and u.args[1] == 0
                            for u in users):
        return []
    return users


def inline_taps(gm: GraphModule, sub: GraphModule, inputs: list[Node], before: Node) -> Node:
    """`sub`'s nodes copied into `gm` before `before`, its placeholders bound to `inputs`; its output."""
    placeholders = sub.graph.find_nodes(op="placeholder")
    resizes = any(n.op == "call_function" and n.target in _RESIZES for n in sub.graph.nodes)
    env: dict[Node, Node] = dict(zip(placeholders, inputs))
    out = None
    with gm.graph.inserting_before(before):
        for node in sub.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                result = node.args[0]
                out = env[result[0] if isinstance(result, (list, tuple)) else result]
                continue
            env[node] = gm.graph.node_copy(node, lambda n: env[n])
            if resizes and any(p in placeholders for p in node.all_input_nodes):
                env[node].meta[READS_MEMORY_KEY] = READS_INPUT
    assert out is not None
    return out


def traced_taps(gm: GraphModule, node: Node, taps: Callable[..., Optional[torch.Tensor]],
                inputs: list[Node]) -> Optional[Node]:
    """`taps(*inputs)` (a pool_windows function; None where it declines) traced on the inputs' fake
    values and inlined before `node`; its output node, or None where it declines or cannot be traced."""
    vals = [x.meta.get("val") if isinstance(x, Node) else None for x in inputs]
    if not all(isinstance(v, torch.Tensor) and getattr(v, "fake_mode", None) is not None for v in vals):
        return None
    with vals[0].fake_mode:  # the functions may make tensors of their own (a divisor's ones)
        try:
            if taps(*vals) is None:
                return None
            sub = make_fx(taps)(*vals)
        except Exception:  # noqa: BLE001 - a rewrite it cannot trace is not made
            log.debug("dynamo_nvf: %s not traced as taps", node.name, exc_info=True)
            return None
    return inline_taps(gm, sub, inputs, node)


def max_pool_as_taps(gm: GraphModule, plan_cpu_as_cuda: bool) -> GraphModule:
    """Each `max_pool2d_with_indices` read only for its values, where `max_pool2d_values` takes it,
    as the traced ops of that function."""
    rewrites = 0
    for pool in list(gm.graph.find_nodes(op="call_function", target=aten.max_pool2d_with_indices.default)):
        readers = _values_only(pool)
        if not readers:
            continue
        args = pool.args[1:]
        out = traced_taps(gm, pool, lambda t: max_pool2d_values(t, *args, any_device=plan_cpu_as_cuda), [pool.args[0]])
        if out is None:
            continue
        for reader in readers:
            reader.replace_all_uses_with(out)
            gm.graph.erase_node(reader)
        gm.graph.erase_node(pool)
        rewrites += 1
    if rewrites:
        add_note(gm, f"max pool: {rewrites} pool(s) whose indices nothing reads as the maximum over "
                     "their window's taps (views, pads and slices a region takes in)")
        gm.graph.lint()
        gm.recompile()
    return gm
