"""recompute_saved_views: under CUDA graphs a training forward saves the tensor a chain of views starts
from, never the views (cudagraph trees rebuild outputs that share a storage on every replay)."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.checkpoint import CheckpointPolicy

from dynamo_nvf.backend import recording
from dynamo_nvf.ops.metadata import is_metadata
from dynamo_nvf.passes.lean_views import reinterpret_tensor
from dynamo_nvf.passes.saved_views import RECOMPUTED_VIEWS_KEY, recompute_saved_views
from helpers import check_training, compile_fn
from programs import QkvAttention

aten = torch.ops.aten
D = 32


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
    tagged = [n for n in gm.graph.nodes if n.meta.get("recompute") == CheckpointPolicy.MUST_RECOMPUTE]
    # t.t() is read by the backward; the chain behind it (t, getitem a, the split) is tagged with it.
    assert [(n.target, n.args[1] if n.target is operator.getitem else None) for n in tagged] == [
        (aten.split.Tensor, None), (operator.getitem, 0), (aten.t.default, None), (aten.t.default, None)]
    views = {n.name: n for n in gm.graph.nodes if n.op == "call_function" and is_metadata(n)}
    untagged = [n for n in views.values() if n not in tagged]
    # Left alone: getitem b (read by a forward mul), the view feeding the forward's sum, primals_2's t and
    # its t (an input's views, read by a forward sum), and the backward's own views of the tangent.
    getitems = [n for n in untagged if n.target is operator.getitem]
    assert [n.args[1] for n in getitems] == [1]
    forward_views = [n for n in untagged if n.target is aten.view.default and n.args[0].target is aten.mul.Tensor]
    assert len(forward_views) == 1
    tangent_views = [n for n in untagged if n.target is aten.view.default and n.args[0].op == "placeholder"
                     or n.target is aten.view.default and n.args[0].target is aten.view.default]
    assert len(tangent_views) == 2
    assert gm.meta[RECOMPUTED_VIEWS_KEY] == len(tagged)


def test_a_users_checkpoint_tag_is_kept_with_its_chain():
    def joint(primals_1, tangents_1):
        h = primals_1 * 2.0
        t = h.t()
        return h.sum(), tangents_1 * t.t()

    gm = make_fx(joint, tracing_mode="fake")(torch.randn(8, 16), torch.randn(8, 16))
    (outer,) = [n for n in gm.graph.nodes if n.target is aten.t.default and n.args[0].target is aten.t.default]
    outer.meta["recompute"] = CheckpointPolicy.MUST_SAVE
    gm = recompute_saved_views(gm)
    assert outer.meta["recompute"] == CheckpointPolicy.MUST_SAVE
    assert not any(n.meta.get("recompute") == CheckpointPolicy.MUST_RECOMPUTE for n in gm.graph.nodes)
