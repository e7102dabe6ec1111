"""A region's fusion key: equal keys mean the same nvFuser definition for the same inputs.

The key hashes a canonical text of the region's FX graph: each node's op, target, arguments (other
nodes by position, not by name) and the dtype, sizes and strides of its traced value, which is what
the lowerings read. Identical blocks of a model (a ViT's 12 layers), a block seen in forward and in
backward, or the same program compiled again therefore get equal keys, and the runtime compiles
their fusion once (`runtime.fusion_cache`). explain() shows the key of each region.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.context import SEGMENT_INPUTS_KEY
from dynamo_nvf.ops.registry import op_name


def _canonical(value: Any, position: dict[Node, int]) -> str:
    if isinstance(value, Node):
        return f"%{position[value]}"
    if isinstance(value, (list, tuple)):
        inner = ",".join(_canonical(v, position) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={_canonical(v, position)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, float):
        return repr(value)  # exact, and distinguishes 1 from 1.0
    if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return str(value)
    return f"{type(value).__name__}:{value}"


def _value(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        return f"{val.dtype}{list(val.shape)}/{list(val.stride())}@{val.device.type}"
    if isinstance(val, (list, tuple)):
        return "(" + ",".join(_value(v) for v in val) + ")"
    return type(val).__name__


def region_fusion_key(region: GraphModule) -> str:
    """16 hex digits identifying the region's computation (see the module docstring)."""
    position: dict[Node, int] = {}
    lines = []
    for i, node in enumerate(region.graph.nodes):
        position[node] = i
        target = op_name(node.target) if node.op == "call_function" else str(node.op)
        lines.append("|".join((node.op, target, _canonical(node.args, position),
                               _canonical(dict(node.kwargs), position), _value(node.meta.get("val")))))
        if node.meta.get(SEGMENT_INPUTS_KEY):  # lowered with a kernel boundary in front of it
            lines[-1] += "|segment"
    return hashlib.sha1("\n".join(lines).encode()).hexdigest()[:16]
