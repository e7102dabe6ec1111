"""hoist_permutes: a permute fed by pointwise ops inside a region moves onto the region's inputs where
that makes them row-major (ConvNeXt's channels-last LayerNorm), so the region reads the NHWC view;
where the region normalises over the permuted last dim an NCHW input is hoisted onto as a strided view;
elsewhere (a strided permute without a norm, a producer read twice, the option off) the region keeps
its permute.
Values and output strides match eager."""

from __future__ import annotations

import torch

from helpers import assert_same_layout, check_inference, check_training
from programs import bias_permute_layer_norm

PLAN = {"plan_cpu_as_cuda": True}


def _inputs(channels_last: bool = True, dtype: torch.dtype = torch.float32):
    x = torch.randn(2, 8, 5, 5, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    return [x, *(torch.randn(8, dtype=dtype) for _ in range(3))]


def _region(plans):
    (plan,) = plans
    (region,) = plan.regions
    return plan, region


def test_channels_last_layer_norm_reads_the_nhwc_view():
    inputs = _inputs()
    plan, region = _region(check_inference(bias_permute_layer_norm, inputs, PLAN))
    assert "aten.permute.default" not in region.ops, region.ops
    (x_in,) = [t for t in region.inputs if len(t.shape) == 4 and t.shape[0] == 2]
    assert list(x_in.shape) == [2, 5, 5, 8] and list(x_in.stride) == [200, 40, 8, 1]  # row-major NHWC
    assert any(note.startswith("permute ") and "row-major" in note for note in plan.rewrites), plan.rewrites
    compiled = torch.compile(bias_permute_layer_norm, backend="nvf_bookend", options=PLAN)
    for _ in range(2):  # fresh inputs
        fresh = _inputs()
        got, want = compiled(*fresh), bias_permute_layer_norm(*fresh)
        torch.testing.assert_close(got, want)
        assert_same_layout(got, want)


def test_a_cast_between_add_and_permute_is_crossed_too():
    def f(x, bias, w, b):
        y = (x + bias.view(-1, 1, 1)).float().permute(0, 2, 3, 1)
        return torch.nn.functional.layer_norm(y, (y.shape[-1],), w.float(), b.float(), 1e-6)

    _, region = _region(check_inference(f, _inputs(dtype=torch.bfloat16), PLAN, rtol=2e-2, atol=2e-2))
    assert "aten.permute.default" not in region.ops, region.ops


def test_nchw_input_of_a_norm_is_read_as_a_strided_view():
    """LayerNorm2d on an NCHW-contiguous tensor (ConvNeXt's stem): the permute moves onto the input, so
    nvFuser reads the strided NHWC view in its allocation order instead of permuting inside."""
    inputs = _inputs(channels_last=False)
    plan, region = _region(check_inference(bias_permute_layer_norm, inputs, PLAN))
    assert "aten.permute.default" not in region.ops, region.ops
    (x_in,) = [t for t in region.inputs if len(t.shape) == 4 and t.shape[0] == 2]
    assert list(x_in.shape) == [2, 5, 5, 8] and list(x_in.stride) == [200, 5, 1, 25]  # NCHW memory
    assert any("strided views" in note for note in plan.rewrites), plan.rewrites


def test_a_strided_hoist_climbs_a_chain_of_pointwise_ops():
    """Two pointwise ops between the input and the permute: the permute ends on the input, not between
    them (each step's permute feeds the next op, no longer the norm)."""
    def f(x, bias, w, b):
        y = ((x + bias.view(-1, 1, 1)) * 2.0).permute(0, 2, 3, 1)
        return torch.nn.functional.layer_norm(y, (y.shape[-1],), w, b, 1e-6)

    plan, region = _region(check_inference(f, _inputs(channels_last=False), PLAN))
    assert "aten.permute.default" not in region.ops, region.ops
    assert sum("strided views" in note for note in plan.rewrites) == 2, plan.rewrites


def test_a_strided_permute_without_a_norm_is_not_hoisted():
    """An NCHW input permuted to NHWC, then scaled and shifted (no norm): hoisting would hand nvFuser a
    strided view for nothing. sink_permutes moves the permute below the pointwise ops instead (the
    region then computes in NCHW, row-major); without it the region keeps its permute."""
    def f(x, bias, w, b):
        return (x + bias.view(-1, 1, 1)).permute(0, 2, 3, 1) * w + b

    plan, region = _region(check_inference(f, _inputs(channels_last=False), PLAN))
    assert not any("moved above" in note for note in plan.rewrites), plan.rewrites
    assert any("onto the region's output" in note for note in plan.rewrites), plan.rewrites
    assert "aten.permute.default" not in region.ops, region.ops
    _, region = _region(check_inference(f, _inputs(channels_last=False), {**PLAN, "sink_permutes": False}))
    assert "aten.permute.default" in region.ops, region.ops


def test_a_producer_read_twice_keeps_the_permute():
    def f(x, bias, w, b):
        y = x + bias.view(-1, 1, 1)
        z = torch.nn.functional.layer_norm(y.permute(0, 2, 3, 1), (8,), w, b, 1e-6)
        return z, y.sum()

    plans = check_inference(f, _inputs(), PLAN)
    assert any("aten.permute.default" in r.ops for p in plans for r in p.regions)
    assert not any(n.startswith("permute ") for p in plans for n in p.rewrites)


def test_option_off_keeps_the_permute():
    _, region = _region(check_inference(bias_permute_layer_norm, _inputs(), {**PLAN, "hoist_permutes": False}))
    assert "aten.permute.default" in region.ops


def test_training_gradients_match_and_only_forward_graphs_hoist():
    torch.manual_seed(0)
    x, bias, w, b = _inputs()
    plans = check_training(bias_permute_layer_norm, [x, bias, w, b], PLAN)
    hoisted = {p.kind: any(n.startswith("permute ") for n in p.rewrites) for p in plans}
    assert hoisted == {"forward": True, "backward": False}, hoisted
