"""What a lowering works with: the fusion being defined and the nvFuser value of each FX node.

It lives under ops/ with the registry that names its type, apart from the fusion builder
(`dynamo_nvf.lowering`), which imports the registry and every lowering.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Sequence

import torch
from torch.fx import Node

from dynamo_nvf.ops.dtypes import LOW_PRECISION_FLOATS, nvf_dtype, python_scalar_dtype_name


class LoweringError(RuntimeError):
    """A node could not be lowered to nvFuser."""


#: Node meta key: the node's tensor inputs reach it through nvFuser's `segment_set`, a boundary that
#: makes nvFuser end a kernel there and start another within the same fusion (one region call, two
#: kernels). Set by passes/split_reductions.py; part of the fusion key.
SEGMENT_INPUTS_KEY = "nvf_segment_inputs"


class LoweringContext:
    """What a lowering sees: the fusion being defined and the nvFuser value of each FX node."""

    def __init__(self, nvf: ModuleType, fd: Any) -> None:
        self.nvf = nvf
        self.fd = fd
        self.ops = fd.ops
        self.values: dict[Node, Any] = {}
        #: Region inputs as defined, before the f32 upcast of half/bfloat16 ones (for gathers).
        self.raw_inputs: dict[Node, Any] = {}
        #: id(f32 value) -> (that value, the half/bfloat16 value it is an exact upcast of).
        self._upcasts: dict[int, tuple[Any, Any]] = {}

    def dtype(self, dtype: torch.dtype) -> Any:
        return nvf_dtype(self.nvf, dtype)

    def value(self, arg: Any) -> Any:
        """The nvFuser value of an FX argument: a node's value, or a constant for a Python number."""
        if isinstance(arg, Node):
            return self.values[arg]
        if isinstance(arg, (list, tuple)):
            return [self.value(a) for a in arg]
        if arg is None:
            return None
        if isinstance(arg, (bool, int, float)):
            return self.fd.define_scalar(arg, dtype=getattr(self.nvf.DataType, python_scalar_dtype_name(arg)))
        raise LoweringError(f"cannot lower argument {arg!r} of type {type(arg).__name__}")

    def constant(self, value: Any, dtype: torch.dtype) -> Any:
        """A scalar of the given dtype's kind (Double for floats, Int for ints, Bool for bools)."""
        if isinstance(value, Node):
            return self.values[value]
        if dtype == torch.bool:
            return self.value(bool(value))
        if dtype.is_floating_point:
            return self.value(float(value))
        return self.value(int(value))

    def index(self, index: Any) -> Any:
        return self.values[index] if isinstance(index, Node) else self.value(int(index))

    def shape(self, sizes: Sequence[Any]) -> list[Any]:
        """A shape argument: ints stay ints, symbolic sizes become the region's scalar inputs."""
        out: list[Any] = []
        for s in sizes:
            if isinstance(s, Node):
                out.append(self.values[s])
            elif isinstance(s, torch.SymInt):
                raise LoweringError("symbolic size without a graph input")
            elif isinstance(s, int):
                out.append(int(s))
            else:
                out.append(s)  # already an nvFuser scalar (e.g. ops.size of a tensor)
        return out

    def cast(self, value: Any, dtype: torch.dtype) -> Any:
        """`value` as `dtype`. Casting an f32 upcast of a half/bfloat16 value back to that dtype gives
        the value itself: the round trip is exact, and nvFuser would see a meta-op chain where an
        output is one (an explicit cast to bf16, computed in f32, leaving as bf16), which it turns
        into a kernel-less host segment (`scripts/nvfuser_repros/kernelless_output_segments.py`)."""
        target = self.dtype(dtype)
        if isinstance(value, self.nvf.TensorView) and value.dtype() == target:
            return value
        upcast = self._upcasts.get(id(value))
        if upcast is not None and upcast[0] is value and upcast[1].dtype() == target:
            return upcast[1]
        result = self.ops.cast(value, target)
        if dtype == torch.float32 and isinstance(value, self.nvf.TensorView) and any(
                value.dtype() == self.dtype(low) for low in LOW_PRECISION_FLOATS):
            self._upcasts[id(result)] = (result, value)
        return result

    def behind_segment_boundary(self, value: Any) -> Any:
        """`value` through nvFuser's `segment_set` (a kernel boundary). An f32 upcast of a half or
        bfloat16 value crosses as that value and is upcast again after it: half the bytes written."""
        if not isinstance(value, self.nvf.TensorView):
            return value
        upcast = self._upcasts.get(id(value))
        if upcast is not None and upcast[0] is value:
            return self.cast(self.ops.segment_set(upcast[1]), torch.float32)
        return self.ops.segment_set(value)

    def broadcast_to(self, value: Any, src: torch.Tensor, out_shape: Sequence[Any]) -> Any:
        """Broadcasts `value` (eager value `src`) to `out_shape`, aligning trailing dims like aten."""
        offset = len(out_shape) - src.dim()
        return self.ops.broadcast_in_dim(value, self.shape(out_shape), list(range(offset, len(out_shape))))

    def is_expanded(self, value: Any) -> bool:
        """True when nvFuser holds `value` with an expanded broadcast dim (stride 0): an IterDomain
        prints as e.g. `bS3{1 ex i2}`, and the direct API has no is_broadcast. Eager's strides do not
        tell: a cast of an expanded tensor is dense in eager but stays expanded inside a fusion."""
        try:
            return any(" ex " in str(d) for d in value.get_logical_domain())
        except Exception:  # not a TensorView, or an API change: the runtime's layout check still runs
            return False

    def times_ones(self, value: Any, src: torch.Tensor) -> Any:
        """`value` (eager value `src`) read through a product with dense ones of `src`'s shape.

        The product gives every dim a concrete extent and a computed value, so nvFuser neither keeps
        an expanded (stride-0) broadcast dim nor forwards an input as a view of itself: a reduction
        of an expanded tensor keeps its extents, and an output is written densely into fresh
        storage by the kernel. Multiplying by one is exact; a bool value goes through a logical and
        with true. Low-precision values are computed in float32 inside fusions, so their ones are.
        """
        if all(isinstance(s, int) for s in src.shape):
            shape: Any = [int(s) for s in src.shape]
        else:
            shape = self.ops.shape(value)  # symbolic sizes: the value's own extents
        if src.dtype == torch.bool:
            return self.ops.logical_and(value, self.ops.full(shape, self.value(True), self.dtype(torch.bool)))
        dtype = self.compute_dtype(src.dtype)
        return self.ops.mul(value, self.ops.full(shape, self.constant(1, dtype), self.dtype(dtype)))

    @staticmethod
    def compute_dtype(dtype: torch.dtype) -> torch.dtype:
        """The dtype a value of eager dtype `dtype` has inside a fusion: half and bfloat16 are
        computed in float32 (inputs are upcast where they are defined, outputs cast back)."""
        return torch.float32 if dtype in LOW_PRECISION_FLOATS else dtype
