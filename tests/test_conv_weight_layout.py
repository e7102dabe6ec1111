"""Under CUDA graphs, a convolution with a channels-last input gets its NCHW weight converted to
channels-last in a region of its own (channels_last_conv_weights), and a lone pointwise op that
broadcasts into a channels-last result (the convolution's bias add) is a region; without graphs both
stay with ATen. A weight computed by ops nvFuser takes (weight standardization) is written
channels-last by the region that computes it, with or without graphs. Depthwise weights (already
channels-last) and NCHW inputs are left alone. Values, strides and gradients match eager; on the GPU
the graph replays nvFuser's kernels for both and no ATen copy or add, and a standardized weight
costs no ATen copy without graphs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf import nvf as nvf_env

from helpers import (assert_as_close_as_eager, assert_same, assert_same_layout, check_inference, check_training,
                     compile_fn, steady_state_kernels, tolerance)

GRAPHS = {"plan_cpu_as_cuda": True, "cuda_graphs": True}


def down(x, w, b):
    """ConvNeXt's downsampling layer: a 2x2 stride-2 convolution with bias."""
    return F.conv2d(x, w, b, stride=2)


def _inputs(device="cpu", dtype=torch.float32, channels_last=True, cin=8, cout=16, hw=8):
    x = torch.randn(2, cin, hw, hw, device=device, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    return [x, torch.randn(cout, cin, 2, 2, device=device, dtype=dtype) / 4,
            torch.randn(cout, device=device, dtype=dtype)]


def std_conv(x, w):
    """timm's StdConv2d (BiT, NFNets): the weight standardized per output channel on every call."""
    o = w.shape[0]
    ws = F.batch_norm(w.reshape(1, o, -1), None, None, training=True, momentum=0., eps=1e-6).reshape_as(w)
    return F.conv2d(x, ws, None, padding=1) * 2.0 + 1.0


def _std_inputs(device="cpu", dtype=torch.float32, cin=8, cout=16, hw=6):
    x = torch.randn(2, cin, hw, hw, device=device, dtype=dtype).to(memory_format=torch.channels_last)
    return [x, torch.randn(cout, cin, 3, 3, device=device, dtype=dtype)]


def _weight_regions(plan):
    return [r for r in plan.regions if r.compute_ops == ["aten.clone.default"]]


@pytest.mark.parametrize("sizes", [{}, {"cin": 16, "cout": 64, "hw": 64}], ids=["small", "large"])
def test_graphs_convert_the_weight_and_fuse_the_bias_add(sizes):
    """Large: an output channels_last_regions takes into NHWC order; the lone add is still a region."""
    (plan,) = check_inference(down, _inputs(**sizes), GRAPHS)
    assert [n.split(":")[0] for n in plan.rewrites if "converted to channels-last" in n] == ["convolution"], plan.rewrites
    (weight,) = _weight_regions(plan)
    assert "memory_format = torch.channels_last" in weight.fx_code, weight.fx_code
    (w_in,) = weight.inputs
    (w_out,) = weight.outputs
    cin = sizes.get("cin", 8)
    assert list(w_in.stride) == [4 * cin, 4, 2, 1] and list(w_out.stride) == [4 * cin, 1, 2 * cin, cin], (w_in, w_out)
    adds = [r for r in plan.regions if r.compute_ops == ["aten.add.Tensor"]]
    assert len(adds) == 1, [r.ops for r in plan.regions]
    assert not plan.eager_nodes or all(n.op != "aten.add.Tensor" for n in plan.eager_nodes)


def test_only_a_strided_broadcast_is_a_lone_region_under_graphs():
    """Same-shape lone ops (an optimizer step's) and row-major broadcasts stay with ATen under graphs."""
    x = torch.randn(2, 8, 4, 4).to(memory_format=torch.channels_last)
    bias = torch.randn(8, 1, 1)
    cases = {
        "channels-last broadcast": (lambda a, b: a + b, [x, bias], 1),
        "same shape, channels-last": (lambda a, b: a + b, [x, x.clone()], 0),
        "row-major broadcast": (lambda a, b: a + b, [x.contiguous(), bias], 0),
    }
    for name, (fn, inputs, regions) in cases.items():
        (plan,) = check_inference(fn, inputs, GRAPHS)
        assert len(plan.regions) == regions, (name, [r.ops for r in plan.regions])
        (plan,) = check_inference(fn, inputs, {"plan_cpu_as_cuda": True})
        assert plan.regions == [], name  # without graphs: the single-op policy


def test_without_graphs_aten_keeps_both():
    (plan,) = check_inference(down, _inputs(), {"plan_cpu_as_cuda": True})
    assert plan.regions == [] and not any("channels-last" in n for n in plan.rewrites), plan.rewrites


@pytest.mark.parametrize("options", [{"plan_cpu_as_cuda": True}, GRAPHS], ids=["no-graphs", "graphs"])
def test_a_computed_weight_is_written_channels_last_by_the_region_that_computes_it(options):
    (plan,) = check_inference(std_conv, _std_inputs(), options)
    assert [n.split(":")[0] for n in plan.rewrites if "written channels-last" in n] == ["convolution"], plan.rewrites
    assert not _weight_regions(plan), [r.ops for r in plan.regions]
    (std,) = [r for r in plan.regions if "aten.var_mean.correction" in r.compute_ops]
    assert "aten.clone.default" in std.compute_ops, std.compute_ops
    (w_out,) = std.outputs  # row-major [O, kh, kw, I]: channels-last once permuted back to [O, I, kh, kw]
    assert list(w_out.shape) == [16, 3, 3, 8] and list(w_out.stride) == [72, 24, 8, 1], w_out
    (back,) = [d for d in std.trailing if d.op == "aten.permute.default"]
    assert back.action == "trimmed", back


def test_a_weight_computed_in_aten_stays_with_aten_without_graphs():
    def mm_weight(x, a, b):
        return F.conv2d(x, (a @ b).view(16, 8, 3, 3), None, padding=1) * 2.0 + 1.0

    x, _ = _std_inputs()
    (plan,) = check_inference(mm_weight, [x, torch.randn(16, 4), torch.randn(4, 72)], {"plan_cpu_as_cuda": True})
    assert not any("channels-last" in n for n in plan.rewrites), plan.rewrites
    assert not any("aten.clone.default" in r.compute_ops for r in plan.regions), [r.ops for r in plan.regions]


def test_training_gradients_match_with_a_computed_weight_written_channels_last():
    torch.manual_seed(0)
    plans = check_training(std_conv, _std_inputs(), {"plan_cpu_as_cuda": True})
    converted = {p.kind: any("written channels-last" in n for n in p.rewrites) for p in plans}
    assert converted == {"forward": True, "backward": False}, converted


def test_option_off_keeps_atens_weight_copy():
    (plan,) = check_inference(down, _inputs(), {**GRAPHS, "channels_last_conv_weights": False})
    assert not _weight_regions(plan) and not any("channels-last" in n for n in plan.rewrites)


def test_nchw_input_and_depthwise_weight_are_left_alone():
    # (channels_last_convs would run this convolution channels-last: the weight rule is tested without it)
    (plan,) = check_inference(down, _inputs(channels_last=False), {**GRAPHS, "channels_last_convs": False})
    assert not _weight_regions(plan)

    def depthwise(x, w, b):
        return F.conv2d(x, w, b, padding=1, groups=x.shape[1])

    x = torch.randn(2, 8, 6, 6).to(memory_format=torch.channels_last)
    (plan,) = check_inference(depthwise, [x, torch.randn(8, 1, 3, 3), torch.randn(8)], GRAPHS)
    assert not _weight_regions(plan)


def test_one_weight_read_by_two_convolutions_is_converted_once():
    def twice(x, w, b):
        return down(x, w, b), down(x * 2.0, w, None)

    (plan,) = check_inference(twice, _inputs(), GRAPHS)
    assert len(_weight_regions(plan)) == 1, [r.ops for r in plan.regions]


def test_training_gradients_match_with_converted_weights():
    torch.manual_seed(0)
    plans = check_training(down, _inputs(), GRAPHS)
    converted = {p.kind: any("channels-last" in n for n in p.rewrites) for p in plans}
    assert converted == {"forward": True, "backward": True}, converted


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_graph_replays_nvfusers_copy_and_add():
    dtype = torch.bfloat16
    inputs = _inputs("cuda", dtype, cin=96, cout=192, hw=56)
    for t in inputs:  # static: no copies into the graph's input buffers
        torch._dynamo.mark_static_address(t)
    compiled = compile_fn(down, {"cuda_graphs": True, "strict": True})
    with torch.no_grad():
        for _ in range(3):  # warm-up, record, replay
            compiled(*inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            out = compiled(*inputs)
            torch.cuda.synchronize()
        assert_same(out, down(*inputs), *tolerance(dtype))
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert sum("nvfuser" in n for n in names) == 2, names
    assert not any("at::native" in n for n in names), names


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_a_standardized_weight_costs_no_aten_copy_without_graphs():
    """ATen's convolution copies an NCHW weight into channels-last on every call (a copy kernel);
    written channels-last by its region, the weight needs none. With the option off the copy is
    there, so the test sees the difference."""
    dtype = torch.bfloat16
    inputs = _std_inputs("cuda", dtype, cin=64, cout=64, hw=28)
    copies = {}
    for on in (True, False):
        compiled = compile_fn(std_conv, {"channels_last_conv_weights": on, "strict": True})
        out, names = steady_state_kernels(compiled, inputs)
        # bf16 sums over 576 taps of a weight rounded once more or less: judged against an f32
        # reference, as eager's own result is
        eager = std_conv(*inputs)
        assert_same_layout(out, eager)
        assert_as_close_as_eager(out, eager, std_conv(*(t.float() for t in inputs)))
        copies[on] = [n for n in names if "copy" in n.lower() or "nchwToNhwc" in n]
    assert copies[True] == [] and copies[False], copies
