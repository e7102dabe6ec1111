"""An average pool runs in a region as the sum over its window's taps over ATen's divisor
(passes/pool_taps.py), in inference and in a training step's forward (its backward stays ATen's):
values and strides equal eager's, NCHW and channels-last, for every divisor rule (the window's size,
the in-bounds taps with `count_include_pad=False`, `divisor_override`); pools it declines keep ATen's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf.pool_windows import avg_pool2d_values
from helpers import DEVICES, check_inference, check_training, device_options, tolerance

#: (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override), input size; taken as taps
POOLS = [
    ((3, 1, 1, False, False, None), 12, True),  # PoolFormer's token mixer
    ((3, 1, 1, False, True, None), 12, True),
    ((2, 2, 0, False, True, None), 12, True),   # DenseNet's transitions, ResNet-D's shortcut
    ((3, 2, 1, False, False, None), 12, True),
    ((5, 1, 2, False, False, None), 10, True),
    ((2, 2, 0, False, True, 3), 12, True),      # divisor_override
    ((2, 2, 0, True, True, None), 12, True),    # ceil_mode that does not change the size
    ((3, 2, 1, True, False, None), 12, False),  # ceil_mode that does
    ((3, 2, 1, False, True, None), 11, False),  # a size the stride does not divide
]
IDS = [f"k{p[0]}s{p[1]}p{p[2]}{'c' if p[3] else ''}{'' if p[4] else 'x'}{p[5] or ''}-{n}" for p, n, _ in POOLS]


def _pool(args):
    return dict(zip(("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"),
                    args))


def _block(args):
    def fn(x):
        y = torch.relu(x) - 0.5
        return F.avg_pool2d(y, **_pool(args)) * 2.0 + 1.0
    return fn


def _avg_pools(plans):
    return [n for p in plans if p.kind in ("inference", "forward") for n in p.nodes
            if n.op == "aten.avg_pool2d.default"]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("pool,size,taken", POOLS, ids=IDS)
def test_values_match_aten(pool, size, taken, channels_last):
    x = torch.randn(2, 8, size, size)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    got = avg_pool2d_values(x, *[[v, v] if i < 3 else v for i, v in enumerate(pool)], any_device=True)
    if not taken:
        assert got is None
        return
    expected = F.avg_pool2d(x, **_pool(pool))
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    assert got.stride() == expected.stride()


@pytest.mark.parametrize("pool,size,taken", POOLS, ids=IDS)
def test_inference_and_training_plans(pool, size, taken):
    x = torch.randn(2, 8, size, size).to(memory_format=torch.channels_last)
    plans = check_inference(_block(pool), [x], {"plan_cpu_as_cuda": True})
    assert bool(_avg_pools(plans)) != taken, [(n.op, n.reason) for p in plans for n in p.nodes]
    plans = check_training(_block(pool), [x], {"plan_cpu_as_cuda": True})
    assert bool(_avg_pools(plans)) != taken
    backward = [n.op for p in plans if p.kind == "backward" for n in p.nodes]
    assert "aten.avg_pool2d_backward.default" in backward, backward


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_pools_match_eager(device, dtype):
    """Each geometry taken, channels-last, on nvFuser: values (as ATen's float accumulation) and strides."""
    from dynamo_nvf.runtime.stats import STATS

    rtol, atol = tolerance(dtype)
    for pool, size, taken in POOLS:
        if not taken:
            continue
        STATS.reset()
        x = torch.randn(4, 32, size, size, device=device, dtype=dtype).to(memory_format=torch.channels_last)
        plans = check_inference(_block(pool), [x], device_options(device), rtol=rtol, atol=atol)
        assert not _avg_pools(plans)
        assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0, (pool, STATS.snapshot())
