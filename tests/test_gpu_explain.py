"""explain() on the GPU: nvFuser's segments, schedulers and times, checked against torch.profiler."""

from __future__ import annotations

import pytest
import torch

import dynamo_nvf
from dynamo_nvf import nvf as nvf_env

import programs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason=f"needs CUDA and nvFuser: {nvf_env.unavailable_reason()}"),
]


def test_seed001_report_shows_segments_that_agree_with_torch_profiler():
    args = [1.0, 2.0, 3.0, 4.0] + [torch.randn(16, 512, 4096, device="cuda") for _ in range(3)]
    report = dynamo_nvf.explain(programs.seed001_bias_gelu_backward, *args)
    print(report)
    (graph,) = report.graphs
    (region,) = graph.regions
    assert region.executor == "nvfuser"
    assert region.profile_source == "nvfuser_direct.PythonProfiler", region.profile_source
    schedulers = sorted(k.scheduler for k in region.kernels)
    assert region.segments == len(region.kernels) == 2, schedulers
    assert any("reduction" in s for s in schedulers) and any("pointwise" in s for s in schedulers), schedulers
    assert all(k.time_ms is not None and k.time_ms > 0 for k in region.kernels)
    assert report.kernels_nvfuser == len(region.kernels)
    assert report.totals()["kernels_eager"] == 0


def test_gpt_block_report_forward_and_backward():
    model = programs.TransformerBlock(256, 8).cuda()
    x = torch.randn(4, 128, 256, device="cuda", requires_grad=True)
    report = dynamo_nvf.explain(model, x)
    print(report)
    assert [g.kind for g in report.graphs] == ["forward", "backward"]
    regions = [r for g in report.graphs for r in g.regions]
    assert regions and all(r.executor == "nvfuser" for r in regions), [(r.name, r.executor_reason) for r in regions]
    profiled = sum(len(r.kernels) for r in regions)
    assert profiled == report.kernels_nvfuser
