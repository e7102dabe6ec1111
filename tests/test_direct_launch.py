"""CPU tests of runtime/direct_launch.py and its C launcher (runtime/launcher.c): which kernels it
takes, the argument bytes it patches, the work buffers it allocates and zeroes, and when the runtime
never tries. The driver's cuLaunchKernel and cuMemsetD8Async are recording stand-ins here (ctypes
callbacks); the GPU tests (test_gpu_direct_launch.py) use the real driver and nvFuser."""

from __future__ import annotations

import ctypes

import pytest
import torch

from dynamo_nvf.runtime import c_launcher
from dynamo_nvf.runtime import direct_launch as dl
from dynamo_nvf.runtime.region import RegionRuntime
from dynamo_nvf.settings import Settings

def _struct(pointer: int, sizes, strides, index: int = 8) -> bytes:
    """An nvFuser Tensor<T, N, N> argument: pointer, then sizes and strides of `index`-byte integers
    (padded to 8 bytes, as the struct is)."""
    raw = pointer.to_bytes(8, "little") + b"".join(v.to_bytes(index, "little", signed=True) for v in (*sizes, *strides))
    return raw + bytes(-len(raw) % 8)


def _kernel(arguments, name: str = "", function: int = 1234) -> dl.KernelLaunch:
    return dl.KernelLaunch(function, name, dl.LaunchConfig((4, 1, 1), (96, 2, 1), 128), list(arguments))


def test_plan_maps_each_argument_to_its_tensor_by_data_pointer():
    x, out = 0x7F0000001000, 0x7F0000002000
    raw = [_struct(x, [4, 8], [8, 1]), _struct(out, [4, 8], [8, 1])]
    plan = dl.plan_launches([_kernel(raw)], [x], [out])
    assert plan.work == [] and plan.kernels == [(1234, (4, 1, 1, 96, 2, 1, 128), raw, (0, 1), False)]
    # arguments in another order than the region's inputs (the pointer decides, not the position)
    y = 0x7F0000003000
    swapped = [_struct(y, [4], [1]), _struct(x, [4, 8], [8, 1]), _struct(out, [4, 8], [8, 1])]
    assert dl.plan_launches([_kernel(swapped)], [x, y], [out]).kernels[0][3] == (1, 0, 2)
    with pytest.raises(dl.NotDirect, match="no __global__"):  # an unknown pointer needs a declaration
        dl.plan_launches([_kernel(raw)], [x], [0x7F0000009000])
    # two inputs at one address (views of one tensor) share its slot
    assert dl.plan_launches([_kernel(raw)], [x, x], [out]).kernels[0][3] == (0, 2)
    with pytest.raises(dl.NotDirect, match="no kernel writes"):
        dl.plan_launches([_kernel(raw[:1])], [x], [out])


def test_work_buffers_take_slots_after_every_input_and_output_position_when_inputs_share_a_pointer():
    """Inputs x and x (views of one tensor) share slot 0, so the pointers are 3 but the positions 4:
    the work buffer is slot 4, never output 1's slot 3 (an intermediate written into an output)."""
    x, out0, out1, mid = 0x7F0000001000, 0x7F0000002000, 0x7F0000003000, 0x7F0000004000
    first = _kernel([_struct(x, [64, 32], [32, 1]), _struct(mid, [64], [1]), _struct(out0, [64, 32], [32, 1])],
                    "_ZN11CudaCodeGen29nvfuser_reduction_f0_c1_r0_g0E", 1)
    second = _kernel([_struct(x, [64, 32], [32, 1]), _struct(mid, [64], [1]), _struct(out1, [64, 32], [32, 1])],
                     "_ZN11CudaCodeGen29nvfuser_pointwise_f0_c1_r0_g1E", 2)
    source = TWO_SEGMENTS.replace("T3) {}", "T3, Tensor<float, 2, 2> T4) {}", 1)
    plan = dl.plan_launches([first, second], [x, x], [out0, out1], source=lambda: source,
                            output_bytes=[64 * 32 * 4, 64 * 32 * 4])
    assert [k[3] for k in plan.kernels] == [(0, 4, 2), (0, 4, 3)] and plan.work == [(64 * 4, False)]
    # an argument that maps to an output's slot but holds more than the output is refused
    wide = _kernel([_struct(x, [64, 32], [32, 1]), _struct(out0, [64, 64], [64, 1])], "", 1)
    with pytest.raises(dl.NotDirect, match="holds more than the output"):
        dl.plan_launches([wide], [x], [out0], source=lambda: SOURCE.replace(
            "Tensor<float, 1, 1> T4, Tensor<float, 2, 2> T7,\n                              Tensor<int64_t, 1, 1> T8",
            "Tensor<float, 2, 2> T4"), output_bytes=[64 * 32 * 4])


SOURCE = """
__global__ void __launch_bounds__(/*maxThreadsPerBlock=*/256, /*minBlocksPerMultiprocessor=*/1) \
nvfuser_reduction_f0_c1_r0_g0(Tensor<__bfloat, 2, 2> T0, Tensor<float, 1, 1> T4, Tensor<float, 2, 2> T7,
                              Tensor<int64_t, 1, 1> T8) {
  alignas(16) extern __shared__ char array[];
}
"""


def test_kernel_parameters_reads_nvfusers_signature():
    assert dl.kernel_parameters(SOURCE) == [
        "Tensor<__bfloat, 2, 2> T0", "Tensor<float, 1, 1> T4", "Tensor<float, 2, 2> T7", "Tensor<int64_t, 1, 1> T8"]
    assert dl.kernel_parameters("__global__ void __cluster_dims__(2, 1, 1) k(Tensor<float, 1, 1> T0, int64_t i1) {}") \
        == ["Tensor<float, 1, 1> T0", "int64_t i1"]
    with pytest.raises(dl.NotDirect, match="no __global__"):
        dl.kernel_parameters("int main() {}")


def test_work_buffer_bytes_from_the_struct_with_either_index_width():
    assert dl.work_buffer_bytes("Tensor<float, 2, 2> T7", _struct(1 << 40, [132, 768], [768, 1])) == 132 * 768 * 4
    assert dl.work_buffer_bytes("Tensor<float, 2, 2> T7", _struct(1 << 40, [132, 768], [768, 1], index=4)) == 132 * 768 * 4
    assert dl.work_buffer_bytes("Tensor<int64_t, 1, 1> T8", _struct(1 << 40, [3], [1], index=4)) == 24
    # an expanded (stride-0) dim is allocated once, as nvFuser allocates it; logical sizes bound it
    assert dl.work_buffer_bytes("Tensor<__bfloat, 2, 2> T9", _struct(1 << 40, [4, 16], [0, 1])) == 4 * 16 * 2
    with pytest.raises(dl.NotDirect, match="not a tensor"):
        dl.work_buffer_bytes("int64_t i3", (5).to_bytes(8, "little"))
    with pytest.raises(dl.NotDirect, match="unknown dtype"):
        dl.work_buffer_bytes("Tensor<__e2m1, 1, 1> T3", _struct(1 << 40, [8], [1]))


def test_work_buffers_after_the_outputs_sized_from_their_structs_and_zeroed_where_the_graph_zeroes():
    x, out, work, semaphore = 0x7F0000001000, 0x7F0000002000, 0x7F0000003000, 0x7F0000004000
    raw = [_struct(x, [132, 768], [768, 1]), _struct(out, [768], [1]), _struct(work, [132, 768], [768, 1]),
           _struct(semaphore, [3], [1])]
    fill = frozenset({132 * 768, 0, semaphore})  # a fill kernel's argument words: numel, value, pointer
    plan = dl.plan_launches([fill, _kernel(raw)], [x], [out], source=lambda: SOURCE)
    assert plan.work == [(132 * 768 * 4, False), (3 * 8, True)]
    assert plan.kernels[0][3] == (0, 1, 2, 3)
    assert dl.plan_launches([frozenset({semaphore}), _kernel(raw)], [x], [out], source=lambda: SOURCE) == plan
    with pytest.raises(dl.NotDirect, match="zeroes an input or an output"):
        dl.plan_launches([frozenset({out}), _kernel(raw)], [x], [out], source=lambda: SOURCE)
    with pytest.raises(dl.NotDirect, match="not one work buffer"):
        dl.plan_launches([frozenset({0x7F0000009000}), _kernel(raw)], [x], [out], source=lambda: SOURCE)
    with pytest.raises(dl.NotDirect, match="zeroed after a kernel used it"):
        dl.plan_launches([_kernel(raw), frozenset({semaphore}), _kernel(raw)], [x], [out], source=lambda: SOURCE,
                         output_bytes=[768 * 4])
    with pytest.raises(dl.NotDirect, match="declared kernel parameters"):
        dl.plan_launches([_kernel(raw[:3])], [x], [out], source=lambda: SOURCE)


TWO_SEGMENTS = """
__global__ void nvfuser_reduction_f0_c1_r0_g0(Tensor<float, 2, 2> T0, Tensor<float, 1, 1> T3) {}
__global__ void nvfuser_pointwise_f0_c1_r0_g1(Tensor<float, 2, 2> T0, Tensor<float, 1, 1> T3, Tensor<float, 2, 2> T5) {}
"""


def test_segments_share_their_intermediates_by_pointer_and_outputs_may_not_hide_reused_memory():
    x, mean, out = 0x7F0000001000, 0x7F0000005000, 0x7F0000002000
    first = _kernel([_struct(x, [64, 32], [32, 1]), _struct(mean, [64], [1])], "_ZN11CudaCodeGen29nvfuser_reduction_f0_c1_r0_g0E", 1)
    second = _kernel([_struct(x, [64, 32], [32, 1]), _struct(mean, [64], [1]), _struct(out, [64, 32], [32, 1])],
                     "_ZN11CudaCodeGen29nvfuser_pointwise_f0_c1_r0_g1E", 2)
    plan = dl.plan_launches([first, second], [x], [out], source=lambda: TWO_SEGMENTS, output_bytes=[64 * 32 * 4])
    assert [k[0] for k in plan.kernels] == [1, 2]
    assert [k[3] for k in plan.kernels] == [(0, 2), (0, 2, 1)]  # the intermediate is work buffer 0 (slot 2)
    assert plan.work == [(64 * 4, False)]
    # the allocator reused a freed intermediate's memory for the output: before the output's producer,
    # an argument at its address with other bytes is that earlier tensor, with a buffer of its own
    reused = _kernel([_struct(x, [64, 32], [32, 1]), _struct(out, [64], [1])], first.name, 1)
    second_reads = _kernel([_struct(x, [64, 32], [32, 1]), _struct(out, [64], [1]), _struct(out, [64, 32], [32, 1])],
                           second.name, 2)
    plan = dl.plan_launches([reused, second_reads], [x], [out], source=lambda: TWO_SEGMENTS, output_bytes=[64 * 32 * 4])
    assert [k[3] for k in plan.kernels] == [(0, 2), (0, 2, 1)] and plan.work == [(64 * 4, False)]
    # after the producer, an argument at the output's address that reaches past it is refused
    past = _kernel([_struct(x, [64, 32], [32, 1]), _struct(out, [4096], [1])], first.name, 1)
    with pytest.raises(dl.NotDirect, match="reaches past it"):
        dl.plan_launches([second, past], [x], [out], source=lambda: TWO_SEGMENTS, output_bytes=[64 * 32 * 4])


PERSISTENT = """
__global__ void nvfuser_inner_persistent_f0_c1_r0_g1(Tensor<__bfloat, 2, 2> T0, nvfuser_index_t i0, float f1,
                                                     Tensor<__bfloat, 2, 2> T5) {}
"""


def test_scalar_parameters_keep_the_builds_bytes_and_other_non_tensors_are_refused():
    x, out = 0x7F0000001000, 0x7F0000002000
    extent, scale = (768).to_bytes(8, "little"), bytes(ctypes.c_float(0.125))
    raw = [_struct(x, [4, 768], [768, 1]), extent, scale, _struct(out, [4, 768], [768, 1])]
    plan = dl.plan_launches([_kernel(raw)], [x], [out], source=lambda: PERSISTENT)
    assert plan.kernels[0][3] == (0, dl.CONSTANT, dl.CONSTANT, 1) and plan.work == []
    with pytest.raises(dl.NotDirect, match="not a tensor"):  # a struct that may carry pointers
        dl.plan_launches([_kernel(raw + [bytes(8)])], [x], [out],
                         source=lambda: PERSISTENT.replace("T5)", "T5, Array<float, 2> a2)"))
    assert dl.is_scalar("nvfuser_index_t i0") and dl.is_scalar("const float f3")
    assert not dl.is_scalar("Tensor<float, 1, 1> T4") and not dl.is_scalar("TensorMap tm0")
    # the launcher writes the pointers around them and leaves their bytes alone, call after call
    a = torch.zeros(64 * 8 + 4)[:256].view(32, 8)
    driver = _Driver(sizes=[40, 8, 4, 40])
    raw = [_struct(a.data_ptr(), a.shape, a.stride()), extent, scale, _struct(a.data_ptr(), a.shape, a.stride())]
    launcher = dl.make_launcher(driver.address(driver.launch), driver.address(driver.cooperative),
                                driver.address(driver.memset),
                                dl.LaunchPlan([(7, (4, 1, 1, 96, 2, 1, 128), raw, (0, dl.CONSTANT, dl.CONSTANT, 1), False)], []),
                                0, [a], [torch.empty(32, 8)], owner=None,
                                empty=lambda shape, strides, dtype: torch.empty_strided(shape, strides, dtype=dtype),
                                get_device=lambda: 0, get_stream=lambda index: 77)
    assert launcher.constants == 2
    for _ in range(2):
        y = torch.randn(32, 8)
        (result,) = launcher((y,))
        arguments = driver.launches[-1][1]
        assert arguments[1:3] == [extent, scale]
        assert [int.from_bytes(arguments[i][:8], "little") for i in (0, 3)] == [y.data_ptr(), result.data_ptr()]


def test_launch_order_follows_the_graphs_edges():
    assert dl._launch_order([3, 1, 2], [(1, 2), (2, 3)]) == [1, 2, 3]
    with pytest.raises(dl.NotDirect, match="cycle"):
        dl._launch_order([1, 2], [(1, 2), (2, 1)])


_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
_COOPERATIVE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                                ctypes.POINTER(ctypes.c_void_p))
_MEMSET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t, ctypes.c_void_p)


class _Driver:
    """Stands in for cuLaunchKernel, cuLaunchCooperativeKernel and cuMemsetD8Async (CPU memory;
    records every call; a cooperative launch is recorded with `cooperative` as its last value)."""

    def __init__(self, sizes, result: int = 0) -> None:
        self.sizes = sizes  # each argument's byte size
        self.result = result
        self.launches: list[tuple] = []
        self.memsets: list[tuple] = []
        self.launch = _LAUNCH(self._launch)
        self.memset = _MEMSET(self._memset)
        self.cooperative = _COOPERATIVE(
            lambda f, gx, gy, gz, bx, by, bz, smem, stream, params: self._launch(f, gx, gy, gz, bx, by, bz, smem,
                                                                                 stream, params, "cooperative"))

    def _launch(self, function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        arguments = [ctypes.string_at(params[i], size) for i, size in enumerate(self.sizes)]
        self.launches.append(((function, gx, gy, gz, bx, by, bz, smem, stream, extra), arguments))
        return self.result

    def _memset(self, dst, value, size, stream):
        ctypes.memset(dst, value, size)
        self.memsets.append((dst, value, size, stream))
        return 0

    def address(self, callback) -> int:
        return ctypes.cast(callback, ctypes.c_void_p).value


def _launcher(driver, inputs, outputs, work=(), device=0, kernels=1, cooperative=()):
    raw = [_struct(t.data_ptr(), t.shape, t.stride()) for t in (*inputs, *outputs)]
    raw += [_struct(0x7F0000000000 + i, [size], [1]) for i, (size, _) in enumerate(work)]
    slots = tuple(range(len(raw)))
    plan = dl.LaunchPlan([(1234 + k, (4, 1, 1, 96, 2, 1, 128), raw, slots, k in cooperative) for k in range(kernels)],
                         list(work))
    empty = lambda shape, strides, dtype: torch.empty_strided(shape, strides, dtype=dtype)  # noqa: E731
    return dl.make_launcher(driver.address(driver.launch), driver.address(driver.cooperative),
                            driver.address(driver.memset), plan, 0,
                            inputs, outputs, owner=None, empty=empty, get_device=lambda: device,
                            get_stream=lambda index: 77), raw


def test_each_call_writes_its_pointers_and_allocates_outputs_like_nvfusers():
    x = torch.zeros(64 * 8 + 4)[:256].view(32, 8)  # 16-byte aligned (the storage is)
    out = torch.empty_strided((8, 32), (1, 8))  # a transposed output layout
    driver = _Driver(sizes=[40, 40])
    launcher, raw = _launcher(driver, [x], [out])
    y = torch.randn(32, 8)
    (result,) = launcher((y,))
    assert result.shape == (8, 32) and result.stride() == (1, 8) and result.dtype == out.dtype
    (dims, arguments), = driver.launches
    assert dims == (1234, 4, 1, 1, 96, 2, 1, 128, 77, None)
    assert [int.from_bytes(a[:8], "little") for a in arguments] == [y.data_ptr(), result.data_ptr()]
    assert [a[8:] for a in arguments] == [r[8:] for r in raw]  # sizes and strides stay the build's
    assert launcher.launches == 1 and launcher.dims == [((4, 1, 1), (96, 2, 1), 128)] and launcher.work_buffers == 0
    assert driver.memsets == []
    (again,) = launcher([torch.randn(32, 8)])  # any sequence of inputs
    assert again.data_ptr() != 0 and launcher.launches == 2


def test_work_buffers_are_allocated_per_call_and_zeroed_where_nvfuser_zeroes_them():
    x = torch.randn(16, 8)
    driver = _Driver(sizes=[40, 40, 24, 24])
    launcher, _ = _launcher(driver, [x], [torch.empty(16, 8)], work=[(4096, False), (24, True)])
    assert launcher.work_buffers == 2
    launcher((x,))
    (_, arguments), = driver.launches
    semaphore = int.from_bytes(arguments[3][:8], "little")
    assert driver.memsets == [(semaphore, 0, 24, 77)]
    assert int.from_bytes(arguments[2][:8], "little") not in (0, 0x7F0000000000)  # a fresh buffer, not the build's


def test_several_kernels_launch_in_order_with_the_same_pointers():
    x = torch.randn(16, 8)
    driver = _Driver(sizes=[40, 40, 24])
    launcher, _ = _launcher(driver, [x], [torch.empty(16, 8)], work=[(512, True)], kernels=3, cooperative={1})
    (out,) = launcher((x,))
    assert [call[0][0] for call in driver.launches] == [1234, 1235, 1236]
    assert [call[0][-1] for call in driver.launches] == [None, "cooperative", None]  # grid-synchronising kernel
    pointers = {tuple(int.from_bytes(a[:8], "little") for a in arguments) for _, arguments in driver.launches}
    assert len(pointers) == 1 and next(iter(pointers))[:2] == (x.data_ptr(), out.data_ptr())
    assert len(driver.memsets) == 1 and launcher.launches == 1


def test_inputs_that_shared_a_pointer_at_build_must_share_it_per_call():
    base = torch.randn(16, 8)
    driver = _Driver(sizes=[40, 40, 40])
    launcher, _ = _launcher(driver, [base, base[:, :4]], [torch.empty(16, 8)])
    assert launcher((base, base[:, :4])) is not None
    other = torch.randn(16, 8)
    assert launcher((base, other[:, :4])) is None
    assert len(driver.launches) == 1


def test_other_strides_misaligned_inputs_or_another_device_go_back_to_fec_execute():
    x = torch.zeros(32, 8)
    driver = _Driver(sizes=[40, 40])
    launcher, _ = _launcher(driver, [x], [torch.empty(8, 32)])
    assert launcher((torch.zeros(8, 32).t(),)) is None
    assert launcher((torch.zeros(32 * 8 + 1)[1:].view(32, 8),)) is None  # 4 bytes off a 16-byte boundary
    assert launcher((x, x)) is None  # another number of inputs
    other, _ = _launcher(driver, [x], [torch.empty(8, 32)], device=1)  # built for device 1, 0 is current
    assert other((x,)) is None
    assert driver.launches == []


def test_a_launch_error_raises_for_the_runtime_to_drop_the_launcher():
    x = torch.zeros(32, 8)
    launcher, _ = _launcher(_Driver(sizes=[40, 40], result=700), [x], [torch.empty(32, 8)])
    with pytest.raises(RuntimeError, match="CUresult 700"):
        launcher((x,))


def test_without_a_c_compiler_there_is_no_direct_launch_and_it_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNAMO_NVF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    c_launcher.reset_for_tests()
    try:
        with pytest.raises(c_launcher.LauncherUnavailable, match="no-such-compiler|No such file"):
            c_launcher.load()
        with pytest.raises(c_launcher.LauncherUnavailable):  # remembered: no second attempt per process
            c_launcher.load()
    finally:
        monkeypatch.undo()
        c_launcher.reset_for_tests()
    assert c_launcher.load().Launcher is not None  # the default compiler builds it


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
