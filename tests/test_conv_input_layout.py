"""conv_input_layout: a patch-embedding convolution (kernel = stride >= 8) of an NCHW image reads it
converted to channels-last in a region of its own, in inference graphs and in the joint graph of a
training step (its convolution backward reads the same converted image); small patches, graphs whose
outputs or views the new layout would change, and the option off keep NCHW. Values, output strides and
gradient strides match eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf import nvf as nvf_env
from helpers import (assert_same, assert_same_layout, check_fresh_inputs, check_inference, check_training,
                     compile_fn, steady_state_kernels)

PLAN = {"plan_cpu_as_cuda": True}


@pytest.fixture(autouse=True)
def _small_images_count(monkeypatch):
    """CPU-sized images stand for large ones (the pass converts at least MIN_ELEMENTS)."""
    from dynamo_nvf.passes import conv_input_layout

    monkeypatch.setattr(conv_input_layout, "MIN_ELEMENTS", 1)


def vit_stem(x, w, b, cls, pos, lw, lb):
    y = F.conv2d(x, w, b, stride=w.shape[-1]).flatten(2).transpose(1, 2)
    y = torch.cat([cls.expand(y.shape[0], -1, -1), y], dim=1) + pos
    return F.layer_norm(y, (y.shape[-1],), lw, lb, 1e-6)


def _inputs(batch=2, d=32, image=32, patch=16, device="cpu"):
    tokens = (image // patch) ** 2
    r = lambda *s: torch.randn(*s, device=device)  # noqa: E731
    return [r(batch, 3, image, image), r(d, 3, patch, patch) * 0.05, r(d), r(1, 1, d), r(1, tokens + 1, d), r(d),
            r(d)]


def _notes(plan):
    return [n for n in plan.rewrites if "patch embedding" in n]


def test_patch_embedding_reads_a_channels_last_image():
    (plan,) = check_inference(vit_stem, _inputs(), PLAN)
    assert _notes(plan) == ["convolution: input arg1_1 converted to channels-last in a region of its own (a "
                            "16x16 patch embedding: cuDNN runs it channels-last and would convert the image "
                            "and its output itself)"], plan.rewrites
    (copy,) = [r for r in plan.regions if r.ops == ["aten.clone.default"]]
    (image,) = copy.outputs
    assert list(image.shape) == [2, 3, 32, 32] and list(image.stride) == [3072, 1, 96, 3]
    compiled = compile_fn(vit_stem, PLAN)
    check_fresh_inputs(compiled, vit_stem, _inputs)


def test_small_images_keep_nchw(monkeypatch):
    from dynamo_nvf.passes import conv_input_layout

    monkeypatch.setattr(conv_input_layout, "MIN_ELEMENTS", 1 << 22)
    (plan,) = check_inference(vit_stem, _inputs(), PLAN)
    assert not _notes(plan), plan.rewrites


def test_small_patches_keep_nchw():
    (plan,) = check_inference(vit_stem, _inputs(patch=4), PLAN)
    assert not _notes(plan), plan.rewrites


def test_a_conv_output_returned_as_it_is_keeps_nchw():
    """The graph's output would come out channels-last: the conversion is undone."""
    def f(x, w):
        return F.conv2d(x, w, stride=16)

    x, w = _inputs()[:2]
    (plan,) = check_inference(f, [x, w], PLAN)
    assert not _notes(plan), plan.rewrites
    compiled = compile_fn(f, PLAN)
    with torch.no_grad():
        assert_same_layout(compiled(x, w), f(x, w))


def test_a_view_the_new_layout_cannot_take_keeps_nchw():
    def f(x, w):
        y = F.conv2d(x, w, stride=16)
        return y.view(y.shape[0], -1) * 2.0  # a view of NCHW memory; channels-last would need a copy

    x, w = _inputs(image=64)[:2]
    (plan,) = check_inference(f, [x, w], PLAN)
    assert not _notes(plan), plan.rewrites


def test_a_graph_reading_memory_by_strides_keeps_nchw():
    """as_strided reads the conv output's memory by explicit strides: the layout must not change."""
    def f(x, w):
        y = F.conv2d(x, w, stride=16)
        return torch.as_strided(y, (2, 16), (16, 1)) * 2.0

    x, w = _inputs()[:2]
    (plan,) = check_inference(f, [x, w], PLAN)
    assert not _notes(plan), plan.rewrites


def test_option_off_keeps_nchw():
    (plan,) = check_inference(vit_stem, _inputs(), {**PLAN, "channels_last_patch_inputs": False})
    assert not _notes(plan)


def test_training_converts_the_image_once_for_forward_and_backward():
    """In a training step the forward's convolution and its backward read one converted image; the
    gradients keep eager's values and strides (the weight gradient contiguous, as eager returns it)."""
    torch.manual_seed(0)
    plans = check_training(vit_stem, _inputs(), PLAN)
    assert len(plans) == 2 and all(_notes(p) for p in plans), [p.rewrites for p in plans]  # the joint graph's note
    copies = [r for p in plans for r in p.regions if r.ops == ["aten.clone.default"]
              and any(list(o.stride) == [3072, 1, 96, 3] for o in r.outputs)]
    assert len(copies) == 1, [r.ops for p in plans for r in p.regions]
    x, *params = _inputs()
    params = [t.requires_grad_() for t in params]
    compiled = compile_fn(vit_stem, PLAN)
    got = torch.autograd.grad(compiled(x, *params).square().sum(), params)
    want = torch.autograd.grad(vit_stem(x, *params).square().sum(), params)
    for g, w in zip(got, want):
        assert g.stride() == w.stride()
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_vit_stem_has_no_cudnn_layout_copies():
    inputs = _inputs(batch=64, d=384, image=224, device="cuda")
    compiled = compile_fn(vit_stem, {"strict": True})
    out, names = steady_state_kernels(compiled, inputs)
    with torch.no_grad():
        want = vit_stem(*inputs)
    # cuDNN runs the same TF32 tensor-op kernel for both layouts (torch.backends.cudnn.allow_tf32).
    assert_same(out, want, rtol=1e-3, atol=1e-3)
    assert_same_layout(out, want)
    assert not any("nchwToNhwc" in n or "nhwcToNchw" in n for n in names), names
    assert "nvfuser" in names[0], names  # the image's conversion
