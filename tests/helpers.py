"""Shared test helpers: compile by backend name, compare with eager (values, strides, gradients)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pytest
import torch
import torch._dynamo
from torch._prims_common import check_significant_strides

import dynamo_nvf  # noqa: F401  (registers the backend)
from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import recording
from dynamo_nvf.ops.metadata import RESHAPE_OPS
from dynamo_nvf.ops.registry import op_name
from dynamo_nvf.passes.batch_buffer_updates import UPDATE_OPS

REPO = Path(__file__).resolve().parents[1]
#: Ops that write a graph's new buffer values back into its inputs (explain() lists them as eager nodes).
WRITE_BACK = frozenset({"aten.copy_.default", *(str(op) for op in UPDATE_OPS)})


def env_with_repo() -> dict[str, str]:
    """The environment with the repository on PYTHONPATH: a child process imports this checkout's
    dynamo_nvf whether or not the package is installed."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def assert_child_prints_ok(code: str, timeout: float) -> None:
    """Runs `code` in a fresh Python (a crash ends only the child) and asserts it printed "ok" last."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env_with_repo(), capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), \
        f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


#: Run a test on the CPU (regions planned as for CUDA, run eagerly) and, where CUDA and nvFuser
#: exist, on the GPU (marked `gpu`).
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=[
        pytest.mark.gpu,
        pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser"),
    ]),
]


def device_options(device: str, **gpu_options: Any) -> dict[str, Any]:
    """Backend options for a DEVICES test: plan CPU tensors as CUDA ones, or the GPU options."""
    return {"plan_cpu_as_cuda": True} if device == "cpu" else dict(gpu_options)

TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 2e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES.get(dtype, (0.0, 0.0))


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def assert_same(actual: Any, expected: Any, rtol: Optional[float] = None, atol: Optional[float] = None) -> None:
    """Values within dtype tolerance, same dtype, same shape, same significant strides."""
    actual_list, expected_list = _flatten(actual), _flatten(expected)
    assert len(actual_list) == len(expected_list)
    for a, e in zip(actual_list, expected_list):
        if not isinstance(e, torch.Tensor):
            assert a == e
            continue
        assert isinstance(a, torch.Tensor)
        assert_same_layout(a, e)
        r, t = tolerance(e.dtype)
        torch.testing.assert_close(a, e, rtol=rtol if rtol is not None else r, atol=atol if atol is not None else t,
                                   equal_nan=True)


def assert_same_layout(a: torch.Tensor, e: torch.Tensor) -> None:
    """Same dtype, same shape, same significant strides."""
    assert a.dtype == e.dtype, (a.dtype, e.dtype)
    assert a.shape == e.shape, (a.shape, e.shape)
    same, _ = check_significant_strides(a, e, only_cuda=False)
    assert same, f"strides differ: compiled {a.stride()} vs eager {e.stride()} for shape {tuple(e.shape)}"


def assert_as_close_as_eager(actual: torch.Tensor, eager: torch.Tensor, reference: torch.Tensor,
                             factor: float = 3.0, floor: float = 1e-6) -> None:
    """`actual` is no further from an f32/f64 `reference` than eager's own result, within `factor`.

    For low-precision sums over thousands of rows (a bf16 weight gradient), the two orders of
    accumulation differ by whole ulps of the result, so an elementwise tolerance against eager is
    either too loose for small values or fails on near-zero ones; the reference error is what tells
    a real bug from rounding (the rule torch._dynamo.utils.same applies with its fp64_ref).
    """
    assert actual.dtype == eager.dtype and actual.shape == eager.shape, (actual.dtype, actual.shape)
    ref = reference.to(torch.float64)
    err = (actual.to(torch.float64) - ref).abs().max().item()
    eager_err = (eager.to(torch.float64) - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= factor * eager_err + floor * max(scale, 1.0), (
        f"max error against the reference {err:.3g} > {factor} x eager's {eager_err:.3g} (scale {scale:.3g})")


def _reference_inputs(inputs: Sequence[Any]) -> list[Any]:
    """The inputs of an f32 reference module: floating tensors as f32 leaves (requiring grad where
    the input did), anything else (ids, masks, Python values) as it is."""
    return [x.detach().float().requires_grad_(x.requires_grad)
            if isinstance(x, torch.Tensor) and x.dtype.is_floating_point else x for x in inputs]


def _low_precision(value: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.dtype in (torch.bfloat16, torch.float16) for t in _flatten(value))


def clone_inputs(inputs: Sequence[Any], requires_grad: bool = False) -> list[Any]:
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            y = x.detach().clone()
            if requires_grad and y.dtype.is_floating_point:
                y.requires_grad_(True)
            out.append(y)
        else:
            out.append(x)
    return out


def compile_fn(fn: Callable[..., Any], options: Optional[dict[str, Any]] = None, **kwargs: Any) -> Callable[..., Any]:
    torch._dynamo.reset()
    return torch.compile(fn, backend="nvf_bookend", options=options or {}, **kwargs)


def check_inference(fn: Callable[..., Any], inputs: Sequence[Any], options: Optional[dict[str, Any]] = None,
                    **tol: Any):
    """Compiles `fn`, runs it under no_grad and compares with eager; returns the recorded plans."""
    compiled = compile_fn(fn, options)
    with torch.no_grad(), recording() as rec:
        actual = compiled(*inputs)
        expected = fn(*inputs)
    assert_same(actual, expected, **tol)
    return rec.plans


def check_fresh_inputs(compiled: Callable[..., Any], fn: Callable[..., Any],
                       make_inputs: Callable[[], Sequence[Any]], rtol: Optional[float] = None,
                       atol: Optional[float] = None, calls: int = 2) -> None:
    """`compiled` against eager `fn` under no_grad on `calls` fresh draws of `make_inputs()`: values,
    dtype, shape and strides (assert_same), so that a plan is checked beyond its tracing inputs."""
    for _ in range(calls):
        fresh = make_inputs()
        with torch.no_grad():
            assert_same(compiled(*fresh), fn(*fresh), rtol, atol)


def check_training(fn: Callable[..., Any], inputs: Sequence[Any], options: Optional[dict[str, Any]] = None,
                   params: Sequence[torch.nn.Parameter] = (), reference: Optional[torch.nn.Module] = None,
                   **tol: Any):
    """Compiles `fn`, runs forward and backward, compares outputs and input/parameter gradients.

    With `reference` (an f32 copy of the module `fn`, its parameters in the order of `params`),
    low-precision gradients are judged against it as eager's are (`assert_as_close_as_eager`): sums
    over rows in another order differ from ATen's by whole ulps.
    """
    compiled = compile_fn(fn, options)
    eager_inputs = clone_inputs(inputs, requires_grad=True)
    comp_inputs = clone_inputs(inputs, requires_grad=True)
    with recording() as rec:
        actual = compiled(*comp_inputs)
        expected = fn(*eager_inputs)
        if reference is not None and _low_precision(expected):
            # A low-precision output rounds f32 math computed in another order than ATen's: two ulps
            # apart at times (bf16 LayerNorm output, H100), so it is judged against the f32 reference.
            ref_out = reference(*_reference_inputs(eager_inputs))
            for a, e, x in zip(_flatten(actual), _flatten(expected), _flatten(ref_out)):
                if isinstance(e, torch.Tensor) and e.dtype in (torch.bfloat16, torch.float16):
                    assert_same_layout(a, e)
                    assert_as_close_as_eager(a, e, x.detach())
                else:
                    assert_same(a, e, **tol)
        else:
            assert_same(actual, expected, **tol)
        grads_out = [torch.randn_like(t) for t in _flatten(expected) if isinstance(t, torch.Tensor) and t.requires_grad]
        outs_a = [t for t in _flatten(actual) if isinstance(t, torch.Tensor) and t.requires_grad]
        outs_e = [t for t in _flatten(expected) if isinstance(t, torch.Tensor) and t.requires_grad]
        param_grads_e = torch.autograd.grad(outs_e, [x for x in eager_inputs if isinstance(x, torch.Tensor) and x.requires_grad] + list(params), grads_out, allow_unused=True)
        param_grads_a = torch.autograd.grad(outs_a, [x for x in comp_inputs if isinstance(x, torch.Tensor) and x.requires_grad] + list(params), grads_out, allow_unused=True)
    exact: Sequence[Optional[torch.Tensor]] = [None] * len(param_grads_e)
    if reference is not None:
        ref_args = _reference_inputs(eager_inputs)
        ref_inputs = [x for x in ref_args if isinstance(x, torch.Tensor) and x.requires_grad]
        ref_params = list(reference.parameters())
        assert len(ref_params) == len(params), "reference's parameters must match params"
        ref_outs = [t for t in _flatten(reference(*ref_args)) if isinstance(t, torch.Tensor) and t.requires_grad]
        exact = torch.autograd.grad(ref_outs, ref_inputs + ref_params, [g.float() for g in grads_out],
                                    allow_unused=True)
    for ga, ge, gx in zip(param_grads_a, param_grads_e, exact):
        if ge is None:
            assert ga is None
            continue
        if gx is not None and ge.dtype in (torch.bfloat16, torch.float16):
            assert_as_close_as_eager(ga, ge, gx)
            continue
        r, t = tolerance(ge.dtype)
        torch.testing.assert_close(ga, ge, rtol=tol.get("rtol", r) * 10, atol=tol.get("atol", t) * 10)
    return rec.plans


def region_ops(plans: Sequence[Any], kind: Optional[str] = None) -> list[list[str]]:
    return [r.ops for p in plans if kind is None or p.kind == kind for r in p.regions]


def cuda_plans(fn: Callable[..., Any], *shapes: Any, options: Optional[dict[str, Any]] = None,
               train: bool = False, dtype: torch.dtype = torch.float32, fake: bool = True) -> list[Any]:
    """The plans a GPU would get, without a GPU.

    fake=True traces `fn` on fake CUDA tensors. Some aten ops cannot run as fake CUDA tensors on a
    CPU-only build (clone with a memory format), so fake=False runs real CPU tensors with
    `plan_cpu_as_cuda`, which plans exactly as for CUDA and runs the regions eagerly.
    `shapes` are tuples (tensor shapes) or plain Python values passed as they are.
    """
    import contextlib

    from torch._subclasses.fake_tensor import FakeTensorMode

    opts = dict(options or {})
    if not fake:
        opts["plan_cpu_as_cuda"] = True
    compiled = compile_fn(fn, opts)
    with FakeTensorMode() if fake else contextlib.nullcontext():
        device = "cuda" if fake else "cpu"
        inputs = [torch.randn(s, device=device).to(dtype).requires_grad_(train) if isinstance(s, tuple) else s
                  for s in shapes]
        with recording() as rec:
            out = compiled(*inputs)
            if train:
                outs = [t for t in _flatten(out) if isinstance(t, torch.Tensor) and t.requires_grad]
                torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
    return rec.plans


def steady_state_kernels(compiled: Callable[..., Any], inputs: Sequence[Any], warmup: int = 5) -> tuple[Any, list[str]]:
    """One steady-state call of `compiled` under no_grad after `warmup` calls (compile, then direct
    launch's checking calls), profiled: its output and the names of the CUDA kernels it ran."""
    with torch.no_grad():
        for _ in range(warmup):
            compiled(*inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            out = compiled(*inputs)
            torch.cuda.synchronize()
    return out, [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


#: The plan names of the reshape ops.
RESHAPE_NAMES = frozenset(op_name(op) for op in RESHAPE_OPS)


def assert_pool_is_one_reduction(plans: Sequence[Any], reduction: str, joined: str, kernel_names: Sequence[str],
                                 on_gpu: bool) -> None:
    """A tiled pool (stride = kernel, no padding) planned as one `reduction` over its phase dims in the
    region that also holds `joined` (an op around it), with no slice; on the GPU that region is the
    one nvFuser kernel of the call and no ATen pool kernel runs."""
    (plan,) = plans
    (region,) = [r for r in plan.regions if reduction in r.compute_ops]
    assert not any("slice" in op for op in region.ops), region.ops
    assert not RESHAPE_NAMES.intersection(region.ops), region.ops  # the split: its inputs' views
    assert joined in region.compute_ops, region.compute_ops
    if on_gpu:
        assert sum("nvfuser" in n for n in kernel_names) == 1 and not any("pool" in n for n in kernel_names), \
            kernel_names
