"""Views' fake values follow their inputs': refresh_view_values repairs a stale one (with a note),
and strict mode names the pass that left it stale."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx import GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

from dynamo_nvf.ops.metadata import stale_views
from dynamo_nvf.passes import NOTES_KEY
from dynamo_nvf.passes.view_values import refresh_view_values
from dynamo_nvf.pipeline import Pass, PassContext, PassError, run_passes
from dynamo_nvf.settings import Settings

aten = torch.ops.aten


def _patch_tokens_graph() -> GraphModule:
    """(x + 1)[:, 1:] transposed, traced with fake values: the transpose is a view of the slice."""
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.empty(2, 17, 8))
    return make_fx(lambda x: (x + 1)[:, 1:].transpose(1, 2), tracing_mode="fake")(x)


def _make_slice_fresh(gm: GraphModule) -> GraphModule:
    """What a careless rewrite does: the slice becomes a copy (a fresh tensor), its view keeps the
    value it had as a view of the slice."""
    (slice_node,) = gm.graph.find_nodes(op="call_function", target=aten.slice.Tensor)
    slice_node.target = aten.slice_copy.Tensor
    old = slice_node.meta["val"]
    with old.fake_mode:
        slice_node.meta["val"] = torch.empty(old.shape, dtype=old.dtype)
    gm.recompile()
    return gm


def _transpose(gm: GraphModule):
    (node,) = gm.graph.find_nodes(op="call_function", target=aten.transpose.int)
    return node


def test_a_traced_graph_has_no_stale_view():
    assert stale_views(_patch_tokens_graph()) == {}


def test_refresh_gives_the_view_its_inputs_layout_and_says_so():
    gm = _make_slice_fresh(_patch_tokens_graph())
    view = _transpose(gm)
    assert view.meta["val"].stride() == (136, 1, 8) and view.meta["val"].storage_offset() == 8
    refresh_view_values(gm)
    assert view.meta["val"].stride() == (128, 1, 8) and view.meta["val"].storage_offset() == 0
    assert stale_views(gm) == {}
    assert any("view values recomputed" in n for n in gm.meta[NOTES_KEY]), gm.meta.get(NOTES_KEY)


def test_strict_mode_names_the_pass_that_left_a_view_stale():
    def careless(gm: GraphModule, ctx: PassContext) -> GraphModule:
        return _make_slice_fresh(gm)  # a new target: the loop sees a change

    passes = (Pass("careless", careless, frozenset({"forward"})),)
    with pytest.raises(PassError, match="pass careless left the fake value of view transpose stale"):
        run_passes("graph", passes, _patch_tokens_graph(), PassContext(Settings(strict=True), "forward"))
    # Not strict: the loop lets it through, for refresh_view_values to repair.
    run_passes("graph", passes, _patch_tokens_graph(), PassContext(Settings(), "forward"))
