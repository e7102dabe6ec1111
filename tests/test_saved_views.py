"""recompute_saved_views: under CUDA graphs a training forward saves the tensor a chain of views starts
from, never the views (cudagraph trees rebuild outputs that share a storage on every replay)."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.checkpoint import CheckpointPolicy

from dynamo_nvf.backend import recording
from dynamo_nvf.ops.metadata import is_metadata
from dynamo_nvf.passes.lean_views import reinterpret_tensor
from dynamo_nvf.passes.saved_views import RECOMPUTED_VIEWS_KEY, recompute_saved_views
from helpers import check_training, compile_fn

aten = torch.ops.aten
D, H = 32, 4


class QkvAttention(nn.Module):
    """GPT-2's attention: one qkv projection split into heads, SDPA, the output projection."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = (t.view(b, s, H, D // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, D))


def _view_base(node: torch.fx.Node) -> torch.fx.Node:
    """Where a chain of views (aten's, or lean_views' one reinterpret_tensor) starts."""
    while node.op == "call_function" and (is_metadata(node) or node.target is reinterpret_tensor):
        node = node.args[0]
    return node


def _saved(options: dict) -> tuple[list[torch.fx.Node], list]:
    """The forward graph's saved tensors (outputs after the user's) and the plans, one CPU training step."""
    torch.manual_seed(0)
    model = QkvAttention()
    x = torch.randn(2, 8, D, requires_grad=True)
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True, **options})
    with recording() as rec:
        compiled(x).sum().backward()
    forward = rec.graph_modules[0]
    outputs = list(forward.graph.find_nodes(op="output"))[0].args[0]
    return [o for o in outputs[1:] if isinstance(o, torch.fx.Node)], rec.plans


def _views_of_computed_tensors(saved: list[torch.fx.Node]) -> list[str]:
    return [n.name for n in saved if _view_base(n) is not n and _view_base(n).op != "placeholder"]


def test_under_cuda_graphs_the_forward_saves_bases_and_the_backward_recomputes_the_views():
    plain, _ = _saved({})
    saved, plans = _saved({"cuda_graphs": True})
    # Without graphs min-cut saves q, k, v (views of the qkv projection) and the attention output's
    # views; under graphs no saved tensor is a view of a computed tensor, and fewer are saved.
    assert len(_views_of_computed_tensors(plain)) >= 3, [n.name for n in plain]
    assert _views_of_computed_tensors(saved) == [], [n.name for n in saved]
    assert len(saved) < len(plain)
    bases = [_view_base(n) for n in saved]
    assert len(set(bases)) == len(bases), "two saved tensors share a base"
    (backward_plan,) = [p for p in plans if p.kind == "backward"]
    assert any(note.startswith("recompute_saved_views: ") for note in backward_plan.rewrites), backward_plan.rewrites


def test_without_cuda_graphs_nothing_is_tagged():
    _, plans = _saved({})
    assert not any("recompute_saved_views" in note for p in plans for note in p.rewrites)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_match_eager_with_recomputed_views(dtype):
    torch.manual_seed(0)
    model = QkvAttention().to(dtype)
    x = torch.randn(2, 8, D, dtype=dtype)
    check_training(model, [x], {"plan_cpu_as_cuda": True, "cuda_graphs": True}, params=list(model.parameters()))


def test_only_forward_alias_views_the_backward_reads_are_tagged():
    def joint(primals_1, primals_2, tangents_1):
        h = primals_1 * 2.0                       # computed base
        a, b = h.split(16, dim=-1)                # views of it; both read by the "backward"
        t = a.t()                                 # a view chain: split -> getitem -> t
        c = h.view(8, 2, 16).sum(1)               # a view the backward does not read
        w = primals_2.t()                         # a view of an input, read by the backward
        grad = tangents_1 * t.t() + b * w.t().sum() + tangents_1.view(-1).view(8, 16)
        return c, grad

    gm = recompute_saved_views(make_fx(joint, tracing_mode="fake")(
        torch.randn(8, 32), torch.randn(16, 16), torch.randn(8, 16)))
    tagged = {n.name for n in gm.graph.nodes if n.meta.get("recompute") == CheckpointPolicy.MUST_RECOMPUTE}
    by_target = {n.name: n.target for n in gm.graph.nodes}
    assert {by_target[name] for name in tagged} == {aten.split.Tensor, aten.t.default, operator.getitem}
    untagged_views = [n for n in gm.graph.nodes if n.op == "call_function" and is_metadata(n) and n.name not in tagged]
    # the view feeding only the forward's sum, and the backward's own views of the tangent, stay as they are
    assert {n.target for n in untagged_views} >= {aten.view.default}
    assert gm.meta[RECOMPUTED_VIEWS_KEY] == len(tagged)
