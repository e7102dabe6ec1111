"""Awkward inputs never crash and never change results: on the CPU (regions planned as for CUDA and run
eagerly) and, where CUDA and nvFuser exist, on the GPU through nvFuser."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from helpers import DEVICES, assert_same, compile_fn, device_options



def fn(x):
    return torch.sigmoid(x * 2) + x.sum(-1, keepdim=True) if x.dim() else torch.sigmoid(x * 2) + 1


def run_both(f, inputs, device, **tol):
    compiled = compile_fn(f, device_options(device))
    expected = f(*inputs)
    actual = compiled(*inputs)
    assert_same(actual, expected, **tol)
    return compiled


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_cpu_scalar_and_device_inputs(device):
    x = torch.randn(8, 8, device=device)
    s = torch.tensor(3.0)  # 0-dim CPU tensor
    run_both(lambda a, b: torch.exp(a) * b + a, [x, s], device)


@pytest.mark.parametrize("device", DEVICES)
def test_complex_inputs(device):
    x = torch.randn(8, 8, dtype=torch.complex64, device=device)
    run_both(lambda a: a * 2 + a.conj(), [x], device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16])
def test_small_integer_inputs(device, dtype):
    x = torch.randint(0, 10, (8, 8), dtype=dtype, device=device)
    run_both(lambda a: a * 2 + 1, [x], device)


@pytest.mark.parametrize("device", DEVICES)
def test_zero_size_tensors(device):
    x = torch.randn(0, 8, device=device)
    run_both(lambda a: torch.exp(a) * 2 + 1, [x], device)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_and_expanded_inputs(device):
    base = torch.randn(16, 32, device=device)
    run_both(lambda a: torch.exp(a) * 2 + 1, [base.t()], device)
    run_both(lambda a: torch.exp(a) * 2 + 1, [base[:, ::2]], device)
    run_both(lambda a: torch.exp(a) * 2 + 1, [torch.randn(16, 1, device=device).expand(16, 32)], device)


@pytest.mark.parametrize("device", DEVICES)
def test_rank_nine(device):
    x = torch.randn(*([2] * 9), device=device)
    run_both(lambda a: torch.exp(a) * 2 + 1, [x], device)


@pytest.mark.parametrize("device", DEVICES)
def test_dtype_change_between_calls(device):
    f = lambda a: torch.tanh(a) * 3 + 1  # noqa: E731
    compiled = compile_fn(f, device_options(device))
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float32):
        x = torch.randn(8, 8, device=device).to(dtype)
        assert_same(compiled(x), f(x))


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_ops_on_inputs(device):
    def f(a, b):
        a.mul_(2).add_(1)
        return torch.exp(a) + b

    x, y = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    x_eager, x_comp = x.clone(), x.clone()
    expected = f(x_eager, y)
    actual = compile_fn(f, device_options(device))(x_comp, y)
    assert_same(actual, expected)
    assert_same(x_comp, x_eager)  # the mutation of the input happened too


@pytest.mark.parametrize("device", DEVICES)
def test_requires_grad_changes_between_calls(device):
    f = lambda a: torch.sigmoid(a) * a + 1  # noqa: E731
    compiled = compile_fn(f, device_options(device))
    x = torch.randn(8, 8, device=device)
    assert_same(compiled(x), f(x))
    xg = x.clone().requires_grad_(True)
    out = compiled(xg)
    out.sum().backward()
    xe = x.clone().requires_grad_(True)
    f(xe).sum().backward()
    assert_same(xg.grad, xe.grad)
    assert_same(compiled(x), f(x))


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_that_alias_each_other(device):
    base = torch.randn(8, 16, device=device)
    a, b = base[:, :8], base[:, 8:]
    run_both(lambda p, q: torch.exp(p) * q + p, [a, b], device)
    run_both(lambda p, q: torch.exp(p) * q + p, [base, base], device)


@pytest.mark.parametrize("device", DEVICES)
def test_cpu_tensors_always_run_eagerly(device):
    x = torch.randn(8, 8)  # CPU, whatever the device under test
    run_both(lambda a: torch.exp(a) * 2 + 1, [x], device)
