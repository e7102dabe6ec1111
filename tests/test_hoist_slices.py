"""hoist_slices: the slices of a pointwise op inside a region move onto its operands (RoPE's backward
slices `g * sin` into halves), so the region reads slices of its inputs, which the bookend pass trims
to aliases; not where a slice leaves the region, where the op has another user, or with the option
off. Operands that broadcast along the sliced dim stay whole. Values, gradients and output strides
match eager."""

from __future__ import annotations

import torch

from helpers import assert_same_layout, check_inference, check_training

PLAN = {"plan_cpu_as_cuda": True, "strict": True}
SLICE = "aten.slice.Tensor"


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """LLaMA's rotary embedding on [batch, heads, seq, head_dim], cos/sin [seq, head_dim]."""
    return (x * cos + _rotate_half(x) * sin).transpose(1, 2).contiguous()


def _rope_inputs(dtype: torch.dtype = torch.float32):
    x = torch.randn(1, 4, 6, 8, dtype=dtype)
    return [x, torch.randn(6, 8, dtype=dtype), torch.randn(6, 8, dtype=dtype)]


def _backward(plans):
    (plan,) = [p for p in plans if p.kind == "backward"]
    return plan


def test_rope_backward_reads_slices_of_its_inputs():
    x, cos, sin = _rope_inputs()
    x.requires_grad_(True)
    plan = _backward(check_training(lambda x: rope(x, cos, sin), [x], PLAN))
    notes = [n for n in plan.rewrites if n.startswith("slices of ")]
    assert len(notes) == 1 and "moved above it onto its operands" in notes[0], plan.rewrites
    regions = [r for r in plan.regions if "aten.constant_pad_nd.default" in r.ops]
    assert regions and all(SLICE not in r.ops for r in regions), [r.ops for r in plan.regions]
    # The product g * sin is now computed on the halves: two multiplies by slices of sin.
    (region,) = regions
    assert region.ops.count("aten.mul.Tensor") == 3, region.ops


def test_rope_backward_in_bfloat16_matches_eager():
    x, cos, sin = _rope_inputs(torch.bfloat16)
    x.requires_grad_(True)
    plan = _backward(check_training(lambda x: rope(x, cos, sin), [x], PLAN, rtol=1.6e-2, atol=1e-2))
    assert any(n.startswith("slices of ") for n in plan.rewrites)


def test_option_off_keeps_the_slices_in_the_region():
    x, cos, sin = _rope_inputs()
    x.requires_grad_(True)
    plan = _backward(check_training(lambda x: rope(x, cos, sin), [x], {**PLAN, "hoist_slices": False}))
    assert not any(n.startswith("slices of ") for n in plan.rewrites)
    assert any(SLICE in r.ops for r in plan.regions), [r.ops for r in plan.regions]


def test_a_slice_that_leaves_the_region_stays():
    def f(x, s):
        y = x * s
        return y[:, :4], y[:, 4:].exp()

    inputs = [torch.randn(6, 8), torch.randn(6, 8)]
    plans = check_inference(f, inputs, PLAN)
    assert not any(n.startswith("slices of ") for p in plans for n in p.rewrites)
    compiled = torch.compile(f, backend="nvf_bookend", options=PLAN)
    fresh = [torch.randn(6, 8), torch.randn(6, 8)]
    for got, want in zip(compiled(*fresh), f(*fresh)):
        torch.testing.assert_close(got, want)
        assert_same_layout(got, want)


def test_an_op_with_another_user_stays():
    def f(x, s):
        y = x * s
        return y[:, :4].exp() + y[:, 4:].exp(), y.sum()

    plans = check_inference(f, [torch.randn(6, 8), torch.randn(6, 8)], PLAN)
    assert not any(n.startswith("slices of ") for p in plans for n in p.rewrites)


def test_an_operand_that_broadcasts_along_the_sliced_dim_stays_whole():
    def f(x, w, s):
        y = x * w + s  # w: [8], broadcast along dim 0
        return y[1:4].exp() * y[4:7].sigmoid()

    inputs = [torch.randn(8, 8), torch.randn(8), torch.randn(8, 8)]
    (plan,) = check_inference(f, inputs, PLAN)
    assert sum(n.startswith("slices of ") for n in plan.rewrites) == 2, plan.rewrites  # add, then mul
    (region,) = plan.regions
    assert SLICE not in region.ops, region.ops
    shapes = sorted(tuple(t.shape) for t in region.inputs)
    assert shapes == [(3, 8), (3, 8), (3, 8), (3, 8), (8,)], shapes  # x and s sliced twice, w whole


def _patch_tokens(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor):
    """A ViT's gradient path in miniature: the patch tokens of a sum, as an image for a convolution
    (ATen, outside the region) and for a sum over the batch and the image (in the region)."""
    image = (a + b)[:, 1:].transpose(1, 2).reshape(2, 8, 4, 4)
    return torch.nn.functional.conv2d(image, w), image.sum((0, 2, 3))


def test_the_views_of_a_hoisted_slice_get_the_new_layout():
    # The slice becomes a fresh [2, 16, 8] tensor: the image view outside the region reads it at
    # offset 0 with its own strides, not at the whole sum's offset 8 and batch stride 17 * 8 (which
    # read past its end: BEiT's patch-embedding gradient was inf). strict raises on a stale view.
    inputs = [torch.randn(2, 17, 8), torch.randn(2, 17, 8), torch.randn(4, 8, 3, 3)]
    (plan,) = check_inference(_patch_tokens, inputs, PLAN)
    assert any(n.startswith("slices of ") for n in plan.rewrites), plan.rewrites
    (region,) = plan.regions
    assert SLICE not in region.ops, region.ops
    compiled = torch.compile(_patch_tokens, backend="nvf_bookend", options=PLAN)
    fresh = [torch.randn(2, 17, 8), torch.randn(2, 17, 8), torch.randn(4, 8, 3, 3)]
    for got, want in zip(compiled(*fresh), _patch_tokens(*fresh)):
        torch.testing.assert_close(got, want)
        assert_same_layout(got, want)


def test_a_slice_whose_view_is_returned_stays():
    # A returned view has eager's strides (the whole sum's): as a view of a fresh slice it would not.
    def f(a, b):
        patches = (a + b)[:, 1:]
        return patches.transpose(1, 2), patches.sum(2)

    inputs = [torch.randn(2, 17, 8), torch.randn(2, 17, 8)]
    plans = check_inference(f, inputs, PLAN)
    assert not any(n.startswith("slices of ") for p in plans for n in p.rewrites)
    compiled = torch.compile(f, backend="nvf_bookend", options=PLAN)
    for got, want in zip(compiled(*inputs), f(*inputs)):
        assert_same_layout(got, want)
