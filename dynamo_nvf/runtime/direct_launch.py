"""Direct launch: a static region's steady calls replay nvFuser's kernels without `fec.execute` (a
region with symbolic sizes: one launcher per set of input sizes, runtime/region.py `_sized`).

Why: `fec.execute` costs ~9-100 us of host time per call even when nothing changes between calls
(input-id string, runtime lookup, argument building, allocations, launches; see region.py's
docstring), and a transformer step makes dozens of such calls without CUDA graphs. For a region whose
input layouts are fixed at compile time (`region.static_region`), everything `fec.execute` recomputes
per call is constant except the data pointers. So, once the region has run on nvFuser:

1. one `fec.execute` is captured in a CUDA graph (not instantiated) and read back through the driver,
   in the graph's order: each nvFuser kernel (one per segment: CUfunction, grid, block, dynamic shared
   memory, cooperative or not, the exact argument bytes, each tensor's struct of data pointer, sizes
   and strides) and each node that zeroes memory (a memset, or ATen's fill kernel of at::zeros: nvFuser
   zeroes each `zero_init` buffer, and one allocation per kernel that it slices, 16 bytes apart, into
   the grid reductions' and grid syncs' semaphores that reset themselves);
2. every argument is mapped by its data pointer to an input, an output, or a work buffer that
   nvFuser allocated for the call (a grid reduction's buffers and semaphores, or an intermediate
   between segments), sized from its `Tensor` declaration in nvFuser's kernel source
   (`plan_launches` says what is refused, and why);
3. the C launcher (runtime/launcher.c, built once per machine by runtime/c_launcher.py) is checked
   once: its outputs must equal nvFuser's bit for bit on the same inputs.

A call then, in C: checks each input against what nvFuser's cache key saw at build (sizes, strides,
dtype, device, and its data pointer divisible by the alignment nvFuser keyed on: the largest power of
two up to 16 bytes, 32 from compute capability 10, dividing the build's pointer; its vectorised
accesses rely on it), since the grid, the extents and the scalar arguments are the build's; makes the
build device and its primary context current where they are not (another device current, or a thread
with no context yet); allocates the outputs with nvFuser's strides and the work buffers (one
allocation); zeroes every byte range nvFuser's run zeroed, before the kernel it preceded; writes the
data pointers into the saved argument bytes and launches each kernel in order: the same binaries, so
the same bits. A call that is not as built declines (`last_decline` says why), and the region runs it
through `fec.execute`, which stays the reference; a launch error drops the launcher. nvFuser's executor cache
owns the kernels' modules, so the launcher keeps a reference to it.

What it measured (H100, 2026-11-24, scripts/direct_launch_cost.py at commit 2828583, medians in one process): per
call 5-57 us against fec.execute's 9-100 on the same inputs (one-kernel forward regions 7-12 against
12-22; 4-6-kernel norm backward regions 29-57 against 54-100); per step, every launcher on against
all off: 0.74-0.80x on LLaMA-style inference and BERT-style training, 0.87-0.88x on ViT and ConvNeXt
training. A Python launcher (ctypes), tried first, (ctypes) saved only 1-3 us per call, and one-kernel regions
only.

Scalar kernel parameters (extents the host evaluated, e.g. a persistent kernel's `nvfuser_index_t i0`)
keep the bytes of the build: with fixed sizes and no random numbers they never change (`is_scalar`).

Integer inputs (the SymInt sizes a dynamic-shape graph hands a region) are taken the same way: the
scalar arguments computed from them are the build's, so a symbolic region keys its launchers by their
values too (region._sized_key) and passes the launcher its tensors alone.

Not taken (the reason is kept for explain()): random numbers, float scalar or CPU inputs, outputs that
alias inputs or that no kernel writes (host-evaluated segments), cluster launches, zeroing that cannot
be mapped to work buffers (of an input or an output, or by a fill kernel whose extent cannot be read),
a torch without `CUDAGraph.raw_cuda_graph`, a driver without `cuFuncGetParamInfo` (CUDA 12.4) or
`cuFuncGetName` (several kernels), or a machine without a C compiler and Python's headers. Under CUDA
graphs there is no host cost to save, so it is off there.
"""

from __future__ import annotations

import ctypes
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import torch

from dynamo_nvf.runtime import c_launcher

log = logging.getLogger("dynamo_nvf")

#: The widest vectorised access nvFuser keys its kernels on, in bytes (128 bits; 256 from compute
#: capability 10 with NVRTC 12.9: getMaxVectorizationSizeInBit in nvFuser's utils.cpp).
MAX_ALIGNMENT = 16
WIDE_ALIGNMENT = 32
#: CUgraphNodeType values (cuda.h).
_KERNEL_NODE, _MEMSET_NODE = 0, 2
#: CUlaunchAttributeID values (cuda.h) a kernel node may carry and a plain cuLaunchKernel cannot give.
_COOPERATIVE, _CLUSTER_DIMENSION = 2, 4
#: Bytes per element of the dtypes nvFuser's kernel signatures print (codegen's `Tensor<dtype, ...>`).
ELEMENT_BYTES = {
    "double": 8, "float": 4, "__half": 2, "__bfloat": 2, "int64_t": 8, "int": 4, "int32_t": 4,
    "uint64_t": 8, "uint32_t": 4, "bool": 1, "char": 1, "int8_t": 1, "uint8_t": 1, "__e4m3": 1, "__e5m2": 1,
    "std::complex<float>": 8, "std::complex<double>": 16,
}

#: Work buffers share one allocation per call, each at a multiple of this many bytes (the caching
#: allocator's block size: at least any alignment a kernel may assume of a fresh allocation).
WORK_GRANULE = 512

#: The kernel's index type (a grid Welford's counts): as wide as the sizes in its Tensor structs.
INDEX_TYPE = "nvfuser_index_t"


class NotDirect(Exception):
    """This region's kernel cannot be launched directly; the message says why (explain shows it).
    `any_size`: the reason holds for every size of its inputs (the machine, the torch, the region's
    inputs' kinds), so a region with symbolic sizes tries no other."""

    def __init__(self, message: str, any_size: bool = False) -> None:
        super().__init__(message)
        self.any_size = any_size


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


class _MemsetNodeParams(ctypes.Structure):
    """CUDA_MEMSET_NODE_PARAMS (cuda.h)."""

    _fields_ = [
        ("dst", ctypes.c_uint64), ("pitch", ctypes.c_size_t), ("value", ctypes.c_uint),
        ("elementSize", ctypes.c_uint), ("width", ctypes.c_size_t), ("height", ctypes.c_size_t),
    ]


@dataclass(frozen=True)
class LaunchConfig:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int


class _Driver:
    """The CUDA driver entry points this needs, loaded once (libcuda, as torch.cuda._utils does).
    The C launcher calls cuLaunchKernel and cuMemsetD8Async through their addresses."""

    _instance: Optional["_Driver"] = None

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            self.get_nodes = lib.cuGraphGetNodes
            self.node_type = lib.cuGraphNodeGetType
            self.kernel_node_params = lib.cuGraphKernelNodeGetParams_v2
            self.memset_node_params = lib.cuGraphMemsetNodeGetParams
            self.kernel_node_attribute = lib.cuGraphKernelNodeGetAttribute
            self.param_info = lib.cuFuncGetParamInfo
            self.launch_address = ctypes.cast(lib.cuLaunchKernel, ctypes.c_void_p).value
            self.cooperative_address = ctypes.cast(lib.cuLaunchCooperativeKernel, ctypes.c_void_p).value
            self.memset_address = ctypes.cast(lib.cuMemsetD8Async, ctypes.c_void_p).value
            self.ctx_get = lib.cuCtxGetCurrent
            self.ctx_get_address = ctypes.cast(lib.cuCtxGetCurrent, ctypes.c_void_p).value
            self.ctx_set_address = ctypes.cast(lib.cuCtxSetCurrent, ctypes.c_void_p).value
        except (OSError, AttributeError) as exc:
            raise NotDirect(f"CUDA driver entry point missing: {exc}", any_size=True) from exc
        self.function_name = getattr(lib, "cuFuncGetName", None)  # CUDA 12.3
        self.edges_v2 = getattr(lib, "cuGraphGetEdges_v2", None)  # CUDA 12.3 (edge data); else the first API
        self.edges = lib.cuGraphGetEdges

    @classmethod
    def get(cls) -> "_Driver":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def check(self, result: int, what: str) -> None:
        if result != 0:
            raise NotDirect(f"{what} failed (CUresult {result})")

    def addresses(self) -> tuple[int, int, int, int, int]:
        """What the C launcher calls: cuLaunchKernel, cuLaunchCooperativeKernel, cuMemsetD8Async,
        cuCtxGetCurrent, cuCtxSetCurrent."""
        return (self.launch_address, self.cooperative_address, self.memset_address, self.ctx_get_address,
                self.ctx_set_address)

    def current_context(self) -> int:
        context = ctypes.c_void_p()
        self.check(self.ctx_get(ctypes.byref(context)), "cuCtxGetCurrent")
        return context.value or 0

    def name_of(self, function: int) -> str:
        if self.function_name is None:
            raise NotDirect("this driver cannot name kernels (cuFuncGetName, CUDA 12.3)", any_size=True)
        name = ctypes.c_char_p()
        self.check(self.function_name(ctypes.byref(name), ctypes.c_void_p(function)), "cuFuncGetName")
        return (name.value or b"").decode(errors="replace")

    def graph_edges(self, graph: ctypes.c_void_p) -> list[tuple[int, int]]:
        """(from, to) of every dependency edge in the graph."""
        def call(sources, targets, data, count):
            if self.edges_v2 is not None:  # edge data (programmatic launches' edges) must be asked for
                return self.edges_v2(graph, sources, targets, data, ctypes.byref(count))
            return self.edges(graph, sources, targets, ctypes.byref(count))
        count = ctypes.c_size_t(0)
        self.check(call(None, None, None, count), "cuGraphGetEdges")
        if count.value == 0:
            return []
        sources, targets = (ctypes.c_void_p * count.value)(), (ctypes.c_void_p * count.value)()
        data = ctypes.create_string_buffer(8 * count.value)  # CUgraphEdgeData: ports, type, reserved
        self.check(call(sources, targets, data, count), "cuGraphGetEdges")
        return list(zip(sources, targets))

    def attribute(self, node: ctypes.c_void_p, attribute: int) -> bytes:
        value = ctypes.create_string_buffer(64)  # CUlaunchAttributeValue
        self.check(self.kernel_node_attribute(node, ctypes.c_int(attribute), value), "cuGraphKernelNodeGetAttribute")
        return value.raw


@dataclass
class KernelLaunch:
    """One captured kernel launch: the function, its launch configuration and argument bytes."""

    function: int
    name: str
    config: LaunchConfig
    arguments: list[bytes]
    #: launched cooperatively (a grid-synchronising persistent kernel; cuLaunchCooperativeKernel)
    cooperative: bool = False


@dataclass(frozen=True)
class Zeroing:
    """A node that zeroes `length` bytes (a memset node, or ATen's fill kernel of at::zeros) from one of
    `starts`: the memset's destination, or every 8-byte word of the fill kernel's arguments (one of
    which is its data pointer; plan_launches finds which)."""

    starts: frozenset
    length: int


@dataclass
class CapturedLaunch:
    """What one captured `fec.execute` did, in launch order: nvFuser's kernels (one per segment) and
    the nodes that zero memory."""

    steps: list[Union[KernelLaunch, Zeroing]] = field(default_factory=list)
    outputs: list[torch.Tensor] = field(default_factory=list)


@dataclass
class LaunchPlan:
    """What the C launcher replays per call: kernels as (function, dims, argument bytes, slots,
    cooperative), a slot being which tensor's data pointer starts that argument (inputs, then outputs,
    then work buffers); per work buffer its bytes and the alignment of its build pointer; and every
    byte range the build zeroed as (before which kernel, work buffer, offset, bytes), in order."""

    kernels: list[tuple[int, tuple[int, ...], list[bytes], tuple[int, ...], bool]]
    work: list[tuple[int, int]]
    zeros: list[tuple[int, int, int, int]] = field(default_factory=list)


def _kernel_launch(driver: _Driver, node: ctypes.c_void_p, named: bool) -> KernelLaunch:
    params = _KernelNodeParams()
    driver.check(driver.kernel_node_params(node, ctypes.byref(params)), "cuGraphKernelNodeGetParams")
    if not params.func or not params.kernelParams or params.extra:
        raise NotDirect("kernel node without a function or with packed arguments")
    arguments: list[bytes] = []
    while True:
        offset, size = ctypes.c_size_t(), ctypes.c_size_t()
        if driver.param_info(ctypes.c_void_p(params.func), ctypes.c_size_t(len(arguments)), ctypes.byref(offset),
                             ctypes.byref(size)) != 0:
            break  # past the last parameter
        arguments.append(ctypes.string_at(params.kernelParams[len(arguments)], size.value))
    config = LaunchConfig((params.gridDimX, params.gridDimY, params.gridDimZ),
                          (params.blockDimX, params.blockDimY, params.blockDimZ), params.sharedMemBytes)
    return KernelLaunch(params.func, driver.name_of(params.func) if named else "", config, arguments)


#: Bytes per element of ATen's FillFunctor<T> by T's Itanium mangling (the kernel of at::zeros).
_FILL_ELEMENT_BYTES = {"h": 1, "a": 1, "c": 1, "b": 1, "s": 2, "t": 2, "N3c104HalfE": 2, "N3c108BFloat16E": 2,
                       "i": 4, "j": 4, "f": 4, "l": 8, "m": 8, "x": 8, "y": 8, "d": 8}
_FILL_TYPE = re.compile(r"FillFunctorI(N3c104HalfE|N3c108BFloat16E|[a-z])E")


def fill_bytes(name: str, arguments: Sequence[bytes]) -> int:
    """Bytes an ATen fill kernel writes: its first parameter is `int N` (elements) in every
    elementwise kernel of CUDALoops.cuh, its element type FillFunctor's template argument."""
    match = _FILL_TYPE.search(name)
    element = _FILL_ELEMENT_BYTES.get(match.group(1), 0) if match is not None else 0
    if not element or not arguments or len(arguments[0]) != 4:
        raise NotDirect(f"a fill kernel whose extent cannot be read ({name[:80]})")
    return int.from_bytes(arguments[0], "little", signed=True) * element


def _words(arguments: Sequence[bytes]) -> frozenset:
    """Every 8-byte-aligned word of a kernel's arguments (where a fill kernel keeps its pointer)."""
    return frozenset(int.from_bytes(raw[i:i + 8], "little") for raw in arguments for i in range(0, len(raw) - 7, 8))


def _launch_order(nodes: Sequence[int], edges: Sequence[tuple[int, int]]) -> list[int]:
    """The nodes in an order that respects every edge (one stream's capture is a chain)."""
    waiting = {node: 0 for node in nodes}
    after: dict[int, list[int]] = {node: [] for node in nodes}
    for source, target in edges:
        after[source].append(target)
        waiting[target] += 1
    ready = [node for node in nodes if waiting[node] == 0]
    order = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for target in after[node]:
            waiting[target] -= 1
            if waiting[target] == 0:
                ready.append(target)
    if len(order) != len(nodes):
        raise NotDirect("the captured graph has a cycle")
    return order


def captured_launches(fec: Any, args: Sequence[Any], device: torch.device) -> CapturedLaunch:
    """Captures one `fec.execute(args)` in a CUDA graph (never instantiated) and reads it back, in
    launch order: each nvFuser kernel (function, launch configuration, argument bytes) and each node
    that zeroes a buffer; and the outputs of the captured call (whose data pointers the arguments hold)."""
    driver = _Driver.get()
    if not hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph"):
        raise NotDirect("this torch cannot hand out a captured graph (CUDAGraph.raw_cuda_graph)", any_size=True)
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
    if count.value == 0:
        raise NotDirect("no graph node")
    nodes = (ctypes.c_void_p * count.value)()
    driver.check(driver.get_nodes(handle, nodes, ctypes.byref(count)), "cuGraphGetNodes")
    order = _launch_order(list(nodes), driver.graph_edges(handle) if count.value > 1 else [])
    named = count.value > 1  # alone, the kernel is nvFuser's; among others, its name tells it apart
    steps: list[Union[KernelLaunch, Zeroing]] = []
    for raw_node in order:
        node = ctypes.c_void_p(raw_node)
        kind = ctypes.c_int(-1)
        driver.check(driver.node_type(node, ctypes.byref(kind)), "cuGraphNodeGetType")
        if kind.value == _MEMSET_NODE:
            memset = _MemsetNodeParams()
            driver.check(driver.memset_node_params(node, ctypes.byref(memset)), "cuGraphMemsetNodeGetParams")
            if memset.value != 0:
                raise NotDirect("a memset to a nonzero value")
            row = memset.width * memset.elementSize
            if memset.height > 1 and memset.pitch != row:
                raise NotDirect("a memset of rows with gaps between them")
            steps.append(Zeroing(frozenset({memset.dst}), row * max(memset.height, 1)))
            continue
        if kind.value != _KERNEL_NODE:
            raise NotDirect(f"a graph node of type {kind.value} (neither a kernel nor a memset)")
        launch = _kernel_launch(driver, node, named)
        if named and "nvfuser" not in launch.name:
            if "FillFunctor" not in launch.name:  # at::zeros of a zero-initialised work buffer
                raise NotDirect(f"a kernel that is not nvFuser's runs with it ({launch.name[:80]})")
            # the filled buffer's pointer is among the words
            steps.append(Zeroing(_words(launch.arguments), fill_bytes(launch.name, launch.arguments)))
            continue
        launch.cooperative = bool(int.from_bytes(driver.attribute(node, _COOPERATIVE)[:4], "little"))
        cluster = [int.from_bytes(driver.attribute(node, _CLUSTER_DIMENSION)[i:i + 4], "little") for i in (0, 4, 8)]
        if math.prod(max(d, 1) for d in cluster) > 1:
            raise NotDirect(f"a cluster launch {tuple(cluster)}")
        steps.append(launch)
    if not any(isinstance(step, KernelLaunch) for step in steps):
        raise NotDirect("no nvFuser kernel")
    return CapturedLaunch(steps, list(outputs))


_GLOBAL = re.compile(r"__global__\s+void\s+(?:__\w+__\s*\([^)]*\)\s*)*(\w+)\s*\(")


def kernel_parameters(source: str, name: str = "") -> list[str]:
    """The parameter declarations of nvFuser's kernel `name` in its source: the `__global__` function
    whose name the (mangled) `name` contains, the longest such; the first one where `name` is ''."""
    found = [m for m in _GLOBAL.finditer(source) if m.group(1) in name] if name else list(_GLOBAL.finditer(source))[:1]
    if not found:
        raise NotDirect(f"no __global__ function {name[:60]} in the kernel source")
    match = max(found, key=lambda m: len(m.group(1)))
    params, depth, current = [], 0, []
    for char in source[match.end():]:
        if char in "<(":
            depth += 1
        elif char in ">)":
            if depth == 0:  # the parameter list's closing parenthesis
                break
            depth -= 1
        if char == "," and depth == 0:
            params.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    last = "".join(current).strip()
    return params + [last] if last else params


_TENSOR = re.compile(r"^Tensor<\s*(.+?)\s*,\s*(\d+)\s*,\s*(\d+)\s*>\s+\w+$")
#: A scalar kernel parameter nvFuser's codegen declares (an extent or a value the host evaluated from
#: sizes, such as `nvfuser_index_t i0`). Pointer-carrying structs (TensorMap, Array) are not scalars.
_SCALAR = re.compile(r"^(?:const\s+)?(?:nvfuser_index_t|int64_t|int32_t|int|unsigned|uint64_t|uint32_t|float|double|bool|"
                     r"__half|__bfloat)\s+\w+$")
#: The slot of an argument whose bytes stay the build's on every call (a scalar).
CONSTANT = -1


def is_scalar(declaration: str) -> bool:
    """True for a scalar kernel parameter. In a region direct launch takes, all of the fusion's inputs
    are tensors whose sizes are fixed (region.static_region, guarded by Dynamo; or, for a region with
    symbolic sizes, the one set of sizes its launcher was built for; the launcher compares them per
    call, with the strides, dtype, device and alignment), and no op draws random numbers
    (no seed or offset): such a scalar is a function of those sizes alone, the same on every call."""
    return _SCALAR.match(declaration) is not None


def work_buffer_bytes(declaration: str, raw: bytes, extent: bool = True) -> int:
    """Bytes of a tensor argument (`Tensor<T, N, A> name`) read from its struct, a data pointer then N
    logical sizes and A allocation strides of 4- or 8-byte indices: its elements, or with `extent`
    also at least the reach of its strides where they pair with the sizes (a work buffer is allocated
    with the larger; the strides follow the allocation domain, which may be permuted)."""
    match = _TENSOR.match(declaration)
    if match is None:
        raise NotDirect(f"a kernel argument that is not a tensor ({declaration[:60]})")
    dtype, dims, alloc_dims = match.group(1), int(match.group(2)), int(match.group(3))
    if dtype not in ELEMENT_BYTES and dtype != INDEX_TYPE:
        raise NotDirect(f"a work buffer of unknown dtype {dtype}")
    index = next((b for b in (8, 4) if len(raw) == 8 + -(-(dims + alloc_dims) * b // 8) * 8), None)
    if index is None:
        raise NotDirect(f"a work buffer struct of {len(raw)} bytes for {declaration}")
    element = index if dtype == INDEX_TYPE else ELEMENT_BYTES[dtype]
    values = [int.from_bytes(raw[8 + i * index:8 + (i + 1) * index], "little", signed=True)
              for i in range(dims + alloc_dims)]
    sizes, strides = values[:dims], values[dims:]
    elements = math.prod(sizes)
    if extent and len(strides) == dims and all(s >= 0 for s in strides):
        elements = max(elements, 1 + sum((n - 1) * s for n, s in zip(sizes, strides) if n > 0))
    return max(elements, 1) * element


def pointer_alignment(pointer: int, cap: int = MAX_ALIGNMENT) -> int:
    """The largest power of two up to `cap` that divides `pointer` (bytes): what nvFuser's cache key
    and its vectorisation see of a data pointer (SchedulerRuntimeInfo::computeAlignmentSizeBit)."""
    alignment = 1
    while alignment < cap and pointer % (alignment * 2) == 0:
        alignment *= 2
    return alignment


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes from a tensor's data pointer to the end of its last element (0 when empty)."""
    if tensor.numel() == 0:
        return 0
    return (1 + sum((n - 1) * abs(s) for n, s in zip(tensor.shape, tensor.stride()))) * tensor.element_size()


def plan_launches(steps: Sequence[Union[KernelLaunch, Zeroing]], inputs: Sequence[int], outputs: Sequence[int],
                  source: Optional[Callable[[], str]] = None,
                  output_bytes: Optional[Sequence[int]] = None,
                  input_bytes: Optional[Sequence[int]] = None) -> LaunchPlan:
    """Maps every kernel argument to the tensor whose data pointer starts it: an input, an output, or
    else a work buffer nvFuser allocated for the call (a grid reduction's buffers, or an intermediate
    between segments), whose size is read from its `Tensor` struct (`source()` gives the kernels'
    source, for the declarations). Work buffers are keyed by pointer, as the capture's allocator laid
    them out; inputs that share a pointer (views of one tensor) share a slot, and the launcher checks
    per call that they still do. With several kernels the allocator may have reused a freed
    intermediate's memory for an output: an argument at an output's address is that output from the
    first one of exactly its bytes (`output_bytes`: elements times element size) on; before it, it is
    an earlier tensor, given a work buffer of its own. A scalar parameter keeps the build's bytes
    (slot CONSTANT; see is_scalar).

    Every zeroing node is replayed where it ran: each work buffer's part of its byte range is zeroed
    before the next kernel (nvFuser zeroes one allocation per kernel and slices it into several
    semaphores, and may zero the same memory again for a later segment). NotDirect where that is not
    sound: an output no kernel writes, an argument that is neither a tensor nor a scalar, a zeroing
    that touches an input or an output (`input_bytes`, `output_bytes`: their extents), that starts in
    no tensor, touches no work buffer, or comes after the last kernel."""
    if len(set(outputs)) != len(outputs) or set(inputs) & set(outputs):
        raise NotDirect("an output shares a data pointer with an input or another output")
    slots: dict[Optional[int], int] = {}
    for index, pointer in enumerate((*inputs, *outputs)):
        slots.setdefault(pointer, index)
    work: dict[Any, int] = {}  # pointer (or ("before", an output's pointer)) -> bytes
    produced: set[int] = set()  # outputs' pointers once their producing kernel was seen
    declarations: dict[str, list[str]] = {}
    kernels = []
    several = sum(isinstance(step, KernelLaunch) for step in steps) > 1

    def declared(step: KernelLaunch, index: int) -> str:
        if step.name not in declarations:
            declarations[step.name] = kernel_parameters(source() if source is not None else "", step.name)
            if len(declarations[step.name]) != len(step.arguments):
                raise NotDirect(f"{len(declarations[step.name])} declared kernel parameters for "
                                f"{len(step.arguments)} arguments")
        return declarations[step.name][index]

    for step in steps:
        if not isinstance(step, KernelLaunch):
            continue
        kernel_slots = []
        for index, raw in enumerate(step.arguments):
            pointer = int.from_bytes(raw[:8], "little") if len(raw) >= 8 else None
            key: Any = pointer
            if several and pointer in slots and slots[pointer] >= len(inputs) and pointer not in work:
                size = work_buffer_bytes(declared(step, index), raw, extent=False)
                need = output_bytes[slots[pointer] - len(inputs)] if output_bytes is not None else -1
                if pointer not in produced and size == need:
                    produced.add(pointer)  # the output, from its producing segment on
                elif pointer not in produced:
                    key = ("before", pointer)  # a freed intermediate's memory, reused for the output later
            # A small value that equals a tensor's pointer (0: an empty input's) may be a scalar (an
            # integer input's value): its declaration decides. Device pointers are far above 2^32.
            ambiguous = key in slots and pointer is not None and pointer < 1 << 32 and source is not None
            if (key not in slots or ambiguous) and is_scalar(declared(step, index)):
                log.debug("direct launch: kernel %s keeps %s = %s", step.name[-40:], declared(step, index), raw.hex())
                kernel_slots.append(CONSTANT)
                continue
            if key not in slots or key in work:
                size = work_buffer_bytes(declared(step, index), raw)
                if key not in work:  # the next work buffer's slot, after every input and output position
                    slots[key] = len(inputs) + len(outputs) + len(work)
                work[key] = max(work.get(key, 0), size)
            slot = slots[key]
            # Every argument at an output's slot (its producer's and later segments' alike) fits in it.
            if (output_bytes is not None and source is not None and len(inputs) <= slot < len(inputs) + len(outputs)
                    and work_buffer_bytes(declared(step, index), raw, extent=False) > output_bytes[slot - len(inputs)]):
                raise NotDirect("an argument at an output's address reaches past it (holds more than the output)")
            kernel_slots.append(slot)
        config = step.config
        kernels.append((step.function, (*config.grid, *config.block, config.dynamic_smem), list(step.arguments),
                        tuple(kernel_slots), step.cooperative))
    used = {slot for kernel in kernels for slot in kernel[3]}
    if any(len(inputs) + i not in used for i in range(len(outputs))):
        raise NotDirect("an output no kernel writes (an alias or a host-evaluated segment)")
    def start(key: Any) -> int:
        return key[1] if isinstance(key, tuple) else key

    work_ranges = [(start(key), start(key) + size) for key, size in work.items()]
    extents = [*(input_bytes or [1] * len(inputs)), *(output_bytes or [1] * len(outputs))]
    io_ranges = [(pointer, pointer + max(extent, 1)) for pointer, extent in zip((*inputs, *outputs), extents)]
    zeros: list[tuple[int, int, int, int]] = []
    before = 0  # kernels launched before this step
    for step in steps:
        if isinstance(step, KernelLaunch):
            before += 1
            continue
        if step.length <= 0:
            continue
        starts = {word for word in step.starts if any(lo <= word < hi for lo, hi in (*work_ranges, *io_ranges))}
        if len(starts) != 1:
            raise NotDirect("the graph zeroes memory that is in no tensor of the kernels" if not starts else
                            "a zeroing whose start cannot be told (several tensors among its arguments)")
        (begin,) = starts
        end = begin + step.length
        if any(lo < end and begin < hi for lo, hi in io_ranges):
            raise NotDirect("the graph zeroes an input or an output")
        if before == len(kernels):
            raise NotDirect("the graph zeroes memory after its last kernel")
        hits = [(before, index, max(begin, lo) - lo, min(end, hi) - max(begin, lo))
                for index, (lo, hi) in enumerate(work_ranges) if lo < end and begin < hi]
        if not hits:
            raise NotDirect("the graph zeroes memory that is not a work buffer of the kernels")
        zeros.extend(hits)
    # work keys were added in slot order (each took the next slot), so the dict's order is theirs.
    # Slots count positions, not distinct pointers: inputs that share a pointer leave a position
    # unused, and numbering work buffers by distinct pointers gave one an output's slot (H100,
    # 2026-11-24: LLaMA-style backward regions wrote an f32 intermediate into a bf16 output, past its end).
    return LaunchPlan(kernels, [(size, pointer_alignment(start(key))) for key, size in work.items()], zeros)


def make_launcher(driver: Sequence[int], context: int, plan: LaunchPlan, device: int,
                  inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], owner: Any,
                  empty: Callable[..., torch.Tensor], get_device: Callable[[], int],
                  exchange_device: Callable[[int], int], get_stream: Callable[[int], int],
                  cap: int = MAX_ALIGNMENT) -> Any:
    """The C launcher (runtime/launcher.c) of a plan: inputs checked against these inputs' sizes,
    strides, dtypes, device and pointer alignment (up to `cap` bytes), outputs allocated like these
    outputs, work buffers allocated (one allocation, work_layout) and zeroed per call, on `device` in
    `context`. `driver` holds the addresses of cuLaunchKernel, cuLaunchCooperativeKernel,
    cuMemsetD8Async, cuCtxGetCurrent and cuCtxSetCurrent (_Driver.addresses)."""
    module = c_launcher.load()
    pointers = [t.data_ptr() for t in inputs]
    input_specs = tuple((tuple(t.shape), tuple(t.stride()), t.dtype, pointers.index(t.data_ptr())) for t in inputs)
    output_args = tuple((tuple(t.shape), tuple(t.stride()), t.dtype) for t in outputs)
    offsets, total = work_layout([size for size, _ in plan.work])
    work_args = (((total,), (1,), torch.uint8),) if plan.work else ()
    alignment = tuple([pointer_alignment(p, cap) for p in pointers]
                      + [pointer_alignment(t.data_ptr(), cap) for t in outputs]
                      + [min(align, cap) for _, align in plan.work])
    return module.Launcher(tuple(driver), context, list(plan.kernels), device, input_specs, output_args, work_args,
                           tuple(offsets), alignment, tuple(plan.zeros), empty, get_device, exchange_device,
                           get_stream, owner)


def work_layout(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Offsets of work buffers of these byte sizes in one allocation, and its size: each starts on a
    WORK_GRANULE boundary, as the caching allocator would have placed it alone (an allocation per buffer
    cost ~2 µs of host per call each; a region with a grid reduction has up to 8)."""
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total += -(-max(size, 1) // WORK_GRANULE) * WORK_GRANULE
    return offsets, total


def alignment_cap(device: torch.device) -> int:
    """The widest access nvFuser may vectorise to on `device` (see MAX_ALIGNMENT)."""
    return WIDE_ALIGNMENT if torch.cuda.get_device_capability(device)[0] >= 10 else MAX_ALIGNMENT


def _allocator(device: torch.device) -> Callable[..., torch.Tensor]:
    """inductor's allocator for its wrappers (no dispatcher) on the current device; else empty_strided."""
    fast = getattr(getattr(getattr(torch._C, "_dynamo", None), "guards", None), "_empty_strided_cuda", None)
    if fast is not None:
        return fast
    return lambda shape, strides, dtype: torch.empty_strided(shape, strides, dtype=dtype, device=device)


def build(fec: Any, args: Sequence[Any], outputs: Sequence[torch.Tensor]) -> Any:
    """The C launcher for `fec`'s kernels on inputs laid out as `args`, checked bit for bit against
    nvFuser's own `outputs` for these `args`. Raises NotDirect (with the reason) where it cannot be.

    Integer inputs (a symbolic region's sizes) are allowed: the launcher replays the scalar kernel
    arguments the build computed from them and takes the tensor inputs alone, so the caller calls it
    only with these integers' values (region._sized_key)."""
    every = list(args)
    for arg in every:
        if isinstance(arg, torch.Tensor):
            if arg.device.type != "cuda":
                raise NotDirect("a CPU input", any_size=True)
        elif not isinstance(arg, int):
            raise NotDirect("a scalar input that is not an integer", any_size=True)
    args = [a for a in every if isinstance(a, torch.Tensor)]
    if not args or not outputs:
        raise NotDirect("no tensor inputs or no outputs", any_size=True)
    devices = {t.device for t in (*args, *outputs)}
    if len(devices) != 1:
        raise NotDirect("tensors on several devices", any_size=True)
    device = next(iter(devices))
    inputs = {t.untyped_storage().data_ptr() for t in args}
    storages = [t.untyped_storage().data_ptr() for t in outputs]
    if len(set(storages)) != len(storages) or inputs.intersection(storages):
        raise NotDirect("an output shares storage with an input or another output")
    try:
        c_launcher.load()
    except c_launcher.LauncherUnavailable as exc:
        raise NotDirect(f"no C launcher: {exc}", any_size=True) from exc

    with torch.cuda.device(device):
        captured = captured_launches(fec, every, device)
        if len(captured.outputs) != len(outputs) or any(c.stride() != o.stride() or c.shape != o.shape
                                                        for c, o in zip(captured.outputs, outputs)):
            raise NotDirect("the captured call's outputs are laid out otherwise")
        plan = plan_launches(captured.steps, [t.data_ptr() for t in args], [t.data_ptr() for t in captured.outputs],
                             source=lambda: fec.get_cuda_kernel(every, device=device.index),
                             output_bytes=[t.numel() * t.element_size() for t in captured.outputs],
                             input_bytes=[tensor_bytes(t) for t in args])
        captured.outputs.clear()
        driver = _Driver.get()
        context = driver.current_context()  # the device's primary context: nvFuser loaded its kernels there
        if not context:
            raise NotDirect("no CUDA context is current on the device", any_size=True)
        launcher = make_launcher(driver.addresses(), context, plan, device.index, args, outputs, fec,
                                 _allocator(device), torch._C._cuda_getDevice, torch._C._cuda_exchangeDevice,
                                 torch._C._cuda_getCurrentRawStream, alignment_cap(device))
        mine = launcher(args)
    if mine is None:
        raise NotDirect(f"it declined the inputs it was built for: {launcher.last_decline}")
    for index, (got, want) in enumerate(zip(mine, outputs)):
        try:  # bit for bit, as region._materialize_outputs checks its rebuilt definitions
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, check_stride=True)
        except AssertionError as exc:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("direct launch: output %d differs: %s\n%s", index, str(exc).splitlines()[:6],
                          _describe(captured, plan, args, outputs,
                                    fec.get_cuda_kernel(every, device=device.index)))
            raise NotDirect("its outputs differ from nvFuser's") from exc
    return launcher


def _describe(captured: CapturedLaunch, plan: LaunchPlan, args: Sequence[torch.Tensor],
              outputs: Sequence[torch.Tensor], source: str) -> str:
    """The captured call and its plan, for a debug log: each kernel's arguments with their slots."""
    lines = [f"inputs {[(tuple(t.shape), t.stride(), t.dtype, hex(t.data_ptr())) for t in args]}",
             f"outputs {[(tuple(t.shape), t.stride(), t.dtype) for t in outputs]}",
             f"work {plan.work}", f"zeroed {plan.zeros}"]
    kernels = iter(plan.kernels)
    for step in captured.steps:
        if not isinstance(step, KernelLaunch):
            lines.append(f"  zero {step.length} bytes from one of {[hex(w) for w in step.starts if w > 1 << 32][:4]}")
            continue
        _, dims, _, slots, cooperative = next(kernels)
        lines.append(f"  kernel {step.name[-50:]} dims {dims} cooperative {cooperative}")
        try:
            declared = kernel_parameters(source, step.name)
        except NotDirect:
            declared = [""] * len(step.arguments)
        for raw, slot, declaration in zip(step.arguments, slots, declared):
            lines.append(f"    slot {slot:3d} {declaration[:40]:40s} {raw[:8].hex()} {raw[8:56].hex()}")
    return "\n".join(lines)


def launch_configs(launcher: Any) -> list[LaunchConfig]:
    return [LaunchConfig(tuple(grid), tuple(block), smem) for grid, block, smem in launcher.dims]
