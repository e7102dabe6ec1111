"""Which regions define their tensor inputs with concrete sizes: the `static_resize_sizes` setting.

Why: regions are defined with symbolic sizes (`lowering.py`), so one definition serves every size. In
fusions that resize (pad, slice, cat; `lowers_to_resize`) values computed from inputs with symbolic extents, nvFuser
0.2.36's resize scheduler can fail to compile: RoPE's backward in an f32 LLaMA-style training step
stopped with "Expected id0->extent()->sameAs(id1->extent()). Invalid domains to map" (csrc/fusion.cpp,
the exact mappings the loop-domain scheduler registers), and ran in eager. With concrete sizes every
extent is a constant, which such a check compares equal.

Cost: such a definition serves one set of input sizes; a call with other sizes builds and compiles
another (the region's cache holds `fusion_cache_size` of them), where a symbolic one would have run.
"""

from __future__ import annotations

from torch.fx import GraphModule

from dynamo_nvf.ops.lowerings import lowers_to_resize
from dynamo_nvf.ops.registry import op_name


def resizing_ops(region: GraphModule) -> list[str]:
    """The names of the region's resize ops, each once, in graph order."""
    names: list[str] = []
    for node in region.graph.nodes:
        if lowers_to_resize(node) and op_name(node.target) not in names:
            names.append(op_name(node.target))
    return names


def region_static_sizes(region: GraphModule, enabled: bool) -> tuple[bool, str]:
    """(concrete sizes, why) for a region: concrete where `enabled` and the region resizes; the reason
    is empty for a region defined symbolically (explain() then says nothing)."""
    if not enabled:
        return False, ""
    ops = resizing_ops(region)
    if not ops:
        return False, ""
    return True, (f"concrete input sizes (static_resize_sizes; it resizes: {', '.join(ops)}): "
                  "one definition per set of input sizes")
