"""CUDA graphs for the compiled aten graphs, through torch's cudagraph trees.

With `cuda_graphs` (or `mode="reduce-overhead"`) each compiled forward, backward or inference graph is
handed to `torch._inductor.cudagraph_trees.cudagraphify_impl`, exactly as torch's own `cudagraphs`
backend and inductor's `reduce-overhead` do: one memory pool shared by forward and backward,
parameters and buffers as static inputs (re-recorded if their addresses change), other inputs copied
into static buffers, one recording per distinct set of integer (size) inputs, warm-up runs first so
nvFuser compiles outside capture. A replay then costs one launch, whatever the number of regions:
the host cost per region (40-170 us in fec.execute on real models) is paid only while recording.

Capture is refused for a graph that torch's checks say cannot be replayed faithfully (CPU tensors,
several devices, ops that sync or have data-dependent outputs, mutation of an input that is not
static), and for CUDA-less machines. Such a graph runs uncaptured and says why once, in the log and
in its GraphPlan (explain()). RNG: ATen's dropout draws from the CUDA generator, which cudagraph
capture registers, so each replay gets a fresh mask.

A replay's host path is inductor's own: cProfile of BERT-style inference (H100, 2026-11-24,
scripts/host_profile.py) lists the same calls with the same counts under both backends
(cudagraph trees' run, check_invariants, the input copy, graph replay, output reconstruction),
127 us per step here against 164 us for inductor's reduce-overhead in that process; step-time
differences between the two in graph mode are this host's drift, not a longer path. One thing in
that path is ours to shape: outputs that share a storage are rebuilt on every replay, so under
graphs a training forward saves no views (passes/saved_views.py; GPT-2-style training, H100,
2026-11-24: 10 rebuilt outputs per step before, none after, reconstruct_outputs 298 -> 145 us profiled).
"""

from __future__ import annotations

import gc
import logging
import threading
from typing import Any, Optional, Sequence

import torch
from torch.fx import GraphModule

from dynamo_nvf.plan import GraphPlan
from dynamo_nvf.runtime.boxed_forward import BoxedFn
from dynamo_nvf.runtime.region import _capturing, reads_an_overwritten_output

log = logging.getLogger("dynamo_nvf")


CAPTURED = "captured (cudagraph trees; recorded on the first calls of each input shape)"


class _CollectionPause:
    """Python's cyclic garbage collection held off while a captured graph runs (nestable, any thread).

    cudagraph trees record inside a call, and torch no longer collects before recording
    (`torch.compiler.config.force_cudagraph_gc` is off). A collection that runs during a capture can
    free a dead region's nvFuser executor there, and its kernel module is unloaded under the capture
    (NVIDIA/warp#401 is the same hazard). Collections wait until the call returns; the pause costs
    well under a microsecond per call. It holds off automatic collections only (an explicit
    `gc.collect()` or a last reference dropped on another thread still frees at once), and on its
    way out it restores the collector as it found it, over a change another thread made meanwhile.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._resume = False

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._depth += 1

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._resume:
                gc.enable()


COLLECTION_PAUSE = _CollectionPause()


def _devices(gm: GraphModule) -> dict[torch.device, str]:
    """Each device a value of the graph lives on, with one node name as an example."""
    found: dict[torch.device, str] = {}
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else (val,)
        for v in vals:
            if isinstance(v, torch.Tensor) and v.device not in found:
                found[v.device] = node.name
    return found


def _first_incompatible_node(gm: GraphModule) -> Optional[str]:
    """torch's own list of ops a CUDA graph cannot replay (syncs, data-dependent outputs, ...)."""
    try:
        from torch._inductor.utils import get_first_incompatible_cudagraph_node
    except ImportError:  # pragma: no cover - older torch
        return None
    node = get_first_incompatible_cudagraph_node(gm)
    return None if node is None else f"{node.name} ({node.target})"


def mutated_inputs(gm: GraphModule) -> set[int]:
    """Indices of the graph's inputs that an op of the graph writes to, through a tensor argument its
    schema marks written or each tensor of such a list (a foreach op's; torch's find_input_mutations
    reads single tensors only)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    by_storage: dict[Any, set[int]] = {}
    mutated: set[int] = set()
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    for index, node in enumerate(placeholders):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            by_storage.setdefault(StorageWeakRef(val.untyped_storage()), set()).add(index)
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None:
            continue
        for position, argument in enumerate(schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = node.args[position] if position < len(node.args) else node.kwargs.get(argument.name)
            for item in value if isinstance(value, (list, tuple)) else (value,):
                val = item.meta.get("val") if isinstance(item, torch.fx.Node) else None
                if isinstance(val, torch.Tensor):
                    mutated |= by_storage.get(StorageWeakRef(val.untyped_storage()), set())
    return mutated


def skip_reason(gm: GraphModule, static_inputs: Sequence[int]) -> Optional[str]:
    """Why `gm` must not be captured here, or None when it can be."""
    if not torch.cuda.is_available():
        return "CUDA is not available"
    return graph_skip_reason(gm, static_inputs)


def graph_skip_reason(gm: GraphModule, static_inputs: Sequence[int], accelerator: str = "cuda") -> Optional[str]:
    """Why the graph itself cannot be replayed as a CUDA graph (whatever the machine), or None.

    `accelerator` is the device type that counts as the GPU (CPU tests plan CPU graphs as CUDA ones).
    """
    devices = _devices(gm)
    cpu = [name for device, name in devices.items() if device.type != accelerator]
    if cpu:
        return f"a value lives off the GPU ({cpu[0]})"
    if len(devices) > 1:
        return f"values on several devices ({', '.join(str(d) for d in devices)})"
    if not devices:
        return f"the graph has no {accelerator.upper()} tensor"
    incompatible = _first_incompatible_node(gm)
    if incompatible is not None:
        return f"an op a CUDA graph cannot replay: {incompatible}"
    mutated = sorted(mutated_inputs(gm) - set(static_inputs))
    if mutated:
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        return f"mutates input(s) that are not parameters or buffers: {', '.join(names[i] for i in mutated)}"
    return None


def _device_index(gm: GraphModule) -> int:
    device = next(iter(_devices(gm)))
    return device.index if device.index is not None else torch.cuda.current_device()


def static_input_indices(num_fixed: int) -> list[int]:
    """Inputs cudagraph trees may read in place: parameters and buffers, as inductor chooses them.

    With inlined nn.Modules (torch's default) parameters are ordinary graph inputs; aot_autograd
    marks them in `fw_metadata.static_input_indices`. Otherwise the first `num_fixed` inputs are the
    ones aot_autograd lifted (parameters, buffers).
    """
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None) if context is not None else None
    indices = getattr(metadata, "static_input_indices", None)
    if indices is None:
        return list(range(num_fixed))
    # As inductor: the metadata alone. `num_fixed` also counts inputs aot_autograd appends (RNG
    # states, subclass parts), which would mark the first user inputs fixed-address.
    return sorted(set(indices))


def _stack_traces(gm: GraphModule) -> list[Optional[str]]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    args = output.args[0]
    if not isinstance(args, (list, tuple)):
        return []
    return [a.stack_trace if isinstance(a, torch.fx.Node) else None for a in args]


def _placeholders(gm: GraphModule) -> Any:
    from torch._inductor.cudagraph_utils import get_placeholder_info

    return get_placeholder_info(gm.graph)


class _ShapeLimit:
    """Captures the first `limit` distinct integer-input keys of a forward (or inference) graph and runs
    later ones uncaptured; tells its CudaGraphs which it chose, for the backward to follow."""

    def __init__(self, captured: BoxedFn, uncaptured: BoxedFn, int_indices: list[int], limit: int,
                 name: str, state: "CudaGraphs") -> None:
        self.captured, self.uncaptured = captured, uncaptured
        self.int_indices, self.limit, self.name, self.state = int_indices, limit, name, state
        self.keys: set[tuple] = set()
        self.warned = False
        self._boxed_call = True

    def __call__(self, args: list) -> Any:
        key = tuple(args[i] for i in self.int_indices)
        capture = not self.state.forward_refused and (key in self.keys or len(self.keys) < self.limit)
        self.state.forward_captured_last = capture
        if capture:
            self.keys.add(key)
            return self.captured(args)
        if not self.warned:
            self.warned = True
            log.warning("dynamo_nvf: %s: %d input shapes already have a CUDA graph "
                        "(cuda_graph_max_shapes); further shapes run uncaptured", self.name, self.limit)
        return self.uncaptured(args)


class _FollowForward:
    """A backward graph runs captured exactly when the forward call it belongs to was: a captured
    backward fed by an uncaptured forward's activations would be re-recorded on every step, and an
    uncaptured backward behind a captured forward must tell the tree manager."""

    def __init__(self, captured: BoxedFn, uncaptured: BoxedFn, state: "CudaGraphs") -> None:
        self.captured, self.uncaptured, self.state = captured, uncaptured, state
        self._boxed_call = True

    def __call__(self, args: list) -> Any:
        return (self.captured if self.state.forward_captured_last else self.uncaptured)(args)


#: Calls of a captured graph whose failure inside cudagraph trees (warm-up, recording) makes the
#: graph run uncaptured instead of raising: the first few, which warm up and record.
_GUARDED_CALLS = 3


class CudaGraphs:
    """Wraps the compiled graphs of one Dynamo graph (its forward and backward share this state)."""

    def __init__(self, num_dynamo_inputs: int, max_shapes: int) -> None:
        self.num_dynamo_inputs = num_dynamo_inputs
        self.max_shapes = max_shapes
        self.device_index: Optional[int] = None
        self.forward_skip: Optional[str] = None
        #: The forward has dynamic sizes (a shape limit); the backward then follows each call's choice.
        self.forward_limited = False
        self.forward_captured_last = True
        #: cudagraph trees refused the forward during its first calls: it and its backward run uncaptured.
        self.forward_refused = False

    def wrap(self, aten_gm: GraphModule, compiled: BoxedFn, example_inputs: Sequence[Any], kind: str,
             plan: GraphPlan) -> BoxedFn:
        """`compiled` under cudagraph trees, or `compiled` itself with the reason in `plan` and the log."""
        if kind == "backward":
            num_fixed = _count_tangents(aten_gm)
            static = list(range(num_fixed))
            skip = (f"its forward graph was not captured ({self.forward_skip})" if self.forward_skip
                    else skip_reason(aten_gm, static))
        else:
            num_fixed = _num_fixed(self.num_dynamo_inputs, len(example_inputs))
            static = static_input_indices(num_fixed)
            skip = skip_reason(aten_gm, static)
            self.forward_skip = skip
        if skip is not None:
            plan.cuda_graph = f"not captured: {skip}"
            # One warning per graph that was asked to be captured and is not; a backward that only
            # follows its forward's skip says so at INFO.
            level = logging.INFO if kind == "backward" and self.forward_skip else logging.WARNING
            log.log(level, "dynamo_nvf: %s graph %d runs without CUDA graphs: %s", kind, plan.graph_id, skip)
            if kind == "backward" and self.forward_skip is None:
                return self._backward_after_captured_forward(compiled)
            return compiled
        if self.device_index is None or kind != "backward":
            self.device_index = _device_index(aten_gm)
        plan.cuda_graph = CAPTURED
        captured = self._deferred(aten_gm, compiled, static, kind, plan)
        if kind == "backward":
            if self.forward_limited:
                return _FollowForward(captured, self._backward_after_captured_forward(compiled), self)
            return captured
        int_indices = [i for i, v in enumerate(example_inputs) if isinstance(v, (int, torch.SymInt))]
        if int_indices:
            self.forward_limited = True
            name = f"{kind} graph {plan.graph_id}"
            return _ShapeLimit(captured, compiled, int_indices, self.max_shapes, name, self)
        return captured

    def _deferred(self, aten_gm: GraphModule, compiled: BoxedFn, static: list[int], kind: str,
                  plan: GraphPlan) -> BoxedFn:
        """cudagraphify_impl, set up on the first real call (it keys recordings on real ints), as
        inductor's compile_fx does."""
        from torch._inductor.cudagraph_trees import cudagraphify_impl

        kwargs = dict(
            device_index=self.device_index,
            is_backward=kind == "backward",
            is_inference=kind == "inference",
            stack_traces=_stack_traces(aten_gm),
            placeholders=_placeholders(aten_gm),
            mutated_input_idxs=mutated_inputs(aten_gm),
        )
        state: dict[str, Any] = {"fn": None, "ran": 0, "failed": False}
        uncaptured = self._backward_after_captured_forward(compiled) if kind == "backward" else compiled
        mutated = sorted(kwargs["mutated_input_idxs"])

        def run(args: list) -> Any:
            if state["failed"]:
                return uncaptured(args)
            if kind == "backward" and self.forward_refused:
                return compiled(args)  # follows its forward, which runs uncaptured
            fn = state["fn"]
            if fn is None:
                fn = state["fn"] = cudagraphify_impl(compiled, args, static, **kwargs)
            if state["ran"] >= _GUARDED_CALLS:
                with COLLECTION_PAUSE:  # it may record (a new shape or input address)
                    return fn(args)
            # The first calls warm up and record. cudagraph trees' own checks can still refuse the
            # graph there (ConvNeXt-T's training backward on an H100, 2026-11-23: "storage data ptrs
            # are not allocated in pool" after its warm-up run, root cause not found): that graph
            # then runs uncaptured, once more on the same inputs (the aten graph is functional), and
            # says why, instead of ending the user's program.
            saved = list(args)
            # Inputs the graph writes (a BatchNorm's running stats): kept, so that a retry after a
            # refusal that came after the warm-up had run the graph does not apply the update twice.
            kept = [(i, saved[i].clone()) for i in mutated if isinstance(saved[i], torch.Tensor)]
            try:
                with COLLECTION_PAUSE:
                    out = fn(args)
            except RuntimeError as exc:
                if _capturing() or reads_an_overwritten_output(exc):
                    raise
                with torch.no_grad():
                    for i, value in kept:
                        saved[i].copy_(value)
                state["failed"] = True
                reason = f"cudagraph trees refused it on call {state['ran'] + 1}: {str(exc)[:200]}"
                plan.cuda_graph = f"not captured: {reason}"
                if kind != "backward":
                    self.forward_skip = reason
                    self.forward_refused = True
                    self.forward_captured_last = False
                log.warning("dynamo_nvf: %s graph runs without CUDA graphs from now on: %s", kind, reason)
                return uncaptured(saved)
            state["ran"] += 1
            return out

        run._boxed_call = True  # type: ignore[attr-defined]
        return run

    def _backward_after_captured_forward(self, compiled: BoxedFn) -> BoxedFn:
        """An uncaptured backward behind a captured forward must tell the tree manager, as torch's
        cudagraphs backend does, so that the forward's pool outputs stay valid."""
        from torch._inductor import cudagraph_trees

        device_index = self.device_index if self.device_index is not None else 0

        def run(args: list) -> Any:
            manager = cudagraph_trees.get_manager(device_index, create_if_none_exists=False)
            if manager is not None:
                manager.set_to_running_backward()
            return compiled(args)

        run._boxed_call = True  # type: ignore[attr-defined]
        return run


def _num_fixed(num_dynamo_inputs: int, num_aot_inputs: int) -> int:
    """Inputs aot_autograd added in front of Dynamo's (lifted parameters and buffers)."""
    try:
        from torch._inductor.utils import num_fw_fixed_arguments
    except ImportError:  # pragma: no cover
        return max(0, num_aot_inputs - num_dynamo_inputs)
    return num_fw_fixed_arguments(num_dynamo_inputs, num_aot_inputs)


def _count_tangents(gm: GraphModule) -> int:
    """Backward inputs that are saved activations (static: they live in the forward's pool)."""
    from torch._inductor.utils import count_tangents

    return count_tangents(gm)
