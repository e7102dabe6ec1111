"""CPU tests of runtime/direct_launch.py and its C launcher (runtime/launcher.c): which kernels it
takes, the argument bytes it patches, the work buffers it allocates and zeroes, and when the runtime
never tries. The driver's cuLaunchKernel and cuMemsetD8Async are recording stand-ins here (ctypes
callbacks); the GPU tests (test_gpu_direct_launch.py) use the real driver and nvFuser."""

from __future__ import annotations

import ctypes
import logging

import pytest
import torch

from dynamo_nvf.runtime import c_launcher
from dynamo_nvf.runtime import direct_launch as dl
from dynamo_nvf.runtime.region import RegionRuntime, _Entry
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
    assert plan.work == [] and plan.zeros == [] and plan.kernels == [(1234, (4, 1, 1, 96, 2, 1, 128), raw, (0, 1), False)]
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
    assert [k[3] for k in plan.kernels] == [(0, 4, 2), (0, 4, 3)] and plan.work == [(64 * 4, 16)]
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
    # a grid Welford's counts: the kernel's index type, as wide as the struct's sizes
    assert dl.work_buffer_bytes("Tensor<nvfuser_index_t, 2, 2> T5", _struct(1 << 40, [528, 64], [64, 1])) == 528 * 64 * 8
    assert dl.work_buffer_bytes("Tensor<nvfuser_index_t, 2, 2> T5",
                                _struct(1 << 40, [528, 64], [64, 1], index=4)) == 528 * 64 * 4
    # an expanded (stride-0) dim is allocated once, as nvFuser allocates it; logical sizes bound it
    assert dl.work_buffer_bytes("Tensor<__bfloat, 2, 2> T9", _struct(1 << 40, [4, 16], [0, 1])) == 4 * 16 * 2
    with pytest.raises(dl.NotDirect, match="not a tensor"):
        dl.work_buffer_bytes("int64_t i3", (5).to_bytes(8, "little"))
    with pytest.raises(dl.NotDirect, match="unknown dtype"):
        dl.work_buffer_bytes("Tensor<__e2m1, 1, 1> T3", _struct(1 << 40, [8], [1]))


def test_work_buffers_after_the_outputs_sized_from_their_structs_and_zeroed_where_the_graph_zeroes():
    x, out, work, semaphore = 0x7E0000000000, 0x7E1000000000, 0x7E2000000000, 0x7E3000000000
    raw = [_struct(x, [132, 768], [768, 1]), _struct(out, [768], [1]), _struct(work, [132, 768], [768, 1]),
           _struct(semaphore, [3], [1])]
    fill = dl.Zeroing(frozenset({132 * 768, 0, semaphore}), 24)  # a fill kernel's argument words
    plan = dl.plan_launches([fill, _kernel(raw)], [x], [out], source=lambda: SOURCE)
    assert plan.work == [(132 * 768 * 4, 16), (3 * 8, 16)]
    assert plan.zeros == [(0, 1, 0, 24)]  # before kernel 0: work buffer 1, bytes 0-24
    assert plan.kernels[0][3] == (0, 1, 2, 3)
    assert dl.plan_launches([dl.Zeroing(frozenset({semaphore}), 24), _kernel(raw)], [x], [out],
                            source=lambda: SOURCE) == plan
    with pytest.raises(dl.NotDirect, match="zeroes an input or an output"):
        dl.plan_launches([dl.Zeroing(frozenset({out}), 8), _kernel(raw)], [x], [out], source=lambda: SOURCE)
    with pytest.raises(dl.NotDirect, match="in no tensor"):
        dl.plan_launches([dl.Zeroing(frozenset({0x7F0000009000}), 8), _kernel(raw)], [x], [out], source=lambda: SOURCE)
    with pytest.raises(dl.NotDirect, match="after its last kernel"):
        dl.plan_launches([_kernel(raw), dl.Zeroing(frozenset({semaphore}), 24)], [x], [out], source=lambda: SOURCE)
    with pytest.raises(dl.NotDirect, match="declared kernel parameters"):
        dl.plan_launches([_kernel(raw[:3])], [x], [out], source=lambda: SOURCE)


GRID_SYNC = """
__global__ void nvfuser_reduction_f0_c1_r0_g0(Tensor<float, 1, 1> T0, Tensor<float, 0, 0> T1, Tensor<float, 0, 0> T2,
                                              Tensor<float, 1, 1> T5, Tensor<int64_t, 1, 1> T6,
                                              Tensor<float, 1, 1> T7, Tensor<int64_t, 1, 1> T8) {}
"""


def test_every_range_of_one_zeroed_allocation_sliced_into_several_semaphores_is_zeroed():
    """nvFuser's zeroed arena: one at::zeros of 128 bytes per kernel, sliced 16-byte aligned into
    the semaphores of two grid reductions; both slices are zeroed at replay, not only the first."""
    x, total, peak = 0x7E0000000000, 0x7F0000002000, 0x7F0000002200
    work0, work1, arena = 0x7F0000003000, 0x7F0000004000, 0x7F0000005000
    raw = [_struct(x, [1 << 24], [1]), _struct(total, [], []), _struct(peak, [], []),
           _struct(work0, [132], [1]), _struct(arena, [3], [1]), _struct(work1, [132], [1]),
           _struct(arena + 32, [3], [1])]
    fill = dl.Zeroing(frozenset({arena}), 128)
    plan = dl.plan_launches([fill, _kernel(raw)], [x], [total, peak], source=lambda: GRID_SYNC,
                            output_bytes=[4, 4], input_bytes=[4 << 24])
    assert plan.kernels[0][3] == (0, 1, 2, 3, 4, 5, 6)
    assert [size for size, _ in plan.work] == [132 * 4, 24, 132 * 4, 24]
    assert plan.zeros == [(0, 1, 0, 24), (0, 3, 0, 24)]  # work buffers 1 and 3: arena + 0 and arena + 32
    # a memset inside a work buffer zeroes that part of it only
    inside = dl.Zeroing(frozenset({work0 + 64}), 16)
    assert dl.plan_launches([inside, _kernel(raw)], [x], [total, peak], source=lambda: GRID_SYNC,
                            output_bytes=[4, 4]).zeros == [(0, 0, 64, 16)]
    # zeroing that reaches an input's extent is refused
    with pytest.raises(dl.NotDirect, match="zeroes an input or an output"):
        dl.plan_launches([dl.Zeroing(frozenset({x + 64}), 128), _kernel(raw)], [x], [total, peak],
                         source=lambda: GRID_SYNC, output_bytes=[4, 4], input_bytes=[4 << 24])
    # two tensors' pointers among a fill kernel's words: which one it zeroes cannot be told
    with pytest.raises(dl.NotDirect, match="cannot be told"):
        dl.plan_launches([dl.Zeroing(frozenset({arena, work0}), 24), _kernel(raw)], [x], [total, peak],
                         source=lambda: GRID_SYNC, output_bytes=[4, 4])


def test_memory_zeroed_again_before_a_later_segment_is_zeroed_again_there():
    """Each kernel's arena is released after its launch, so the next segment's semaphores may sit at
    the same address: zeroed before each kernel, as the build did."""
    x, mean, out, arena = 0x7F0000001000, 0x7F0000005000, 0x7F0000002000, 0x7F0000007000
    source = """
__global__ void nvfuser_reduction_f0_c1_r0_g0(Tensor<float, 2, 2> T0, Tensor<float, 1, 1> T3, Tensor<int64_t, 1, 1> T9) {}
__global__ void nvfuser_pointwise_f0_c1_r0_g1(Tensor<float, 2, 2> T0, Tensor<float, 1, 1> T3, Tensor<int64_t, 1, 1> T9,
                                              Tensor<float, 2, 2> T5) {}
"""
    first = _kernel([_struct(x, [64, 32], [32, 1]), _struct(mean, [64], [1]), _struct(arena, [2], [1])],
                    "_ZN11CudaCodeGen29nvfuser_reduction_f0_c1_r0_g0E", 1)
    second = _kernel([_struct(x, [64, 32], [32, 1]), _struct(mean, [64], [1]), _struct(arena, [2], [1]),
                      _struct(out, [64, 32], [32, 1])], "_ZN11CudaCodeGen29nvfuser_pointwise_f0_c1_r0_g1E", 2)
    zero = dl.Zeroing(frozenset({arena}), 128)
    plan = dl.plan_launches([zero, first, zero, second], [x], [out], source=lambda: source,
                            output_bytes=[64 * 32 * 4])
    assert plan.zeros == [(0, 1, 0, 16), (1, 1, 0, 16)]


def test_fill_kernel_extent_is_read_from_its_element_count_and_type():
    name = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIhEESt5arrayIPcLm1EEEEviT0_T1_"
    count = (128).to_bytes(4, "little")
    assert dl.fill_bytes(name, [count, b"\x00", bytes(8)]) == 128
    assert dl.fill_bytes(name.replace("FillFunctorIhE", "FillFunctorIfE"), [count, bytes(4), bytes(8)]) == 512
    assert dl.fill_bytes(name.replace("FillFunctorIhE", "FillFunctorIN3c108BFloat16EE"), [count, bytes(2), bytes(8)]) == 256
    with pytest.raises(dl.NotDirect, match="extent cannot be read"):
        dl.fill_bytes(name.replace("FillFunctorIhE", "FillFunctorIN3c1011Float8_e4m3fnEE"), [count, b"\x00", bytes(8)])
    with pytest.raises(dl.NotDirect, match="extent cannot be read"):
        dl.fill_bytes(name, [bytes(8), bytes(8)])  # a 64-bit count is not the kernels this reads


def test_pointer_alignment_is_the_largest_power_of_two_up_to_the_cap_dividing_the_pointer():
    assert [dl.pointer_alignment(p) for p in (0x1000, 0x1008, 0x1004, 0x1002, 0x1001, 0x1030)] == [16, 8, 4, 2, 1, 16]
    assert dl.pointer_alignment(0x1020, cap=32) == 32 and dl.pointer_alignment(0x1010, cap=32) == 16


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
    assert plan.work == [(64 * 4, 16)]
    # the allocator reused a freed intermediate's memory for the output: before the output's producer,
    # an argument at its address with other bytes is that earlier tensor, with a buffer of its own
    reused = _kernel([_struct(x, [64, 32], [32, 1]), _struct(out, [64], [1])], first.name, 1)
    second_reads = _kernel([_struct(x, [64, 32], [32, 1]), _struct(out, [64], [1]), _struct(out, [64, 32], [32, 1])],
                           second.name, 2)
    plan = dl.plan_launches([reused, second_reads], [x], [out], source=lambda: TWO_SEGMENTS, output_bytes=[64 * 32 * 4])
    assert [k[3] for k in plan.kernels] == [(0, 2), (0, 2, 1)] and plan.work == [(64 * 4, 16)]
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
    # an integer input of value 0 beside an empty input (data pointer 0): the declaration says scalar
    empty = _struct(0, [0, 768], [768, 1])
    zero = (0).to_bytes(8, "little")
    plan = dl.plan_launches([_kernel([empty, zero, scale, _struct(out, [4, 768], [768, 1])])], [0], [out],
                            source=lambda: PERSISTENT)
    assert plan.kernels[0][3] == (0, dl.CONSTANT, dl.CONSTANT, 1)
    assert dl.is_scalar("nvfuser_index_t i0") and dl.is_scalar("const float f3")
    assert not dl.is_scalar("Tensor<float, 1, 1> T4") and not dl.is_scalar("TensorMap tm0")
    # the launcher writes the pointers around them and leaves their bytes alone, call after call
    a = torch.zeros(64 * 8 + 4)[:256].view(32, 8)
    driver = _Driver(sizes=[40, 8, 4, 40])
    raw = [_struct(a.data_ptr(), a.shape, a.stride()), extent, scale, _struct(a.data_ptr(), a.shape, a.stride())]
    plan = dl.LaunchPlan([(7, (4, 1, 1, 96, 2, 1, 128), raw, (0, dl.CONSTANT, dl.CONSTANT, 1), False)], [])
    launcher = driver.make(plan, [a], [torch.empty(32, 8)])
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
_CTX_GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
_CTX_SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
#: The context the stand-in's kernels were "loaded" in.
CONTEXT = 0xC0DE00


class _Driver:
    """Stands in for cuLaunchKernel, cuLaunchCooperativeKernel, cuMemsetD8Async, cuCtxGetCurrent and
    cuCtxSetCurrent (CPU memory; records every call in `events`, in order; a cooperative launch is
    recorded with `cooperative` as its last value), and for torch's current device and its exchange.
    The stand-in's tensors are CPU tensors, whose get_device() is -1: the launcher's device."""

    def __init__(self, sizes, result: int = 0, context: int = CONTEXT, device: int = -1) -> None:
        self.sizes = sizes  # each argument's byte size
        self.result = result
        self.context = context  # the thread's current context (0: none yet)
        self.device = device  # torch's current device
        self.events: list[tuple] = []
        self.allocations: list[tuple] = []  # the shape of each tensor the launcher allocated
        self.launch = _LAUNCH(self._launch)
        self.memset = _MEMSET(self._memset)
        self.cooperative = _COOPERATIVE(
            lambda f, gx, gy, gz, bx, by, bz, smem, stream, params: self._launch(f, gx, gy, gz, bx, by, bz, smem,
                                                                                 stream, params, "cooperative"))
        self.ctx_get = _CTX_GET(self._ctx_get)
        self.ctx_set = _CTX_SET(self._ctx_set)

    @property
    def launches(self) -> list[tuple]:
        return [event[1:] for event in self.events if event[0] == "launch"]

    @property
    def memsets(self) -> list[tuple]:
        return [event[1:] for event in self.events if event[0] == "memset"]

    def _launch(self, function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        arguments = [ctypes.string_at(params[i], size) for i, size in enumerate(self.sizes)]
        self.events.append(("launch", (function, gx, gy, gz, bx, by, bz, smem, stream, extra), arguments,
                            self.context, self.device))
        return self.result

    def _memset(self, dst, value, size, stream):
        ctypes.memset(dst, value, size)
        self.events.append(("memset", dst, value, size, stream))
        return 0

    def _ctx_get(self, out):
        out[0] = self.context or None
        return 0

    def _ctx_set(self, context):
        self.context = context or 0
        self.events.append(("ctx_set", self.context))
        return 0

    def exchange_device(self, index: int) -> int:
        previous, self.device = self.device, index
        self.events.append(("device", index))
        return previous

    def address(self, callback) -> int:
        return ctypes.cast(callback, ctypes.c_void_p).value

    def addresses(self) -> tuple:
        return tuple(self.address(f) for f in (self.launch, self.cooperative, self.memset, self.ctx_get, self.ctx_set))

    def make(self, plan, inputs, outputs, device: int = -1, cap: int = dl.MAX_ALIGNMENT):
        def empty(shape, strides, dtype):
            self.allocations.append(tuple(shape))
            return torch.empty_strided(shape, strides, dtype=dtype)

        return dl.make_launcher(self.addresses(), CONTEXT, plan, device, inputs, outputs, owner=None, empty=empty,
                                get_device=lambda: self.device, exchange_device=self.exchange_device,
                                get_stream=lambda index: 77, cap=cap)


def _launcher(driver, inputs, outputs, work=(), device=-1, kernels=1, cooperative=(), zeros=()):
    raw = [_struct(t.data_ptr(), t.shape, t.stride()) for t in (*inputs, *outputs)]
    raw += [_struct(0x7F0000000000 + i, [size], [1]) for i, (size, _) in enumerate(work)]
    slots = tuple(range(len(raw)))
    plan = dl.LaunchPlan([(1234 + k, (4, 1, 1, 96, 2, 1, 128), raw, slots, k in cooperative) for k in range(kernels)],
                         list(work), list(zeros))
    return driver.make(plan, inputs, outputs, device=device), raw


def test_each_call_writes_its_pointers_and_allocates_outputs_like_nvfusers():
    x = torch.zeros(64 * 8 + 4)[:256].view(32, 8)  # 16-byte aligned (the storage is)
    out = torch.empty_strided((8, 32), (1, 8))  # a transposed output layout
    driver = _Driver(sizes=[40, 40])
    launcher, raw = _launcher(driver, [x], [out])
    y = torch.randn(32, 8)
    (result,) = launcher((y,))
    assert result.shape == (8, 32) and result.stride() == (1, 8) and result.dtype == out.dtype
    (dims, arguments, *_), = driver.launches
    assert dims == (1234, 4, 1, 1, 96, 2, 1, 128, 77, None)
    assert [int.from_bytes(a[:8], "little") for a in arguments] == [y.data_ptr(), result.data_ptr()]
    assert [a[8:] for a in arguments] == [r[8:] for r in raw]  # sizes and strides stay the build's
    assert launcher.launches == 1 and launcher.dims == [((4, 1, 1), (96, 2, 1), 128)] and launcher.work_buffers == 0
    assert driver.memsets == [] and launcher.zeroed == 0 and launcher.declines == {}
    (again,) = launcher([torch.randn(32, 8)])  # any sequence of inputs
    assert again.data_ptr() != 0 and launcher.launches == 2


def test_work_buffers_are_allocated_per_call_and_every_zeroed_range_is_zeroed_before_its_kernel():
    x = torch.randn(16, 8)
    driver = _Driver(sizes=[40, 40, 24, 24])
    zeros = [(0, 1, 0, 24), (0, 0, 64, 16), (1, 1, 8, 16)]  # (before kernel, work buffer, offset, bytes)
    launcher, _ = _launcher(driver, [x], [torch.empty(16, 8)], work=[(4096, 16), (24, 16)], kernels=2, zeros=zeros)
    assert launcher.work_buffers == 2 and launcher.zeroed == 3
    launcher((x,))
    kinds = [event[0] for event in driver.events]
    assert kinds == ["memset", "memset", "launch", "memset", "launch"]
    arguments = driver.launches[0][1]
    work, semaphore = (int.from_bytes(arguments[i][:8], "little") for i in (2, 3))
    # one allocation per call holds both, each on its own 512-byte block, as the allocator places buffers
    assert driver.allocations == [(16, 8), (4096 + 512,)] and semaphore == work + 4096
    assert driver.memsets == [(semaphore, 0, 24, 77), (work + 64, 0, 16, 77), (semaphore + 8, 0, 16, 77)]
    assert work not in (0, 0x7F0000000000)  # a fresh buffer, not the build's
    with pytest.raises(ValueError, match="names no kernel"):  # a range before a kernel that does not exist
        _launcher(driver, [x], [torch.empty(16, 8)], work=[(24, 16)], zeros=[(1, 0, 0, 24)])


def test_work_buffers_are_laid_out_on_512_byte_blocks_of_one_allocation():
    assert dl.work_layout([4096, 24, 0, 513]) == ([0, 4096, 4608, 5120], 6144)
    assert dl.work_layout([]) == ([], 0)


def test_several_kernels_launch_in_order_with_the_same_pointers():
    x = torch.randn(16, 8)
    driver = _Driver(sizes=[40, 40, 24])
    launcher, _ = _launcher(driver, [x], [torch.empty(16, 8)], work=[(512, 16)], kernels=3, cooperative={1},
                            zeros=[(0, 0, 0, 512)])
    (out,) = launcher((x,))
    assert [call[0][0] for call in driver.launches] == [1234, 1235, 1236]
    assert [call[0][-1] for call in driver.launches] == [None, "cooperative", None]  # grid-synchronising kernel
    pointers = {tuple(int.from_bytes(a[:8], "little") for a in call[1]) for call in driver.launches}
    assert len(pointers) == 1 and next(iter(pointers))[:2] == (x.data_ptr(), out.data_ptr())
    assert len(driver.memsets) == 1 and launcher.launches == 1


def test_inputs_that_shared_a_pointer_at_build_must_share_it_per_call():
    base = torch.randn(16, 8)
    driver = _Driver(sizes=[40, 40, 40])
    launcher, _ = _launcher(driver, [base, base[:, :4]], [torch.empty(16, 8)])
    assert launcher((base, base[:, :4])) is not None
    other = torch.randn(16, 8)
    assert launcher((base, other[:, :4])) is None
    assert "no longer do" in launcher.last_decline
    assert len(driver.launches) == 1


def test_an_input_less_aligned_than_at_build_declines_and_a_more_aligned_one_launches():
    """nvFuser vectorises by the alignment of the build's pointer: built 8-byte aligned (a slice two
    floats into its storage), a call at 4 bytes declines; at 8 or 16 it launches."""
    storage = torch.zeros(4 * 256 + 16)
    at = lambda offset: storage[offset:offset + 256].view(32, 8)  # noqa: E731 (offset in floats)
    assert dl.pointer_alignment(at(2).data_ptr()) == 8
    driver = _Driver(sizes=[40, 40])
    launcher, _ = _launcher(driver, [at(2)], [torch.empty(32, 8)])
    assert launcher((at(1),)) is None and launcher((at(3),)) is None
    assert launcher.last_decline == "an input less aligned than nvFuser's kernel was built for (input 0)"
    assert launcher((at(6),)) is not None and launcher((at(4),)) is not None and launcher((at(0),)) is not None
    assert launcher.declines == {"an input less aligned than nvFuser's kernel was built for": 2}
    assert len(driver.launches) == 3
    # 16-byte aligned at build, 32 is the cap where nvFuser vectorises 256 bits: a 16-byte pointer declines
    wide, _ = _launcher(driver, [at(0)], [torch.empty(32, 8)])
    assert wide((at(4),)) is not None
    built = torch.zeros(4 * 256 + 64)
    base = built[(-built.data_ptr() % 32) // 4:][:256 + 8]  # 32-byte aligned
    raw = [_struct(base.data_ptr(), [32, 8], [8, 1]), _struct(0, [32, 8], [8, 1])]
    plan = dl.LaunchPlan([(1, (1, 1, 1, 32, 1, 1, 0), raw, (0, 1), False)], [])
    wide = driver.make(plan, [base[:256].view(32, 8)], [torch.empty(32, 8)], cap=32)
    assert wide((base[4:260].view(32, 8),)) is None  # 16 bytes on: less than the 32 nvFuser keyed on
    assert wide((base[:256].view(32, 8),)) is not None


def test_other_sizes_strides_dtype_device_or_input_count_decline():
    """The grid, the extents and the scalar arguments are the build's: any difference declines."""
    x = torch.zeros(32, 8)
    driver = _Driver(sizes=[40, 40])
    launcher, _ = _launcher(driver, [x], [torch.empty(8, 32)])
    assert launcher((torch.zeros(8, 32).t(),)) is None
    assert launcher.last_decline == "an input of other strides (input 0)"
    assert launcher((torch.zeros(16, 8),)) is None  # the same strides, fewer rows
    assert launcher.last_decline == "an input of other sizes (input 0)"
    assert launcher((torch.zeros(32, 8, dtype=torch.int32),)) is None
    assert launcher.last_decline == "an input of another dtype (input 0)"
    assert launcher((_OnDevice(torch.zeros(32, 8), 1),)) is None
    assert launcher.last_decline == "an input on another device (input 0)"
    assert launcher((x, x)) is None
    assert launcher.last_decline == "another number of inputs"
    assert driver.launches == [] and sum(launcher.declines.values()) == 5
    assert launcher((_OnDevice(torch.zeros(32, 8), -1),)) is not None  # the same checks pass a tensor-like


class _OnDevice:
    """A CPU tensor that says it is on another device (the launcher asks get_device())."""

    def __init__(self, tensor: torch.Tensor, index: int) -> None:
        self.tensor, self.index, self.dtype = tensor, index, tensor.dtype

    def data_ptr(self) -> int:
        return self.tensor.data_ptr()

    def stride(self):
        return self.tensor.stride()

    def size(self):
        return self.tensor.size()

    def get_device(self) -> int:
        return self.index


def test_the_build_device_is_made_current_for_the_call_and_the_callers_restored():
    """A region built on one device, called while another is current (cuda:1 inputs, cuda:0 current):
    allocations, stream and launch on the build's device, then the caller's device back."""
    x = torch.zeros(32, 8)
    driver = _Driver(sizes=[40, 40], device=0)  # the current device is 0; the launcher's -1
    launcher, _ = _launcher(driver, [x], [torch.empty(32, 8)])
    assert launcher((x,)) is not None
    assert [e for e in driver.events if e[0] != "launch"] == [("device", -1), ("device", 0)]
    assert driver.launches[0][3] == -1 and driver.device == 0  # launched on -1, 0 current again
    driver.events.clear()
    broken = _Driver(sizes=[40, 40], result=700, device=0)
    failing, _ = _launcher(broken, [x], [torch.empty(32, 8)])
    with pytest.raises(RuntimeError, match="CUresult 700"):  # a failing launch still restores the device
        failing((x,))
    assert broken.device == 0


def test_a_thread_without_a_context_gets_the_kernels_context_and_another_context_declines():
    x = torch.zeros(32, 8)
    fresh = _Driver(sizes=[40, 40], context=0)  # a thread whose first CUDA work this is
    launcher, _ = _launcher(fresh, [x], [torch.empty(32, 8)])
    assert launcher((x,)) is not None
    assert fresh.events[0] == ("ctx_set", CONTEXT) and fresh.launches[0][2] == CONTEXT
    assert launcher((x,)) is not None and [e[0] for e in fresh.events].count("ctx_set") == 1
    foreign = _Driver(sizes=[40, 40], context=0xBAD)  # a context the user made current
    launcher, _ = _launcher(foreign, [x], [torch.empty(32, 8)])
    assert launcher((x,)) is None and launcher.last_decline == "another CUDA context is current"
    assert foreign.launches == [] and foreign.context == 0xBAD


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


def test_a_region_runs_declined_calls_through_fec_execute_says_so_once_and_explain_counts_them(caplog):
    """The region's side of a decline: the call runs through its executor (a stand-in here), one
    warning per region, and explain()'s launch line keeps the count and the last reason; a launch
    error drops the launcher with one warning."""
    x = torch.randn(32, 8)
    runtime = _runtime(lambda t: (t * 2,), Settings(), x)
    executed = []

    class Executor:  # stands in for fec.execute: the decision logic is under test, not nvFuser
        def execute(self, args):
            executed.append(args)
            return [args[0] * 2]

    entry = _Entry(fd=Executor())
    entry.fec = Executor()
    runtime._fast, runtime._direct_countdown = entry, 0
    driver = _Driver(sizes=[40, 40])
    runtime._direct, _ = _launcher(driver, [x], [torch.empty(32, 8)])
    runtime._direct_summary = runtime.plan.launch = "direct (stand-in)"
    misaligned = torch.zeros(32 * 8 + 1)[1:].view(32, 8)  # 4 bytes off the build's 16
    with caplog.at_level(logging.INFO, logger="dynamo_nvf"):
        runtime(x)
        for _ in range(2):
            (got,) = runtime(misaligned)
            assert torch.equal(got, misaligned * 2)
    assert len(driver.launches) == 1 and len(executed) == 2
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "less aligned" in warned[0], warned
    assert runtime.plan.launch == ("direct (stand-in); 2 call(s) through fec.execute, the last for an input less "
                                   "aligned than nvFuser's kernel was built for (input 0)")
    driver.result = 700  # the driver refuses the next launch
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dynamo_nvf"):
        (got,) = runtime(x)
    assert torch.equal(got, x * 2) and runtime._direct is None
    assert runtime.plan.launch.startswith("fec.execute (direct launch failed")
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


def _symbolic_runtime(settings):
    """A region traced with symbolic sizes (a dynamic-shape graph's): not static, so no `_fast` path."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.plan import RegionPlan

    gm = make_fx(lambda t: (t * 2,), tracing_mode="symbolic")(torch.randn(32, 8))
    return RegionRuntime(gm, RegionPlan(id=0, name="nvf_region_0", ops=[], nodes=[]), settings)


def test_symbolic_regions_get_a_launcher_per_set_of_input_sizes_only_where_direct_launch_is_on():
    x = torch.randn(4, 8)
    assert _runtime(lambda t: (t * 2,), Settings(), x)._sized is None  # static: `_direct` instead
    assert _symbolic_runtime(Settings())._sized == {}
    assert _symbolic_runtime(Settings(cuda_graphs=True))._sized is None
    assert _symbolic_runtime(Settings(direct_launch=False))._sized is None


def test_a_symbolic_region_launches_directly_at_sizes_seen_in_steady_calls_and_fec_execute_elsewhere(monkeypatch):
    """Each set of input sizes gets its launcher after DIRECT_AFTER_FAST_CALLS steady calls through
    fec.execute (a stand-in here); calls at other sizes, and calls the launcher declines, run there."""
    from dynamo_nvf.runtime import region as region_module

    runtime = _symbolic_runtime(Settings())
    runtime._nvf = object()
    executed, built = [], []

    class Executor:  # stands in for fec.execute: the decision logic is under test, not nvFuser
        def execute(self, args):
            executed.append(tuple(args[0].shape))
            return [args[0] * 2]

    entry = _Entry(fd=Executor())
    entry.fec = Executor()
    monkeypatch.setattr(runtime, "_lookup", lambda args: entry)
    driver = _Driver(sizes=[40, 40])

    def build(fec, args, outputs):
        assert fec is entry.fec and torch.equal(outputs[0], args[0] * 2)
        built.append(tuple(args[0].shape))
        return _launcher(driver, list(args), list(outputs))[0]

    monkeypatch.setattr(region_module.direct_launch, "build", build)
    long, short = torch.randn(32, 8), torch.randn(16, 8)
    for _ in range(region_module.DIRECT_AFTER_FAST_CALLS + 2):
        runtime(long)
    runtime(short)
    assert built == [(32, 8)] and executed == [(32, 8)] * region_module.DIRECT_AFTER_FAST_CALLS + [(16, 8)]
    assert len(driver.launches) == 2 and runtime.plan.launch.startswith("direct per set of input sizes: 1")
    misaligned = torch.zeros(32 * 8 + 1)[1:].view(32, 8)  # declined: its alignment is not the build's
    (got,) = runtime(misaligned)
    assert torch.equal(got, misaligned * 2) and executed[-1] == (32, 8) and len(driver.launches) == 2
    runtime(long)  # a declining launcher is dropped: its sizes stay on fec.execute
    assert len(executed) == region_module.DIRECT_AFTER_FAST_CALLS + 3 and len(driver.launches) == 2
    assert "0 launcher(s); 1 dropped" in runtime.plan.launch, runtime.plan.launch


def _symbolic_with_scalar(fn, scalar):
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.plan import RegionPlan

    gm = make_fx(fn, tracing_mode="symbolic")(torch.randn(32, 8), scalar)
    return RegionRuntime(gm, RegionPlan(id=0, name="nvf_region_0", ops=[], nodes=[]), Settings())


def test_a_symbolic_region_with_integer_inputs_keys_its_launchers_by_their_values(monkeypatch):
    """A dynamic-shape graph hands its regions SymInt sizes: a launcher replays the scalar kernel
    arguments its build computed from them, so it serves only calls with the same integers, and it
    takes the tensors alone. A float input keeps the region on fec.execute."""
    from dynamo_nvf.runtime import region as region_module

    assert _symbolic_with_scalar(lambda t, n: (t * n,), 2.5)._sized is None
    runtime = _symbolic_with_scalar(lambda t, n: (t.view(n, -1) * 2,), 32)
    assert runtime._sized == {} and runtime._integer_inputs == (1,)
    runtime._nvf = object()
    executed, built = [], []

    class Executor:  # stands in for fec.execute
        def execute(self, args):
            executed.append((tuple(args[0].shape), args[1]))
            return [args[0].reshape(args[1], -1) * 2]

    entry = _Entry(fd=Executor())
    entry.fec = Executor()
    monkeypatch.setattr(runtime, "_lookup", lambda args: entry)
    driver = _Driver(sizes=[40, 40])

    def build(fec, args, outputs):
        built.append((tuple(args[0].shape), args[1]))
        return _launcher(driver, [args[0]], list(outputs))[0]  # the launcher takes the tensors alone

    monkeypatch.setattr(region_module.direct_launch, "build", build)
    x = torch.randn(32, 8)
    for _ in range(region_module.DIRECT_AFTER_FAST_CALLS + 2):
        runtime(x, 32)
    assert built == [((32, 8), 32)] and len(driver.launches) == 2
    (got,) = runtime(x, 16)  # same layout, another integer: not this launcher's call
    assert executed[-1] == ((32, 8), 16) and len(driver.launches) == 2 and got.shape == (16, 16)
    runtime(x, 32)
    assert len(driver.launches) == 3


def test_a_symbolic_region_stops_trying_where_no_size_could_launch_directly(monkeypatch):
    from dynamo_nvf.runtime import region as region_module

    runtime = _symbolic_runtime(Settings())
    runtime._nvf = object()

    class Executor:
        def execute(self, args):
            return [args[0] * 2]

    entry = _Entry(fd=Executor())
    entry.fec = Executor()
    monkeypatch.setattr(runtime, "_lookup", lambda args: entry)
    tries = []

    def refuse(fec, args, outputs):
        tries.append(tuple(args[0].shape))
        raise dl.NotDirect("no C launcher: no compiler", any_size=True)

    monkeypatch.setattr(region_module.direct_launch, "build", refuse)
    for rows in (8, 16, 24) * 3:
        runtime(torch.randn(rows, 8))
    assert tries == [(8, 8)] and runtime.plan.launch == "fec.execute (no C launcher: no compiler)"
