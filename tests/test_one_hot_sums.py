"""simplify_one_hot_sums: the sum over classes of a one-hot mask's broadcast value is a `where`, so
cross-entropy's backward has no row reduction left (joint-graph pass, before min-cut)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from dynamo_nvf.backend import recording
from dynamo_nvf.passes.one_hot_sums import simplify_one_hot_sums
from helpers import DEVICES, check_training, compile_fn, device_options

aten = torch.ops.aten
C = 7


def _one_hot_sum(value_shape, keepdim: bool, value_varies: bool = False):
    def f(value, target):
        hits = torch.arange(C).unsqueeze(0) == target.unsqueeze(1)
        return torch.where(hits, value, torch.scalar_tensor(0.0)).sum(1, keepdim=keepdim)

    value = torch.randn((5, C) if value_varies else value_shape)
    target = torch.tensor([0, 6, -1, 7, 3])  # two out of range: no class, a zero sum
    return f, value, target


def _traced(f, *args):
    return make_fx(f, tracing_mode="fake")(*args)


@pytest.mark.parametrize("value_shape", [(), (5, 1), (1,)])
@pytest.mark.parametrize("keepdim", [True, False])
def test_the_sum_becomes_a_where_with_the_same_values(value_shape, keepdim):
    f, value, target = _one_hot_sum(value_shape, keepdim)
    gm = _traced(f, value, target)
    simplify_one_hot_sums(gm)
    sums = [n for n in gm.graph.nodes if n.target is aten.sum.dim_IntList]
    assert not sums, gm.code
    torch.testing.assert_close(gm(value, target), f(value, target), rtol=0, atol=0)


def test_a_value_that_varies_over_the_classes_is_left_alone():
    """The loss's pick of each row's log-probability is a real sum over classes."""
    f, value, target = _one_hot_sum(None, True, value_varies=True)
    gm = _traced(f, value, target)
    simplify_one_hot_sums(gm)
    assert any(n.target is aten.sum.dim_IntList for n in gm.graph.nodes), gm.code


def test_not_an_arange_is_left_alone():
    def f(value, target, classes):
        hits = classes.unsqueeze(0) == target.unsqueeze(1)
        return torch.where(hits, value, torch.scalar_tensor(0.0)).sum(1, keepdim=True)

    args = (torch.randn(()), torch.tensor([0, 1, 1]), torch.tensor([1, 1, 0, 2]))
    gm = _traced(f, *args)
    simplify_one_hot_sums(gm)
    assert any(n.target is aten.sum.dim_IntList for n in gm.graph.nodes), gm.code
    torch.testing.assert_close(gm(*args), f(*args))


@pytest.mark.parametrize("ignore_index", [-100, 3])
def test_cross_entropy_backward_has_no_row_reduction(ignore_index):
    rows, classes = 12, 40

    def loss_fn(logits, target):
        return F.cross_entropy(logits.float(), target, ignore_index=ignore_index)

    logits = torch.randn(rows, classes, requires_grad=True)
    target = torch.randint(0, classes, (rows,))
    target[::4] = ignore_index
    with recording() as rec:
        loss = compile_fn(loss_fn, {"plan_cpu_as_cuda": True})(logits, target)
        loss.backward()
    want_in = logits.detach().clone().requires_grad_()
    want = loss_fn(want_in, target)
    want.backward()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(logits.grad, want_in.grad)
    backward = next(p for p in rec.plans if p.kind == "backward")
    code = "\n".join(r.fx_code for r in backward.regions)
    assert "sum.dim_IntList" not in code, code  # only the tiny count of counted rows remains


def test_a_dynamic_shape_cross_entropy_step_has_no_row_reduction_and_runs_at_every_size():
    """dynamic=True (the rows symbolic): the where needs no expand, so no symbolic size reaches an op's
    arguments (which had made the region's eager forward fail with a NameError)."""
    classes, hidden = 40, 16
    torch._dynamo.reset()
    head = torch.nn.Linear(hidden, classes)  # the classes static (a weight's), the rows not

    def loss_fn(x, target):
        return F.cross_entropy(head(x), target)

    compiled = torch.compile(loss_fn, backend="nvf_bookend", options={"plan_cpu_as_cuda": True}, dynamic=True)
    with recording() as rec:
        for rows in (12, 20, 7):
            x = torch.randn(rows, hidden, requires_grad=True)
            target = torch.randint(0, classes, (rows,))
            loss = compiled(x, target)
            loss.backward()
            got = x.grad
            x.grad = None
            want = loss_fn(x, target)
            want.backward()
            torch.testing.assert_close(loss, want)
            torch.testing.assert_close(got, x.grad)
    backward = next(p for p in rec.plans if p.kind == "backward")
    assert any(isinstance(s, str) for r in backward.regions for t in r.inputs for s in t.shape)  # symbolic
    code = "\n".join(r.fx_code for r in backward.regions)
    # the bias gradient's column sum remains; no sum over the classes, and no expand
    assert ", [1], True)" not in code and "sum.dim_IntList(sub" in code and "expand" not in code, code


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_backward_computes_the_class_index_in_its_kernel(device, dtype):
    """`arange(C) == target` is computed in the region (nvFuser's iota): a [1, C] int64 index as a
    region input would set the pointwise vector width by its 8 bytes (2 lanes of bf16 logits)."""
    rows, classes = 16, 48

    def loss_fn(logits, target):
        return F.cross_entropy(logits.float(), target)

    logits = torch.randn(rows, classes, device=device, dtype=dtype)
    target = torch.randint(0, classes, (rows,), device=device)
    plans = check_training(loss_fn, [logits, target], device_options(device))
    backward = next(p for p in plans if p.kind == "backward")
    region = next(r for r in backward.regions if any("exp" in op for op in r.ops))
    assert any(op.startswith("aten.arange") for op in region.ops), region.ops
    wide_index_inputs = [t for t in region.inputs if t.dtype == "int64" and len(t.shape) == 2]
    assert not wide_index_inputs, region.inputs
