"""Stability on the GPU: many calls with varying shapes, layouts and dtypes keep the caches bounded and
host and GPU memory flat. NVF_STABILITY_CALLS sets the number of calls (default 10,000)."""

from __future__ import annotations

import os
import resource

import pytest
import torch
import torch._dynamo

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import recording
from dynamo_nvf.runtime.region import RegionRuntime
from dynamo_nvf.runtime.stats import STATS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser"),
]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def test_ten_thousand_calls_stay_bounded_and_flat():
    calls = int(os.environ.get("NVF_STABILITY_CALLS", "10000"))

    def f(x):
        return torch.sigmoid(x * 2) + x.sum(-1, keepdim=True)

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="nvf_bookend", options={"fusion_cache_size": 4}, dynamic=True)
    STATS.reset()
    shapes = [(r, c) for r in (3, 8, 17, 64) for c in (5, 32, 100)]
    dtypes = [torch.float32, torch.bfloat16]
    inputs = []
    for i, (r, c) in enumerate(shapes):
        for dtype in dtypes:
            x = torch.randn(r, c, device="cuda", dtype=dtype)
            inputs.append(x if i % 3 else torch.randn(c, r, device="cuda", dtype=dtype).t())
    with recording() as rec:
        for x in inputs:  # warm up every variant
            compiled(x)
    torch.cuda.synchronize()
    gpu_before, rss_before = torch.cuda.memory_allocated(), _rss_mb()
    for i in range(calls):
        x = inputs[i % len(inputs)]
        out = compiled(x)
        if i % 997 == 0:
            torch.testing.assert_close(out, f(x), rtol=2e-2, atol=2e-2)
    del out
    torch.cuda.synchronize()
    gpu_after, rss_after = torch.cuda.memory_allocated(), _rss_mb()
    runtimes = [n.target for gm in rec.graph_modules for n in gm.graph.nodes if isinstance(n.target, RegionRuntime)]
    print(f"stability: {calls} calls, GPU memory {gpu_before / 2**20:.1f} -> {gpu_after / 2**20:.1f} MiB, "
          f"host RSS {rss_before:.1f} -> {rss_after:.1f} MiB, {STATS.snapshot()}")
    assert runtimes and all(len(r._by_descriptor) <= 4 and len(r._by_exact) <= 32 for r in runtimes)
    assert STATS.fallbacks == 0 and STATS.nvfuser_calls >= calls
    assert gpu_after - gpu_before <= 1 * 2**20
    assert rss_after - rss_before <= 64
