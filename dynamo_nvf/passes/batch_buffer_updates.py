"""Buffer updates in one launch: the `copy_`s that write a graph's new buffer values back into its
inputs (aot_autograd keeps input mutations in the graph) become one `_foreach_copy_` per device and
dtype pair, and a counter's `copy_(t, t + 1)` one `_foreach_add_` per device, dtype and step.

Why: each BatchNorm in training writes three buffers (running mean, running variance,
num_batches_tracked), each copy a kernel launch of its own: 159 per ResNet-50 training step, on a
host-bound step. The counter's `t + 1` also sat in the BatchNorm's region, where nvFuser gave the
0-dim integer add a kernel of its own (a `nvfuser_no_op` segment) in every such region. Inductor writes
the buffers inside its kernels. A foreach op writes every tensor of its lists in one multi-tensor
kernel where PyTorch's fast path takes them (same device and dtype), else one by one: never more work
than before.

Which copies: `copy_(dst, src)` with `dst` a graph input, its result unused, of `src`'s shape and
device, and after every other reader of `dst` (the epilogue aot_autograd writes), so moving it to the
end of the graph changes no value read (through a view either); none where two copies write one
storage, one reads what another writes, or another `copy_` stays in the graph. A counter is
`add(dst, number)` read by its copy alone, of a floating or int64 `dst` (the foreach add range-checks
its step where add wraps).

Pure: GraphModule in, GraphModule out (before partitioning, so a counter's add never joins a region).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Optional

import torch
from torch.fx import GraphModule, Node
from torch.multiprocessing.reductions import StorageWeakRef

from dynamo_nvf.ops.metadata import is_metadata, tensor_val
from dynamo_nvf.passes import add_note

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten

#: The ops this pass writes (explain() lists them as eager nodes, the graph's buffer updates).
FOREACH_COPY, FOREACH_ADD = aten._foreach_copy_.default, aten._foreach_add_.Scalar
UPDATE_OPS = (FOREACH_COPY, FOREACH_ADD)

NOTE = ("buffer updates: {copies} copy_(s) as {copy_calls} _foreach_copy_, {counters} counter(s) as {add_calls} "
        "_foreach_add_")


def _epilogue_copy(node: Node, order: dict[Node, int]) -> bool:
    """Whether a `copy_` node writes a graph input that nothing reads after it (module docstring)."""
    if node.users or len(node.args) != 2 or node.kwargs.get("non_blocking", False):
        return False
    dst, src = node.args
    if not isinstance(dst, Node) or dst.op != "placeholder" or not isinstance(src, Node):
        return False
    dst_val, src_val = tensor_val(dst), tensor_val(src)
    if dst_val is None or src_val is None or dst_val.shape != src_val.shape or dst_val.device != src_val.device:
        return False
    return all(order[reader] <= order[node] for reader in _readers(dst))


def _readers(node: Node) -> list[Node]:
    """The nodes that read `node`'s storage: its users, and through views the users of those."""
    readers, pending = [], list(node.users)
    while pending:
        user = pending.pop()
        readers.append(user)
        if is_metadata(user):
            pending.extend(user.users)
    return readers


def _counter_step(copy: Node) -> Optional[Any]:
    """The number a counter update `copy_(dst, add(dst, number))` adds, or None for any other copy."""
    dst, src = copy.args
    if src.op != "call_function" or src.target is not aten.add.Tensor or src.kwargs or len(src.users) != 1:
        return None
    if len(src.args) != 2 or src.args[0] is not dst or isinstance(src.args[1], bool):
        return None
    step = src.args[1]
    dst_val, src_val = tensor_val(dst), tensor_val(src)
    if not isinstance(step, (int, float)) or dst_val.dtype != src_val.dtype:
        return None
    # the foreach add converts its step to the tensors' type with a range check (CUDA) where add wraps
    if dst_val.dtype.is_floating_point or (dst_val.dtype == torch.int64 and isinstance(step, int)
                                           and abs(step) < 2**62):
        return step
    return None


def _aliased(copies: list[Node]) -> bool:
    """True when two copies write one storage, or one reads what another writes: their order would
    matter, and a foreach op writes its list at once."""
    written = [StorageWeakRef(tensor_val(copy.args[0]).untyped_storage()) for copy in copies]
    read = {StorageWeakRef(tensor_val(copy.args[1]).untyped_storage()) for copy in copies}
    return len(set(written)) != len(written) or bool(set(written) & read)


def batch_buffer_updates(gm: GraphModule) -> GraphModule:
    """Gathers a graph's epilogue buffer copies into foreach ops (module docstring)."""
    graph = gm.graph
    order = {node: index for index, node in enumerate(graph.nodes)}
    every_copy = [node for node in graph.nodes if node.op == "call_function" and node.target is aten.copy_.default]
    copies = [node for node in every_copy if _epilogue_copy(node, order)]
    if len(copies) < 2 or len(copies) != len(every_copy) or _aliased(copies):
        return gm  # a copy that stays in place might be ordered against a moved one
    adds: dict[tuple, list[Node]] = defaultdict(list)
    writes: dict[tuple, list[tuple[Node, Node]]] = defaultdict(list)
    counter_adds: list[Node] = []
    for copy in copies:
        dst, src = copy.args
        dst_val, src_val = tensor_val(dst), tensor_val(src)
        step = _counter_step(copy)
        if step is not None:
            adds[(dst_val.device, dst_val.dtype, type(step), step)].append(dst)
            counter_adds.append(src)
        else:
            writes[(dst_val.device, dst_val.dtype, src_val.dtype)].append((dst, src))
    output = next(node for node in reversed(graph.nodes) if node.op == "output")
    with graph.inserting_before(output):
        for (_, _, _, step), dsts in adds.items():
            graph.call_function(FOREACH_ADD, (dsts, step)).meta["val"] = None
        for pairs in writes.values():
            graph.call_function(FOREACH_COPY, ([d for d, _ in pairs], [s for _, s in pairs])).meta["val"] = None
    for copy in copies:
        graph.erase_node(copy)
    for add in counter_adds:
        graph.erase_node(add)
    counters = len(counter_adds)
    add_note(gm, NOTE.format(copies=len(copies) - counters, copy_calls=len(writes), counters=counters,
                             add_calls=len(adds)))
    graph.lint()
    gm.recompile()
    log.debug("dynamo_nvf: %d buffer copies batched into %d foreach op(s)", len(copies), len(writes) + len(adds))
    return gm
