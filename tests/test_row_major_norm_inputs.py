"""row_major_norm_inputs: a region that normalizes the rows of a token tensor held transposed in memory
(MLP-Mixer's residual stream, [B, T, C] stored [B, C, T]) reads a row-major copy that a region of its
own writes, in the forward and the backward; small tensors, channels-last activations and the option
off keep the strided read. Values, gradients and output strides match eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf.passes import row_major_norm_inputs as pass_module
from helpers import check_inference, check_training

PLAN = {"plan_cpu_as_cuda": True}
B, C, SIDE = 4, 64, 8  # tokens [4, 64, 64]: 16 thousand elements


@pytest.fixture
def small_tensors_count(monkeypatch):
    """Test shapes stand in for Mixer's 4.8 million-element tokens."""
    monkeypatch.setattr(pass_module, "MIN_ELEMENTS", 1)


def mixer_block(image, w, b, ln_w, ln_b, fc_w):
    """A patch convolution's output as tokens, a residual token-mixing MLP, a LayerNorm."""
    x = F.conv2d(image, w, b, stride=2).flatten(2).transpose(1, 2)  # [B, T, C] held [B, C, T]
    mixed = F.linear(F.layer_norm(x, (C,), ln_w, ln_b).transpose(1, 2), fc_w).transpose(1, 2)
    x = x + mixed
    return F.layer_norm(x, (C,), ln_w, ln_b).sum(1)


def _inputs(batch=B):
    torch.manual_seed(0)
    image = torch.randn(batch, 3, 2 * SIDE, 2 * SIDE)
    params = [torch.randn(C, 3, 2, 2) * 0.3, torch.randn(C) * 0.1, 1 + 0.1 * torch.randn(C), 0.1 * torch.randn(C),
              torch.randn(SIDE * SIDE, SIDE * SIDE) * 0.1]
    return image, [torch.nn.Parameter(p) for p in params]


def _copy_regions(plan):
    return [r for r in plan.regions if r.ops == ["aten.clone.default"]]


def _notes(plans):
    return [n for p in plans for n in p.rewrites if "read row-major from a copy" in n]


def test_transposed_tokens_are_copied_row_major_for_the_norms_forward_and_backward(small_tensors_count):
    image, params = _inputs()
    plans = check_training(lambda x: mixer_block(x, *params), [image], PLAN, params=params)
    forward = next(p for p in plans if p.kind == "forward")
    backward = next(p for p in plans if p.kind == "backward")
    for plan in (forward, backward):
        copies = _copy_regions(plan)
        assert copies, (plan.kind, [r.ops for r in plan.regions])
        for region in copies:
            (out,) = region.outputs
            assert list(out.stride) == [SIDE * SIDE * C, C, 1], (plan.kind, out)
            (src,) = region.inputs
            assert list(src.stride)[-2:] == [1, SIDE * SIDE], (plan.kind, src)
        norms = [r for r in plan.regions if r not in copies and any(
            op.startswith("aten.var_mean") or op == "aten.sum.dim_IntList" for op in r.ops)]
        transposed = [(r.name, t.name) for r in norms for t in r.inputs
                      if list(t.shape) == [B, SIDE * SIDE, C] and list(t.stride)[-2:] == [1, SIDE * SIDE]]
        assert norms and not transposed, (plan.kind, transposed)
    assert len(_notes(plans)) >= 2


def test_the_option_off_and_small_tensors_keep_the_strided_read(small_tensors_count):
    image, params = _inputs()
    plans = check_training(lambda x: mixer_block(x, *params), [image], {**PLAN, "row_major_norm_inputs": False},
                           params=params)
    assert not _notes(plans) and not any(_copy_regions(p) for p in plans)


def test_small_tokens_are_not_copied():
    image, params = _inputs()
    plans = check_training(lambda x: mixer_block(x, *params), [image], PLAN, params=params)
    assert not _notes(plans)


def test_channels_last_activations_are_not_token_tensors(small_tensors_count):
    """A channels-last [N, C, H, W] tensor's memory order is N, H, W, C: not a transposed token tensor,
    so a norm over its W rows keeps reading it as it is (channels_last_regions plans those)."""
    x = torch.randn(2, 8, 4, 4).to(memory_format=torch.channels_last)

    def fn(x):
        return F.layer_norm(x.relu(), (4,)).sin()

    (plan,) = check_inference(fn, [x], PLAN)
    assert not _copy_regions(plan)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        tokens = torch.empty(2, 16, 8).transpose(1, 2)
        channels_last = torch.empty(2, 8, 4, 4).to(memory_format=torch.channels_last)
    assert pass_module.is_transposed_tokens(tokens)
    assert not pass_module.is_transposed_tokens(channels_last)
    assert not pass_module.is_transposed_tokens(mode.from_tensor(torch.empty(2, 8, 16)))


def test_a_copy_is_made_just_before_its_first_reader(small_tensors_count):
    """In the backward graph the transposed tensors are saved inputs: each copy is made where its norm
    region first reads it (after the other copies that region reads), not at the graph's start, so no
    copy is held longer than its reader needs."""
    image, params = _inputs()
    plans = check_training(lambda x: mixer_block(x, *params), [image], PLAN, params=params)
    backward = next(p for p in plans if p.kind == "backward")
    names = [n.name for n in backward.nodes]
    compute = {n.name for n in backward.nodes if n.region is not None}
    copies = [r.nodes[0] for r in _copy_regions(backward)]
    assert copies
    for copy in copies:
        at = names.index(copy)
        reader = next(i for i, n in enumerate(backward.nodes) if copy in n.inputs)
        between = [names[i] for i in range(at + 1, reader) if names[i] in compute and names[i] not in copies]
        assert not between, (copy, between)
