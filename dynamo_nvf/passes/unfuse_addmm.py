"""Unfuse a float32 linear's bias: `addmm(bias, a, b)` becomes `mm(a, b) + bias` where every use of the
result is pointwise, so the bias add joins the nvFuser region of what follows (a GELU, a residual).

Why: this is inductor's `unfuse_bias_add_to_pointwise` (torch/_inductor/fx_passes/post_grad.py), with
its rule: GPU only, every use pointwise (through views), and half/bfloat16 addmms kept fused
(`keep_addmm_fused_for_half_dtypes`: an extra rounding of the matmul's output before the add). The
kernels are then the ones inductor runs: cuBLAS picks its GEMM for `mm` without a bias epilogue, and
the add costs nothing in a pointwise kernel that runs anyway. On an H100 the GPT-2-style MLP block in
float32 (perf `gpt_mlp_fwd_f32`) was the one forward block over inductor's GPU time with addmm kept.
The numbers are the same: float32 accumulates the product and adds the bias in float32 either way
(cuBLAS's epilogue adds it to the accumulator; here the rounded product is added, as inductor does).

Pure: GraphModule in (aot_autograd's aten graph, before partitioning), GraphModule out.
"""

from __future__ import annotations

import operator
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import is_metadata
from dynamo_nvf.ops.lowerings import is_pointwise
from dynamo_nvf.passes import add_note, call_like

aten = torch.ops.aten

#: The note explain() shows for each rewritten addmm (graph plan's `rewrites`).
NOTE = "addmm {name}: bias add moved out of the matmul into the pointwise region that reads it (float32)"
#: Dtypes whose addmm is unfused; half and bfloat16 stay fused, as in inductor.
UNFUSED_DTYPES = frozenset({torch.float32, torch.float64})


def _pointwise_use(node: Node) -> bool:
    """True when `node` is a pointwise op nvFuser lowers, or a view all of whose uses are."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem or is_metadata(node):
        return bool(node.users) and all(_pointwise_use(u) for u in node.users)
    return is_pointwise(node)


def _unfusable(node: Node, on_cuda: bool) -> Optional[tuple[Node, Node, Node]]:
    """(bias, mat1, mat2) of an addmm this pass rewrites, else None."""
    if node.op != "call_function" or node.target is not aten.addmm.default or len(node.args) != 3:
        return None
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        return None
    bias, mat1, mat2 = node.args
    if not all(isinstance(a, Node) for a in (bias, mat1, mat2)):
        return None
    val = node.meta.get("val")
    bias_val = bias.meta.get("val")
    if not isinstance(val, torch.Tensor) or not isinstance(bias_val, torch.Tensor) \
            or getattr(val, "fake_mode", None) is None:
        return None
    if val.dtype not in UNFUSED_DTYPES or bias_val.dtype != val.dtype:
        return None
    if not (val.device.type == "cuda" or on_cuda):
        return None
    if not node.users or not all(_pointwise_use(u) for u in node.users):
        return None
    return bias, mat1, mat2


def unfuse_addmm_bias(gm: GraphModule, plan_cpu_as_cuda: bool = False) -> GraphModule:
    """Rewrites each addmm whose uses are all pointwise into mm plus add, with a note for the plan."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        found = _unfusable(node, plan_cpu_as_cuda)
        if found is None:
            continue
        bias, mat1, mat2 = found
        mode = node.meta["val"].fake_mode
        with gm.graph.inserting_before(node):
            product = call_like(gm, aten.mm.default, (mat1, mat2), node, mode)
            total = call_like(gm, aten.add.Tensor, (product, bias), node, mode)
        node.replace_all_uses_with(total)
        gm.graph.erase_node(node)
        add_note(gm, NOTE.format(name=node.name))
        rewritten += 1
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return gm
