"""split_channel_statistics: a region that normalises with two BatchNorms (a ResNet bottleneck's main
and shortcut branches, the add and the ReLU) writes only the statistics and its full-size tensors; the
saved reciprocal std and the new running statistics come from a region of their own. CPU plans as for
CUDA (regions run eagerly); values, gradients and buffers against eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from dynamo_nvf.passes.split_channel_statistics import REASON

from helpers import compile_fn
from test_batch_norm import ConvBnBlock, _train_steps


class Bottleneck(nn.Module):
    """A ResNet bottleneck's last stage: conv-BN on the main branch, conv-BN on the shortcut, add, ReLU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 2 * channels, 1, bias=False)
        self.bn = nn.BatchNorm2d(2 * channels)
        self.down = nn.Conv2d(channels, 2 * channels, 1, bias=False)
        self.bn_down = nn.BatchNorm2d(2 * channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)) + self.bn_down(self.down(x)))


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _forward_regions(plans: list) -> list:
    return [r for p in plans if p.kind == "forward" for r in p.regions]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_two_batch_norm_region_writes_only_statistics_and_full_tensors(channels_last):
    torch.manual_seed(0)
    model = Bottleneck(4)
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    plans = _train_steps(model, compiled, (2, 4, 6, 5), channels_last, "cpu", torch.float32)
    regions = _forward_regions(plans)
    norms = [r for r in regions if r.ops.count("aten.var_mean.correction") == 2]
    assert norms, [r.ops for r in regions]
    channels = 8
    for region in norms:
        small = [o.shape for o in region.outputs if 1 < _numel(o.shape) <= channels]
        # the two means and the two variances, nothing computed from them
        assert len(small) == 4 and all(len(s) == 4 for s in small), [o.shape for o in region.outputs]
        assert "aten.rsqrt.default" in region.ops  # still normalises
    stats = [r for r in regions if any(REASON in b for b in r.boundary)]
    assert len(stats) == len(norms), [r.ops for r in regions]
    for region in stats:
        assert "aten.var_mean.correction" not in region.ops
        assert region.ops.count("aten.rsqrt.default") == 2, region.ops
        assert all(_numel(o.shape) <= channels for o in region.outputs), [o.shape for o in region.outputs]
    assert model.bn.num_batches_tracked.item() == 3


def test_regions_with_one_batch_norm_are_left_whole():
    """A basic block's BatchNorms sit in two regions (a convolution between them): nothing is split."""
    torch.manual_seed(0)
    model = ConvBnBlock(8)
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    plans = _train_steps(model, compiled, (2, 8, 6, 6), False, "cpu", torch.float32, steps=2)
    regions = _forward_regions(plans)
    assert sum(r.ops.count("aten.var_mean.correction") for r in regions) == 2
    assert not [r for r in regions if any(REASON in b for b in r.boundary)]
    assert any(o.shape == [8] for r in regions if "aten.var_mean.correction" in r.ops for o in r.outputs)


def test_evaluation_is_left_whole():
    torch.manual_seed(0)
    model = Bottleneck(4).eval()
    with torch.no_grad():
        model.bn.running_var.uniform_(0.5, 2.0)
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    from dynamo_nvf.backend import recording

    x = torch.randn(2, 4, 6, 5)
    with recording() as rec, torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    assert rec.plans and not [r for p in rec.plans for r in p.regions if any(REASON in b for b in r.boundary)]


def test_a_dynamic_batch_is_not_specialised():
    """Sizes are read without guarding on them: a batch marked dynamic compiles once, and is split."""
    torch.manual_seed(0)
    model = Bottleneck(4)
    eager = Bottleneck(4)
    eager.load_state_dict(model.state_dict())
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    from dynamo_nvf.backend import recording

    with recording() as rec:
        for batch in (4, 6, 3):
            x = torch.randn(batch, 4, 6, 5)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(compiled(x), eager(x))
    forward = [p for p in rec.plans if p.kind == "forward"]
    assert len(forward) == 1
    assert [r for r in forward[0].regions if any(REASON in b for b in r.boundary)]


class TwoLayerNorms(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.a, self.b = nn.LayerNorm(width), nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x) + self.b(x * 2))


def test_row_norms_are_not_batch_norms():
    """Two LayerNorms over a 2-D input's rows (statistics that keep dim 0) are left whole."""
    torch.manual_seed(0)
    model = TwoLayerNorms(16)
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    from dynamo_nvf.backend import recording

    x = torch.randn(32, 16, requires_grad=True)
    with recording() as rec:
        compiled(x).sum().backward()
    regions = _forward_regions(rec.plans)
    assert any(r.ops.count("aten.var_mean.correction") == 2 for r in regions), [r.ops for r in regions]
    assert not [r for r in regions if any(REASON in b for b in r.boundary)]


def test_batch_norm_1d_split_says_why():
    """The note sits on the new region's first computing node, which no later pass trims away."""
    torch.manual_seed(0)

    class TwoBatchNorm1d(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.BatchNorm1d(8), nn.BatchNorm1d(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.a(x) + self.b(x * 2))

    model = TwoBatchNorm1d()
    compiled = compile_fn(model, {"plan_cpu_as_cuda": True})
    plans = _train_steps(model, compiled, (4, 8), False, "cpu", torch.float32, steps=2)
    regions = _forward_regions(plans)
    assert sum(any(REASON in b for b in r.boundary) for r in regions) == 1, [r.boundary for r in regions]
