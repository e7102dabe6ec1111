"""GPU: a stack of identical blocks builds and compiles each distinct fusion once (real nvFuser)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import programs

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import recording
from dynamo_nvf.runtime.fusion_cache import SHARED_FUSIONS
from dynamo_nvf.runtime.stats import STATS
from helpers import assert_same, compile_fn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser"),
]


@pytest.mark.parametrize("depth", [4, 8])
def test_identical_blocks_compile_each_fusion_once(depth):
    torch.manual_seed(0)
    model = nn.Sequential(*[programs.ResidualBlock(64) for _ in range(depth)]).cuda()
    x = torch.randn(4, 32, 64, device="cuda", requires_grad=True)
    SHARED_FUSIONS.clear()
    STATS.reset()
    with recording() as rec:
        out = compile_fn(model, {"strict": True})(x)
        out.sum().backward()
    expected = model(x.detach().clone())
    assert_same(out.detach(), expected.detach(), rtol=1e-4, atol=1e-4)
    regions = [r for p in rec.plans for r in p.regions]
    distinct = {r.fusion_key for r in regions}
    assert STATS.fusions_built == len(distinct) < len(regions)
    assert STATS.fusions_reused == len(regions) - len(distinct)
    assert STATS.fallbacks == 0 and all(r.executor == "nvfuser" for r in regions)
