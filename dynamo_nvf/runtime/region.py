"""Runs one region: on nvFuser when it can, else its eager FX submodule, with the same results.

Per call it only builds a cache key and executes; definitions are built and compiled once per input
description (dtype, rank, broadcast dims, layout, device) and kept in a bounded LRU. An nvFuser error
(build, compile or run) makes the region run as pieces from then on (runtime/split_region.py), each
a region of its own that runs in eager if nvFuser fails it too; a region that cannot be split runs in
eager. Either way one warning names the region. An error that transposed inputs cause
(`LAYOUT_ERRORS`) first has the region built again for row-major copies of them.

Where a steady call's time goes inside ``fec.execute`` (nvFuser's own trace, NVFUSER_TRACE, read by
scripts/nvf_trace.py; H100, nvfuser_direct 0.2.36, 2026-11-23; traced calls run slower by ~1-3 us
per scope): per call, setting the cache id ~3-4 us and the runtime lookup ~2 us; then per segment
(1.3-1.7 per region in LLaMA-/BERT-style steps) ~5-20 us of KernelExecutor::run's own work (argument
binding, launch parameters), output allocation ~6-12 us, zero-filled intermediate buffers (grid
reductions' semaphores: an extra fill kernel) ~2-12 us, and the launch ~8-11 us. So the levers
that are ours are fewer segments per region and fewer outputs; the rest is nvFuser's floor (~12 us
for a one-kernel fusion) and this wrapper's ~1 us.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import warnings
from collections import OrderedDict
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch.fx import GraphModule

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.lowering import build_fusion, views_an_input
from dynamo_nvf.ops.lowerings import draws_random_numbers
from dynamo_nvf.ops.metadata import static_layout, strides_nest
from dynamo_nvf.ops.registry import op_name
from dynamo_nvf.passes.fusion_key import region_fusion_key
from dynamo_nvf.plan import KernelInfo, RegionPlan
from dynamo_nvf.ops import fast_math
from dynamo_nvf.ops.static_sizes import region_static_sizes
from dynamo_nvf.runtime import direct_launch, kernel_cache
from dynamo_nvf.runtime.fusion_cache import SHARED_FUSIONS
from dynamo_nvf.runtime.split_region import Piece, computes, run_pieces, split_by_stage, split_region
from dynamo_nvf.runtime.stats import STATS, record_fallback
from dynamo_nvf.segmenter import oracle_for
from dynamo_nvf.settings import Settings

log = logging.getLogger("dynamo_nvf")


#: Steady (fast-path) calls before a region builds its direct launcher: past warm-up, and never on
#: a region that only ever runs once.
DIRECT_AFTER_FAST_CALLS = 2
#: Direct launchers a region with symbolic sizes keeps, one per set of input sizes (a server's few
#: lengths or buckets); sizes past these, and sets of sizes tracked past SIZES_TRACKED, stay on
#: fec.execute.
SIZED_LAUNCHERS = 8
SIZES_TRACKED = 64
#: nvFuser errors that a region's transposed inputs cause and row-major copies of them avoid: a
#: LayerNorm backward whose input is transposed in memory (MLP-Mixer's token mixing;
#: scripts/nvfuser_repros/transposed_input_norm_backward.py, whose row-major variant compiles). Such a
#: region is built again for row-major copies of those inputs before it is cut into pieces.
LAYOUT_ERRORS = ("Vectorized dim for producer has to be from an inner most position",)


def _reads_transposed(arg: Any) -> bool:
    """A tensor input whose copy would be row-major and no larger: not contiguous, no dim that
    broadcasts or overlaps another (an expand, an unfold)."""
    if not isinstance(arg, torch.Tensor) or arg.dim() < 2 or arg.is_contiguous():
        return False
    return strides_nest(arg.shape, arg.stride(), sorted(range(arg.dim()), key=arg.stride))


def _row_major(args: Sequence[Any]) -> list[Any]:
    return [a.contiguous() if _reads_transposed(a) else a for a in args]


def _ops_named(plan: RegionPlan) -> str:
    """A region's first compute ops, for a fallback's warning (a region of views only, which
    bookend=False keeps, names its views)."""
    ops = plan.compute_ops or plan.ops
    return ", ".join(ops[:4]) + (", ..." if len(ops) > 4 else "")


class NvFuserRegionError(RuntimeError):
    """Raised in strict mode where the region would otherwise fall back to eager."""


def tensor_descriptor(sizes: Sequence[int], strides: Sequence[int]) -> tuple[tuple, tuple]:
    """(contiguity, stride order) as nvFuser's computeTensorDescriptor derives them for define_tensor.

    A port of python_utils.cpp, so that two inputs share a cache entry exactly when nvFuser would
    define them the same way: broadcast (size-1 or stride-0) dims are skipped when judging whether a
    dim is contiguous with the next inner one.
    """
    n = len(sizes)
    dims = sorted((i for i in range(n) if strides[i] != 0), key=lambda i: -strides[i])
    for i in (i for i in range(n) if strides[i] == 0):
        dims.insert(i, i)
    broadcast = [strides[d] == 0 or sizes[d] == 1 for d in dims]
    order_at = [0] * n
    contiguity: list[Optional[bool]] = [None] * n
    i = 0
    while i < n:
        order_at[i] = n - 1 - i
        if broadcast[i]:
            i += 1
            continue
        left = i
        i += 1
        expected = 1
        while i < n:
            order_at[i] = n - 1 - i
            if not broadcast[i]:
                expected = strides[dims[i]] * sizes[dims[i]]
                break
            i += 1
        contiguity[left] = strides[dims[left]] == expected
    stride_order = [0] * n
    for position, d in enumerate(dims):
        stride_order[d] = order_at[position]
    return tuple(contiguity), tuple(stride_order)


def _descriptor(arg: Any, static_sizes: bool = False) -> Any:
    """What a fusion definition depends on: dtype, device, size-1 dims and layout; the sizes too where
    the definition has them (`static_sizes`), so it never serves inputs of other sizes."""
    if isinstance(arg, torch.Tensor):
        sizes, strides = tuple(arg.shape), arg.stride()
        described = (arg.dtype, arg.device, tuple(s == 1 for s in sizes)) + tensor_descriptor(sizes, strides)
        return described + (sizes,) if static_sizes else described
    return type(arg)


def _integer_inputs(region: GraphModule) -> Optional[tuple[int, ...]]:
    """The positions of the region's integer inputs (a dynamic-shape graph's SymInt sizes, bools),
    where every other input is a tensor; None where an input is neither (a float scalar)."""
    positions = []
    for index, node in enumerate(n for n in region.graph.nodes if n.op == "placeholder"):
        val = node.meta.get("val")
        if isinstance(val, (torch.SymInt, torch.SymBool, int)):  # bool is an int
            positions.append(index)
        elif not isinstance(val, torch.Tensor):
            return None
    return tuple(positions)


def _exact_key(args: Sequence[Any]) -> tuple:
    return tuple(
        (a.dtype, a.device, a.shape, a.stride()) if isinstance(a, torch.Tensor) else type(a) for a in args
    )


class _Entry:
    """One fusion definition: its executor cache once run, and outputs whose layout needs a fix."""

    __slots__ = ("fd", "fec", "eager_reason", "output_orders", "fixups", "definition", "enable_options")

    def __init__(self, fd: Any = None, eager_reason: str = "", output_orders: Sequence[Any] = (),
                 definition: str = "", enable_options: Sequence[str] = ()) -> None:
        self.fd = fd
        self.fec = None
        self.eager_reason = eager_reason
        self.output_orders = list(output_orders)
        self.fixups: list[tuple[int, list[int]]] = []
        self.definition = definition
        #: nvFuser enable options of its compiles (fast math), passed on every call: a call with new
        #: sizes compiles again inside the executor cache.
        self.enable_options = list(enable_options)

    def execute(self, args: Sequence[Any]) -> Any:
        """Runs the definition through nvFuser (its first run compiles it), with its options."""
        if self.fec is None:
            return _execute(self.fd, list(args), self.enable_options)
        return _execute(self.fec, args, self.enable_options)


def _execute(runner: Any, args: Any, enable_options: Sequence[str]) -> Any:
    """`runner.execute(args)` (a FusionDefinition or its executor cache), passing nvFuser enable
    options only where there are any."""
    if enable_options:
        return runner.execute(args, _enable_options=list(enable_options))
    return runner.execute(args)


def _dense_in_order(t: torch.Tensor, order: Sequence[int]) -> bool:
    """True when `t` is dense with its dims laid out as nvFuser stride order `order` says."""
    expected = 1
    for d in sorted(range(t.dim()), key=lambda d: order[d]):
        if t.shape[d] == 1:
            continue
        if t.stride(d) != expected:
            return False
        expected *= t.shape[d]
    return True


def _relayout(t: torch.Tensor, order: Sequence[int]) -> torch.Tensor:
    """A dense copy of `t` in the given stride order (eager's), e.g. of an expanded output."""
    perm = sorted(range(t.dim()), key=lambda d: -order[d])
    out = torch.empty_permuted(t.shape, perm, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def layout_fixups(outputs: Sequence[torch.Tensor], orders: Sequence[Optional[list[int]]]) -> list[tuple[int, list[int]]]:
    """Outputs nvFuser did not lay out as eager does (dense, in eager's dim order)."""
    return [(i, order) for i, (out, order) in enumerate(zip(outputs, orders))
            if order is not None and not _dense_in_order(out, order)]


def static_region(region: GraphModule) -> bool:
    """True when every input of the region has sizes, strides and offset fixed at compile time.

    Such a region always sees the same input layouts: graph inputs are guarded by Dynamo, and
    intermediates are computed from them deterministically (region outputs in eager's layout).
    Its runtime can then skip the per-call cache key; nvFuser still validates inputs against the
    definition, and an error sends the call back through the keyed path.
    """
    for node in region.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not static_layout(val):
            return False
    return True


def _traced_strides(output_nodes: Sequence[Any]) -> list[Optional[tuple[int, ...]]]:
    """Eager's strides of each tensor output where static: the layout the graph around the region
    reads it in (a view of it may be a `reinterpret_tensor` of exactly these strides)."""
    vals = [getattr(node, "meta", {}).get("val") for node in output_nodes]
    return [tuple(int(s) for s in val.stride()) if isinstance(val, torch.Tensor) and static_layout(val) else None
            for val in vals]


def _significant(t: torch.Tensor, strides: Sequence[int]) -> list[int]:
    return [s for s, n in zip(strides, t.shape) if n > 1]


def in_traced_layouts(outputs: Sequence[Any], strides: Sequence[Optional[tuple[int, ...]]]) -> Any:
    """`outputs` with each tensor whose layout differs from its traced `strides` copied into them: a
    region's eager run computes its rewritten graph (passes change the order it computes in), whose
    outputs TensorIterator may lay out otherwise than eager's original ops did."""
    fixed = None
    for i, (out, stride) in enumerate(zip(outputs, strides)):
        if stride is None or not isinstance(out, torch.Tensor) or out.dim() != len(stride):
            continue
        if _significant(out, out.stride()) != _significant(out, stride):
            fixed = list(outputs) if fixed is None else fixed
            fixed[i] = torch.empty_strided(out.shape, stride, dtype=out.dtype, device=out.device).copy_(out)
    if fixed is None:
        return outputs
    return tuple(fixed) if isinstance(outputs, tuple) else fixed


def _expected_outputs(region: GraphModule) -> list[tuple[torch.dtype, list[Optional[int]]]]:
    """Eager's dtype and static sizes (None where symbolic) of each region output."""
    out = next(n for n in region.graph.nodes if n.op == "output")
    expected = []
    for node in out.args[0]:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            expected.append((val.dtype, [s if isinstance(s, int) else None for s in val.shape]))
    return expected


def _validate_outputs(outputs: Sequence[torch.Tensor], expected: Sequence[tuple[torch.dtype, list]]) -> None:
    """Once per definition: nvFuser's outputs must have eager's dtypes and shapes, else the region
    falls back to eager (a wrong result must never reach the program)."""
    if len(outputs) != len(expected):
        raise RuntimeError(f"nvFuser returned {len(outputs)} outputs, eager returns {len(expected)}")
    for i, (out, (dtype, sizes)) in enumerate(zip(outputs, expected)):
        shape_ok = out.dim() == len(sizes) and all(s is None or s == o for s, o in zip(sizes, out.shape))
        if out.dtype != dtype or not shape_ok:
            raise RuntimeError(
                f"nvFuser output {i} is {out.dtype}{list(out.shape)}, eager's is {dtype}{sizes}"
            )


#: Relative error (norm of the difference over the norm of eager's output) a region output may have
#: against eager's under `verify_regions`. It is there to catch gross errors (wrong elements, layouts,
#: broadcasts: a ConvNeXt head's backward region gave 0.86 on an H100), not rounding: an f32 mean
#: that cancels to almost nothing (a LayerNorm's saved mean) differs by up to 0.008 in norm between
#: two correct summation orders (H100, 2026-11-24).
VERIFY_TOLERANCE = {torch.float64: 1e-6, torch.float32: 5e-2, torch.bfloat16: 5e-2, torch.float16: 5e-2}


def _strides_that_matter(t: torch.Tensor) -> list[int]:
    """Strides of the dims longer than 1 (a size-1 dim's stride is never used)."""
    return [st for st, n in zip(t.stride(), t.shape) if n > 1]


#: Share of a bool or integer output's elements that may differ from eager's under verify_regions: a
#: comparison computed in f32 inside nvFuser and on rounded bf16 values by eager can flip a few.
VERIFY_MISMATCH_SHARE = 1e-3


class RegionMismatch(RuntimeError):
    """verify_regions found nvFuser's outputs unlike eager's."""


def _value_problem(got: torch.Tensor, want: torch.Tensor) -> str:
    """What differs in one non-empty output's values ('' when nothing does)."""
    if want.is_complex():
        got, want = torch.view_as_real(got), torch.view_as_real(want)
    if not want.is_floating_point():
        differ = int((got != want).sum())
        if differ > VERIFY_MISMATCH_SHARE * want.numel():
            return f"{differ} of {want.numel()} {want.dtype} values differ"
        return ""
    for name, mask in (("NaNs", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        if not torch.equal(mask(got), mask(want)):
            return f"{name} differ"
    finite = torch.isfinite(want)
    g, w = got.double()[finite], want.double()[finite]
    diff, scale = (g - w).norm().item(), w.norm().item()
    tol = VERIFY_TOLERANCE.get(want.dtype, 5e-2)
    # An output eager computes as zeros: allow rounding-sized values (eps per element, in norm).
    floor = torch.finfo(want.dtype).eps * max(1, w.numel()) ** 0.5
    if diff > tol * scale + floor:
        return f"relative error {diff / max(scale, 1e-30):.3g} (tolerance {tol:g})"
    return ""


def verify_against_eager(outputs: Sequence[torch.Tensor], eager: Sequence[Any]) -> str:
    """'' when nvFuser's outputs match eager's, else what differs: values within VERIFY_TOLERANCE of
    each output's norm (finite elements; NaNs and infinities where eager's are; bool and integer
    outputs up to VERIFY_MISMATCH_SHARE of elements), strides on dims longer than 1."""
    wanted = [t for t in eager if isinstance(t, torch.Tensor)]
    if len(wanted) != len(outputs):
        return f"{len(outputs)} outputs, eager's tensors are {len(wanted)}"
    for i, (got, want) in enumerate(zip(outputs, wanted)):
        if want.numel() == 0:
            continue
        if _strides_that_matter(got) != _strides_that_matter(want):
            return f"output {i}: strides {got.stride()}, eager's {want.stride()}"
        problem = _value_problem(got, want)
        if problem:
            return f"output {i} {want.dtype}{list(want.shape)}: {problem}"
    return ""


def has_random_ops(region: GraphModule) -> bool:
    """True when the region draws random numbers (dropout): a second, eager run would draw others."""
    return any(draws_random_numbers(node) for node in region.graph.nodes)


def _validate_devices(outputs: Sequence[torch.Tensor], home: Optional[torch.device]) -> None:
    """Once per definition: nvFuser's outputs must be on eager's GPU (several GPUs per host)."""
    if home is None:
        return
    for i, out in enumerate(outputs):
        if out.device != home:
            raise RuntimeError(f"nvFuser output {i} is on {out.device}, eager's on {home}")


#: The name nvFuser gives a kernel, `nvfuser_<scheduler>_f<fusion>_c<...>_r<...>_g<segment>` (within
#: torch.profiler's names, after an `nvf::` namespace and before the parameter list).
NVFUSER_KERNEL_NAME = re.compile(r"nvfuser_([a-z_]+?)_f\d+(?:_c\d+_r\d+_g(\d+))?")


def _scheduler_from_kernel_name(name: str) -> str:
    """The scheduler in a kernel's name; nvFuser's profile sometimes leaves its scheduler field empty."""
    match = NVFUSER_KERNEL_NAME.match(name)
    return match.group(1) if match else ""


_ERROR_CHARS = 800


def _short_error(exc: BaseException) -> str:
    """The head of an error for a warning: nvFuser's messages carry C++ stack frames after
    "Exception raised from"; the whole text goes to the DEBUG log instead."""
    text = str(exc)
    log.debug("dynamo_nvf: full nvFuser error: %s: %s", type(exc).__name__, text)
    lines = []
    for line in text.splitlines():
        if line.startswith(("Exception raised from", "frame #")):
            continue
        if line.strip():
            lines.append(line.strip())
    short = " | ".join(lines)
    if len(short) > _ERROR_CHARS:
        short = short[:_ERROR_CHARS] + " ... (full text at DEBUG in the dynamo_nvf log)"
    return f"{type(exc).__name__}: {short}"


class _Profiling:
    """Switched on by explain() around the runs it profiles; read on every call, so kept tiny."""

    enabled = False
    #: "nvfuser": each call runs under nvFuser's profiler (segments, kernel and compile times);
    #: "torch": each call runs inside a profiler range named by the region's `profile_label`, so that
    #: the torch.profiler around the run can tell which region launched which kernel.
    mode = "nvfuser"

    @contextlib.contextmanager
    def on(self, mode: str = "nvfuser") -> Iterator[None]:
        """Profiles the region calls made inside, in `mode`."""
        self.enabled, self.mode = True, mode
        try:
            yield
        finally:
            self.enabled, self.mode = False, "nvfuser"


PROFILING = _Profiling()


def _op_range(name: str) -> Any:
    """A profiler range of op scope (the kernels launched inside are linked to it)."""
    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
    return fast(name) if fast is not None else torch.profiler.record_function(name)


def home_device(region: GraphModule) -> Optional[torch.device]:
    """The device eager puts the region's outputs on (a CUDA one with its index), or None when unknown."""
    out = next(n for n in region.graph.nodes if n.op == "output")
    for node in out.args[0]:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and (val.device.type != "cuda" or val.device.index is not None):
            return val.device
    return None


def device_reason(args: Sequence[Any], home: Optional[torch.device]) -> str:
    """'' unless nvFuser would pick the wrong GPU: with no CUDA tensor among its inputs (factory ops,
    CPU scalars) a fusion runs on cuda:0, whatever the current device, so on another rank's GPU the
    region runs in eager, where its outputs land where they belong (CPU outputs: `_runs_on_nvfuser`)."""
    if home is None or home.type != "cuda" or home.index == 0:
        return ""
    if any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args):
        return ""
    return f"no CUDA tensor input: nvFuser would run it on cuda:0, its outputs belong on {home}"


#: cudagraph trees' words for a tensor that a later replay overwrote (torch/_inductor/cudagraph_trees.py,
#: `format_dealloc_msg`, forward and gradient outputs alike): reading it fails wherever it is read.
OVERWRITTEN_OUTPUT = "output of CUDAGraphs that has been overwritten"


def reads_an_overwritten_output(exc: BaseException) -> bool:
    """True for the error of reading a CUDA-graph output that a later replay overwrote (a model that
    keeps a compiled output across calls, as LeViT's eval-mode bias cache does). It is the caller's
    input that is gone, not nvFuser or a graph that failed: raised as it is, with torch's advice
    (clone it, or `torch.compiler.cudagraph_mark_step_begin()`), the region left as it was."""
    return isinstance(exc, RuntimeError) and OVERWRITTEN_OUTPUT in str(exc)


def _capturing() -> bool:
    """True while a CUDA graph is being captured on the current stream (asked on error paths only)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _runs_on_nvfuser(args: Sequence[Any], home: Optional[torch.device] = None) -> str:
    """'' when nvFuser can take these inputs and make outputs where they belong (`home`), else why not.

    A region without CUDA inputs whose outputs belong on the CPU (planned as for CUDA on CPU tensors,
    on a machine with a GPU) would otherwise run on cuda:0."""
    if home is not None and home.type != "cuda":
        return f"its outputs belong on {home.type}: nvFuser runs CUDA tensors"
    for a in args:
        if isinstance(a, torch.Tensor) and a.device.type != "cuda" and not (a.device.type == "cpu" and a.dim() == 0):
            return f"inputs on {a.device.type}: nvFuser runs CUDA tensors"
    return ""


class RegionRuntime:
    """The callable that replaces a region's submodule in the compiled graph."""

    def __init__(self, eager: GraphModule, plan: RegionPlan, settings: Settings, profile_label: str = "",
                 parent: Optional["RegionRuntime"] = None) -> None:
        self.eager = eager
        #: The region this one is a piece of (split_region): it warns and counts for its pieces.
        self.parent = parent
        #: The name of its calls in a torch.profiler trace while explain() profiles (plan.region_label).
        self.profile_label = profile_label or plan.name
        self._eager_forward: Callable[..., Any] = eager.forward
        self.plan = plan
        self.settings = settings
        self.failed: Optional[str] = None
        self._by_exact: OrderedDict[tuple, _Entry] = OrderedDict()
        self._by_descriptor: OrderedDict[tuple, _Entry] = OrderedDict()
        self._expected = _expected_outputs(eager)
        self._output_nodes = list(next(n for n in eager.graph.nodes if n.op == "output").args[0])
        self._traced_strides = _traced_strides(self._output_nodes)
        self._home = home_device(eager)
        self._nvf = nvf_env.nvfuser_module() if nvf_env.nvfuser_available() else None
        self._static = static_region(eager)
        #: After an nvFuser error on the whole region: its pieces, run in order (split_region), and
        #: the runtimes of those with compute.
        self._pieces: Optional[Callable[..., tuple]] = None
        #: After nvFuser failed on transposed inputs (LAYOUT_ERRORS): every call copies them row-major,
        #: and the plan says so (executor_reason, kept by every later first run).
        self._row_major_inputs = False
        self._row_major_reason = ""
        self._piece_runtimes: list[RegionRuntime] = []
        self._piece_warned = False
        #: Whether the region's first call outside a capture has asked if it runs as its stages'
        #: pieces (_split_by_stage); never to be asked of a piece, or where split_by_stage is off.
        self._stages_asked = parent is not None or not settings.splits_by_stage()
        self._enable_options = [fast_math.ENABLE_OPTION] if plan.fast_math else []
        plan.static_sizes, plan.sizes = region_static_sizes(eager, settings.static_resize_sizes)
        random = has_random_ops(eager)
        self._random = settings.verify_regions and random
        #: The one entry a static region runs without a cache key, once it has run on nvFuser.
        self._fast: Optional[_Entry] = None
        #: Its kernel launched without fec.execute (runtime/direct_launch.py), once built.
        self._direct: Optional[Callable[[Sequence[Any]], Optional[list]]] = None  # a C Launcher
        #: explain()'s launch line of the built launcher, before any declined call is counted in.
        self._direct_summary = ""
        #: Calls the direct launcher declined (they ran through fec.execute).
        self._direct_declines = 0
        #: Fast calls left before the direct launcher is built (0: never, or already decided).
        self._direct_countdown = DIRECT_AFTER_FAST_CALLS if (
            settings.launches_directly() and self._static and not random) else 0
        #: A region with symbolic sizes (a dynamic-shape graph): per exact input layout (_exact_key)
        #: and integer inputs' values (_sized_key), its steady calls so far (int), then its (entry,
        #: launcher), or None where it has none. None for a static region (it has `_direct`), one with
        #: a float input, or where direct launch is off.
        integers = _integer_inputs(eager)
        self._sized: Optional[OrderedDict[tuple, Any]] = OrderedDict() if (
            settings.launches_directly() and not self._static and not random and integers is not None) else None
        #: The positions of its integer inputs (the SymInt sizes a dynamic-shape graph hands its
        #: regions): their values are part of a launcher's key, since it replays the scalar kernel
        #: arguments its build computed from them, and they are not passed to it.
        self._integer_inputs: tuple[int, ...] = integers or ()
        #: Launchers the region has tried to build (built or refused), at most SIZED_LAUNCHERS.
        self._sized_tried = 0
        if self._nvf is None:
            plan.executor = "eager"
            plan.executor_reason = nvf_env.unavailable_reason()

    # -- the hot path -----------------------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        if self._row_major_inputs:  # after a LAYOUT_ERRORS error on the inputs' own layouts
            args = tuple(_row_major(args))
        entry = self._fast
        if entry is not None and not PROFILING.enabled:
            # A static region with one definition: no cache key per call (see static_region).
            outputs = None
            if self._direct is not None:
                try:
                    outputs = self._direct(args)  # None: a call unlike the build's (last_decline says how)
                    if outputs is None:
                        self._direct_declined()
                    else:
                        STATS.direct_launches += 1
                except Exception as exc:  # a launch error: fec.execute from now on
                    if reads_an_overwritten_output(exc):
                        raise
                    self._drop_direct(exc)
            if outputs is None:
                try:
                    outputs = entry.execute(args)
                except Exception as exc:  # e.g. a layout the definition does not take: the keyed path decides
                    if _capturing() or reads_an_overwritten_output(exc):
                        raise
                    self._fast = None
                    return self._keyed_call(args)
                if self._direct_countdown:
                    self._direct_countdown -= 1
                    if not self._direct_countdown:
                        self._build_direct(entry, args, outputs)
            if entry.fixups:
                for index, order in entry.fixups:
                    outputs[index] = _relayout(outputs[index], order)
            STATS.nvfuser_calls += 1
            self.plan.calls_nvfuser += 1
            return outputs
        return self._keyed_call(args)

    def _keyed_call(self, args: Sequence[Any]) -> Any:
        if self._pieces is not None:
            return self._pieces(*args)
        if self._nvf is None or self.failed is not None:
            return self._run_eager(args)
        if not self._stages_asked and not _capturing():
            self._stages_asked = True
            if self._split_by_stage():
                return self._pieces(*args)
        exact = _exact_key(args)
        sized = self._sized_key(exact, args) if self._sized is not None else exact
        if self._sized is not None and not PROFILING.enabled:
            outputs = self._sized_launch(sized, args)
            if outputs is not None:
                return outputs
        entry = self._by_exact.get(exact)
        if entry is None:
            entry = self._lookup(args)
        if entry.eager_reason:
            return self._pieces(*args) if self._pieces is not None else self._run_eager(args)
        steady = entry.fec is not None and not PROFILING.enabled
        try:
            if steady:
                outputs = entry.execute(args)
            else:
                outputs = self._first_or_profiled_execute(entry, args)
        except RegionMismatch as exc:  # verify_regions
            return self._fail(f"verify_regions: {exc}", args)
        except Exception as exc:  # nvFuser run-time error
            if reads_an_overwritten_output(exc):
                raise
            return self._fail(f"nvFuser execution failed: {_short_error(exc)}", args, detail=str(exc))
        if steady and self._sized is not None:
            self._count_sized(sized, entry, args, outputs)
        self._handed_back(entry, outputs)
        if self.plan.executor != "nvfuser":  # a definition shared by an equal region ran first
            self.plan.executor, self.plan.executor_reason = "nvfuser", self._row_major_reason
        if self._static and len(self._by_descriptor) == 1 and entry.fec is not None:
            self._fast = entry
        return outputs

    # -- direct launch -----------------------------------------------------------------------------
    def _build_direct(self, entry: _Entry, args: Sequence[Any], outputs: Sequence[torch.Tensor]) -> None:
        """Builds the direct launcher from a steady call's inputs and nvFuser's outputs for them; any
        reason it cannot be is kept for explain() (the region then stays on fec.execute)."""
        if _capturing():  # building captures and syncs: never inside a capture
            self.plan.launch = "fec.execute (first steady call was inside a CUDA-graph capture)"
            return
        start = time.perf_counter()
        try:
            self._direct = direct_launch.build(entry.fec, args, outputs)
        except direct_launch.NotDirect as exc:
            self.plan.launch = f"fec.execute ({exc})"
            log.debug("%s: no direct launch: %s", self.plan.name, exc)
            return
        except Exception as exc:  # never let the optimisation cost a call
            self.plan.launch = f"fec.execute (direct launcher failed: {_short_error(exc)})"
            log.info("%s: direct launcher failed to build: %s", self.plan.name, _short_error(exc))
            return
        configs = direct_launch.launch_configs(self._direct)
        work, constants = self._direct.work_buffers, self._direct.constants
        kernels = "; ".join(f"grid {c.grid}, block {c.block}, {c.dynamic_smem} B dynamic smem" for c in configs)
        zeroed = self._direct.zeroed
        self.plan.launch = (f"direct ({f'{len(configs)} kernels: ' if len(configs) > 1 else ''}{kernels}"
                            f"{f'; {work} work buffer(s)' if work else ''}"
                            f"{f', {zeroed} zeroed range(s)' if zeroed else ''}"
                            f"{f'; {constants} scalar argument(s)' if constants else ''}; "
                            f"built in {(time.perf_counter() - start) * 1e3:.1f} ms)")
        self._direct_summary = self.plan.launch
        log.debug("%s: %s", self.plan.name, self.plan.launch)

    def _sized_key(self, exact: tuple, args: Sequence[Any]) -> tuple:
        """A symbolic region's launcher key: the inputs' layouts, with its integer inputs' values."""
        if not self._integer_inputs:
            return exact
        return exact, tuple(args[i] for i in self._integer_inputs)

    def _tensor_args(self, args: Sequence[Any]) -> Sequence[Any]:
        """What a symbolic region's launcher takes: its tensor inputs (the integers are in its key)."""
        if not self._integer_inputs:
            return args
        return tuple(a for a in args if isinstance(a, torch.Tensor))

    def _sized_launch(self, exact: tuple, args: Sequence[Any]) -> Optional[list]:
        """A symbolic region's call through the direct launcher of its input sizes (and integer
        inputs), where one was built; None where none was, or it declined the call or failed
        (fec.execute then runs it, and these sizes stay there)."""
        state = self._sized.get(exact)
        if type(state) is not tuple:
            return None
        entry, launcher = state
        try:
            outputs = launcher(self._tensor_args(args))
        except Exception as exc:  # a launch error: fec.execute for these sizes from now on
            if reads_an_overwritten_output(exc):
                raise
            outputs = None
            log.warning("%s: direct launch failed, back to fec.execute: %s", self.plan.name, _short_error(exc))
        if outputs is None:  # declined (another alignment) or failed: not tried again at these sizes
            self._sized[exact] = None
            self._direct_declines += 1
            self.plan.launch = (f"direct per set of input sizes: {self._sized_launchers()} launcher(s); "
                                f"{self._direct_declines} dropped after a declined or failed call")
            return None
        STATS.direct_launches += 1
        return self._handed_back(entry, outputs)

    def _sized_launchers(self) -> int:
        """The launchers a symbolic region holds now (built, not dropped)."""
        return sum(type(state) is tuple for state in self._sized.values())

    def _handed_back(self, entry: _Entry, outputs: Any) -> Any:
        """A call's nvFuser outputs as the program gets them (eager's layout where nvFuser's differs),
        counted (the static fast path in __call__ does the same inline)."""
        for index, order in entry.fixups:
            outputs[index] = _relayout(outputs[index], order)
        STATS.nvfuser_calls += 1
        self.plan.calls_nvfuser += 1
        return outputs

    def _count_sized(self, exact: tuple, entry: _Entry, args: Sequence[Any], outputs: Sequence[torch.Tensor]) -> None:
        """Counts a steady fec.execute call of a symbolic region at these exact sizes; at the
        DIRECT_AFTER_FAST_CALLS-th, builds their direct launcher (`outputs`: nvFuser's, before any
        relayout, which the launcher must reproduce bit for bit). At most SIZED_LAUNCHERS builds are
        tried per region; a refusal that no size can change ends them all."""
        state = self._sized.get(exact, 0)
        if type(state) is not int:
            return
        if exact not in self._sized and len(self._sized) >= SIZES_TRACKED:
            counted = next((key for key, value in self._sized.items() if type(value) is int), None)
            if counted is None:
                return
            del self._sized[counted]  # forget the oldest size still only counted
        if state + 1 < DIRECT_AFTER_FAST_CALLS or _capturing():
            self._sized[exact] = state + 1
            return
        self._sized[exact] = None
        if self._sized_tried >= SIZED_LAUNCHERS:
            return
        self._sized_tried += 1
        start = time.perf_counter()
        try:
            launcher = direct_launch.build(entry.fec, args, outputs)
        except direct_launch.NotDirect as exc:
            log.debug("%s: no direct launch at these sizes: %s", self.plan.name, exc)
            if not self._sized_launchers():
                self.plan.launch = f"fec.execute ({exc})"
            if exc.any_size:
                self._sized_tried = SIZED_LAUNCHERS
            return
        except Exception as exc:  # never let the optimisation cost a call
            log.info("%s: direct launcher failed to build: %s", self.plan.name, _short_error(exc))
            self._sized_tried = SIZED_LAUNCHERS
            return
        self._sized[exact] = (entry, launcher)
        self.plan.launch = (f"direct per set of input sizes: {self._sized_launchers()} launcher(s), the last built in "
                            f"{(time.perf_counter() - start) * 1e3:.1f} ms")

    def _direct_declined(self) -> None:
        """A call unlike the build's (an input's sizes, strides, dtype, device, alignment): it runs
        through fec.execute; explain() counts such calls with the last reason, said once per region."""
        self._direct_declines += 1
        reason = self._direct.last_decline
        self.plan.launch = (f"{self._direct_summary}; {self._direct_declines} call(s) through fec.execute, "
                            f"the last for {reason}")
        if self._direct_declines == 1:
            log.warning("%s: direct launch declined a call (%s); such calls run through fec.execute",
                        self.plan.name, reason)

    def _drop_direct(self, exc: BaseException) -> None:
        self._direct = None
        self.plan.launch = f"fec.execute (direct launch failed: {_short_error(exc)})"
        log.warning("%s: direct launch failed, back to fec.execute: %s", self.plan.name, _short_error(exc))

    # -- misses, fallbacks, profiling -------------------------------------------------------------
    def _run_eager(self, args: Sequence[Any]) -> Any:
        STATS.eager_calls += 1
        self.plan.calls_eager += 1
        return in_traced_layouts(self._eager_forward(*args), self._traced_strides)

    def _lookup(self, args: Sequence[Any]) -> _Entry:
        exact = _exact_key(args)
        descriptor = tuple(_descriptor(a, self.plan.static_sizes) for a in args)
        entry = self._by_descriptor.get(descriptor)
        if entry is None:
            STATS.cache_misses += 1
            reason = _runs_on_nvfuser(args, self._home) or device_reason(args, self._home)
            if reason and self.plan.executor == "planned":
                self.plan.executor, self.plan.executor_reason = "eager", reason
            entry = _Entry(eager_reason=reason) if reason else self._shared_or_built(args, descriptor)
            self._by_descriptor[descriptor] = entry
            if len(self._by_descriptor) > self.settings.fusion_cache_size:
                self._by_descriptor.popitem(last=False)
                STATS.evictions += 1
        else:
            STATS.cache_hits += 1
            self._by_descriptor.move_to_end(descriptor)
        self._by_exact[exact] = entry
        if len(self._by_exact) > 8 * self.settings.fusion_cache_size:
            self._by_exact.popitem(last=False)
        return entry

    def _shared_or_built(self, args: Sequence[Any], descriptor: tuple) -> _Entry:
        """The definition of an equal region (same fusion key and inputs) if one exists, else a new one,
        which is then offered to later equal regions."""
        key = ((self.plan.fusion_key, self.plan.fast_math, self.plan.static_sizes, descriptor)
               if self.plan.fusion_key else None)
        entry = SHARED_FUSIONS.get(key) if key is not None else None
        if entry is not None:
            self.plan.fusion_reused = True
            self.plan.definition = entry.definition
            return entry
        entry = self._build(args)
        if key is not None and entry.fd is not None and not entry.eager_reason:
            SHARED_FUSIONS.put(key, entry)
        return entry

    def _build(self, args: Sequence[Any]) -> _Entry:
        start = time.perf_counter()
        try:
            built = build_fusion(self._nvf, self.eager, args, static_sizes=self.plan.static_sizes)
        except Exception as exc:
            if reads_an_overwritten_output(exc):
                raise
            if self.settings.strict:
                raise NvFuserRegionError(f"{self.plan.name}: building the fusion failed: {exc}") from exc
            self._split_or_warn(f"building the fusion failed: {_short_error(exc)}")
            return _Entry(eager_reason=self.failed or "build failed")
        STATS.fusions_built += 1
        self.plan.definition = built.definition
        self.plan.build_ms = (time.perf_counter() - start) * 1e3
        return _Entry(fd=built.fd, output_orders=built.output_orders, definition=built.definition,
                      enable_options=self._enable_options)

    def _first_or_profiled_execute(self, entry: _Entry, args: Sequence[Any]) -> Any:
        start = time.perf_counter()
        if PROFILING.enabled:
            outputs = self._profiled_execute(entry, args)
        else:
            outputs = self._compiling_execute(entry.fd, args, entry.enable_options)
        if entry.fec is None:
            self.plan.first_run_ms = (time.perf_counter() - start) * 1e3
            log.debug("%s: first nvFuser run (compile) took %.1f ms", self.plan.name, self.plan.first_run_ms)
            try:
                _validate_outputs(outputs, self._expected)
                _validate_devices(outputs, self._home)
            except Exception:
                # Never hand this definition to anyone: equal regions share it (fusion_cache).
                entry.eager_reason = "its first run gave outputs unlike eager's"
                SHARED_FUSIONS.discard(entry)
                raise
            # nvFuser keeps broadcast dims of expanded inputs as stride-0 outputs where eager
            # materialises them, and returns meta ops of an input as views of it where eager copies.
            # Checked once per definition: such outputs are then written by a rebuilt definition,
            # or, where that fails, copied on every call.
            entry.fixups = layout_fixups(outputs, entry.output_orders)
            aliased = self._aliased_outputs(outputs, args)
            entry.fec = entry.fd.fec
            if entry.fixups or aliased:
                outputs = self._materialize_outputs(entry, args, outputs, aliased)
            if self.settings.verify_regions:
                self._verify(entry, args, outputs)
        self.plan.executor = "nvfuser"
        self.plan.executor_reason = self._row_major_reason
        return outputs

    def _verify(self, entry: _Entry, args: Sequence[Any], outputs: Sequence[torch.Tensor]) -> None:
        """verify_regions: nvFuser's first outputs (after the per-call relayouts) against eager's.

        Not for regions that draw random numbers (the eager run would draw other ones, and move the
        generator on), nor during a CUDA-graph capture (nothing may sync there); those are logged."""
        if self._random:
            log.info("%s: not verified (it draws random numbers)", self.plan.name)
            return
        if _capturing():
            log.info("%s: not verified (its first run is inside a CUDA-graph capture)", self.plan.name)
            return
        try:
            shown = list(outputs)
            for index, order in entry.fixups:
                shown[index] = _relayout(shown[index], order)
            expected = in_traced_layouts(self._eager_forward(*args), self._traced_strides)
            problem = verify_against_eager(shown, expected)
        except Exception as exc:  # the check itself failed: never keep an unchecked definition
            problem = f"the check failed: {_short_error(exc)}"
        if problem:
            entry.eager_reason = f"verify_regions: {problem}"
            SHARED_FUSIONS.discard(entry)
            raise RegionMismatch(f"nvFuser's result differs from eager's: {problem}")
        log.debug("%s: verified against eager", self.plan.name)

    def _aliased_outputs(self, outputs: Sequence[torch.Tensor], args: Sequence[Any]) -> frozenset[int]:
        """Outputs sharing storage with a region input where eager's would not (eager's output is not
        a view chain of an input): nvFuser forwards meta ops of inputs (a one-input cat, a reduction
        over size-1 dims) that `lowering.copies_an_input` cannot foresee."""
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor) and a.numel()}
        if not inputs:
            return frozenset()
        found = set()
        for index, (out, node) in enumerate(zip(outputs, self._output_nodes)):
            if out.numel() and out.untyped_storage().data_ptr() in inputs and not views_an_input(node):
                found.add(index)
        return frozenset(found)

    def _compiling_execute(self, fd: Any, args: Sequence[Any], enable_options: Sequence[str] = ()) -> Any:
        """A definition's first run, which compiles it (with `enable_options`): through the kernel
        cache when it is on."""
        cache = (kernel_cache.activate(self.settings.kernel_cache_dir, self.settings.kernel_cache_max_mb)
                 if self.settings.kernel_cache else None)
        if cache is None:
            return _execute(fd, list(args), enable_options)
        with cache.opening():
            return fd.execute(list(args), _enable_options=[*kernel_cache.ENABLE_OPTIONS, *enable_options],
                              _disable_options=list(kernel_cache.DISABLE_OPTIONS))

    def _materialize_outputs(self, entry: _Entry, args: Sequence[Any], outputs: Any,
                             aliased: frozenset[int] = frozenset()) -> Any:
        """Rebuilds `entry` so the kernel writes its misplaced outputs densely and its aliased ones
        fresh (`LoweringContext.times_ones`), checked once to equal the first definition's outputs
        exactly. Keeps the old definition if that fails or does not help: misplaced outputs are then
        copied per call, and aliased ones make the region eager (a write to one tensor must never show
        in the other). Returns the outputs to hand back for this call."""
        pinned = frozenset(index for index, _ in entry.fixups)
        wanted = pinned | aliased
        try:
            built = build_fusion(self._nvf, self.eager, args, materialize=wanted, pin=pinned,
                                 static_sizes=self.plan.static_sizes)
            rebuilt = self._compiling_execute(built.fd, args, entry.enable_options)
            _validate_outputs(rebuilt, self._expected)
            remaining = layout_fixups(rebuilt, built.output_orders)
            still_aliased = self._aliased_outputs(rebuilt, args)
            for index in wanted:
                torch.testing.assert_close(rebuilt[index], outputs[index], rtol=0, atol=0, equal_nan=True)
        except Exception as exc:
            log.debug("%s: rebuild of outputs %s failed: %s", self.plan.name, sorted(wanted), _short_error(exc))
            remaining, still_aliased, built = entry.fixups, aliased, None
        if built is None or still_aliased or len(remaining) > len(entry.fixups) or (
                not aliased and len(remaining) == len(entry.fixups)):
            if aliased:
                entry.eager_reason = f"outputs {sorted(aliased)} share storage with an input, unlike eager's"
                SHARED_FUSIONS.discard(entry)
                raise RuntimeError(f"nvFuser returned outputs {sorted(aliased)} as views of an input, where "
                                   f"eager's own storage; a rebuild did not fix it")
            log.debug("%s: dense-output rebuild did not help; outputs %s are copied per call",
                      self.plan.name, sorted(pinned))
            return outputs
        STATS.fusions_built += 1
        log.debug("%s: outputs %s written by the kernel (no per-call copy, no alias)", self.plan.name, sorted(wanted))
        entry.fd, entry.fec, entry.output_orders = built.fd, built.fd.fec, built.output_orders
        entry.fixups = remaining
        entry.definition = self.plan.definition = built.definition
        return rebuilt

    def _profiled_execute(self, entry: _Entry, args: Sequence[Any]) -> Any:
        nvf = self._nvf
        self._last_profiled = (entry, list(args))
        if PROFILING.mode == "torch":  # explain() reads the kernels under this label from its profile
            # An op-scope range, as aot_autograd's own: torch.profiler links a kernel to the innermost
            # op-scope range around its launch, and record_function's user scope gets none.
            with _op_range(self.profile_label):
                return entry.execute(args)
        try:
            with nvf.PythonProfiler() as profiler:
                outputs = entry.execute(args)
            profile = profiler.profile
            self.plan.kernels = [
                KernelInfo(
                    name=str(k.name),
                    scheduler=str(k.scheduler) or _scheduler_from_kernel_name(str(k.name)) or "no kernel",
                    time_ms=float(k.time_ms),
                    compile_time_ms=float(k.compile_time_ms),
                    segment_id=int(k.segment_id),
                )
                for k in profile.kernel_profiles
            ]
            self.plan.segments = int(profile.segments)
            # A segment without a kernel name launched nothing (nvFuser evaluated it on the host).
            self.plan.profile_source = "nvfuser_direct.PythonProfiler"
        except Exception as exc:  # profiling is reported unstable on CUDA 13: degrade, say so
            self.plan.profile_source = f"nvFuser profiler failed ({type(exc).__name__}: {exc})"
            outputs = entry.execute(args)
        return outputs

    def attach_sources(self, cuda_source: bool, scheduled_ir: bool) -> None:
        """Stores the CUDA source and/or nvFuser's scheduled IR of the last profiled run in the plan
        (explain(cuda_source=True, scheduled_ir=True))."""
        last = getattr(self, "_last_profiled", None)
        if last is None or last[0].fec is None:
            return
        entry, args = last
        if cuda_source:
            try:
                self.plan.cuda_source = entry.fec.get_cuda_kernel(args)
            except Exception as exc:
                self.plan.cuda_source = f"unavailable: {type(exc).__name__}: {exc}"
        if scheduled_ir:
            try:
                self.plan.scheduled_ir = entry.fec.get_most_recent_scheduled_ir()
            except Exception as exc:
                self.plan.scheduled_ir = f"unavailable: {type(exc).__name__}: {exc}"

    def _fail(self, message: str, args: Sequence[Any], detail: str = "") -> Any:
        """After an nvFuser error (`message`, short; `detail`, its whole text): a row-major retry where
        transposed inputs caused it, else pieces, else eager."""
        if self.settings.strict:
            raise NvFuserRegionError(f"{self.plan.name}: {message}")
        if _capturing():
            # During CUDA-graph capture the failed launch has likely invalidated the capture: let
            # the capture fail as it is, and keep the region as it was for later calls.
            raise NvFuserRegionError(f"{self.plan.name}: {message} (during CUDA-graph capture)")
        if self._retries_row_major(message + detail, args):
            self._row_major_reason = f"row-major copies of its transposed inputs (nvFuser: {message})"
            outputs = self._keyed_call(_row_major(args))
            if self.plan.executor == "nvfuser":  # not pieces or eager after a second error
                self.plan.executor_reason = self._row_major_reason
            return outputs
        if self._split_or_warn(message):
            return self._pieces(*args)
        return self._run_eager(args)

    def _retries_row_major(self, message: str, args: Sequence[Any]) -> bool:
        """After an nvFuser error that transposed inputs cause (LAYOUT_ERRORS), once: the region is
        built again for row-major copies of them, and every later call copies them."""
        if self._row_major_inputs or not any(e in message for e in LAYOUT_ERRORS):
            return False
        if not any(_reads_transposed(a) for a in args):
            return False
        self._row_major_inputs = True
        # The failed definitions were keyed by the transposed layouts no call reaches now: forgotten,
        # and never shared, so the static fast path and direct launch serve the row-major one.
        for entry in {*self._by_descriptor.values(), *self._by_exact.values()}:
            SHARED_FUSIONS.discard(entry)
        self._by_descriptor.clear()
        self._by_exact.clear()
        if self._sized is not None:
            self._sized.clear()
        self._fast = None
        self._direct = None
        log.info("%s: built again for row-major copies of its transposed inputs after: %s", self.plan.name, message)
        return True

    def _split_by_stage(self) -> bool:
        """Before the first compile: a region that no single nvFuser scheduler takes whole (the
        segmenter oracle's answer, per fusion key) runs as its stages' pieces, each a RegionRuntime of
        its own (split_region.split_by_stage), so that nvFuser's segmenter has little to do. Why:
        settings.split_by_stage."""
        try:
            pieces = split_by_stage(self.eager)
            if pieces is None:
                return False
            oracle = oracle_for(self.settings)
            if oracle is None or oracle.schedulers(self.eager) != ():  # one kernel, or no answer
                return False
            runners = [self._piece_runtime(i, piece) for i, piece in enumerate(pieces)]
        except Exception as exc:  # never let an optimisation cost the call: the region stays whole
            log.info("%s: not split by stage: %s", self.plan.name, _short_error(exc))
            return False
        self._run_as_pieces(pieces, runners, f"{len(pieces)} pieces, one per stage of reductions: no single "
                                             "nvFuser scheduler takes the whole region")
        STATS.stage_split_regions += 1
        return True

    def _run_as_pieces(self, pieces: Sequence[Piece], runners: Sequence[Callable[..., Any]], reason: str) -> None:
        """From now on every call runs `pieces` in order (split_region.run_pieces); explain() lists them."""
        self._pieces = run_pieces(self.eager, pieces, runners)
        self._piece_runtimes = [r for r in runners if isinstance(r, RegionRuntime)]
        self._fast = None
        self._direct = None
        self.plan.executor = "pieces"
        self.plan.executor_reason = reason
        self.plan.pieces = [r.plan for r in self._piece_runtimes]

    def _split_or_warn(self, message: str) -> bool:
        """After an nvFuser error on the whole region: its pieces from now on, each a RegionRuntime of
        its own (split_region), with one warning; where it cannot be split (a piece, a wrong value,
        inside a CUDA-graph capture, a region split_region declines), eager (`_warn`)."""
        self._row_major_inputs, self._row_major_reason = False, ""  # pieces, or eager: the inputs as they are
        pieces = None
        if self.parent is None and not message.startswith("verify_regions") and not _capturing():
            try:
                pieces = split_region(self.eager)
                runners = [self._piece_runtime(i, piece) for i, piece in enumerate(pieces or ())]
            except Exception as exc:  # never let the fallback's fallback cost the call
                log.info("%s: not split: %s", self.plan.name, _short_error(exc))
                pieces = None
        if pieces is None:
            self._warn(message)
            return False
        self._run_as_pieces(pieces, runners, f"{len(pieces)} pieces after an nvFuser error on the whole region: "
                                             f"{message}")
        self.failed = message
        STATS.split_regions += 1
        warnings.warn(f"dynamo_nvf: {self.plan.name} runs as {len(pieces)} pieces from now on (each on nvFuser, "
                      f"or in eager where it fails too): {message}", RuntimeWarning, stacklevel=4)
        return True

    def _piece_runtime(self, index: int, piece: Piece) -> Callable[..., Any]:
        """A piece as a region of its own; a piece of views only runs as its FX module."""
        if not computes(piece.module):
            return piece.module
        nodes = [n for n in piece.module.graph.nodes if n.op == "call_function"]
        plan = RegionPlan(id=self.plan.id, name=f"{self.plan.name}.piece{index}",
                          ops=[op_name(n.target) for n in nodes], nodes=[n.name for n in nodes],
                          fx_code=piece.module.code, fast_math=self.plan.fast_math, math=self.plan.math,
                          fusion_key=region_fusion_key(piece.module))  # equal regions' pieces: one compile
        return RegionRuntime(piece.module, plan, self.settings, f"{self.profile_label}.piece{index}", parent=self)

    def _piece_failed(self, piece: "RegionRuntime", message: str) -> None:
        """A piece fell back to eager: the region warns and counts once; once every piece has, the
        whole region runs in eager (its pieces would recompute their pointwise ops there)."""
        if all(r.failed is not None for r in self._piece_runtimes):
            self._pieces = None
            self.failed = self.failed or message  # eager from now on, not the whole region again
            self.plan.executor = "eager"
            self.plan.executor_reason = f"fallback after nvFuser errors on the region and on each of its pieces: {message}"
        if self._piece_warned:
            return
        self._piece_warned = True
        record_fallback(f"{piece.plan.name}, a piece of {self.plan.name} ({_ops_named(self.plan)}): {message}")
        warnings.warn(f"dynamo_nvf: {piece.plan.name}, a piece of {self.plan.name}, runs in eager from now on: "
                      f"{message}", RuntimeWarning, stacklevel=4)

    def _warn(self, message: str) -> None:
        self.failed = message
        self._fast = None
        self._direct = None
        self.plan.executor = "eager"
        self.plan.executor_reason = f"fallback after nvFuser error: {message}"
        if self.parent is not None:
            self.parent._piece_failed(self, message)
            return
        record_fallback(f"{self.plan.name} ({_ops_named(self.plan)}): {message}")
        warnings.warn(f"dynamo_nvf: {self.plan.name} ({_ops_named(self.plan)}) runs in eager from now on: {message}",
                      RuntimeWarning, stacklevel=3)
