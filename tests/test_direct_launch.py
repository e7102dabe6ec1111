"""CPU tests of runtime/direct_launch.py's planning: which kernels it takes, the strides it bakes in,
the entry kernel's source, and when the runtime never tries (GPU tests: test_gpu_direct_launch.py)."""

from __future__ import annotations

import ctypes

import pytest
import torch

from dynamo_nvf.runtime import direct_launch as dl
from dynamo_nvf.runtime.region import RegionRuntime
from dynamo_nvf.settings import Settings

def _struct(pointer: int, sizes, strides) -> bytes:
    """An nvFuser Tensor<T, N, N> argument with int64 indices: pointer, sizes, strides."""
    return b"".join(v.to_bytes(8, "little", signed=True) for v in (pointer, *sizes, *strides))


def test_argument_buffers_check_each_argument_is_its_tensors_struct():
    raw = [_struct(0x7F0000001000, [4, 8], [8, 1]), _struct(0x7F0000002000, [4, 8], [8, 1])]
    buffers = dl.argument_buffers(raw, [0x7F0000001000, 0x7F0000002000])
    assert [bytes(b.raw) for b in buffers] == raw
    with pytest.raises(dl.NotDirect, match="not the struct of tensor 1"):
        dl.argument_buffers(raw, [0x7F0000001000, 0x7F0000003000])
    with pytest.raises(dl.NotDirect, match="3 kernel arguments for 2 tensors"):  # a work buffer or a scalar
        dl.argument_buffers(raw + [(7).to_bytes(8, "little")], [0x7F0000001000, 0x7F0000002000])
    with pytest.raises(dl.NotDirect):  # a 4-byte scalar argument
        dl.argument_buffers([raw[0], (3).to_bytes(4, "little")], [0x7F0000001000, 3])


class _RecordingLaunch:
    """Stands in for cuLaunchKernel in this CPU test of the argument patching (GPU tests use the driver)."""

    def __init__(self, result: int = 0) -> None:
        self.calls: list[tuple] = []
        self.result = result

    def __call__(self, function, gx, gy, gz, bx, by, bz, smem, stream, array, extra):
        pointers = [int.from_bytes(ctypes.string_at(array[i], 8), "little") for i in range(self.count)]
        values = tuple(v.value for v in (function, gx, gy, gz, bx, by, bz, smem, stream))
        self.calls.append((values, pointers))
        return self.result


def _kernel(launch, x, out):
    raw = [_struct(x.data_ptr(), x.shape, x.stride()), _struct(out.data_ptr(), out.shape, out.stride())]
    buffers = dl.argument_buffers(raw, [x.data_ptr(), out.data_ptr()])
    launch.count = 2
    config = dl.LaunchConfig((4, 1, 1), (96, 2, 1), 128)
    return dl.DirectKernel(launch, 1234, config, 0, buffers, [x], [out], owner=None, stream=lambda device: 77)


def test_each_call_writes_its_pointers_and_allocates_outputs_like_nvfusers():
    storage = torch.zeros(64 * 8 + 4)
    x = storage[:256].view(32, 8)  # 16-byte aligned (the storage is)
    out = torch.empty_strided((8, 32), (1, 8))  # a transposed output layout
    launch = _RecordingLaunch()
    kernel = _kernel(launch, x, out)
    y = torch.randn(32, 8)
    (result,) = kernel([y])
    assert result.shape == (8, 32) and result.stride() == (1, 8) and result.dtype == out.dtype
    (dims, pointers), = launch.calls
    assert dims == (1234, 4, 1, 1, 96, 2, 1, 128, 77)
    assert pointers == [y.data_ptr(), result.data_ptr()]
    # the sizes and strides bytes after each pointer are the build's
    assert kernel._buffers[0].raw[8:] == _struct(0, x.shape, x.stride())[8:]


def test_other_strides_or_misaligned_inputs_go_back_to_fec_execute():
    x = torch.zeros(32, 8)
    launch = _RecordingLaunch()
    kernel = _kernel(launch, x, torch.empty(8, 32))
    assert kernel([torch.zeros(8, 32).t()]) is None
    assert kernel([torch.zeros(32 * 8 + 1)[1:].view(32, 8)]) is None  # 4 bytes off a 16-byte boundary
    assert launch.calls == []


def test_a_launch_error_raises_for_the_runtime_to_drop_the_launcher():
    x = torch.zeros(32, 8)
    kernel = _kernel(_RecordingLaunch(result=700), x, torch.empty(32, 8))
    with pytest.raises(RuntimeError, match="CUresult 700"):
        kernel([x])


def test_settings_on_by_default_and_off_under_cuda_graphs():
    assert Settings().launches_directly()
    assert not Settings(direct_launch=False).launches_directly()
    assert not Settings.from_options({"direct_launch": False}).launches_directly()
    assert not Settings(cuda_graphs=True).launches_directly()
    assert not Settings().with_mode("reduce-overhead").launches_directly()


def _runtime(fn, settings, *example):
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.plan import RegionPlan

    gm = make_fx(fn)(*example)
    for node in gm.graph.nodes:  # make_fx records `val` on each node, as aot_autograd does
        assert node.op != "placeholder" or "val" in node.meta
    return RegionRuntime(gm, RegionPlan(id=0, name="nvf_region_0", ops=[], nodes=[]), settings)


def test_runtime_tries_only_static_non_random_regions_without_graphs():
    x = torch.randn(4, 8)
    double = lambda t: (t * 2,)  # noqa: E731  (a region returns a tuple)
    assert _runtime(double, Settings(), x)._direct_countdown == 2
    assert _runtime(double, Settings(cuda_graphs=True), x)._direct_countdown == 0
    assert _runtime(double, Settings(direct_launch=False), x)._direct_countdown == 0
    assert _runtime(lambda t: (torch.rand_like(t) * t,), Settings(), x)._direct_countdown == 0


def test_without_nvfuser_a_region_never_builds_a_launcher():
    x = torch.randn(4, 8)
    runtime = _runtime(lambda t: (t * 2,), Settings(), x)
    for _ in range(4):
        torch.testing.assert_close(runtime(x)[0], x * 2)
    assert runtime._direct is None and runtime.plan.launch == ""
