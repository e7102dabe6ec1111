"""aten.cumsum lowers to a masked sum (`sum(x[k] for k <= i)`): transformers' packed-sequence numbering
(a cumsum of a bool mask between pointwise ops) and a float running sum join one region each, bools
summed in int64 as torch sums them; a scan longer than the masked sum pays for stays in ATen and
says why. CPU tests plan as for CUDA (regions run eagerly); `gpu` tests run real nvFuser, and no
ATen scan kernel."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.runtime.stats import STATS
from dynamo_nvf.ops.lowerings import CUMSUM_MAX_LENGTH
from helpers import check_fresh_inputs, check_inference, compile_fn, steady_state_kernels, tolerance

ON = {"plan_cpu_as_cuda": True}
CUDA = pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")


def packed_sequence_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """transformers' find_packed_sequence_indices: a new sequence wherever the position does not step by 1."""
    first = position_ids[:, :1] - 1
    steps = torch.diff(position_ids, prepend=first, dim=-1)
    return (steps != 1).cumsum(-1) * 2


def running_mean(x: torch.Tensor, dim: int) -> torch.Tensor:
    return (x * 2).cumsum(dim) / (torch.arange(x.shape[dim], device=x.device) + 1).view(
        [-1 if d == dim % x.dim() else 1 for d in range(x.dim())])


def _positions(device: str = "cpu") -> list:
    starts = torch.tensor([[0, 0, 0, 5, 6, 7, 0, 1], [0, 1, 2, 3, 4, 5, 6, 7]], device=device)
    return [starts + torch.randint(0, 2, (2, 1), device=device)]


def _in_aten(plans) -> list[str]:
    return [n.op for p in plans for n in p.nodes if n.region is None and "trimmed" not in (n.reason or "")]


def test_packed_sequence_ids_are_one_region():
    plans = check_inference(packed_sequence_ids, _positions(), ON)
    assert "aten.cumsum.default" not in _in_aten(plans), _in_aten(plans)
    out = compile_fn(packed_sequence_ids, ON)(*_positions())
    assert out.dtype == torch.int64


@pytest.mark.parametrize("dim", [0, -1])
def test_a_float_running_sum_is_in_a_region(dim):
    x = torch.randn(6, 40)
    plans = check_inference(lambda t: running_mean(t, dim), [x], ON, rtol=1e-5, atol=1e-5)
    assert "aten.cumsum.default" not in _in_aten(plans), _in_aten(plans)


def test_a_cumsum_with_a_dtype_and_along_a_middle_dim_is_in_a_region():
    def fn(x):
        return (x > 0).cumsum(1, dtype=torch.int32) + 1

    plans = check_inference(fn, [torch.randn(3, 9, 4)], ON)
    assert "aten.cumsum.default" not in _in_aten(plans), _in_aten(plans)


def test_a_long_scan_stays_in_aten_and_says_why():
    def fn(x):
        return (x * 2).cumsum(-1) + 1

    plans = check_inference(fn, [torch.randn(2, CUMSUM_MAX_LENGTH + 1)], ON, rtol=1e-4, atol=1e-4)
    reasons = [n.reason for p in plans for n in p.nodes if n.op == "aten.cumsum.default"]
    assert len(reasons) == 1 and "masked sum" in reasons[0], reasons


def _no_scan_kernel(compiled, inputs) -> None:
    _, kernels = steady_state_kernels(compiled, inputs)
    assert kernels and not any("scan" in k.lower() or "cumsum" in k.lower() for k in kernels), kernels


@pytest.mark.gpu
@CUDA
def test_gpu_packed_sequence_ids_run_on_nvfuser():
    STATS.reset()
    compiled = compile_fn(packed_sequence_ids)
    check_fresh_inputs(compiled, packed_sequence_ids, lambda: _positions("cuda"), calls=3)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
    _no_scan_kernel(compiled, _positions("cuda"))


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("dim", [0, -1])
def test_gpu_a_float_running_sum_runs_on_nvfuser(dim, dtype):
    def fn(t):
        return running_mean(t, dim)

    STATS.reset()
    rtol, atol = tolerance(dtype)
    compiled = compile_fn(fn)
    check_fresh_inputs(compiled, fn, lambda: [torch.randn(64, 512, device="cuda", dtype=dtype)], rtol,
                       max(atol, 1e-4), calls=3)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
    _no_scan_kernel(compiled, [torch.randn(64, 512, device="cuda", dtype=dtype)])
