"""views_to_region_edges: a view moves across the one-operand elementwise ops between it and its
region's edge (above a cast onto a region input, below a cast that only other code reads), and a
split the region reads also above ops whose other operands come from outside, so the bookend pass
trims it and nvFuser gets the tensor in the shape the region computes in; where the move would copy
or change what readers see, the view stays. CPU plans as for CUDA (regions run eagerly);
the GPU test runs real nvFuser on GPT-2's cross-entropy, which failed to compile with the view inside."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf import recording
from dynamo_nvf.passes.views_to_edges import _split_groups
from dynamo_nvf.runtime.stats import STATS
from helpers import (DEVICES, RESHAPE_NAMES, check_fresh_inputs, check_inference, check_training, compile_fn,
                     device_options, tolerance)

ON = {"plan_cpu_as_cuda": True}


def _notes(plans, word):
    return [n for p in plans for n in p.rewrites if n.startswith("view ") and word in n]


def _reshapes(region) -> list[str]:
    return [op for op in region.ops if op in RESHAPE_NAMES]


def _loss(logits, targets):
    """A language model's loss: logits upcast to f32, flattened to (rows, vocab), cross-entropy."""
    return F.cross_entropy(logits.float().flatten(0, -2), targets.flatten())


def test_a_cross_entropys_flatten_leaves_its_regions():
    """Forward: the flatten moves above the upcast onto the logits (a region input); backward: the
    gradient's view back to [batch, seq, vocab] moves below its downcast, which only the graph's
    output reads. No region computes a reshape; loss and gradient as eager's."""
    logits = torch.randn(2, 16, 1001, dtype=torch.bfloat16)
    targets = torch.randint(0, 1001, (2, 16))
    plans = check_training(_loss, [logits, targets], ON)
    assert _notes(plans, "moved above") and _notes(plans, "moved below"), [p.rewrites for p in plans]
    for plan in plans:
        for region in plan.regions:
            assert not _reshapes(region), (plan.kind, region.fx_code)
            assert all(len(t.shape) <= 2 for t in region.inputs), [t.shape for t in region.inputs]


def test_a_view_crosses_a_chain_of_one_operand_ops():
    """exp(neg(x.float())).view(...) reads the view of x; the ops are computed on it as before."""

    def fn(x):
        return torch.exp(-x.float()).view(-1, 64) * 2.0

    x = torch.randn(4, 8, 64, dtype=torch.bfloat16)
    plans = check_inference(fn, [x], ON)
    notes = _notes(plans, "moved above")
    assert len(notes) == 1 and "neg" in notes[0] and "exp" in notes[0], [p.rewrites for p in plans]
    assert not any(_reshapes(r) for p in plans for r in p.regions)
    check_fresh_inputs(compile_fn(fn, ON), fn, lambda: [torch.randn(4, 8, 64, dtype=torch.bfloat16)])


def test_a_view_of_an_in_region_reshape_joins_it():
    """`view(cast(view(a + b, 3-D)), 2-D)` gives `a + b` its own shape back: the two views become none,
    forward and backward (a padded LM head's logits: sliced, copied dense, viewed [batch, seq, vocab],
    upcast, flattened; nvFuser failed to compile that region with the reshape round trip in it)."""

    def fn(x, b, t):
        return _loss((x + b).view(2, 16, 1001), t)

    args = [torch.randn(32, 1001, dtype=torch.bfloat16), torch.randn(1001, dtype=torch.bfloat16),
            torch.randint(0, 1001, (2, 16))]
    plans = check_training(fn, args, ON)
    assert any(p.kind == "forward" for p in plans) and _notes(plans, "joined with"), [p.rewrites for p in plans]
    for plan in plans:
        for region in plan.regions:
            assert not _reshapes(region), (plan.kind, region.fx_code)


def test_a_view_that_would_copy_stays():
    """A transposed input cannot be viewed flat without a copy: the reshape's copy is not moved onto
    the input."""

    def fn(x):
        return x.t().float().reshape(-1) + 1.0

    plans = check_inference(fn, [torch.randn(32, 48, dtype=torch.bfloat16)], ON)
    assert not _notes(plans, "moved above"), [p.rewrites for p in plans]
    check_fresh_inputs(compile_fn(fn, ON), fn, lambda: [torch.randn(32, 48, dtype=torch.bfloat16)])


def test_an_op_read_inside_the_region_keeps_its_view_inside():
    """The cast after the view is read by the region too: sinking the view would not take it out."""

    def fn(x):
        y = (x * 2.0).view(4, 8, 64)
        z = y.to(torch.bfloat16)
        return z, z.float().sum(-1)

    plans = check_inference(fn, [torch.randn(32, 64)], ON)
    assert not _notes(plans, "moved below"), [p.rewrites for p in plans]


def test_a_flatten_does_not_cross_an_op_of_two_tensors():
    """x.float() + y, then flattened: the add reads two tensors and the view merges dims, so it is not
    moved above the add (y's view could copy), nor below the scaling (the graph returns that)."""

    def fn(x, y):
        return (x.float() + y).view(-1) * 3.0

    plans = check_inference(fn, [torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(4, 8)], ON)
    assert not _notes(plans, "moved"), [p.rewrites for p in plans]


def test_a_split_crosses_ops_of_a_broadcast_operand():
    """relu(x + b) split [n, h, w, c] -> [n, h/2, 2, w/2, 2, c] and reduced over the phase dims (a
    tiled pool after a convolution's bias): the split moves onto x and b (b's broadcast dims split
    into ones; a 0-dim scale stays as it is), so the region computes in the split shape from views of
    its inputs; nvFuser failed to run the reshape between the broadcast add and the reduction. Values
    as eager's."""

    def fn(x, b, s):
        return (torch.relu(x + b) * s).view(2, 4, 2, 4, 2, 16).amax((2, 4)) * 2.0

    def inputs():
        return [torch.randn(2, 8, 8, 16, dtype=torch.bfloat16), torch.randn(16, dtype=torch.bfloat16),
                torch.tensor(1.5, dtype=torch.bfloat16)]

    plans = check_inference(fn, inputs(), ON)
    notes = _notes(plans, "a split")
    assert len(notes) == 1 and all(op in notes[0] for op in ("add", "relu", "mul")), [p.rewrites for p in plans]
    (region,) = [r for p in plans for r in p.regions]
    assert not _reshapes(region), region.fx_code
    assert sorted(len(t.shape) for t in region.inputs) == [0, 6, 6], [t.shape for t in region.inputs]
    check_fresh_inputs(compile_fn(fn, ON), fn, inputs)


@pytest.mark.parametrize("src,dst,groups", [
    ([64, 224, 224, 8], [64, 112, 2, 112, 2, 8], [[64], [112, 2], [112, 2], [8]]),  # a tiled pool's split
    ([32, 16], [2, 16, 16], [[2, 16], [16]]),            # rows into [batch, seq]
    ([4, 1, 6], [4, 6], [[4], [], [6]]),                  # a size-one dim dropped
    ([4, 6], [1, 4, 6, 1], [[1, 4], [6, 1]]),             # size-one dims added
    ([4, 6], [24], None),                                 # a merge
    ([4, 6], [2, 12], None),                              # a split across two dims
    ([4, 6], [4, 3], None),                               # fewer elements
])
def test_split_groups(src, dst, groups):
    assert _split_groups(src, dst) == groups


def test_a_split_does_not_cross_an_op_of_two_in_region_operands():
    """y * sigmoid(y), y computed in the region: the chain forks, so the split stays where it is."""

    def fn(x):
        y = x.float() * 2.0
        return (y * torch.sigmoid(y)).view(4, 2, 4, 8).sum(2)

    plans = check_inference(fn, [torch.randn(8, 4, 8, dtype=torch.bfloat16)], ON)
    assert not _notes(plans, "a split"), [p.rewrites for p in plans]
    check_fresh_inputs(compile_fn(fn, ON), fn, lambda: [torch.randn(8, 4, 8, dtype=torch.bfloat16)])


def test_symbolic_sizes_are_left_alone():
    """With dynamic shapes the sizes are symbols: nothing is moved (comparing them would add guards),
    and the loss matches eager's at two sequence lengths."""
    compiled = compile_fn(_loss, ON, dynamic=True)
    with recording() as rec:
        for seq in (16, 24):
            logits = torch.randn(2, seq, 1001, dtype=torch.bfloat16)
            targets = torch.randint(0, 1001, (2, seq))
            torch.testing.assert_close(compiled(logits, targets), _loss(logits, targets), rtol=1e-4, atol=1e-4)
    assert rec.plans and not _notes(rec.plans, "moved"), [p.rewrites for p in rec.plans]


def test_a_returned_value_is_not_made_a_view():
    """sigmoid((x * w).view(4, 8)).bfloat16() returned: sinking the view below the cast would return a
    view of an intermediate, which autograd refuses to modify in place; eager returns a fresh tensor."""

    def fn(x, w):
        return torch.sigmoid((x * w).view(4, 8)).to(torch.bfloat16)

    compiled = compile_fn(fn, ON)
    with recording() as rec:
        x = torch.randn(32, requires_grad=True)
        out = compiled(x, torch.randn(32))
    assert not out._is_view() and not _notes(rec.plans, "moved below"), [p.rewrites for p in rec.plans]
    out.mul_(2)
    out.float().sum().backward()
    assert x.grad is not None


def test_a_clone_to_a_memory_format_is_not_crossed():
    """clone(memory_format=...) sets a layout: a view is not moved across it, so strides stay eager's
    in size-one dims too."""

    def fn(x):
        return torch.clone(x.float(), memory_format=torch.channels_last).view(2, 3, 1, 1) * 2

    x = torch.randn(1, 1, 2, 3, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    plans = check_inference(fn, [x], ON)
    assert not any("clone" in n for n in _notes(plans, "moved")), [p.rewrites for p in plans]
    assert compile_fn(fn, ON)(x).stride() == fn(x).stride()


@pytest.mark.gpu
@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_padded_lm_head_and_its_cross_entropy_run_whole(device):
    """GPT-2's head and loss: `h @ w.t()` over 50257 words (pad_matmuls pads it to 50264 and slices; the
    slice is copied dense for the backward), viewed [8, 512, vocab], upcast, flattened. With the view
    round trip in the loss region nvFuser failed to compile it and it ran as pieces; joined, every
    region runs whole on nvFuser. Loss and gradients match eager's."""

    def head(h, w, targets):
        return _loss((h @ w.t()).view(8, 512, -1), targets)

    STATS.reset()
    torch.manual_seed(0)
    compiled = compile_fn(head, device_options(device))
    rtol, atol = tolerance(torch.bfloat16)
    with recording() as rec:
        for _ in range(2):
            h = torch.randn(4096, 768, device=device, dtype=torch.bfloat16)
            w = torch.randn(50257, 768, device=device, dtype=torch.bfloat16) * 0.02
            targets = torch.randint(0, 50257, (8, 512), device=device)
            (hc, wc), (he, we) = [[t.clone().requires_grad_(True) for t in (h, w)] for _ in range(2)]
            out, expected = compiled(hc, wc, targets), head(he, we, targets)
            torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)
            out.backward()
            expected.backward()
            for got, want in ((hc.grad, he.grad), (wc.grad, we.grad)):
                assert got.stride() == want.stride()
                torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    assert any("pad_matmuls" in n for p in rec.plans for n in p.rewrites), [p.rewrites for p in rec.plans]
    assert all(r.executor == "nvfuser" for p in rec.plans for r in p.regions), \
        [(r.name, r.executor, r.executor_reason[:200]) for p in rec.plans for r in p.regions]
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0, STATS.snapshot()


@pytest.mark.gpu
@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_cross_entropy_over_gpt2s_vocabulary_runs_on_nvfuser(device):
    """GPT-2's loss over a 50257-word vocabulary, bf16 logits [8, 512, 50257]: with the flatten inside
    its region the forward failed to compile (scripts/nvfuser_repros/cross_entropy_vectorized_reduction.py)
    and ran in eager. Now every region runs on nvFuser; loss and gradient match eager's."""
    STATS.reset()
    torch.manual_seed(0)
    compiled = compile_fn(_loss, device_options(device))
    rtol, atol = tolerance(torch.bfloat16)
    for _ in range(2):
        logits = torch.randn(8, 512, 50257, device=device, dtype=torch.bfloat16)
        targets = torch.randint(0, 50257, (8, 512), device=device)
        la, le = logits.clone().requires_grad_(True), logits.clone().requires_grad_(True)
        out, expected = compiled(la, targets), _loss(le, targets)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        out.backward()
        expected.backward()
        assert la.grad.stride() == le.grad.stride()
        torch.testing.assert_close(la.grad, le.grad, rtol=rtol, atol=atol)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0, STATS.snapshot()
