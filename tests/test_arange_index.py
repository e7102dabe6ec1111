"""index_by_aranges_as_views: `t[arange(B)[:, None, None, None], arange(S)[None, None, :, None]]`
(how transformers builds attention masks) becomes `t.view(B, 1, S, 1)`, so the mask's ops join one
region instead of an ATen gather between regions; indexes that are not whole aranges in order, and
returned ones, stay. CPU tests plan as for CUDA (regions run eagerly); the `gpu` test runs nvFuser."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.runtime.stats import STATS
from helpers import check_fresh_inputs, check_inference, compile_fn

ON = {"plan_cpu_as_cuda": True}
INDEX = "aten.index.Tensor"


def packed_sequence_mask(positions: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """transformers' mask: same packed sequence (ids per query and key) and not padding, causal; the
    ids and the padding mask are computed from the inputs, as transformers computes them."""
    batch, length = positions.shape
    ids, padding = positions // 4, attention > 0.2
    device = positions.device
    b = torch.arange(batch, device=device)[:, None, None, None]
    q = (torch.arange(length, device=device) + 0)[None, None, :, None]
    k = torch.arange(length, device=device)[None, None, None, :]
    return (ids[b, q] == ids[b, k]) & padding[b, k] & (k <= q)


def _inputs(batch: int = 2, length: int = 16, device: str = "cpu"):
    positions = torch.arange(length, device=device).repeat(batch, 1) + torch.randint(0, 3, (batch, 1), device=device)
    return [positions, torch.rand(batch, length, device=device)]


def _eager_ops(plan) -> list[str]:
    return [row.op for row in plan.eager_nodes]


def test_a_mask_indexed_by_aranges_is_views_in_one_region():
    plans = check_inference(packed_sequence_mask, _inputs(), ON)
    (plan,) = plans
    assert INDEX not in _eager_ops(plan), _eager_ops(plan)
    assert sum(1 for n in plan.rewrites if "arange_index" in n) == 3, plan.rewrites
    assert len(plan.regions) == 1, [r.ops for r in plan.regions]
    check_fresh_inputs(compile_fn(packed_sequence_mask, ON), packed_sequence_mask, _inputs)


@pytest.mark.parametrize("case", ["part", "order", "step", "returned", "returned_view", "returned_diagonal",
                                  "returned_unfold", "input", "input_diagonal"])
def test_an_index_that_is_not_a_view_stays(case):
    """A part of a dim, aranges out of order, a step of 2, an index the graph returns (or returns an
    alias of: a view, a `diagonal`, an `unfold`, the last two outside METADATA_OPS), and an index of an
    input or of an input's diagonal (its view would alias the caller's tensor) stay `aten.index`;
    values as eager's."""
    def fn(x):
        t = x if case == "input" else x.diagonal(0, 1, 2) if case == "input_diagonal" else x * 1
        whole = t[torch.arange(2)[:, None], torch.arange(6)[None, :]]
        if case == "part":
            return t[torch.arange(2)[:, None], torch.arange(3)[None, :]] * 2
        if case == "order":
            return t[torch.arange(2)[None, :], torch.arange(6)[:, None]] * 2
        if case == "step":
            return t[torch.arange(2)[:, None], torch.arange(0, 6, 2)[None, :]] * 2
        if case == "returned":
            return whole
        if case == "returned_view":
            return whole.unsqueeze(0)
        if case == "returned_diagonal":
            return whole.diagonal(), whole * 2
        if case == "returned_unfold":
            return whole.unfold(1, 2, 2), whole * 2
        return whole * 2

    plans = check_inference(fn, [torch.randn(2, 6, 6) if case == "input_diagonal" else torch.randn(2, 6)], ON)
    assert not any("arange_index" in n for p in plans for n in p.rewrites), [p.rewrites for p in plans]


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_gpu_a_mask_indexed_by_aranges_runs_on_nvfuser():
    """The mask as one region on nvFuser: no fallback, values as eager's on fresh inputs."""
    STATS.reset()
    compiled = compile_fn(packed_sequence_mask)
    check_fresh_inputs(compiled, packed_sequence_mask, lambda: _inputs(4, 128, "cuda"), calls=3)
    assert STATS.fallbacks == 0 and STATS.split_regions == 0 and STATS.nvfuser_calls > 0, STATS
