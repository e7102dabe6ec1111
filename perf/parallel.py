"""How a perf model is wrapped for data-parallel training and compiled: DDP, FSDP2, mixed precision.

The three wrappers are the ones users write (torch's own tests and torchtitan do the same):

* ``ddp``          ``torch.compile(DistributedDataParallel(model))``.  Dynamo's DDPOptimizer splits the
                   graph at DDP's bucket boundaries and compiles each piece with the backend, so the
                   gradient all-reduce of one bucket overlaps the backward of the next.
* ``fsdp2``        ``fully_shard`` on every block, then on the root; each block compiled on its own
                   (``block.compile(...)``).  The root's own layers (embeddings, head) run eagerly.
* ``fsdp2-model``  the same sharding, and the whole model compiled (``model.compile(...)``).

FSDP2's hooks (all-gather before a block, reduce-scatter after its backward) are excluded from Dynamo
(torch 2.11 and 2.13 wrap them in ``torch._dynamo.disable``), so they run in PyTorch between compiled
graphs; DDP's all-reduces run from autograd hooks.  Neither puts a collective inside a traced graph.

Mixed precision (``--dtype bf16``): DDP runs the forward under ``torch.autocast(bf16)`` with f32
parameters; FSDP2 uses its own ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32)``
(parameters all-gathered and used in bf16, gradients reduced in f32, f32 sharded master weights).
Both are the wrapper's standard recipe, and eager runs the same recipe as every compiled backend.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional

import torch
from torch import nn

from perf.backends import BACKENDS as REGISTRY

WRAPPERS = ("ddp", "fsdp2", "fsdp2-model")
BACKENDS = ("eager", "inductor", "inductor_ro", "nvf_bookend", "nvf_cudagraphs")
#: Backends whose compiled graphs replay as CUDA graphs (``mode="reduce-overhead"``), and the
#: dynamo_nvf ones: as perf's backend registry marks them.
CUDA_GRAPH_BACKENDS = tuple(b for b in BACKENDS if REGISTRY[b].cuda_graphs)
NVF_BACKENDS = tuple(b for b in BACKENDS if REGISTRY[b].nvf)
#: The backend each one's step time is measured against, under the same wrapper.
STEP_REFERENCE = {"nvf_bookend": "inductor", "nvf_cudagraphs": "inductor_ro", "inductor_ro": "inductor"}


@dataclass
class Wrapped:
    """A model ready to train: call ``step_module(*inputs)`` inside ``autocast()`` for the loss."""

    step_module: Callable[..., torch.Tensor]
    #: The module whose parameters the optimizer updates (FSDP2: sharded DTensor parameters).
    params_module: nn.Module
    autocast: Callable[[], ContextManager[Any]]
    precision: str


def blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of a perf model: members of its ModuleLists and Sequentials whose class
    name ends in "Block" (LlamaBlock, PreNormBlock, PostNormBlock, ConvNeXtBlock)."""
    found: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            found.extend(m for m in module if type(m).__name__.endswith("Block"))
    return found


def compile_kwargs(backend: str, device_type: str, nvf_options: Optional[dict] = None) -> dict:
    """torch.compile's arguments for a backend; on a CPU the nvf backend plans for CUDA (regions
    then run eagerly), so a CPU run still exercises planning. ``inductor_ro`` and ``nvf_cudagraphs``
    are the same backends with CUDA graphs (``mode="reduce-overhead"``)."""
    graphs = backend in CUDA_GRAPH_BACKENDS
    if backend in ("inductor", "inductor_ro"):
        return {"backend": "inductor", "mode": "reduce-overhead"} if graphs else {"backend": "inductor"}
    if backend in NVF_BACKENDS:
        import dynamo_nvf  # noqa: F401  (registers the backend)

        options = dict(nvf_options or {})
        if device_type == "cpu":
            options.setdefault("plan_cpu_as_cuda", True)
        if graphs:  # what mode="reduce-overhead" sets; torch.compile takes mode or options, not both
            options["cuda_graphs"] = True
        return {"backend": "nvf_bookend", "options": options}
    raise ValueError(f"unknown backend {backend!r}; choose from {BACKENDS}")


def _autocast(device_type: str, dtype: Optional[torch.dtype]) -> Callable[[], ContextManager[Any]]:
    if dtype is None:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type, dtype=dtype)


def wrap(model: nn.Module, wrapper: str, backend: str, device: torch.device, bf16: bool,
         bucket_cap_mb: Optional[float] = None, nvf_options: Optional[dict] = None) -> Wrapped:
    """Wraps `model` (on `device`, f32 parameters) for data-parallel training with `backend`."""
    compiled = backend != "eager"
    kwargs = compile_kwargs(backend, device.type, nvf_options) if compiled else {}
    if wrapper == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp_kwargs: dict[str, Any] = {}
        if bucket_cap_mb is not None:
            ddp_kwargs["bucket_cap_mb"] = bucket_cap_mb
        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None, **ddp_kwargs)
        step_module = torch.compile(ddp, **kwargs) if compiled else ddp
        return Wrapped(step_module, model, _autocast(device.type, torch.bfloat16 if bf16 else None),
                       "bf16 autocast, f32 parameters" if bf16 else "f32")
    if wrapper in ("fsdp2", "fsdp2-model"):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 \
            else MixedPrecisionPolicy()
        model_blocks = blocks(model)
        if not model_blocks:
            raise ValueError(f"{type(model).__name__} has no blocks to shard")
        if bf16:
            # BatchNorm keeps f32 parameters (its running statistics are f32, and ATen's kernels take a
            # bf16 input with f32 parameters, as under autocast): a group of its own, inputs left as they are.
            norm_policy = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32,
                                               cast_forward_inputs=False)
            for norm in (m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)):
                fully_shard(norm, mp_policy=norm_policy)
        for block in model_blocks:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        if compiled and wrapper == "fsdp2":
            for block in model_blocks:
                block.compile(**kwargs)
        elif compiled:
            model.compile(**kwargs)
        return Wrapped(model, model, contextlib.nullcontext,
                       "FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32), BatchNorm in f32" if bf16
                       else "f32")
    raise ValueError(f"unknown wrapper {wrapper!r}; choose from {WRAPPERS}")
