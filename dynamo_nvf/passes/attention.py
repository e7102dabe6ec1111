"""Attention pass: explicit `softmax(q @ k^T * scale + mask) @ v` becomes one scaled_dot_product_attention.

Runs on Dynamo's torch-level graph, before aot_autograd, which then traces the SDPA call into ATen's
fused attention ops for forward and backward (flash, memory-efficient or cuDNN on CUDA, flash on
CPU), as inductor's `fuse_attention` pass does for its graphs. The explicit chain writes and reads the
(L, S) score matrix several times (two matmuls around a softmax region); the fused kernels never
materialise it. ATen's SDPA rather than nvFuser's `sdpfa_fwd`/`sdpfa_bwd`: nvFuser runs those through
ATen's flash kernel, so they cannot be faster, and ATen also picks the memory-efficient or cuDNN
kernel where flash does not apply (masks, float32). In float32 training ATen's fused backward is the
memory-efficient kernel, which recomputes the scores on CUDA cores, and inductor keeps the explicit
chain there; keeping it was measured and lost (`python3 -m perf.interleave 'gpt_attention_*' --gpu`,
H100, 2026-11-25: gpt_attention_train_f32, [8, 16, 512, 64], GPU time against inductor's 1.030x with
the chain in cuBLAS and nvFuser regions, 1.013x rewritten), so float32 is rewritten too.

Dynamo spells attention many ways; the matcher follows one softmax at a time through example values
(`node.meta["example_value"]`), not through fixed patterns. A rewrite is made only where SDPA computes
the same function:

* softmax over the last dim; its input is a matmul of q (..., L, E) and a (..., E, S) tensor (a
  transpose of the last two dims of k, stripped, or anything else, transposed back), scaled by Python
  numbers (`*`, `/`, on q, on k or on the scores), then at most one mask: an additive tensor of q's
  dtype, `masked_fill(mask, -inf)` or `where(mask, scores, -inf)` (SDPA's bool mask means keep), then
  casts (an upcast to float32 for the softmax and back, HF style), dropout, and a matmul with v;
* q, k and v of one float dtype (f16, bf16, f32), rank 3 or 4, equal batch dims; no score or
  probability tensor has another user (it would have to be computed anyway); the mask needs no grad;
  nothing changes a tensor in place between the two matmuls (SDPA reads q, k and the mask later).

Known differences, as with inductor's pass: dropout draws its mask from SDPA's RNG, so results are
equal in distribution only (rewritten only where the dropout is active, else it is dropped: `training`
False or p=0 is the identity); a row whose every key is masked is NaN in the explicit softmax and zeros
in SDPA. Everything else leaves the graph as it is; an unexpected error leaves it untouched too.
"""

from __future__ import annotations

import logging
import math
import operator
import warnings
from dataclasses import dataclass, field
from typing import Any, Collection, Optional

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from dynamo_nvf.ops.metadata import same_shape
from dynamo_nvf.ops.metadata import tensor_val as example_tensor
from dynamo_nvf.passes import NOTES_KEY

log = logging.getLogger("dynamo_nvf")

#: gm.meta key: descriptions of what this pass rewrote (or declined to), for explain(); the key every
#: rewriting pass leaves its notes under.
REWRITES_KEY = NOTES_KEY
ATTENTION_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

#: Canonical names of the callables that spell the ops of an attention chain in Dynamo graphs.
_FUNCTIONS: dict[Any, str] = {
    torch.matmul: "matmul", operator.matmul: "matmul", torch.bmm: "matmul",
    torch.softmax: "softmax", torch.special.softmax: "softmax", F.softmax: "softmax",
    operator.mul: "mul", torch.mul: "mul", torch.multiply: "mul",
    operator.truediv: "div", torch.div: "div", torch.divide: "div", torch.true_divide: "div",
    operator.add: "add", torch.add: "add",
    torch.masked_fill: "masked_fill", torch.where: "where",
    F.dropout: "dropout", torch.dropout: "dropout",
    torch.transpose: "transpose", torch.swapaxes: "transpose", torch.swapdims: "transpose",
    torch.permute: "permute",
    operator.invert: "not", torch.logical_not: "not", torch.bitwise_not: "not",
}
_METHODS: dict[str, str] = {
    "matmul": "matmul", "bmm": "matmul", "softmax": "softmax",
    "mul": "mul", "div": "div", "true_divide": "div", "add": "add", "masked_fill": "masked_fill",
    "transpose": "transpose", "swapaxes": "transpose", "swapdims": "transpose", "permute": "permute",
    "to": "cast", "type": "cast", "type_as": "cast", "float": "cast", "half": "cast", "bfloat16": "cast",
    "logical_not": "not", "bitwise_not": "not",
    "reshape": "reshape", "view": "reshape", "flatten": "reshape", "contiguous": "contiguous",
}
#: Positional parameter names, to read node args and kwargs alike.
_SIGNATURES: dict[str, tuple[str, ...]] = {
    "matmul": ("input", "other"), "softmax": ("input", "dim", "dtype"),
    "mul": ("input", "other"), "div": ("input", "other", "rounding_mode"), "add": ("input", "other", "alpha"),
    "masked_fill": ("input", "mask", "value"), "where": ("condition", "input", "other"),
    "transpose": ("input", "dim0", "dim1"), "not": ("input",),
}
_SIGNATURE_OF_FUNCTION: dict[Any, tuple[str, ...]] = {
    F.softmax: ("input", "dim", "_stacklevel", "dtype"),
    F.dropout: ("input", "p", "training", "inplace"),
    torch.dropout: ("input", "p", "training"),
}


class _Reject(Exception):
    """Why a softmax is not rewritten (shown by explain() when the softmax looks like attention)."""


@dataclass
class AttentionMatch:
    """One matched chain and the SDPA call that replaces it."""

    softmax: Node
    output: Node  # the matmul with v, whose users get the SDPA result
    query: Node
    key: Node  # k (..., S, E), or k^T (..., E, S) when `key_needs_transpose`
    key_needs_transpose: bool
    value: Node
    mask: Optional[Node] = None
    mask_not_needed: bool = False  # a bool mask meaning "drop where True": SDPA gets its logical_not
    scale: float = 1.0
    dropout_p: float = 0.0
    rank: int = 4
    contiguous: bool = False  # the output goes where eager's contiguous layout can be observed
    nodes: list[Node] = field(default_factory=list)  # matched nodes, erased when left unused
    description: str = ""

    def describe(self, order: dict[Node, int]) -> str:
        chain = " -> ".join(n.name for n in sorted(self.nodes, key=order.__getitem__) if n is not self.output)
        mask = "None"
        if self.mask is not None:
            mask = f"~{self.mask.name}" if self.mask_not_needed else self.mask.name
        return (f"attention: {chain} -> {self.output.name} became scaled_dot_product_attention("
                f"q={self.query.name}, k={self.key.name}{'.mT' if self.key_needs_transpose else ''}, "
                f"v={self.value.name}, attn_mask={mask}, dropout_p={self.dropout_p:g}, scale={self.scale:.6g})")


def _op(node: Any) -> Optional[str]:
    """The canonical name of a node's callable, or None when it is none of ours."""
    if not isinstance(node, Node):
        return None
    if node.op == "call_method":
        return _METHODS.get(node.target)
    if node.op == "call_function":
        if node.target is getattr and len(node.args) == 2 and node.args[1] == "mT":
            return "mT"
        try:
            return _FUNCTIONS.get(node.target)
        except TypeError:  # an unhashable callable
            return None
    return None


def _bind(node: Node, name: str) -> dict[str, Any]:
    names = _SIGNATURE_OF_FUNCTION.get(node.target) if node.op == "call_function" else None
    names = names or _SIGNATURES[name]
    if len(node.args) > len(names):
        raise _Reject(f"{node.name}: unexpected arguments")
    bound = dict(zip(names, node.args))
    for key, value in node.kwargs.items():
        key = "training" if key == "train" else key
        if key in bound or key not in names:
            raise _Reject(f"{node.name}: unexpected argument {key!r}")
        bound[key] = value
    return bound


def _tensor(node: Any, what: str) -> torch.Tensor:
    value = example_tensor(node)
    if value is None:
        raise _Reject(f"{what} has no tensor example value")
    return value


def _same(a: Any, b: Any) -> bool:
    return statically_known_true(a == b)


def _constant(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _scale_of(node: Node) -> tuple[Node, float]:
    """(the scaled tensor, the factor) of `x * c`, `c * x` or `x / c` with a Python number c."""
    op = _op(node)
    bound = _bind(node, op)
    a, b = bound.get("input"), bound.get("other")
    if op == "div":
        if bound.get("rounding_mode") is not None:
            raise _Reject(f"{node.name}: division with a rounding mode")
        if isinstance(a, Node) and _constant(b) and b != 0:
            return a, 1.0 / b
    elif isinstance(a, Node) and _constant(b) and b != 0:
        return a, float(b)
    elif isinstance(b, Node) and _constant(a) and a != 0:
        return b, float(a)
    raise _Reject(f"{node.name}: the scale is not a constant number")


def _strip_scales(node: Node, scale: float, nodes: list[Node]) -> tuple[Node, float]:
    """Folds `* c` and `/ c` of q or k into the scale (other users of the scaled tensor keep it)."""
    while _op(node) in ("mul", "div"):
        try:
            inner, factor = _scale_of(node)
        except _Reject:
            break
        inner_val, val = example_tensor(inner), example_tensor(node)
        if (inner_val is None or val is None or inner_val.dtype != val.dtype
                or not same_shape(inner_val.shape, val.shape)):
            break
        nodes.append(node)
        node, scale = inner, scale * factor
    return node, scale


def _last_two_swapped(node: Node) -> Optional[Node]:
    """The input of a node that swaps the last two dims (transpose, mT, permute), else None."""
    op = _op(node)
    val = example_tensor(node)
    if val is None or op not in ("transpose", "mT", "permute"):
        return None
    rank = val.dim()
    if op == "mT":
        return node.args[0] if rank >= 2 else None
    if op == "transpose":
        bound = dict(zip(("input", "dim0", "dim1"), node.args))
        bound.update(node.kwargs)
        dims = [bound.get(k, bound.get(a)) for k, a in (("dim0", "axis0"), ("dim1", "axis1"))]
        if all(isinstance(d, int) for d in dims) and sorted(d % rank for d in dims) == [rank - 2, rank - 1]:
            return bound["input"]
        return None
    dims = node.args[1:] if node.op == "call_method" else node.args[1:2]
    if node.op == "call_method" and len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    elif node.op == "call_function":
        dims = dims[0] if dims else node.kwargs.get("dims", ())
    dims = [d % rank for d in dims] if all(isinstance(d, int) for d in dims) else []
    if dims == list(range(rank - 2)) + [rank - 1, rank - 2]:
        return node.args[0]
    return None


def _single_user(node: Node, what: str) -> Node:
    users = list(node.users)
    if len(users) != 1:
        names = ", ".join(u.name for u in users) or "none"
        raise _Reject(f"{what} {node.name} has other users ({names}): it would be computed anyway")
    return users[0]


def _looks_like_attention(softmax: Node, depth: int = 6) -> bool:
    """A matmul among the softmax's near ancestors: worth saying why it was not rewritten."""
    frontier = [softmax]
    for _ in range(depth):
        frontier = list(dict.fromkeys(p for n in frontier for p in n.all_input_nodes))
        if any(_op(n) == "matmul" for n in frontier):
            return True
    return False


# -- matching ----------------------------------------------------------------------------------------


@dataclass
class _Scores:
    """What the walk from the softmax up to the q @ k^T matmul found."""

    matmul: Node
    chain: list[Node]  # softmax input ... matmul's user, softmax side first
    scale: float
    mask: Optional[Node]
    mask_kind: str  # "", "add", "keep" or "drop"


def _walk_scores(node: Node, chain: list[Node], scale: float, mask: Optional[Node], mask_kind: str) -> _Scores:
    """Up from the softmax's input: casts, one mask, scales, then the matmul (recursive for `add`)."""
    op = _op(node)
    if op == "matmul":
        return _Scores(node, chain, scale, mask, mask_kind)
    if op is None:
        raise _Reject(f"the scores come from {node.name} ({node.target}), not from a matmul")
    _single_user(node, "score tensor")
    if op == "cast":
        source = node.args[0]
        if not isinstance(source, Node):
            raise _Reject(f"{node.name}: cast of a non-tensor")
        return _walk_scores(source, chain + [node], scale, mask, mask_kind)
    if op in ("mul", "div"):
        inner, factor = _scale_of(node)
        return _walk_scores(inner, chain + [node], scale * factor, mask, mask_kind)
    if op in ("add", "masked_fill", "where"):
        if mask is not None:
            raise _Reject(f"{node.name}: a second mask")
        scale_before = scale  # the factors found so far are applied after this mask
        if op == "add":
            bound = _bind(node, "add")
            if bound.get("alpha", 1) != 1:
                raise _Reject(f"{node.name}: add with alpha")
            errors = []
            for chain_arg, mask_arg in ((bound.get("input"), bound.get("other")),
                                        (bound.get("other"), bound.get("input"))):
                if not isinstance(chain_arg, Node) or not isinstance(mask_arg, Node):
                    continue
                try:
                    result = _walk_scores(chain_arg, chain + [node], 1.0, mask_arg, "add")
                except _Reject as exc:
                    errors.append(str(exc))
                    continue
                return _with_mask_scale(result, scale_before, node)
            raise _Reject(errors[0] if errors else f"{node.name}: adds a non-tensor to the scores")
        bound = _bind(node, op)
        if op == "masked_fill":
            source, cond, fill, kind = bound.get("input"), bound.get("mask"), bound.get("value"), "drop"
        else:
            cond = bound.get("condition")
            if bound.get("other") == -math.inf:
                source, fill, kind = bound.get("input"), -math.inf, "keep"
            else:
                source, fill, kind = bound.get("other"), bound.get("input"), "drop"
        if not (isinstance(fill, float) and fill == -math.inf):
            raise _Reject(f"{node.name}: the masked value is {fill!r}, not -inf")
        if not isinstance(source, Node) or not isinstance(cond, Node):
            raise _Reject(f"{node.name}: mask or scores are not tensors")
        result = _walk_scores(source, chain + [node], 1.0, cond, kind)
        return _with_mask_scale(result, scale_before, node)
    raise _Reject(f"the scores pass through {node.name} ({op}), which SDPA does not compute")


def _with_mask_scale(result: _Scores, scale_after_mask: float, mask_node: Node) -> _Scores:
    """Factors applied after the mask: fine for a -inf mask when positive, never for an additive one."""
    if scale_after_mask != 1.0 and (result.mask_kind == "add" or scale_after_mask <= 0):
        raise _Reject(f"{mask_node.name}: the scores are scaled after the mask")
    result.scale *= scale_after_mask
    return result


def _match_softmax(softmax: Node) -> AttentionMatch:
    name = _op(softmax)
    bound = _bind(softmax, name)
    source, dim, dtype = bound.get("input"), bound.get("dim"), bound.get("dtype")
    scores_in = _tensor(source, "the softmax input")
    if not isinstance(dim, int) or dim % max(scores_in.dim(), 1) != scores_in.dim() - 1:
        raise _Reject(f"{softmax.name}: softmax over dim {dim}, not the last")
    if dtype not in (None, torch.float32, scores_in.dtype):
        raise _Reject(f"{softmax.name}: softmax to {dtype}")

    walk = _walk_scores(source, [], 1.0, None, "")
    matmul = walk.matmul
    _single_user(matmul, "score tensor")
    mm = _bind(matmul, "matmul")
    nodes = [softmax, matmul, *walk.chain]
    query, scale = _strip_scales(mm["input"], walk.scale, nodes)
    kt, scale = _strip_scales(mm["other"], scale, nodes)
    key = _last_two_swapped(kt)
    transposed = key is None
    if key is None:
        key = kt
    else:
        nodes.append(kt)
        key, scale = _strip_scales(key, scale, nodes)

    # Down from the softmax: casts and dropout, then the matmul with v.
    node, dropout_p = softmax, 0.0
    while True:
        user = _single_user(node, "probability tensor")
        op = _op(user)
        if op == "cast":
            if user.args[0] is not node:
                raise _Reject(f"{user.name}: casts another tensor to the probabilities' type")
        elif op == "dropout":
            d = _bind(user, "dropout")
            if d.get("input") is not node:
                raise _Reject(f"{user.name}: unexpected dropout arguments")
            p, training, inplace = d.get("p", 0.5), d.get("training", True), d.get("inplace", False)
            if not _constant(p) or not isinstance(training, bool) or inplace is not False or not 0 <= p < 1:
                raise _Reject(f"{user.name}: dropout with p={p!r}, training={training!r}, inplace={inplace!r}")
            if training and p > 0:
                if dropout_p:
                    raise _Reject(f"{user.name}: a second dropout")
                dropout_p = float(p)
        elif op == "matmul":
            pv = _bind(user, "matmul")
            if pv.get("input") is not node:
                raise _Reject(f"{user.name}: the probabilities are the right operand of the matmul")
            output, value = user, pv.get("other")
            break
        else:
            raise _Reject(f"the probabilities feed {user.name} ({user.target}), not a matmul with v")
        nodes.append(user)
        node = user
    nodes.append(output)

    match = AttentionMatch(softmax=softmax, output=output, query=query, key=key, key_needs_transpose=transposed,
                           value=value, scale=scale, dropout_p=dropout_p, nodes=nodes)
    _check_values(match, walk)
    return match


def _check_values(match: AttentionMatch, walk: _Scores) -> None:
    """Dtypes, shapes and devices under which SDPA computes what the chain computes."""
    q = _tensor(match.query, "q")
    k = _tensor(match.key, "k")
    v = _tensor(match.value, "v")
    k_shape = list(k.shape)
    if match.key_needs_transpose and len(k_shape) >= 2:
        k_shape[-2:] = k_shape[:-3:-1]
    scores = _tensor(walk.matmul, "the scores")
    out = _tensor(match.output, "the output")
    dtype = q.dtype
    if dtype not in ATTENTION_DTYPES:
        raise _Reject(f"q is {dtype}, not one of {[str(d) for d in ATTENTION_DTYPES]}")
    if k.dtype != dtype or v.dtype != dtype or scores.dtype != dtype or out.dtype != dtype:
        raise _Reject(f"q, k, v or the output differ in dtype ({dtype}, {k.dtype}, {v.dtype}, {out.dtype})")
    if not (q.device == k.device == v.device):
        raise _Reject("q, k and v are on different devices")
    if q.device.type not in ("cpu", "cuda"):
        raise _Reject(f"device {q.device.type}")
    rank = q.dim()
    shapes = f"q {tuple(q.shape)}, k {tuple(k_shape)}, v {tuple(v.shape)}"
    if rank not in (3, 4) or len(k_shape) != rank or v.dim() != rank:
        raise _Reject(f"ranks of {shapes} (rank 3 or 4 needed)")
    if not all(_same(a, b) and _same(a, c) for a, b, c in zip(q.shape[:-2], k_shape[:-2], v.shape[:-2])):
        raise _Reject(f"batch dims differ: {shapes}")
    if not (_same(q.shape[-1], k_shape[-1]) and _same(k_shape[-2], v.shape[-2])):
        raise _Reject(f"shapes do not chain: {shapes}")
    if not scores.is_contiguous() or not out.is_contiguous():
        raise _Reject("the matmuls' results are not contiguous")
    # Every score node keeps the score shape (a mask never broadcasts it) and q's dtype, or float32
    # from an upcast on (nearest the softmax); the probabilities are q's dtype or float32.
    upcast = False
    for n in reversed(walk.chain):  # matmul side first
        val = _tensor(n, n.name)
        if not same_shape(val.shape, scores.shape) or val.device != q.device:
            raise _Reject(f"{n.name}: changes the scores' shape or device")
        if val.dtype == torch.float32 and dtype != torch.float32:
            upcast = True
        elif val.dtype != dtype or upcast:
            raise _Reject(f"{n.name}: computes the scores in {val.dtype}")
    for n in match.nodes:
        if n in walk.chain or n is walk.matmul or n is match.output:
            continue
        val = example_tensor(n)
        if n is match.softmax or _op(n) in ("cast", "dropout"):
            if (val is None or not same_shape(val.shape, scores.shape) or val.dtype not in (dtype, torch.float32)
                    or val.device != q.device):
                raise _Reject(f"{n.name}: computes the probabilities in another shape or dtype")
    if walk.mask is not None:
        mask = _tensor(walk.mask, "the mask")
        if mask.requires_grad:
            raise _Reject("the mask requires grad")
        if mask.device != q.device or mask.dim() > rank:
            raise _Reject("the mask's device or rank")
        if walk.mask_kind == "add":
            mask_node = next(n for n in walk.chain if _op(n) == "add")
            if mask.dtype != dtype or _tensor(mask_node, "the masked scores").dtype != dtype:
                raise _Reject(f"additive mask of {mask.dtype} on {dtype} scores")
        elif mask.dtype != torch.bool:
            raise _Reject(f"masked by a {mask.dtype} tensor, not bool")
        match.mask = walk.mask
        if walk.mask_kind == "drop":
            # masked_fill(~keep, -inf): SDPA takes `keep` itself.
            inner = walk.mask.args[0] if _op(walk.mask) == "not" and walk.mask.args else None
            if isinstance(inner, Node) and example_tensor(inner) is not None and example_tensor(inner).dtype == torch.bool:
                match.nodes.append(walk.mask)
                match.mask = inner
            else:
                match.mask_not_needed = True
    match.rank = rank
    match.contiguous = rank == 3 or not _layout_unobservable(match.output)


def _layout_unobservable(output: Node) -> bool:
    """True for the usual `out.transpose(1, 2).reshape(b, s, d)`: SDPA's own layout gives the same result.

    Eager's matmul returns a contiguous (B, H, L, E) tensor; SDPA's kernels return (B, L, H, E) memory.
    After the transpose and a reshape (or contiguous) that merges heads, both are contiguous; anywhere
    else the layout could be seen (an output, a view), so the rewrite appends `.contiguous()`.
    """
    for user in output.users:
        if _op(user) not in ("transpose", "permute"):
            return False
        val = example_tensor(user)
        if val is None or val.dim() != 4 or not _swaps_heads(user):
            return False
        for consumer in user.users:
            op, cval = _op(consumer), example_tensor(consumer)
            if op == "contiguous" and cval is not None:
                continue
            if op != "reshape" or cval is None or cval.dim() >= 4:
                return False
    return True


def _swaps_heads(node: Node) -> bool:
    args = node.args[1:]
    if _op(node) == "permute":
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = args[0]
        return [a % 4 if isinstance(a, int) else a for a in args] == [0, 2, 1, 3]
    dims = list(args) + [node.kwargs[k] for k in ("dim0", "dim1") if k in node.kwargs]
    return len(dims) == 2 and all(isinstance(d, int) for d in dims) and sorted(d % 4 for d in dims) == [1, 2]


_INPLACE_OPERATORS = frozenset({
    operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
    operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
    operator.ilshift, operator.irshift,
})


def may_mutate(node: Node) -> bool:
    """An in-place op (or a module call, which could hold one)."""
    if node.op == "call_module":
        return True
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.startswith("_")
    if node.op == "call_function":
        try:
            if node.target in _INPLACE_OPERATORS:
                return True
        except TypeError:
            return True
        name = getattr(node.target, "__name__", "")
        return name.endswith("_") and not name.startswith("_")
    return False


def first_mutation(inside: Collection[Node], end: Node, nodes: list[Node], order: dict[Node, int]) -> Optional[Node]:
    """The first op other than `inside`'s own that may change a tensor in place between the earliest
    node of `inside` and `end` (`nodes` in graph order, `order` their positions), or None."""
    for node in nodes[min(order[n] for n in inside):order[end]]:
        if node not in inside and may_mutate(node):
            return node
    return None


def _check_no_mutation(match: AttentionMatch, nodes: list[Node], order: dict[Node, int]) -> None:
    """SDPA reads q, k and the mask where the matmul with v was: nothing may change them in between."""
    node = first_mutation(match.nodes, match.output, nodes, order)
    if node is not None:
        raise _Reject(f"{node.name} may change a tensor in place between the two matmuls")


def find_attention(gm: GraphModule) -> tuple[list[AttentionMatch], list[str]]:
    """The chains to rewrite, and why attention-like softmaxes were left alone. Reads, never writes."""
    matches: list[AttentionMatch] = []
    skipped: list[str] = []
    softmaxes = [n for n in gm.graph.nodes if _op(n) == "softmax"]
    nodes = list(gm.graph.nodes) if softmaxes else []
    order = {n: i for i, n in enumerate(nodes)}
    for node in softmaxes:
        try:
            match = _match_softmax(node)
            _check_no_mutation(match, nodes, order)
            match.description = match.describe(order)
            matches.append(match)
        except _Reject as exc:
            log.debug("dynamo_nvf: attention around %s not rewritten: %s", node.name, exc)
            if _looks_like_attention(node):
                skipped.append(f"attention around {node.name} not rewritten: {exc}")
    return matches, skipped


# -- rewriting ---------------------------------------------------------------------------------------


def _copy_meta(new: Node, old: Node) -> None:
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
        if key in old.meta:
            new.meta[key] = old.meta[key]


def _rewrite(gm: GraphModule, matches: list[AttentionMatch]) -> None:
    """Replaces each match by one SDPA call, in place; an error undoes everything before re-raising.

    In place because Dynamo's graph carries attributes on its nodes (`_dynamo_source` on placeholders)
    that aot_autograd reads and a graph copy would lose. Inserting nodes and redirecting uses is
    undone on error; the matched nodes are erased only after that has succeeded (then they are dead).
    """
    graph = gm.graph
    inserted: list[Node] = []
    redirected: list[tuple[Node, Any, Any]] = []  # (user, its args, its kwargs) before the rewrite
    replaced: dict[Node, Node] = {}  # an earlier match's output -> its SDPA result

    def new(node: Optional[Node]) -> Optional[Node]:
        return None if node is None else replaced.get(node, node)

    def call(op: str, target: Any, args: tuple, kwargs: Optional[dict] = None) -> Node:
        node = graph.create_node(op, target, args, kwargs or {})
        inserted.append(node)
        return node

    try:
        for match in matches:
            output = match.output
            q, key, v, mask = new(match.query), new(match.key), new(match.value), new(match.mask)
            with graph.inserting_before(output):
                if match.key_needs_transpose:
                    key = call("call_method", "transpose", (key, -2, -1))
                if mask is not None and match.mask_not_needed:
                    mask = call("call_function", torch.logical_not, (mask,))
                if match.rank == 3:
                    q, key, v = (call("call_method", "unsqueeze", (t, 0)) for t in (q, key, v))
                result = call("call_function", F.scaled_dot_product_attention, (q, key, v),
                              {"attn_mask": mask, "dropout_p": match.dropout_p, "is_causal": False,
                               "scale": match.scale})
                _copy_meta(result, output)
                if match.rank == 3:
                    result = call("call_method", "squeeze", (result, 0))
                if match.contiguous:
                    result = call("call_method", "contiguous", (result,))
            redirected.extend((user, user.args, user.kwargs) for user in output.users)
            output.replace_all_uses_with(result)
            replaced[output] = result
        graph.lint()
    except Exception:
        for user, args, kwargs in reversed(redirected):
            user.args, user.kwargs = args, kwargs
        for node in reversed(inserted):
            graph.erase_node(node)
        gm.recompile()
        raise
    order = {n: i for i, n in enumerate(graph.nodes)}
    dead = {n for match in matches for n in match.nodes}
    for node in sorted(dead, key=order.__getitem__, reverse=True):
        if not node.users:
            graph.erase_node(node)
    gm.recompile()


def fuse_attention(gm: GraphModule, *, strict: bool = False) -> GraphModule:
    """Rewrites explicit attention chains of a Dynamo graph into SDPA calls; records them in gm.meta.

    Never breaks a program: an unexpected error leaves the graph as it was, with one warning (raised
    instead with `strict`). Graphs without a softmax cost one scan.
    """
    try:
        matches, skipped = find_attention(gm)
        if matches:
            _rewrite(gm, matches)
    except Exception as exc:
        if strict:
            raise
        error = f"{type(exc).__name__}: {exc}"
        log.debug("dynamo_nvf: attention rewrite failed", exc_info=True)
        warnings.warn(f"dynamo_nvf: attention rewrite failed, the graph is left as it was: {error}",
                      RuntimeWarning, stacklevel=2)
        gm.meta[REWRITES_KEY] = [f"attention rewrite failed, graph left as it was: {error}"]
        return gm
    gm.meta[REWRITES_KEY] = [m.description for m in matches] + skipped
    for match in matches:
        log.info("dynamo_nvf: %s", match.description)
    return gm
