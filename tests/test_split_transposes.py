"""split_transposes: a large transposed read that a concatenation reads (ViT's patch tokens before the
CLS concat) moves into a region of its own that writes it row-major; small ones, transposes no
concatenation reads, backward graphs and the option off keep one region. Values and output strides
match eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf import nvf as nvf_env
from helpers import (assert_same, assert_same_layout, check_fresh_inputs, check_inference, check_training,
                     compile_fn, steady_state_kernels, tolerance)

PLAN = {"plan_cpu_as_cuda": True}


def patch_tokens(x, b, cls, pos, w, bb):
    """ViT's stem after its convolution: bias, flatten and transpose to tokens, CLS concat, position
    embedding, the first LayerNorm."""
    y = (x + b.view(-1, 1, 1)).flatten(2).transpose(1, 2)
    y = torch.cat([cls.expand(y.shape[0], -1, -1), y], dim=1) + pos
    return F.layer_norm(y, (y.shape[-1],), w, bb, 1e-6)


def _inputs(batch=4, d=256, side=32, device="cpu", dtype=torch.float32):
    r = lambda *s: torch.randn(*s, device=device, dtype=dtype)  # noqa: E731
    return [r(batch, d, side, side), r(d), r(1, 1, d), r(1, side * side + 1, d), r(d), r(d)]


def _notes(plan):
    return [n for n in plan.rewrites if n.startswith("transpose ")]


def test_large_transposed_tokens_get_a_region_of_their_own():
    inputs = _inputs()  # tokens [4, 1024, 256]: 1M elements
    (plan,) = check_inference(patch_tokens, inputs, PLAN)
    assert _notes(plan) == ["transpose transpose: 5 node(s) split into a region of their own that writes its "
                            "result row-major for cat (a concatenation reading a transpose)"], plan.rewrites
    transposing = [r for r in plan.regions if "aten.transpose.int" in r.ops]
    (first,) = transposing
    assert first.ops[-1] == "aten.clone.default", first.ops
    (tokens,) = first.outputs
    assert list(tokens.shape) == [4, 1024, 256] and list(tokens.stride) == [1024 * 256, 256, 1]
    (second,) = [r for r in plan.regions if "aten.cat.default" in r.ops]
    assert "aten.transpose.int" not in second.ops and "aten.var_mean.correction" in second.ops
    assert any(list(t.shape) == [4, 1024, 256] and list(t.stride) == [1024 * 256, 256, 1] for t in second.inputs)
    compiled = compile_fn(patch_tokens, PLAN)
    check_fresh_inputs(compiled, patch_tokens, _inputs)


def test_small_tokens_stay_in_one_region():
    (plan,) = check_inference(patch_tokens, _inputs(batch=2, d=32, side=4), PLAN)
    assert not _notes(plan), plan.rewrites
    assert len(plan.regions) == 1


def test_a_transpose_no_concatenation_reads_is_not_split():
    def f(x, b, w, bb):
        y = (x + b.view(-1, 1, 1)).flatten(2).transpose(1, 2)
        return F.layer_norm(y, (y.shape[-1],), w, bb, 1e-6)

    x, b, _, _, w, bb = _inputs()
    plans = check_inference(f, [x, b, w, bb], PLAN)
    assert not any(_notes(p) for p in plans)


@pytest.mark.parametrize("reader", ["transpose", "row_sum"])
def test_other_readers_of_the_transpose_keep_its_view(reader, monkeypatch):
    """Only the concatenation reads the row-major copy: another reader of the transposed tokens (a
    transpose back, a sum over the last dim) keeps reading the view its strides were planned for."""
    from dynamo_nvf.passes import split_transposes

    monkeypatch.setattr(split_transposes, "MIN_ELEMENTS", 1)

    def f(x, b, cls, pos, w, bb):
        y = (x + b.view(-1, 1, 1)).flatten(2).transpose(1, 2)
        tokens = torch.cat([cls.expand(y.shape[0], -1, -1), y], dim=1) + pos
        other = y.transpose(1, 2) * 3 if reader == "transpose" else (y * 3).sum(-1)
        return F.layer_norm(tokens, (tokens.shape[-1],), w, bb, 1e-6), other

    inputs = _inputs(batch=2, d=12, side=4)
    plans = check_inference(f, inputs, PLAN)
    assert any(_notes(p) for p in plans), [p.rewrites for p in plans]
    compiled = compile_fn(f, PLAN)
    fresh = _inputs(batch=2, d=12, side=4)
    with torch.no_grad():
        for got, want in zip(compiled(*fresh), f(*fresh)):
            assert_same(got, want)
            assert_same_layout(got, want)


def test_option_off_keeps_one_region():
    (plan,) = check_inference(patch_tokens, _inputs(), {**PLAN, "split_transposes": False})
    assert not _notes(plan)
    assert len(plan.regions) == 1


def test_training_splits_the_forward_only():
    torch.manual_seed(0)
    plans = check_training(patch_tokens, _inputs(), PLAN)
    split = {p.kind: bool(_notes(p)) for p in plans}
    assert split == {"forward": True, "backward": False}, split


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_vit_stem_runs_a_transpose_kernel_then_the_norm():
    dtype = torch.float32
    inputs = _inputs(batch=64, d=384, side=14, device="cuda", dtype=dtype)
    compiled = compile_fn(patch_tokens, {"strict": True})
    out, names = steady_state_kernels(compiled, inputs)
    with torch.no_grad():
        want = patch_tokens(*inputs)
    assert_same(out, want, *tolerance(dtype))
    assert_same_layout(out, want)
    nvf = [n for n in names if "nvfuser" in n]
    assert len(nvf) == 2 and "transpose" in nvf[0], names
    assert not any("at::native" in n for n in names), names
