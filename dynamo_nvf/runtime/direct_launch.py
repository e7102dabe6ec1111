"""Direct launch: a one-kernel region's steady calls launch nvFuser's own kernel without `fec.execute`.

Why: `fec.execute` costs ~9-30 us of host time per call even when nothing changes between calls
(input-id string, runtime lookup, argument building, output allocation, launch; see region.py's
docstring), and a transformer step makes dozens of such calls without CUDA graphs. For a region whose
input layouts are fixed at compile time (`region.static_region`) and which nvFuser runs as exactly
one kernel with no work buffers, everything `fec.execute` recomputes per call is constant except the
data pointers. So, once the region has run on nvFuser:

1. one `fec.execute` is captured in a CUDA graph (not instantiated) and the graph's single kernel
   node is read back through the driver: nvFuser's CUfunction, grid, block, dynamic shared memory
   and the exact argument bytes it passed (each tensor's struct: data pointer, sizes, strides);
2. each argument's first 8 bytes must be the data pointer of the matching input or output, in
   order, else the kernel takes something else (a scalar, a work buffer) and it is not used;
3. the launcher is checked once: its outputs must equal nvFuser's bit for bit on the same inputs.

A call then checks each input's strides and 16-byte alignment (what nvFuser's cache key would see),
allocates the outputs with nvFuser's strides, writes the new data pointers into the saved argument
bytes and calls the driver's `cuLaunchKernel`: the same binary, so the same bits, with a few
microseconds of host time. Anything unexpected (another layout, a launch error) goes back to
`fec.execute`, which stays the reference. nvFuser's executor cache owns the kernel's module, so the
launcher keeps a reference to it.

What it measured (H100, session 14): per call, in one process (scripts/direct_launch_cost.py,
medians), 8.5-25 us against fec.execute's 9-29 on the same inputs: 1-3 us less. fec.execute is
~9-12 us in steady state, not the 40-170 us first measured, and allocating the outputs from Python
(~2.3 us each) plus a ctypes launch spend most of what it skips. Per step (perf.interleave, 7 rounds,
10 small-batch models): 0.958x the step time of fec.execute on the geomean, 0.87x-0.97x on the
forward models, 0.97x-1.017x on training steps. A launcher in C++ (allocation and launch in one
call) would be needed to get below ~6 us.

Not taken (the reason is kept for explain()): several segments, kernels or memsets (grid reductions'
zeroed buffers), random numbers, scalar or CPU inputs, outputs that alias inputs, a torch without
`CUDAGraph.raw_cuda_graph`, or a driver without `cuFuncGetParamInfo` (CUDA 12.4). Under CUDA
graphs there is no host cost to save, so it is off there.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch

#: Pointer alignment nvFuser's vectorization keys on (16 bytes: 8 bf16 or 4 f32 per access).
ALIGNMENT = 16
#: CUgraphNodeType of a kernel node.
_KERNEL_NODE = 0


class NotDirect(Exception):
    """This region's kernel cannot be launched directly; the message says why (explain shows it)."""


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h)."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.POINTER(ctypes.c_void_p)),
        ("extra", ctypes.POINTER(ctypes.c_void_p)),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]


@dataclass(frozen=True)
class LaunchConfig:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int


class _Driver:
    """The few CUDA driver entry points this needs, loaded once (libcuda, as torch.cuda._utils does).

    The launch goes through a PyDLL handle, which keeps the GIL: the argument bytes a call writes
    cannot be rewritten by another thread before the driver has copied them."""

    _instance: Optional["_Driver"] = None

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            held = ctypes.PyDLL("libcuda.so.1")
            self.get_nodes = lib.cuGraphGetNodes
            self.node_type = lib.cuGraphNodeGetType
            self.kernel_node_params = lib.cuGraphKernelNodeGetParams_v2
            self.param_info = lib.cuFuncGetParamInfo
            launch = held.cuLaunchKernel
        except (OSError, AttributeError) as exc:
            raise NotDirect(f"CUDA driver entry point missing: {exc}") from exc
        launch.restype = ctypes.c_int  # arguments are passed as ready ctypes values: no conversion per call
        self.launch = launch

    @classmethod
    def get(cls) -> "_Driver":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def check(self, result: int, what: str) -> None:
        if result != 0:
            raise NotDirect(f"{what} failed (CUresult {result})")


def captured_kernel(fec: Any, args: Sequence[torch.Tensor], device: torch.device) -> tuple[LaunchConfig, int, list[bytes], list]:
    """Captures one `fec.execute(args)` in a CUDA graph and reads its only node back: the launch
    configuration, nvFuser's CUfunction, each kernel argument's bytes, and the outputs of the
    captured call (whose data pointers the output arguments hold)."""
    driver = _Driver.get()
    if not hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph"):
        raise NotDirect("this torch cannot hand out a captured graph (CUDAGraph.raw_cuda_graph)")
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    stream = torch.cuda.Stream(device)
    current = torch.cuda.current_stream(device)
    stream.wait_stream(current)
    try:
        with torch.cuda.stream(stream):
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                outputs = fec.execute(args)
            finally:
                graph.capture_end()
    except Exception as exc:
        raise NotDirect(f"fec.execute could not be captured: {str(exc).splitlines()[0][:160]}") from exc
    finally:
        current.wait_stream(stream)
    handle = ctypes.c_void_p(graph.raw_cuda_graph())
    count = ctypes.c_size_t(0)
    driver.check(driver.get_nodes(handle, None, ctypes.byref(count)), "cuGraphGetNodes")
    if count.value != 1:
        raise NotDirect(f"{count.value} graph nodes (kernels, memsets of zeroed buffers)")
    node = ctypes.c_void_p()
    driver.check(driver.get_nodes(handle, ctypes.byref(node), ctypes.byref(count)), "cuGraphGetNodes")
    kind = ctypes.c_int(-1)
    driver.check(driver.node_type(node, ctypes.byref(kind)), "cuGraphNodeGetType")
    if kind.value != _KERNEL_NODE:
        raise NotDirect("its one segment launches no kernel")
    params = _KernelNodeParams()
    driver.check(driver.kernel_node_params(node, ctypes.byref(params)), "cuGraphKernelNodeGetParams")
    if not params.func or not params.kernelParams or params.extra:
        raise NotDirect("kernel node without a function or with packed arguments")
    raw: list[bytes] = []
    while True:
        offset, size = ctypes.c_size_t(), ctypes.c_size_t()
        if driver.param_info(ctypes.c_void_p(params.func), ctypes.c_size_t(len(raw)), ctypes.byref(offset),
                             ctypes.byref(size)) != 0:
            break  # past the last parameter
        raw.append(ctypes.string_at(params.kernelParams[len(raw)], size.value))
    config = LaunchConfig((params.gridDimX, params.gridDimY, params.gridDimZ),
                          (params.blockDimX, params.blockDimY, params.blockDimZ), params.sharedMemBytes)
    return config, params.func, raw, list(outputs)


def argument_buffers(raw: Sequence[bytes], pointers: Sequence[int]) -> list[ctypes.Array]:
    """Writable copies of the kernel's argument bytes, after checking that argument i is a tensor
    struct whose data pointer is `pointers[i]` (inputs, then outputs); NotDirect otherwise."""
    if len(raw) != len(pointers):
        raise NotDirect(f"{len(raw)} kernel arguments for {len(pointers)} tensors (work buffers or scalars)")
    buffers = []
    for index, (data, pointer) in enumerate(zip(raw, pointers)):
        if len(data) < 8 or int.from_bytes(data[:8], "little") != pointer:
            raise NotDirect(f"kernel argument {index} is not the struct of tensor {index}")
        buffers.append(ctypes.create_string_buffer(data, len(data)))
    return buffers


class DirectKernel:
    """One region's kernel, launched without fec.execute. Call it with the region's inputs; it returns
    the outputs, or None when an input is not laid out as at build time (the caller then runs
    fec.execute)."""

    __slots__ = ("config", "_launch", "_fixed", "_device", "_input_strides", "_aligned", "_outputs", "_slots",
                 "_array", "_stream", "_streams", "_lock", "_owner", "_buffers", "_empty", "_current_device")

    def __init__(self, launch: Callable[..., int], function: int, config: LaunchConfig, device: int,
                 buffers: Sequence[ctypes.Array], inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor],
                 owner: Any, stream: Optional[Callable[[int], int]] = None) -> None:
        self.config = config
        self._launch = launch
        #: cuLaunchKernel's leading arguments: function, grid, block, dynamic shared memory
        self._fixed = (ctypes.c_void_p(function), *(ctypes.c_uint(v) for v in (*config.grid, *config.block)),
                       ctypes.c_uint(config.dynamic_smem))
        self._device = device
        self._input_strides = tuple(t.stride() for t in inputs)
        self._aligned = tuple(t.data_ptr() % ALIGNMENT == 0 for t in inputs)
        self._outputs = tuple((tuple(t.shape), t.stride(), t.dtype, t.device) for t in outputs)
        self._buffers = list(buffers)
        #: the data pointer of each argument, written in place before each launch
        self._slots = [ctypes.c_uint64.from_buffer(b) for b in self._buffers]
        self._array = (ctypes.c_void_p * len(self._buffers))(*[ctypes.addressof(b) for b in self._buffers])
        self._stream = stream or torch._C._cuda_getCurrentRawStream  # device index -> cudaStream_t
        self._streams: dict[int, ctypes.c_void_p] = {}
        # inductor's allocator for its wrappers (no dispatcher), on the current device; else empty_strided
        fast_empty = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
        self._empty = getattr(fast_empty, "_empty_strided_cuda", None) if stream is None else None
        self._current_device = getattr(torch._C, "_cuda_getDevice", None)
        self._lock = threading.Lock()
        self._owner = owner  # nvFuser's executor cache: it owns the kernel's module

    def __call__(self, args: Sequence[torch.Tensor]) -> Optional[list[torch.Tensor]]:
        pointers = []
        for arg, strides, aligned in zip(args, self._input_strides, self._aligned):
            pointer = arg.data_ptr()
            if arg.stride() != strides or (aligned and pointer % ALIGNMENT):
                return None
            pointers.append(pointer)
        empty = self._empty
        if empty is not None and self._current_device() == self._device:
            outputs = [empty(shape, strides, dtype) for shape, strides, dtype, _ in self._outputs]
        else:
            outputs = [torch.empty_strided(shape, strides, dtype=dtype, device=device)
                       for shape, strides, dtype, device in self._outputs]
        pointers.extend(out.data_ptr() for out in outputs)
        raw_stream = self._stream(self._device)
        stream = self._streams.get(raw_stream)
        if stream is None:
            stream = self._streams.setdefault(raw_stream, ctypes.c_void_p(raw_stream))
        with self._lock:
            for slot, pointer in zip(self._slots, pointers):
                slot.value = pointer
            result = self._launch(*self._fixed, stream, self._array, None)
        if result != 0:
            raise RuntimeError(f"cuLaunchKernel failed (CUresult {result})")
        return outputs


def build(fec: Any, args: Sequence[Any], outputs: Sequence[torch.Tensor]) -> DirectKernel:
    """A DirectKernel for `fec`'s kernel on inputs laid out as `args`, checked bit for bit against
    nvFuser's own `outputs` for these `args`. Raises NotDirect (with the reason) where it cannot be."""
    if not args or not outputs:
        raise NotDirect("no inputs or no outputs")
    for arg in args:
        if not isinstance(arg, torch.Tensor) or arg.device.type != "cuda":
            raise NotDirect("a scalar or CPU input")
    devices = {t.device for t in (*args, *outputs)}
    if len(devices) != 1:
        raise NotDirect("tensors on several devices")
    device = next(iter(devices))
    inputs = {t.untyped_storage().data_ptr() for t in args}
    storages = [t.untyped_storage().data_ptr() for t in outputs]
    if len(set(storages)) != len(storages) or inputs.intersection(storages):
        raise NotDirect("an output shares storage with an input or another output")

    with torch.cuda.device(device):
        config, function, raw, captured = captured_kernel(fec, args, device)
        if len(captured) != len(outputs) or any(c.stride() != o.stride() or c.shape != o.shape
                                                 for c, o in zip(captured, outputs)):
            raise NotDirect("the captured call's outputs are laid out otherwise")
        buffers = argument_buffers(raw, [t.data_ptr() for t in (*args, *captured)])
        del captured
        kernel = DirectKernel(_Driver.get().launch, function, config, device.index, buffers, args, outputs, fec)
        mine = kernel(args)
    if mine is None:
        raise NotDirect("the inputs' layout check failed on the inputs it was built for")
    for got, want in zip(mine, outputs):
        try:  # bit for bit, as region._materialize_outputs checks its rebuilt definitions
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, check_stride=True)
        except AssertionError as exc:
            raise NotDirect("its outputs differ from nvFuser's") from exc
    return kernel
