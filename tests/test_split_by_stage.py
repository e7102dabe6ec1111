"""A region no single nvFuser scheduler takes runs as pieces, one per stage of its reductions
(runtime/split_region.split_by_stage): the pieces' structure and values on the CPU, and on the GPU a
BatchNorm training step that nvFuser would segment, run as pieces with eager's results."""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

import pytest

from dynamo_nvf.runtime.split_region import keeps_innermost_dim, run_pieces, split_by_stage
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


def _assert_same_outputs(got, want) -> None:
    """The pieces' (or the runtime's) outputs are the region's, bit for bit, none missing."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _run_pieces(region: GraphModule, pieces, *args):
    """The pieces run as their FX modules, in order, on `args`."""
    return run_pieces(region, pieces, [p.module for p in pieces])(*args)


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
    _assert_same_outputs(_run_pieces(region, pieces, *args), region(*args))


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
    _assert_same_outputs(_run_pieces(region, pieces, *args), region(*args))


def test_views_of_the_statistics_get_a_piece_without_compute():
    """A BatchNorm forward also returns its mean squeezed to [C] (saved for the backward): a view of
    what the statistics piece wrote, run by PyTorch, not an output of a compute piece."""
    from dynamo_nvf.runtime.split_region import computes

    def forward(x, running_mean):
        var, mean = torch.var_mean(x, [0, 2, 3], correction=0, keepdim=True)
        y = (x - mean) * torch.rsqrt(var + 1e-5)
        return y.relu(), running_mean * 0.9 + mean.squeeze() * 0.1, mean.squeeze()

    args = [torch.randn(4, 8, 5, 5).to(memory_format=torch.channels_last), torch.randn(8)]
    region = make_fx(forward)(*args)
    pieces = split_by_stage(region)
    # the statistics; the activation; the running mean; the saved mean, a view
    assert pieces is not None and [computes(p.module) for p in pieces] == [True, True, True, False]
    _assert_same_outputs(_run_pieces(region, pieces, *args), region(*args))


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
    _assert_same_outputs(_run_pieces(region, pieces, x), region(x))


def test_the_innermost_dim_is_the_smallest_stride_that_is_not_a_broadcast():
    def means(c, x):
        return c.expand(64, 16).mean(0), x.mean(0), x.t().mean(1)

    region = make_fx(means)(torch.randn(64, 1), torch.randn(64, 16))
    reductions = [n for n in region.graph.nodes if n.op == "call_function" and "mean" in str(n.target)]
    # an expanded column's mean over its rows reads memory along dim 0; a row-major [64, 16]'s over dim 0
    # keeps its contiguous dim; its transpose's over dim 1 too
    assert [keeps_innermost_dim(n) for n in reductions] == [False, True, True]


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
    f64 copy); the regions no scheduler takes whole ran as pieces. By default, without CUDA graphs,
    none did."""
    from test_batch_norm import _large_steps

    STATS.reset()
    plans = _large_steps(device, dtype, device_options(device, split_by_stage=True), steps=3)
    assert _stage_pieces(plans), [(r.name, r.executor, r.executor_reason) for p in plans for r in p.regions]
    assert STATS.stage_split_regions > 0 and STATS.fallbacks == 0, STATS.snapshot()
    whole = _large_steps(device, dtype, device_options(device), steps=2)
    assert not _stage_pieces(whole)


# --------------------------------------------------------------------------------------------------
# The runtime's decision, on the CPU: nvFuser's answer stubbed, every piece running eagerly
# --------------------------------------------------------------------------------------------------


class _Oracle:
    def __init__(self, answer):
        self.answer = answer

    def schedulers(self, region):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _runtime(monkeypatch, answer, **options):
    """A RegionRuntime of the BatchNorm backward region, as if nvFuser were there (its pieces and the
    whole region then find CPU inputs and run eagerly), the oracle answering `answer`."""
    from dynamo_nvf.plan import RegionPlan
    from dynamo_nvf.runtime import region as region_module
    from dynamo_nvf.settings import Settings

    monkeypatch.setattr(region_module, "oracle_for", lambda settings: _Oracle(answer))
    gm = make_fx(_batch_norm_backward)(*_inputs())
    plan = RegionPlan(id=0, name="nvf_region_0", ops=[], nodes=[], fx_code=gm.code)
    runtime = region_module.RegionRuntime(gm, plan, Settings(**options))
    runtime._nvf = object()
    return runtime, gm


@pytest.mark.parametrize("answer,split", [((), True), (("reduction",), False), (None, False),
                                          (RuntimeError("no answer"), False)],
                         ids=["segments", "one_kernel", "unknown", "raises"])
def test_the_runtime_splits_only_where_nvfuser_has_no_single_scheduler(monkeypatch, answer, split):
    STATS.reset()
    runtime, gm = _runtime(monkeypatch, answer, split_by_stage=True)
    for _ in range(2):
        args = _inputs()
        _assert_same_outputs(runtime(*args), gm(*args))
    assert (runtime.plan.executor == "pieces") == split, (runtime.plan.executor, runtime.plan.executor_reason)
    assert len(runtime.plan.pieces) == (2 if split else 0)
    assert STATS.stage_split_regions == int(split) and STATS.fallbacks == 0, STATS.snapshot()


@pytest.mark.parametrize("options,split", [({}, False), ({"cuda_graphs": True}, True),
                                           ({"cuda_graphs": True, "split_by_stage": False}, False),
                                           ({"split_by_stage": True}, True)],
                         ids=["default", "default_graphs", "off_graphs", "on"])
def test_by_default_on_with_cuda_graphs_and_off_without(monkeypatch, options, split):
    """split_by_stage=None (the default) splits where CUDA graphs replay the pieces without host time."""
    STATS.reset()
    runtime, gm = _runtime(monkeypatch, (), **options)
    runtime(*_inputs())
    assert (runtime.plan.executor == "pieces") == split and STATS.stage_split_regions == int(split)


@pytest.mark.parametrize("value", [1, "on"])
def test_split_by_stage_takes_a_bool_or_none(value):
    from dynamo_nvf.settings import Settings

    assert Settings.from_options({"split_by_stage": None}).split_by_stage is None
    assert Settings.from_options({"split_by_stage": True}).splits_by_stage()
    with pytest.raises(TypeError, match="bool or None"):
        Settings.from_options({"split_by_stage": value})


def test_when_every_piece_fails_the_region_runs_in_eager_with_one_warning(monkeypatch):
    """Every piece's build fails: each piece, then the region, runs in eager; the whole region is
    never built after its pieces failed, and the region warns and counts once."""
    from dynamo_nvf.runtime import region as region_module

    builds = []

    def failing_build(*args, **kwargs):
        builds.append(args[1])
        raise RuntimeError("nvFuser refused")

    monkeypatch.setattr(region_module.nvf_env, "nvfuser_available", lambda: True)
    monkeypatch.setattr(region_module.nvf_env, "nvfuser_module", lambda: object())
    monkeypatch.setattr(region_module, "_runs_on_nvfuser", lambda args, home=None: "")
    monkeypatch.setattr(region_module, "build_fusion", failing_build)
    STATS.reset()
    runtime, gm = _runtime(monkeypatch, (), split_by_stage=True)
    with pytest.warns(RuntimeWarning, match="a piece of nvf_region_0"):
        for _ in range(3):
            args = _inputs()
            _assert_same_outputs(runtime(*args), gm(*args))
    assert len(builds) == 2 and gm not in builds  # one build per piece, never the whole region
    assert runtime.failed and runtime.plan.executor == "eager", runtime.plan.executor_reason
    assert STATS.fallbacks == 1 and STATS.split_regions == 0, STATS.snapshot()


def test_explain_lists_each_piece_with_how_it_launches(monkeypatch):
    """explain()'s text names each piece, its executor and its launch (direct, or why fec.execute)."""
    from dynamo_nvf.plan import GraphPlan
    from dynamo_nvf.plan_text import render_plan_text

    runtime, _ = _runtime(monkeypatch, (), split_by_stage=True)
    runtime(*_inputs())
    runtime.plan.pieces[0].launch = "fec.execute (an output no kernel writes)"
    text = render_plan_text(GraphPlan(kind="backward", graph_id=0, regions=[runtime.plan]))
    assert "nvf_region_0.piece0" in text and "nvf_region_0.piece1" in text, text
    assert "launch: fec.execute (an output no kernel writes)" in text, text
