"""Pools as ops the region around them takes in (dynamo_nvf/pool_windows.py: views, pads and slices
of the window's taps): max pools whose indices nothing reads (inference graphs) as the maximum over
the taps, where ATen's kernel would also write the int64 indices; average pools (forward graphs too)
as their sum over ATen's divisor. Their backward stays ATen's."""

from __future__ import annotations

import logging
import operator
from typing import Callable, Optional

import torch
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

from dynamo_nvf.passes import add_note
from dynamo_nvf.passes.partition import READS_MEMORY_KEY
from dynamo_nvf.pool_windows import avg_pool2d_values, max_pool2d_values

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: Why the taps read the pool's input from memory (partition.READS_MEMORY_KEY).
READS_INPUT = ("a pool's taps read its input from memory: after the ops that compute it in one region, "
               "nvFuser splits the region at the pads and keeps an f32 copy of the whole input between its "
               "kernels (ResNet-50 inference, H100: peak memory 1.9x inductor's, first call 2x)")


def _values_only(pool: Node) -> list[Node]:
    """The pool's `getitem(_, 0)` users, or [] when anything else reads it (its indices)."""
    users = list(pool.users)
    if not users or not all(u.op == "call_function" and u.target is operator.getitem and u.args[1] == 0
                            for u in users):
        return []
    return users


def _inline(gm: GraphModule, sub: GraphModule, inputs: list[Node], before: Node) -> Node:
    """`sub`'s nodes copied into `gm` before `before`, its placeholders bound to `inputs`; its output."""
    placeholders = sub.graph.find_nodes(op="placeholder")
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
            if any(p in placeholders for p in node.all_input_nodes):
                env[node].meta[READS_MEMORY_KEY] = READS_INPUT
    assert out is not None
    return out


def _as_taps(gm: GraphModule, pool: Node, x: Node, values: Callable[[torch.Tensor], Optional[torch.Tensor]]) -> Optional[Node]:
    """`values(x)` traced on `x`'s fake value and inlined before `pool`: its result, or None where
    `values` declines or cannot be traced."""
    val = x.meta.get("val") if isinstance(x, Node) else None
    if not isinstance(val, torch.Tensor) or getattr(val, "fake_mode", None) is None:
        return None
    with val.fake_mode:
        try:
            if values(val) is None:
                return None
            sub = make_fx(values)(val)
        except Exception:  # noqa: BLE001 - a rewrite it cannot trace is not made
            log.debug("dynamo_nvf: pool %s not traced as taps", pool.name, exc_info=True)
            return None
    return _inline(gm, sub, [x], pool)


def pool_as_taps(gm: GraphModule, plan_cpu_as_cuda: bool) -> GraphModule:
    """Each `max_pool2d_with_indices` read only for its values, and each `avg_pool2d`, where
    `max_pool2d_values` (`avg_pool2d_values`) takes it, as the traced ops of that function."""
    counts = {"max": 0, "avg": 0}
    for pool in list(gm.graph.find_nodes(op="call_function", target=aten.max_pool2d_with_indices.default)):
        readers = _values_only(pool)
        if not readers:
            continue
        args = pool.args[1:]
        out = _as_taps(gm, pool, pool.args[0],
                       lambda t: max_pool2d_values(t, *args, any_device=plan_cpu_as_cuda))
        if out is None:
            continue
        for reader in readers:
            reader.replace_all_uses_with(out)
            gm.graph.erase_node(reader)
        gm.graph.erase_node(pool)
        counts["max"] += 1
    for pool in list(gm.graph.find_nodes(op="call_function", target=aten.avg_pool2d.default)):
        args, kwargs = pool.args[1:], dict(pool.kwargs)
        out = _as_taps(gm, pool, pool.args[0],
                       lambda t: avg_pool2d_values(t, *args, **kwargs, any_device=plan_cpu_as_cuda))
        if out is None:
            continue
        pool.replace_all_uses_with(out)
        gm.graph.erase_node(pool)
        counts["avg"] += 1
    if counts["max"]:
        add_note(gm, f"max pool: {counts['max']} pool(s) whose indices nothing reads as the maximum over "
                     "their window's taps (views, pads and slices a region takes in)")
    if counts["avg"]:
        add_note(gm, f"average pool: {counts['avg']} pool(s) as the sum over their window's taps over ATen's "
                     "divisor (views, pads and slices a region takes in)")
    if counts["max"] or counts["avg"]:
        gm.graph.lint()
        gm.recompile()
    return gm
