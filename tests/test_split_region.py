"""split_region: a region nvFuser fails to compile runs as pieces, one cut point (a reduction) each, the
pointwise ops before it recomputed; the pieces give the region's outputs on fresh inputs; a region that
draws random numbers is never split."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.fx import GraphModule

from dynamo_nvf.backend import recording
from dynamo_nvf.ops.lowerings import is_reduction
from dynamo_nvf.runtime.region import RegionRuntime
from dynamo_nvf.runtime.split_region import recomputed, run_pieces, split_region

PLAN = {"plan_cpu_as_cuda": True}
ROWS, VOCAB = 64, 50


def _regions(fn, *inputs, backward: bool = False) -> list[GraphModule]:
    compiled = torch.compile(fn, backend="nvf_bookend", options=PLAN)
    with recording() as rec:
        out = compiled(*inputs)
        if backward:
            out.backward()
    return [n.target.eager for gm in rec.graph_modules for n in gm.graph.nodes
            if n.op == "call_function" and isinstance(n.target, RegionRuntime)]


def _fresh_inputs(region: GraphModule) -> list[torch.Tensor]:
    inputs = []
    for node in region.graph.nodes:
        if node.op == "placeholder":
            val = node.meta["val"]
            if val.is_floating_point():
                inputs.append(torch.randn(val.shape, dtype=val.dtype))
            else:
                inputs.append(torch.randint(0, VOCAB, val.shape, dtype=val.dtype))
    return inputs


def _cross_entropy(logits, labels):
    return F.cross_entropy(logits.float(), labels)


def test_cross_entropy_regions_split_into_one_reduction_each_and_match_the_region():
    logits = torch.randn(ROWS, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    regions = _regions(_cross_entropy, logits, torch.randint(0, VOCAB, (ROWS,)), backward=True)
    split = [(r, split_region(r)) for r in regions]
    assert any(pieces for _, pieces in split), [r.code for r in regions]
    for region, pieces in split:
        if pieces is None:
            continue
        for piece in pieces:
            cut = [n for n in piece.module.graph.nodes if n.op == "call_function" and not recomputed(n)]
            assert len(cut) <= 1, piece.module.code
        forward = [p for p in pieces if any(is_reduction(n) for n in p.module.graph.nodes)]
        for piece in forward:  # only inputs and cut points' results cross pieces: never the f32 logits
            for read in piece.reads:
                assert read.op == "placeholder" or not recomputed(read), (read, piece.module.code)
        for _ in range(2):
            inputs = _fresh_inputs(region)
            expected = region(*inputs)
            actual = run_pieces(region, pieces, [p.module for p in pieces])(*inputs)
            assert len(actual) == len(expected)
            for a, e in zip(actual, expected):
                assert a.dtype == e.dtype and a.shape == e.shape
                torch.testing.assert_close(a, e, rtol=0, atol=0)


def test_layer_norm_statistics_tuple_stays_in_one_piece():
    """var_mean's two results leave its piece as getitems, never as a tuple."""
    def norm(x, w):
        return F.layer_norm(x, (x.shape[-1],), w).sum()

    x = torch.randn(ROWS, 32, requires_grad=True)
    w = torch.randn(32, requires_grad=True)
    for region in _regions(norm, x, w, backward=True):
        for piece in split_region(region) or []:
            for value in piece.reads + piece.writes:
                assert isinstance(value.meta.get("val"), torch.Tensor), (value, piece.module.code)


def test_a_region_that_draws_random_numbers_is_not_split():
    def dropout_softmax(x):
        return F.dropout(torch.softmax(x, -1), 0.5, training=True) * 2

    regions = _regions(dropout_softmax, torch.randn(ROWS, VOCAB))
    random = [r for r in regions if any(torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())
                                        for n in r.graph.nodes if n.op == "call_function")]
    assert random
    assert all(split_region(r) is None for r in random)


def test_a_region_thousands_of_nodes_deep_splits_without_recursion():
    """The walk back from a cut point is a loop: a 1200-op pointwise chain before two reductions."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def chain(x):
        for _ in range(600):
            x = x * 1.0001 + 0.001
        return x.sum(1) + x.amax(1)

    x = torch.randn(4, 8)
    region = make_fx(chain, tracing_mode="fake")(x)
    pieces = split_region(region)
    assert pieces is not None and len(pieces) == 3  # sum, amax, and the add of the two
    torch.testing.assert_close(run_pieces(region, pieces, [p.module for p in pieces])(x), chain(x),
                               rtol=0, atol=0)


def test_profile_labels_name_each_piece_as_its_runtime_opens_its_range():
    """explain() finds a piece's kernels under the range its RegionRuntime opens."""
    from dynamo_nvf.plan import GraphPlan, RegionPlan, profile_labels, region_label

    region = RegionPlan(id=3, name="nvf_region_3", ops=[], nodes=[])
    region.pieces = [RegionPlan(id=3, name="nvf_region_3.piece1", ops=[], nodes=[])]
    graph = GraphPlan(kind="backward", graph_id=7, nodes=[], regions=[region])
    labels = profile_labels(graph)
    assert labels[region_label(graph, region)] is region
    assert labels[f"{region_label(graph, region)}.piece1"] is region.pieces[0]
