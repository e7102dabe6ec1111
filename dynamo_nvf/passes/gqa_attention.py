"""Grouped-query attention pass: SDPA over repeated K/V heads reads K/V as they are, with `enable_gqa`.

LLaMA-style code repeats each key/value head `n_rep` times before attention (`repeat_kv`:
`x[:, :, None].expand(b, h_kv, n_rep, s, d).reshape(b, h_kv * n_rep, s, d)`, or
`repeat_interleave(x, n_rep, dim=1)`), which writes K and V `n_rep` times over and, in training, sums
their gradients back. `scaled_dot_product_attention(..., enable_gqa=True)` takes the unrepeated heads
(query head h reads key/value head h // n_rep, the repeat's own order), so the copies and their
backward go away. Measured on an H100 (2026-11-24, side by side with perf backend nvf_repeat_kv,
which keeps the repeats): the LLaMA-style bf16 inference step 0.884x the step time (perf.interleave,
5 rounds, 0.834x to 0.917x), 92.5 against 95.0 us of GPU time and 31 against 33 kernels
(scripts/block_kernels.py); training unchanged (323.7 against 324.5 us of GPU time, step 0.98x within
noise): cuDNN reduces dK/dV over the groups itself (fmha_reduce_head, 7 us a step), about what the
repeat's gradient sums cost. Every training gradient within bound (perf.grad_check).
scripts/repros/sdpa_gqa.py at commit 2828583 timed single calls (events after a ~0.1 ms GPU spin, so host time past the
spin counts too): results equal, enable_gqa faster at every bf16 shape tried, and in float32 SDPA's
math kernel (6632 against 1930 us forward at b8 h32 s1024 d128).

Runs on Dynamo's graph, before aot_autograd and after the attention pass (whose SDPA calls it sees
too). A call is rewritten only where:
* its key and value are both the repeat of a tensor over one head dim (dim -3) by the same `n_rep`,
  checked on example values (shapes), not only op names, and the query has `h_kv * n_rep` heads;
* the repeated tensors are read by nothing else (else they are written anyway);
* q, k and v are float16 or bfloat16: the fused kernels that take grouped heads (cuDNN, flash) are
  half precision only, and in float32 SDPA would fall back to its math kernel;
* tracing the new call, as aot_autograd will, selects a fused attention op, not the math fallback;
* nothing may change a tensor in place between the repeat (a copy) and SDPA (a KV-cache write).
"""

from __future__ import annotations

import contextlib
import logging
import operator
import warnings
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torch.utils._python_dispatch import TorchDispatchMode

from dynamo_nvf.passes import add_note
from dynamo_nvf.ops.metadata import tensor_val as _value
from dynamo_nvf.passes.attention import first_mutation

log = logging.getLogger("dynamo_nvf")

GQA_DTYPES = (torch.float16, torch.bfloat16)
_SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
_RESHAPES_METHODS = ("reshape", "view", "flatten")
_RESHAPES_FUNCTIONS = (torch.reshape, torch.flatten)
#: Fused attention ops that read grouped heads; anything else in the trace means the math fallback.
_FUSED_ATTENTION = ("flash_attention", "cudnn_attention", "efficient_attention")
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _is_call(node: Any, functions: tuple = (), methods: tuple = ()) -> bool:
    return isinstance(node, Node) and (
        (node.op == "call_function" and node.target in functions)
        or (node.op == "call_method" and node.target in methods))


def _shape(t: torch.Tensor) -> tuple:
    return tuple(t.shape)


def _unsqueezed_at_heads(node: Node) -> Optional[Node]:
    """The tensor `node` is with a size-1 dim inserted before its last two (x[:, :, None],
    x.unsqueeze(2), torch.unsqueeze(x, -3)), or None."""
    if not isinstance(node, Node) or not node.args or not isinstance(node.args[0], Node):
        return None
    source = node.args[0]
    if _is_call(node, (operator.getitem,)):
        index = node.args[1] if len(node.args) > 1 else None
        if not isinstance(index, tuple) or not all(
                i is None or i is Ellipsis or i == slice(None, None, None) for i in index):
            return None
    elif not _is_call(node, (torch.unsqueeze,), ("unsqueeze",)):
        return None
    out, src = _value(node), _value(source)
    if out is None or src is None or src.dim() < 3:
        return None
    wanted = _shape(src)[:-2] + (1,) + _shape(src)[-2:]
    return source if _shape(out) == wanted else None


def repeated_heads(node: Any) -> Optional[tuple[Node, int]]:
    """(x, n_rep) where `node` is x with each head (dim -3) repeated n_rep times in place
    (repeat_interleave order: head h of the result is head h // n_rep of x), else None."""
    out = _value(node)
    if out is None or out.dim() < 3:
        return None
    if _is_call(node, (torch.repeat_interleave,), ("repeat_interleave",)):
        args = list(node.args) + [None] * 3
        source = node.kwargs.get("input", args[0])
        repeats = node.kwargs.get("repeats", args[1])
        dim = node.kwargs.get("dim", args[2])
        src = _value(source)
        if src is None or not isinstance(repeats, int) or not isinstance(dim, int) or repeats < 1:
            return None
        if dim % src.dim() != src.dim() - 3 or node.kwargs.get("output_size") not in (None, out.shape[-3]):
            return None
        wanted = _shape(src)[:-3] + (src.shape[-3] * repeats,) + _shape(src)[-2:]
        return (source, repeats) if _shape(out) == wanted else None
    if not _is_call(node, _RESHAPES_FUNCTIONS, _RESHAPES_METHODS) or not node.args:
        return None
    expanded = node.args[0]
    if not _is_call(expanded, (), ("expand",)) or len(expanded.users) != 1 or not expanded.args:
        return None
    inserted = expanded.args[0]
    source = _unsqueezed_at_heads(inserted)
    big = _value(expanded)
    if source is None or big is None or len(inserted.users) != 1:
        return None
    src = _shape(_value(source))
    n_rep = big.shape[-3]
    if not isinstance(n_rep, int) or _shape(big) != src[:-2] + (n_rep,) + src[-2:]:
        return None
    # The reshape merges (h_kv, n_rep) row-major: head h reads x's head h // n_rep.
    if _shape(out) != src[:-3] + (src[-3] * n_rep,) + src[-2:]:
        return None
    return source, n_rep


def _bound(node: Node) -> dict[str, Any]:
    params = dict(zip(_SDPA_PARAMS, node.args))
    params.update(node.kwargs)
    return params


class _AttentionOps(TorchDispatchMode):
    """Records whether a fused attention op is dispatched (below autograd and SDPA's own choice)."""

    def __init__(self) -> None:
        super().__init__()
        self.fused = False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        self.fused |= any(name in str(func) for name in _FUSED_ATTENTION)
        return func(*args, **(kwargs or {}))


def _selects_fused_kernel(params: dict[str, Any]) -> bool:
    """Whether SDPA with enable_gqa on these example values dispatches a fused attention op, as the
    same call will when aot_autograd traces it (under the same fake mode, or on real tensors)."""
    values = {k: (_value(v) if isinstance(v, Node) else v) for k, v in params.items()}
    tensors = [values["query"], values["key"], values["value"]]
    mask = values.get("attn_mask")
    if any(t is None for t in tensors) or (params.get("attn_mask") is not None and mask is None):
        return False
    kwargs = {k: values[k] for k in ("dropout_p", "is_causal", "scale") if k in values}
    # The example values' own mode: the tracing context's may be another one by now.
    fake_mode = getattr(tensors[0], "fake_mode", None)
    recorder = _AttentionOps()
    try:
        with contextlib.ExitStack() as stack:
            if fake_mode is not None:
                stack.enter_context(fake_mode)
            stack.enter_context(recorder)
            F.scaled_dot_product_attention(*tensors, attn_mask=mask, enable_gqa=True, **kwargs)
    except Exception:  # noqa: BLE001 - a probe: whatever it cannot run is left alone
        log.debug("dynamo_nvf: grouped-query probe failed", exc_info=True)
        return False
    return recorder.fused


def _changed_in_between(sdpa: Node, repeats: tuple[tuple[Node, Node], ...], nodes: list[Node],
                        order: dict[Node, int]) -> Optional[Node]:
    """An op that may change a tensor in place after the first repeat and before SDPA, or None: the
    repeat copies K and V, so SDPA reading them unrepeated would see the change (a KV-cache write).
    `repeats` pairs each repeated tensor with its source."""
    chain: set[Node] = set()
    for node, source in repeats:
        while isinstance(node, Node) and node is not source and node not in chain:
            chain.add(node)
            node = node.args[0] if node.args else node.kwargs.get("input")
    return first_mutation(chain, sdpa, nodes, order)


def _rewrite_reason(node: Node, nodes: list[Node], order: dict[Node, int]) -> tuple[Optional[tuple[Node, Node]], str]:
    """((k, v) unrepeated, '') where the call can read them with enable_gqa, else (None, why not);
    `nodes` are the graph's in order, `order` their positions."""
    params = _bound(node)
    if params.get("enable_gqa"):
        return None, ""
    key, value = repeated_heads(params.get("key")), repeated_heads(params.get("value"))
    if key is None or value is None:
        return None, ""
    (k, k_rep), (v, v_rep) = key, value
    q, k_val, v_val = _value(params.get("query")), _value(k), _value(v)
    what = f"SDPA {node.name} over repeated key/value heads"
    if q is None or k_val is None or v_val is None or k_rep != v_rep or k_rep < 2 \
            or k_val.shape[-3] != v_val.shape[-3] or q.dim() != k_val.dim() or q.shape[-3] != k_val.shape[-3] * k_rep:
        return None, ""
    if len(params["key"].users) != 1 or len(params["value"].users) != 1:
        return None, f"{what} not rewritten: the repeated tensors have other users"
    changed = _changed_in_between(node, ((params["key"], k), (params["value"], v)), nodes, order)
    if changed is not None:
        return None, f"{what} not rewritten: {changed.name} may change a tensor in place between the repeat and SDPA"
    if not (q.dtype == k_val.dtype == v_val.dtype) or q.dtype not in GQA_DTYPES:
        return None, f"{what} not rewritten: {q.dtype} has no fused grouped-query kernel (float16/bfloat16 only)"
    if not _selects_fused_kernel({**params, "key": k, "value": v}):
        return None, f"{what} not rewritten: with enable_gqa SDPA would run its math kernel"
    return (k, v), ""


def read_grouped_heads(gm: GraphModule, *, strict: bool = False) -> GraphModule:
    """Rewrites SDPA calls over repeated K/V heads into `enable_gqa=True` calls on the unrepeated heads,
    in place (Dynamo's graph keeps attributes a copy would lose); notes each rewrite for explain().

    Every decision is made before the graph is touched, so an unexpected error while deciding leaves
    the graph as it was, with one warning (raised instead with `strict`)."""
    decided: list[tuple[Node, Node, Node]] = []
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    try:
        for node in nodes:
            if _is_call(node, _SDPA):
                found, why_not = _rewrite_reason(node, nodes, order)
                if found is not None:
                    decided.append((node, *found))
                elif why_not:
                    add_note(gm, why_not)
    except Exception as exc:
        if strict:
            raise
        log.debug("dynamo_nvf: grouped-query rewrite failed", exc_info=True)
        warnings.warn(f"dynamo_nvf: grouped-query attention rewrite failed, the graph is left as it was: "
                      f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
        return gm
    for node, k, v in decided:
        params = _bound(node)
        old_key, old_value = params["key"], params["value"]
        n_rep = repeated_heads(old_key)[1]
        args, kwargs = list(node.args), dict(node.kwargs)
        for name, new in (("key", k), ("value", v)):
            position = _SDPA_PARAMS.index(name)
            if position < len(args):
                args[position] = new
            else:
                kwargs[name] = new
        kwargs["enable_gqa"] = True
        node.args, node.kwargs = tuple(args), kwargs
        for dead in dict.fromkeys((old_key, old_value)):
            _erase_chain(gm, dead)
        note = (f"SDPA {node.name}: key/value heads repeated {n_rep}x ({old_key.name}, {old_value.name}) "
                f"read as they are, enable_gqa=True")
        add_note(gm, note)
        log.info("dynamo_nvf: %s", note)
    if decided:
        gm.graph.lint()
        gm.recompile()
    return gm


def _erase_chain(gm: GraphModule, node: Node) -> None:
    """Erases `node` and the ops above it that fed only it (the repeat's reshape, expand, unsqueeze)."""
    while isinstance(node, Node) and node.op in ("call_function", "call_method") and not node.users:
        source = node.args[0] if node.args else None
        gm.graph.erase_node(node)
        node = source
