"""A region no single nvFuser scheduler takes runs as pieces, one per stage of its reductions
(runtime/split_region.split_by_stage): the pieces' structure and values on the CPU, and on the GPU a
BatchNorm training step that nvFuser would segment, run as pieces with eager's results."""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

import pytest

from dynamo_nvf.runtime.split_region import run_pieces, split_by_stage
from dynamo_nvf.runtime.stats import STATS

from helpers import DEVICES, device_options


def _batch_norm_backward(dy, x, mean, rstd, weight, mask):
    """A ReLU and BatchNorm backward as a training graph's region computes it: two column sums, then
    the input gradient that reads them."""
    dy = torch.where(mask, dy, 0)
    xhat = (x - mean[None, :, None, None]) * rstd[None, :, None, None]
    dbias, dweight = dy.sum([0, 2, 3]), (dy * xhat).sum([0, 2, 3])
    n = x.numel() / x.shape[1]
    dx = (dy - dbias[None, :, None, None] / n - xhat * (dweight[None, :, None, None] / n)) \
        * (rstd * weight)[None, :, None, None]
    return dx, dbias, dweight


def _inputs() -> list[torch.Tensor]:
    """Channels-last activations, as the conv-net layout plan gives a BatchNorm on the GPU."""
    def activation() -> torch.Tensor:
        return torch.randn(4, 8, 5, 5).to(memory_format=torch.channels_last)

    return [activation(), activation(), torch.randn(8), torch.rand(8) + 0.5, torch.randn(8), activation() > 0.3]


def _reductions(module: GraphModule) -> list[str]:
    return [n.name for n in module.graph.nodes if n.op == "call_function" and any(r in str(n.target) for r in ("sum", "mean"))]


def test_column_sums_share_a_piece_and_the_gradient_that_reads_them_gets_another():
    region = make_fx(_batch_norm_backward)(*_inputs())
    pieces = split_by_stage(region)
    assert pieces is not None and len(pieces) == 2
    sums, gradient = pieces
    assert len(_reductions(sums.module)) == 2 and [w.name for w in sums.writes] == _reductions(region)
    assert not _reductions(gradient.module)
    assert set(sums.writes) <= set(gradient.reads)  # the sums go through memory; the rest is recomputed
    args = _inputs()
    run = run_pieces(region, pieces, [p.module for p in pieces])
    for got, want in zip(run(*args), region(*args)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_per_channel_outputs_get_a_piece_apart_from_the_normalised_activation():
    """A BatchNorm forward's last piece: the normalised activation in one piece, the new running
    mean (per channel) in another, both reading the statistics piece's results."""
    def forward(x, running_mean):
        var, mean = torch.var_mean(x, [0, 2, 3], correction=0)
        y = (x - mean[None, :, None, None]) * torch.rsqrt(var + 1e-5)[None, :, None, None]
        return y.relu(), running_mean * 0.9 + mean * 0.1

    args = [torch.randn(4, 8, 5, 5).to(memory_format=torch.channels_last), torch.randn(8)]
    region = make_fx(forward)(*args)
    pieces = split_by_stage(region)
    assert pieces is not None and len(pieces) == 3
    assert [tuple(p.writes[0].meta["val"].shape) for p in pieces[1:]] == [(4, 8, 5, 5), (8,)]
    run = run_pieces(region, pieces, [p.module for p in pieces])
    for got, want in zip(run(*args), region(*args)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_chain_of_reductions_gets_one_piece_per_stage():
    def normalise(x):
        mean = x.mean(0, keepdim=True)
        var = ((x - mean) ** 2).mean(0, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5)

    x = torch.randn(64, 16)
    region = make_fx(normalise)(x)
    pieces = split_by_stage(region)
    assert pieces is not None and len(pieces) == 3
    assert [len(_reductions(p.module)) for p in pieces] == [1, 1, 0]
    run = run_pieces(region, pieces, [p.module for p in pieces])
    torch.testing.assert_close(run(x)[0], region(x)[0], rtol=0, atol=0)


def test_row_reductions_pointwise_regions_or_random_numbers_are_not_split():
    """A softmax's max and sum (one persistent kernel on nvFuser), the same BatchNorm backward over
    NCHW tensors (its sums reduce the innermost dim), pointwise ops only, a dropout."""
    def softmax(x):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)

    assert split_by_stage(make_fx(softmax)(torch.randn(8, 32))) is None
    nchw = [a.contiguous() for a in _inputs()]
    assert split_by_stage(make_fx(_batch_norm_backward)(*nchw)) is None
    region = make_fx(lambda x: (x.relu() + 1, x * 2))(torch.randn(8, 4))
    assert split_by_stage(region) is None
    dropout = make_fx(lambda x: torch.nn.functional.dropout(x - x.mean(0), 0.5, True))(torch.randn(8, 4))
    assert split_by_stage(dropout) is None


# --------------------------------------------------------------------------------------------------
# GPU: real nvFuser
# --------------------------------------------------------------------------------------------------


def _stage_pieces(plans) -> list[str]:
    return [r.name for p in plans for r in p.regions
            if r.executor == "pieces" and "stage of reductions" in r.executor_reason]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_a_batch_norm_nvfuser_would_segment_runs_as_stage_pieces(device, dtype):
    """[8, 64, 128, 128] channels-last BatchNorm + SiLU training steps with split_by_stage on: outputs,
    gradients and running statistics as eager's (test_batch_norm._large_steps checks them against an
    f64 copy); the regions no scheduler takes whole ran as pieces. By default none did."""
    from test_batch_norm import _large_steps

    STATS.reset()
    plans = _large_steps(device, dtype, device_options(device, split_by_stage=True), steps=3)
    assert _stage_pieces(plans), [(r.name, r.executor, r.executor_reason) for p in plans for r in p.regions]
    assert STATS.stage_split_regions > 0 and STATS.fallbacks == 0, STATS.snapshot()
    whole = _large_steps(device, dtype, device_options(device), steps=2)
    assert not _stage_pieces(whole)
