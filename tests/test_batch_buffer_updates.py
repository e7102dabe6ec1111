"""batch_buffer_updates: the copies that write a forward graph's new buffer values back (BatchNorm's
running statistics) run as one foreach op per device and dtype, and a counter's `t + 1` as a foreach
add outside any region. Buffers, outputs and gradients match eager's after several steps; a counter
the graph also reads, or a single copy, stays as it was; CUDA-graph planning sees the foreach writes."""

from __future__ import annotations

import copy

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from dynamo_nvf.backend import recording
from dynamo_nvf.runtime.cudagraphs import mutated_inputs

from helpers import assert_same, compile_fn

PLAN = {"plan_cpu_as_cuda": True}


def _conv_bn_net(momentum=0.1) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8, momentum=momentum), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8, momentum=momentum), torch.nn.ReLU())


def _train_steps(model, steps, compiled=None):
    fn = compiled or model
    outs = []
    for step in range(steps):
        torch.manual_seed(100 + step)
        x = torch.randn(4, 3, 16, 16, requires_grad=True)
        out = fn(x)
        out.sum().backward()
        outs.append((out.detach(), x.grad))
    return outs


def _forward_nodes(plans):
    return [n for p in plans if p.kind == "forward" for n in p.nodes]


def test_batch_norm_buffers_update_in_two_foreach_ops_and_match_eager():
    eager = _conv_bn_net()
    model = copy.deepcopy(eager)
    compiled = compile_fn(model, PLAN)
    with recording() as rec:
        got = _train_steps(model, 3, compiled)
    expected = _train_steps(eager, 3)
    assert_same(got, expected)
    for (name, buf), (_, ref) in zip(model.named_buffers(), eager.named_buffers()):
        torch.testing.assert_close(buf, ref, rtol=1e-5, atol=1e-6, msg=name)  # dtypes too
    assert int(model[1].num_batches_tracked) == 3
    for (name, p), (_, ref) in zip(model.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.grad, ref.grad, rtol=1e-4, atol=1e-5, msg=name)

    ops = [n.op for n in _forward_nodes(rec.plans)]
    assert "aten.copy_.default" not in ops, ops
    assert ops.count("aten._foreach_copy_.default") == 1 and ops.count("aten._foreach_add_.Scalar") == 1, ops
    counters = [n for n in _forward_nodes(rec.plans) if n.op == "aten._foreach_add_.Scalar"]
    assert counters[0].region is None and len(counters[0].inputs) == 2  # both num_batches_tracked
    assert any("buffer updates: 4 copy_(s) as 1 _foreach_copy_, 2 counter(s)" in r
               for p in rec.plans for r in p.rewrites), [p.rewrites for p in rec.plans]


def test_a_counter_the_graph_reads_stays_a_copy_and_matches_eager():
    """A step count the graph also reads (a cumulative average): its add stays, its copy joins a foreach."""
    def average(x, n, total, mean):
        n.add_(1)
        total.add_(x.sum(0))
        mean.copy_(total / n)
        return x * n

    args = [torch.randn(4, 3), torch.zeros((), dtype=torch.int64), torch.zeros(3), torch.zeros(3)]
    eager_args = [t.clone() for t in args]
    compiled = compile_fn(average, PLAN)
    with recording() as rec:
        for _ in range(2):
            assert_same(compiled(*args), average(*eager_args))
    for got, ref in zip(args, eager_args):
        torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
    ops = [n.op for p in rec.plans for n in p.nodes]
    assert "aten._foreach_add_.Scalar" not in ops and "aten.copy_.default" not in ops, ops
    assert ops.count("aten._foreach_copy_.default") == 2, ops  # int64 and float32 apart


def test_copies_of_other_dtypes_group_apart_and_a_lone_copy_stays():
    def two(x, a, b, n):
        a.copy_(x.sum(0))
        b.mul_(0.5)
        n.add_(2)
        return x * 2

    args = [torch.randn(4, 3), torch.zeros(3), torch.ones(5), torch.zeros((), dtype=torch.int64)]
    eager_args = [t.clone() for t in args]
    compiled = compile_fn(two, PLAN)
    with recording() as rec:
        out = compiled(*args)
    assert_same(out, two(*eager_args))
    for got, ref in zip(args, eager_args):
        assert torch.equal(got, ref), (got, ref)
    ops = [n.op for p in rec.plans for n in p.nodes]
    assert ops.count("aten._foreach_copy_.default") == 1 and ops.count("aten._foreach_add_.Scalar") == 1, ops

    def lone(x, a):
        a.copy_(x.sum(0))
        return x * 2

    with recording() as rec:
        compile_fn(lone, PLAN)(torch.randn(4, 3), torch.zeros(3))
    ops = [n.op for p in rec.plans for n in p.nodes]
    assert "aten.copy_.default" in ops and "aten._foreach_copy_.default" not in ops, ops


def test_cuda_graph_planning_sees_writes_through_foreach_lists():
    def writes(a, b, c, x):
        torch._foreach_copy_([a, c], [x, x])
        torch._foreach_add_([b], 1)

    gm = make_fx(writes, tracing_mode="fake")(torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.ones(3))
    assert mutated_inputs(gm) == {0, 1, 2}
    gm = make_fx(lambda a, b: a.add_(b), tracing_mode="fake")(torch.zeros(3), torch.ones(3))
    assert mutated_inputs(gm) == {0}


def _copies_graph(alias: bool = False, read_after: str = "") -> torch.fx.GraphModule:
    """copy_(a, x) and copy_(b, x) on placeholders (b a view of a's buffer with `alias`); with
    `read_after` "a" or "view", the output reads a (or a view of it) after the copies."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    graph = torch.fx.Graph()
    with FakeTensorMode():
        base, other = torch.empty(2, 3), torch.empty(3)
        vals = [base[0], base[1] if alias else other, torch.empty(3)]
    a, b, x = (graph.placeholder(name) for name in "abx")
    for node, val in zip((a, b, x), vals):
        node.meta["val"] = val
    view = graph.call_function(torch.ops.aten.view.default, (a, [3])) if read_after == "view" else a
    view.meta["val"] = vals[0]
    for dst in (a, b):
        graph.call_function(torch.ops.aten.copy_.default, (dst, x))
    graph.output(view if read_after else None)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _call_targets(gm: torch.fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function" and n.target is not torch.ops.aten.view.default]


def test_copies_whose_order_may_matter_stay_in_place():
    """Two inputs that are views of one buffer (a foreach op would write both at once), or a buffer
    read after its copy, directly or through a view (that copy stays, so the other may not move)."""
    from dynamo_nvf.passes.batch_buffer_updates import batch_buffer_updates

    copies = [torch.ops.aten.copy_.default] * 2
    assert _call_targets(batch_buffer_updates(_copies_graph())) == [torch.ops.aten._foreach_copy_.default]
    assert _call_targets(batch_buffer_updates(_copies_graph(alias=True))) == copies
    assert _call_targets(batch_buffer_updates(_copies_graph(read_after="a"))) == copies
    assert _call_targets(batch_buffer_updates(_copies_graph(read_after="view"))) == copies


def test_a_narrow_integer_counter_is_copied_not_added_by_foreach():
    """CUDA's foreach add range-checks its step in the tensors' type, where add wraps: only int64 and
    floating counters become foreach adds."""
    def counters(x, small, big, total):
        small.add_(1)
        big.add_(1)
        total.copy_(x.sum(0))
        return x * 2

    args = [torch.randn(4, 3), torch.zeros((), dtype=torch.int32), torch.zeros((), dtype=torch.int64), torch.zeros(3)]
    eager_args = [t.clone() for t in args]
    with recording() as rec:
        assert_same(compile_fn(counters, PLAN)(*args), counters(*eager_args))
    for got, ref in zip(args, eager_args):
        assert torch.equal(got, ref), (got, ref)
    writes = [n for p in rec.plans for n in p.nodes
              if n.op in ("aten._foreach_add_.Scalar", "aten._foreach_copy_.default")]
    assert [(n.op, len(n.inputs)) for n in writes] == [("aten._foreach_add_.Scalar", 1),
                                                       ("aten._foreach_copy_.default", 2),
                                                       ("aten._foreach_copy_.default", 2)], writes
