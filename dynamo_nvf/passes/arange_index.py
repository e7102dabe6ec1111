"""Indexing by whole aranges is a view: `t[arange(B)[:, None, None, None], arange(S)[None, None, :, None]]`
is `t.view(B, 1, S, 1)`.

Why: transformers' attention masks (masking_utils) index the padding mask and the packed-sequence ids
by the batch, query and key aranges (`padding_mask[batch_idx, kv_idx]`), which aot_autograd records
as `aten.index.Tensor`: a gather nvFuser has no lowering for, so each ran as an ATen kernel and cut
the mask's pointwise ops into separate regions (a CPU plan of HF LLaMA's inference graph: two
`index` calls between three regions; BERT's: one). As views, the mask is one region's broadcasts,
as inductor's indexing makes it.

Exact where it applies: every index tensor is a whole `arange(n)` (start 0, step 1, `n` the size of
the dim it indexes, static; an added 0 allowed: transformers' `kv_arange + kv_offset`) given size-1
dims by unsqueezes or views, each indexing the tensor's next dim, with its one dim of size `n` at
increasing positions, so the result element at (.., j, .., k, ..) is t[j, k, ...]: the tensor with
size-1 dims inserted. Eager's result is a tensor of its own and the view aliases its source, so only
where nobody can tell: the source is computed in the graph (not an input or an alias of one, whose
later in-place change a saved view would see), and neither the index nor an alias of it (a view, a
`diagonal`, an `unfold`) is returned. Not where anything is symbolic (a dynamic-shape graph keeps its
`aten.index`).

Pure: GraphModule in, GraphModule out (before partitioning).
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf.ops.metadata import may_alias_its_input, tensor_val, whole_arange_length
from dynamo_nvf.passes import add_note, call_like

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

INDEXES = frozenset({aten.index.Tensor, aten._unsafe_index.Tensor})
#: Ops that give a vector size-1 dims as a view does.
_UNSQUEEZES = frozenset({aten.unsqueeze.default, aten.view.default, aten._unsafe_view.default, aten.reshape.default})

NOTE = "index {name}: by whole aranges, a view of {source} (arange_index)"


def _whole_arange(node: object) -> Optional[int]:
    """n where `node` is arange(n) (start 0, step 1, static), or arange(n) + 0; else None."""
    if isinstance(node, Node) and node.op == "call_function" and node.target in (aten.add.Tensor, aten.add.Scalar):
        if len(node.args) == 2 and node.args[1] == 0 and node.kwargs.get("alpha", 1) == 1:
            node = node.args[0]
        else:
            return None
    return whole_arange_length(node)


def _iota_position(index: object) -> Optional[tuple[Optional[int], int]]:
    """(position, n) of a whole arange(n) given size-1 dims, in the index tensor's shape (position
    None where n is 1: any); else None."""
    node = index
    while isinstance(node, Node) and node.op == "call_function" and node.target in _UNSQUEEZES:
        node = node.args[0]
    n = _whole_arange(node)
    val = tensor_val(index)
    if n is None or val is None or not all(isinstance(s, int) for s in val.shape):
        return None
    big = [d for d, s in enumerate(val.shape) if s != 1]
    if n == 1 and not big:
        return None, 1
    if len(big) != 1 or val.shape[big[0]] != n:
        return None
    return big[0], n


def _view_shape(node: Node) -> Optional[list[int]]:
    """The shape `node` (an index by aranges) equals its source viewed as, or None."""
    source, indices = node.args[0], node.args[1]
    src, out = tensor_val(source), tensor_val(node)
    if src is None or out is None or not isinstance(indices, (list, tuple)) or not indices:
        return None
    if any(i is None for i in indices) or len(indices) > src.dim():
        return None
    if not all(isinstance(s, int) for s in (*src.shape, *out.shape)):
        return None
    rank = max(tensor_val(i).dim() if isinstance(i, Node) and tensor_val(i) is not None else -1 for i in indices)
    shape = [1] * rank
    last = -1
    for dim, index in enumerate(indices):
        found = _iota_position(index)
        if found is None or tensor_val(index).dim() != rank:
            return None
        position, n = found
        if n != src.shape[dim]:
            return None
        if position is not None:
            if position <= last:
                return None
            shape[position], last = n, position
    shape += list(src.shape[len(indices):])
    return shape if shape == list(out.shape) else None


def _views_reach(node: Node, targets: set[Node]) -> bool:
    """Whether `node`, or an alias of it (through any chain of aliasing ops: views, and `diagonal`,
    `unfold` or `view.dtype`, which METADATA_OPS does not list), is among `targets`."""
    return node in targets or any(may_alias_its_input(u) and _views_reach(u, targets) for u in node.users)


def _of_an_input(node: Node) -> bool:
    """Whether `node` is a graph input or an alias of one (through any chain of aliasing ops)."""
    while may_alias_its_input(node) and node.args and isinstance(node.args[0], Node):
        node = node.args[0]
    return node.op == "placeholder"


def index_by_aranges_as_views(gm: GraphModule) -> GraphModule:
    """Rewrites each index by whole aranges as a view of its source (module docstring)."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    returned = set(output.all_input_nodes)
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in INDEXES:
            continue
        source = node.args[0]
        if not isinstance(source, Node) or _of_an_input(source) or _views_reach(node, returned):
            continue  # its view would alias an input, or come back to the caller as one
        shape = _view_shape(node)
        mode = getattr(tensor_val(node), "fake_mode", None)
        if shape is None or mode is None:
            continue
        with gm.graph.inserting_before(node):
            view = call_like(gm, aten.view.default, (node.args[0], shape), node, mode)
        add_note(gm, NOTE.format(name=node.name, source=node.args[0].name))
        node.replace_all_uses_with(view)
        gm.graph.erase_node(node)
        rewritten += 1
    if rewritten:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
        log.debug("dynamo_nvf: %d index(es) by aranges made views", rewritten)
    return gm
