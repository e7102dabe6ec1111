"""channels_last_regions (on by default): a region reading channels-last activations computes in NHWC order.
BatchNorm + ReLU forward and backward: the region's 4-D inputs are row-major NHWC views, its reductions
run over [0, 1, 2], values, gradients and output strides match eager; NCHW activations, small tensors and
views the rewrite does not know leave the region as it was; the option off leaves every region alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import assert_same_layout, check_inference, check_training

ON = {"plan_cpu_as_cuda": True, "channels_last_regions": True}
#: The convolution's weight gradient sums 8192 products of the BatchNorm backward's input gradient,
#: which the region computes in NHWC order: f32 values of up to ~0.2 differ from eager's by ~1e-4.
GRAD_TOL = {"atol": 1e-4}


def _conv_bn_relu() -> torch.nn.Module:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16),
                            torch.nn.ReLU())
    return m.to(memory_format=torch.channels_last)


def _notes(plans, kind=None):
    return [n for p in plans if kind in (None, p.kind) for n in p.rewrites if "NHWC order" in n]


def _activation_inputs(region):
    return [t for t in region.inputs if len(t.shape) == 4 and t.shape[1] * t.shape[2] > 1 and t.shape[3] > 1]


def _fresh_channels_last_inputs_match_eager(compiled, m, shape) -> None:
    """Two fresh channels-last inputs: `compiled`'s outputs have eager's layout and values."""
    for _ in range(2):
        x = torch.randn(*shape).to(memory_format=torch.channels_last)
        out, expected = compiled(x), m(x)
        assert_same_layout(out, expected)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_batch_norm_training_regions_compute_in_nhwc_order():
    m = _conv_bn_relu()
    x = torch.randn(8, 8, 32, 32).to(memory_format=torch.channels_last)
    plans = check_training(m, [x], ON, params=list(m.parameters()), **GRAD_TOL)
    assert _notes(plans, "forward") and _notes(plans, "backward"), [p.rewrites for p in plans]
    for plan in plans:
        for region in plan.regions:
            acts = _activation_inputs(region)
            assert acts, region.fx_code
            for t in acts:  # [N, H, W, C] row-major: the permuted view the bookend trimmed
                assert list(t.shape)[-1] == 16 and list(t.stride)[-1] == 1, (t.shape, t.stride)
            assert "[0, 2, 3]" not in region.fx_code and "[0, 1, 2]" in region.fx_code, region.fx_code


def test_pooled_head_backward_computes_in_nhwc_order():
    """A global average pool's backward broadcasts [N, C, 1, 1] over H and W (an expand of a 4-D
    value): the BatchNorm + ReLU backward region it joins still computes in NHWC order."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(_conv_bn_relu(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(16, 4)).to(memory_format=torch.channels_last)
    x = torch.randn(8, 8, 32, 32).to(memory_format=torch.channels_last)
    plans = check_training(m, [x], ON, params=list(m.parameters()), **GRAD_TOL)
    backward = [r for p in plans if p.kind == "backward" for r in p.regions if "expand" in r.fx_code]
    assert backward and _notes(plans, "backward"), [p.rewrites for p in plans]
    for region in backward:
        assert "[0, 1, 2]" in region.fx_code and "[0, 2, 3]" not in region.fx_code, region.fx_code
        assert "expand.default(permute_default, [8, 32, 32, 16])" in region.fx_code, region.fx_code
        for t in _activation_inputs(region):
            assert list(t.shape)[-1] == 16 and list(t.stride)[-1] == 1, (t.shape, t.stride)


class _MeanHead(torch.nn.Module):
    """conv-BN-ReLU, then `x.mean((2, 3))` and a Linear (ResNet's head as many nets write it)."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.fc = _conv_bn_relu(), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x).mean((2, 3)))


def test_a_mean_heads_backward_computes_in_nhwc_order():
    """The mean's backward unsqueezes the [N, C] gradient inside the region and expands it over H and W:
    that [N, C, 1, 1] value is permuted and expanded in NHWC order, so the BatchNorm + ReLU backward
    region it joins computes in NHWC order (it stayed NCHW, and nvFuser ran its sums as a transpose and
    an inner reduction)."""
    torch.manual_seed(0)
    m = _MeanHead().to(memory_format=torch.channels_last)
    x = torch.randn(8, 8, 32, 32).to(memory_format=torch.channels_last)
    plans = check_training(m, [x], ON, params=list(m.parameters()), **GRAD_TOL)
    backward = [r for p in plans if p.kind == "backward" for r in p.regions if "expand" in r.fx_code]
    assert len(backward) == 1 and _notes(plans, "backward"), [p.rewrites for p in plans]
    (region,) = backward
    assert "[0, 1, 2]" in region.fx_code and "[0, 2, 3]" not in region.fx_code, region.fx_code
    assert "expand.default(permute_default, [8, 32, 32, 16])" in region.fx_code, region.fx_code
    for t in _activation_inputs(region):
        assert list(t.shape)[-1] == 16 and list(t.stride)[-1] == 1, (t.shape, t.stride)


def test_an_expand_read_outside_the_region_leaves_the_rest_in_nhwc_order():
    """An expanded mean returned as it is: eager lays the pointwise op of that broadcast out NCHW, so
    the expand is not computed NHWC; the BatchNorm + ReLU before it still is, and strides match eager."""
    def f(x):
        y = F.batch_norm(x, None, None, training=True).relu()
        return y, y.mean((2, 3))[:, :, None, None].expand_as(x) + 1

    x = torch.randn(4, 16, 32, 32).to(memory_format=torch.channels_last)
    plans = check_inference(f, [x], ON)
    assert _notes(plans), [p.rewrites for p in plans]


def test_fresh_inputs_outputs_and_strides_match_eager():
    m = _conv_bn_relu().eval()
    compiled = torch.compile(m, backend="nvf_bookend", options=ON)
    with torch.no_grad():
        plans = check_inference(m, [torch.randn(8, 8, 32, 32).to(memory_format=torch.channels_last)], ON)
        assert _notes(plans)
        _fresh_channels_last_inputs_match_eager(compiled, m, (8, 8, 32, 32))


def test_squeeze_excite_gate_and_mean_keep_eager_layout():
    """A mean over H and W with keepdim (an SE block's squeeze) and a gate broadcast over H and W."""
    def se(x, w):
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(s * w.unsqueeze(-1).unsqueeze(-1)), s

    x = torch.randn(4, 16, 32, 32).to(memory_format=torch.channels_last)
    plans = check_inference(se, [x, torch.randn(16)], ON)
    assert _notes(plans)


def test_nchw_small_and_unknown_regions_stay_as_written():
    def norm_relu(x):
        return torch.relu(F.batch_norm(x, None, None, training=True))

    big = torch.randn(8, 16, 32, 32)
    assert not _notes(check_inference(norm_relu, [big], ON))  # NCHW: nothing to gain
    small = torch.randn(2, 4, 4, 4).to(memory_format=torch.channels_last)
    assert not _notes(check_inference(norm_relu, [small], ON))  # under MIN_ELEMENTS

    def flattened(x):  # C, H and W flattened: no view of the NHWC value (a copy), so not rewritten
        return (torch.relu(x) * 2).flatten(1).sum(-1)

    assert not _notes(check_inference(flattened, [big.to(memory_format=torch.channels_last)], ON))


def test_on_by_default_and_off_leaves_every_region_alone():
    m = _conv_bn_relu()
    x = torch.randn(8, 8, 32, 32).to(memory_format=torch.channels_last)
    assert _notes(check_training(m, [x], {"plan_cpu_as_cuda": True}, params=list(m.parameters()), **GRAD_TOL))
    off = {"plan_cpu_as_cuda": True, "channels_last_regions": False}
    assert not _notes(check_training(m, [x], off, params=list(m.parameters()), **GRAD_TOL))


def test_a_region_whose_outputs_eager_lays_out_otherwise_stays_as_written():
    """Two keepdim reductions broadcast together: eager's TensorIterator lays the product out in
    logical (NCHW) order, which a channels-last result would not match."""
    def fn(x):
        return (x.amax(1, keepdim=True) * x.mean(2, keepdim=True)).relu()

    x = torch.randn(4, 16, 32, 32).to(memory_format=torch.channels_last)
    compiled = torch.compile(fn, backend="nvf_bookend", options=ON)
    with torch.no_grad():
        assert not _notes(check_inference(fn, [x], ON))
        assert_same_layout(compiled(x), fn(x))



class _PaddedPoolStem(torch.nn.Module):
    """A convolution, an explicit (asymmetric, "same") pad and a max pool, then BatchNorm and ReLU:
    BiT's stem, and any "same"-padded pool."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.pool = torch.nn.MaxPool2d(3, 2)
        self.norm = torch.nn.BatchNorm2d(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.pool(F.pad(torch.relu(self.conv(x)), (0, 1, 0, 1)))))


def test_a_pad_computes_in_nhwc_order():
    """The pad of a channels-last activation is padded in memory order (its widths permuted): the
    region reads and writes row-major NHWC tensors, values and strides as eager's, in inference and
    in training."""
    torch.manual_seed(0)
    m = _PaddedPoolStem().to(memory_format=torch.channels_last)
    x = torch.randn(8, 8, 32, 32).to(memory_format=torch.channels_last)
    check_training(m, [x], ON, params=list(m.parameters()), **GRAD_TOL)
    plans = check_inference(m.eval(), [x], ON)
    forward = [r for p in plans for r in p.regions]
    pads = [r for r in forward if "constant_pad_nd" in r.fx_code]
    assert pads and all("[0, 0, 0, 1, 0, 1]" in r.fx_code for r in pads), [r.fx_code for r in forward]
    for region in pads:
        assert "[0, 3, 1, 2]" not in region.fx_code, region.fx_code  # no permute back to NCHW dims inside
        for t in region.inputs:
            if len(t.shape) >= 4 and t.shape[-1] == 16:
                assert list(t.stride)[-1] == 1, (t.shape, t.stride)
    assert _notes(plans), [p.rewrites for p in plans]
    with torch.no_grad():
        compiled = torch.compile(m, backend="nvf_bookend", options=ON)
        _fresh_channels_last_inputs_match_eager(compiled, m, (8, 8, 32, 32))


def test_a_region_of_one_op_computes_in_nhwc_order():
    """A lone pad of a channels-last activation (BiT's stem, before a later pass fuses it into the
    next region) is planned in NHWC order too; values and strides as eager's."""
    def pad(x):
        return F.pad(x, (0, 1, 0, 1))

    x = torch.randn(2, 16, 64, 64).to(memory_format=torch.channels_last)
    plans = check_inference(pad, [x], {**ON, "min_region_size": 1})
    assert _notes(plans), [p.rewrites for p in plans]
    ((region,),) = [p.regions for p in plans]
    assert "[0, 0, 0, 1, 0, 1]" in region.fx_code, region.fx_code


@pytest.mark.parametrize("hoist_permutes", [True, False], ids=["hoisted", "not_hoisted"])
def test_a_permute_read_outside_keeps_eager_strides(hoist_permutes):
    """A permute of a broadcast of two keepdim reductions (which TensorIterator lays out in logical
    order) read outside the region: neither channels_last_regions (which would compute it as it is)
    nor hoist_permutes (which would permute the operands) gives it other strides than eager's."""

    def fn(x):
        x = x * 2
        s = x.sum((2, 3), keepdim=True) * x.sum(1, keepdim=True)
        return s.permute(0, 2, 3, 1)

    x = torch.randn(8, 16, 32, 32).to(memory_format=torch.channels_last)
    compiled = torch.compile(fn, backend="nvf_bookend", options={**ON, "hoist_permutes": hoist_permutes})
    out, expected = compiled(x), fn(x)
    assert out.stride() == expected.stride()
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-3)


class _DenseLayers(torch.nn.Module):
    """Two DenseNet layers: each concatenates every feature map before it along the channels, then
    BatchNorm, ReLU and a convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.conv1 = torch.nn.BatchNorm2d(16), torch.nn.Conv2d(16, 8, 3, padding=1, bias=False)
        self.norm2, self.conv2 = torch.nn.BatchNorm2d(24), torch.nn.Conv2d(24, 8, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.conv1(torch.relu(self.norm1(x)))
        b = self.conv2(torch.relu(self.norm2(torch.cat([x, a], 1))))
        return torch.cat([x, a, b], 1)


def test_a_concatenation_of_channels_last_maps_computes_in_nhwc_order():
    """DenseNet's concatenation along the channels of channels-last feature maps joins the region in
    NHWC order (along its last dim there), forward and backward: the region reads and writes
    row-major NHWC tensors, values, gradients and strides as eager's."""
    torch.manual_seed(0)
    m = _DenseLayers().to(memory_format=torch.channels_last)
    x = torch.randn(8, 16, 32, 32).to(memory_format=torch.channels_last)
    plans = check_training(m, [x], ON, params=list(m.parameters()), **GRAD_TOL)
    cats = [r for p in plans if p.kind == "forward" for r in p.regions if "cat.default" in r.fx_code]
    assert cats, [r.fx_code for p in plans for r in p.regions]
    for region in cats:
        assert ", 3)" in region.fx_code.split("cat.default", 1)[1].split("\n")[0], region.fx_code
        for t in _activation_inputs(region):
            assert list(t.stride)[-1] == 1, (t.shape, t.stride)
    assert _notes(plans, "forward"), [p.rewrites for p in plans]
    with torch.no_grad():
        m.eval()
        plans = check_inference(m, [x], ON)
        assert [r for p in plans for r in p.regions if "cat.default" in r.fx_code] and _notes(plans)
        compiled = torch.compile(m, backend="nvf_bookend", options=ON)
        _fresh_channels_last_inputs_match_eager(compiled, m, (8, 16, 32, 32))


class _CrossStage(torch.nn.Module):
    """A CSP net's cross stage: a convolution's channels split in halves, one half through a
    BatchNorm + LeakyReLU + convolution block, then both concatenated again and normalized."""

    def __init__(self) -> None:
        super().__init__()
        self.expand, self.bn0 = torch.nn.Conv2d(8, 32, 1, bias=False), torch.nn.BatchNorm2d(32)
        self.block, self.bn1 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16)
        self.bn2 = torch.nn.BatchNorm2d(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.leaky_relu(self.bn0(self.expand(x)), 0.01)
        shortcut, half = y.split(16, dim=1)
        half = F.leaky_relu(self.bn1(self.block(half)), 0.01)
        return F.leaky_relu(self.bn2(torch.cat([shortcut, half], 1)), 0.01)


def test_split_and_sliced_halves_of_channels_last_maps_compute_in_nhwc_order():
    """A CSP net's halves: the split (a channel slice of a channels-last map, not dense) joins its
    region in NHWC order, as does the backward region that concatenates a sliced gradient with the
    block's (cutting along the last dim there); values, gradients and strides as eager's. In logical
    NCHW order nvFuser ran CSPDarkNet-53's such regions as transposes (zoo, H200: 1.96x inductor's
    kernel time)."""
    torch.manual_seed(0)
    m = _CrossStage().to(memory_format=torch.channels_last)
    x = torch.randn(8, 8, 32, 32).to(memory_format=torch.channels_last)
    plans = check_training(m, [x], ON, params=list(m.parameters()), **GRAD_TOL)
    cut = [(p.kind, r) for p in plans for r in p.regions if "split.Tensor" in r.fx_code or "cat.default" in r.fx_code]
    assert {k for k, _ in cut} == {"forward", "backward"}, [(p.kind, r.fx_code) for p in plans for r in p.regions]
    for _, region in cut:
        line = next(ln for ln in region.fx_code.split("\n") if "split.Tensor" in ln or "cat.default" in ln)
        assert line.rstrip().split(";")[0].endswith(", 3)"), region.fx_code  # the channels: last in NHWC
        for t in _activation_inputs(region):
            assert list(t.stride)[-1] == 1, (t.shape, t.stride)
