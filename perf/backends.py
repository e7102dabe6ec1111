"""Backend registry: a name -> how to turn a plain callable into the thing we time.

Every backend is a black box to the suite: it only wraps a callable.  The nvf
backends import ``dynamo_nvf`` lazily (importing it registers the
``nvf_bookend`` torch.compile backend), so listing workloads or running the
eager / inductor columns never depends on that package being importable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

Wrap = Callable[[Callable], Callable]

#: The backend the ratio columns are about, and the references it is divided by.
SUBJECT = "nvf_bookend"
REFERENCES = ("eager", "inductor", "nvf_untrimmed")
#: Every ratio column (subject, reference), in column order; a column appears when both ran.
#: CUDA graphs are compared with CUDA graphs: nvf_cudagraphs against inductor_ro.
RATIO_PAIRS: tuple[tuple[str, str], ...] = tuple((SUBJECT, r) for r in REFERENCES) + (("nvf_cudagraphs", "inductor_ro"),)


@dataclass(frozen=True)
class Backend:
    """One column of the report: ``wrap(fn)`` returns the callable to time."""

    name: str
    wrap: Wrap
    description: str
    compiled: bool = True  # False: no compile step, so no fresh compile for tiny inputs
    cuda_graphs: bool = False  # call torch.compiler.cudagraph_mark_step_begin() before each step
    nvf: bool = False  # a dynamo_nvf backend: nvFuser calls per step are counted


def _eager(fn: Callable) -> Callable:
    return fn


def _inductor(fn: Callable) -> Callable:
    return torch.compile(fn)


def _dynamo_eager(fn: Callable) -> Callable:
    return torch.compile(fn, backend="eager")


def _inductor_ro(fn: Callable) -> Callable:
    return torch.compile(fn, mode="reduce-overhead")


def _nvf(options: dict | None, mode: str | None = None) -> Wrap:
    def wrap(fn: Callable) -> Callable:
        import dynamo_nvf  # noqa: F401  (import registers the "nvf_bookend" backend)

        kwargs: dict = {"backend": "nvf_bookend"}
        if options:
            kwargs["options"] = dict(options)
        if mode:
            kwargs["mode"] = mode
        return torch.compile(fn, **kwargs)

    return wrap


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("eager", _eager, "plain PyTorch eager", compiled=False),
        Backend("inductor", _inductor, "torch.compile default (inductor)"),
        Backend("nvf_bookend", _nvf(None), "dynamo_nvf backend, bookend trimming on", nvf=True),
        Backend(
            "nvf_untrimmed",
            _nvf({"bookend": False}),
            'dynamo_nvf backend with options={"bookend": False}',
            nvf=True,
        ),
        Backend(
            "nvf_cudagraphs",
            _nvf(None, mode="reduce-overhead"),
            'nvf_bookend with CUDA graphs: torch.compile(backend="nvf_bookend", mode="reduce-overhead")',
            cuda_graphs=True,
            nvf=True,
        ),
        Backend(
            "nvf_aten_embedding",
            _nvf({"fuse_embedding": False}),
            'dynamo_nvf with options={"fuse_embedding": False}: ATen\'s embedding, against the fused default; opt-in',
            nvf=True,
        ),
        Backend(
            "nvf_aten_views",
            _nvf({"lean_views": False}),
            'dynamo_nvf with options={"lean_views": False}: aten view calls between regions, against the lean default; opt-in',
            nvf=True,
        ),
        Backend(
            "nvf_aten_glue",
            _nvf({"fuse_cross_entropy": False, "fuse_data_movement": False}),
            'dynamo_nvf with fuse_cross_entropy and fuse_data_movement off (ATen\'s nll_loss, slice/select '
            'gradients and stack), against the fused default; opt-in',
            nvf=True,
        ),
        Backend(
            "nvf_aten_glue_cudagraphs",
            _nvf({"fuse_cross_entropy": False, "fuse_data_movement": False, "cuda_graphs": True}),
            'nvf_aten_glue with CUDA graphs; opt-in',
            cuda_graphs=True,
            nvf=True,
        ),
        Backend(
            "nvf_split_norm_bwd",
            _nvf({"split_norm_backward_rows": 1 << 40}),
            'dynamo_nvf with split_norm_backward_rows at every size (a norm backward\'s column sums in a region '
            'of their own, not nvFuser\'s inner-outer persistent kernel); opt-in',
            nvf=True,
        ),
        Backend(
            "nvf_no_segmenter",
            _nvf({"ask_segmenter": False}),
            "dynamo_nvf with ask_segmenter off: norm backwards past the row rules stay whole even where "
            "nvFuser has no one-kernel schedule for them (the pre-segmenter plan); opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_split_by_stage",
            _nvf({"split_by_stage": True}),
            "dynamo_nvf with split_by_stage on without CUDA graphs (its default there is off): regions no "
            "single scheduler takes run as pieces, one per stage of their reductions (shorter first call, "
            "lower peak, more host time); opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_cudagraphs_whole_stages",
            _nvf({"split_by_stage": False, "cuda_graphs": True}),
            "nvf_cudagraphs with split_by_stage off: regions no single scheduler takes stay whole, for "
            "nvFuser's segmenter (the default under graphs runs them as their stages' pieces); opt-in",
            cuda_graphs=True,
            nvf=True,
        ),
        Backend(
            "nvf_whole_norm_bwd",
            _nvf({"segment_norm_backward": False}),
            'dynamo_nvf with segment_norm_backward off: without graphs, norm backwards as one inner-outer '
            'persistent kernel; opt-in',
            nvf=True,
        ),
        Backend(
            "nvf_atomic_embedding_all",
            _nvf({"atomic_embedding_backward_min_indices": 1}),
            "dynamo_nvf with embedding gradients as atomic adds at every size (the default: past 3072 indices, "
            "where ATen sorts); opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_aten_embedding_grad",
            _nvf({"matmul_embedding_backward": False}),
            "dynamo_nvf with matmul_embedding_backward off: half-precision embedding gradients up to 3072 "
            "indices in ATen's kernel; opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_fec_execute",
            _nvf({"direct_launch": False}),
            'dynamo_nvf with direct_launch off: every region call goes through fec.execute (the default '
            'replays a static region\'s kernels, every segment\'s, through the driver once it has run)',
            nvf=True,
        ),
        Backend(
            "nvf_split_norm_bwd_cudagraphs",
            _nvf({"split_norm_backward_rows": 1 << 40, "cuda_graphs": True}),
            'nvf_split_norm_bwd with CUDA graphs; opt-in',
            cuda_graphs=True,
            nvf=True,
        ),
        Backend(
            "nvf_fused_norm_bwd_cudagraphs",
            _nvf({"split_norm_backward_rows": 0, "cuda_graphs": True}),
            'nvf_cudagraphs with norm backwards never cut (split_norm_backward_rows=0; the default '
            'cuts at up to 1024 rows under graphs, and unpermuted ones at any size); opt-in',
            cuda_graphs=True,
            nvf=True,
        ),
        Backend(
            "nvf_unpermute_split",
            _nvf({"unpermute_reductions": 1}),
            "dynamo_nvf with unpermute_reductions (sums of permutes, then their regions' column sums cut) at "
            "every size; the default does so under CUDA graphs, and from 16384 rows without; opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_no_unpermute",
            _nvf({"unpermute_reductions": 0}),
            "dynamo_nvf with unpermute_reductions off (ConvNeXt's norm backwards left to nvFuser's segmenter); opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_reduce_logical",
            _nvf({"memory_order_reductions": False}),
            "dynamo_nvf with memory_order_reductions off (reductions of channels-last tensors over their "
            "logical dims); opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_nchw_regions",
            _nvf({"channels_last_regions": False}),
            "dynamo_nvf with channels_last_regions off (regions reading channels-last activations compute in "
            "their logical NCHW order), against the default; opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_transposed_norms",
            _nvf({"row_major_norm_inputs": False}),
            "dynamo_nvf with row_major_norm_inputs off (a region normalizing rows of a token tensor held "
            "transposed reads it strided, not from a row-major copy), against the default; opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_nchw_patch_inputs",
            _nvf({"channels_last_patch_inputs": False}),
            "dynamo_nvf with channels_last_patch_inputs off (a patch embedding's convolution reads its image "
            "NCHW, so its tokens come out transposed in memory), against the default; opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_padded_outputs",
            _nvf({"padded_matmul_outputs": True}),
            "dynamo_nvf with padded_matmul_outputs on (an inference graph returns a padded matmul's "
            "slice with its padded strides, as inductor does, instead of a copy with eager's); opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_padded_outputs_cudagraphs",
            _nvf({"padded_matmul_outputs": True, "cuda_graphs": True}),
            "nvf_cudagraphs with padded_matmul_outputs on (against inductor_ro, which returns padded "
            "logits); opt-in",
            cuda_graphs=True,
            nvf=True,
        ),
        Backend(
            "nvf_avg_pool_taps",
            _nvf({"avg_pool_taps": True}),
            "dynamo_nvf with avg_pool_taps on in every graph (average pools and their gradients as window "
            "taps inside the regions; the default takes inference graphs' pools only); opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_aten_avg_pool",
            _nvf({"avg_pool_taps": False}),
            "dynamo_nvf with avg_pool_taps off (every average pool in ATen's kernel), against the default; "
            "opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_reduce_logical_cudagraphs",
            _nvf({"memory_order_reductions": False, "cuda_graphs": True}),
            "nvf_cudagraphs with memory_order_reductions off; opt-in",
            cuda_graphs=True,
            nvf=True,
        ),
        Backend(
            "nvf_no_unflatten",
            _nvf({"unflatten_reductions": False}),
            "dynamo_nvf with unflatten_reductions off (reductions of flattening views left as they are); opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_repeat_kv",
            _nvf({"grouped_query_attention": False}),
            "dynamo_nvf with grouped-query K/V heads repeated before SDPA, as the model writes it, instead of "
            "read as they are with enable_gqa (grouped_query_attention); opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_addmm_fused",
            _nvf({"unfuse_addmm_bias": False}),
            "dynamo_nvf with float32 addmm kept whole (cuBLAS's bias epilogue) instead of its bias add moved "
            "into the next pointwise region (unfuse_addmm_bias); opt-in",
            nvf=True,
        ),
        Backend(
            "nvf_verify",
            _nvf({"verify_regions": True}),
            "dynamo_nvf checking each region's first nvFuser run against eager (verify_regions); a debugging aid",
            nvf=True,
        ),
        Backend(
            "dynamo_eager",
            _dynamo_eager,
            'torch.compile(backend="eager"): Dynamo\'s own cost, the floor of any backend; opt-in',
        ),
        Backend(
            "inductor_ro",
            _inductor_ro,
            'torch.compile(mode="reduce-overhead") (CUDA graphs); with --reduce-overhead, in model runs',
            cuda_graphs=True,
        ),
    )
}

#: Backends a plain run uses; inductor_ro is opt-in (--reduce-overhead).
DEFAULT_BACKENDS: tuple[str, ...] = ("eager", "inductor", "nvf_bookend", "nvf_untrimmed")
#: Backends of a run of model workloads only (--tag model): each compiler with and without CUDA graphs.
MODEL_BACKENDS: tuple[str, ...] = ("eager", "inductor", "inductor_ro", "nvf_bookend", "nvf_cudagraphs")
OPTIONAL_BACKENDS: tuple[str, ...] = ("inductor_ro", "nvf_cudagraphs", "dynamo_eager")


def default_backends(model_run: bool, mixed: bool = False) -> list[str]:
    """The backends a run uses without --backends: models get MODEL_BACKENDS, a selection with
    both kinds of workload gets the union (in MODEL_BACKENDS then DEFAULT_BACKENDS order)."""
    if not model_run:
        return list(DEFAULT_BACKENDS)
    if not mixed:
        return list(MODEL_BACKENDS)
    return list(dict.fromkeys(MODEL_BACKENDS + DEFAULT_BACKENDS))


def mark_step(backend: Backend) -> Callable[[], None]:
    """What to call before each step: cudagraph_mark_step_begin for a CUDA-graph backend (a new
    step may overwrite the last step's graph outputs), else nothing."""
    if not backend.cuda_graphs:
        return lambda: None
    return torch.compiler.cudagraph_mark_step_begin


def get_backend(name: str) -> Backend:
    """Look a backend up, with an error that lists the valid names."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None


def reset_compile_state() -> None:
    """Drop dynamo caches so one backend's compiled graphs never serve another, and dynamo_nvf's
    process-wide shared fusions (else a second nvf backend would start from the first one's compiled
    fusions, and its first call would not be a compile).

    The GPU is synchronized first (an error left by the last pair's kernels is raised here, in
    Python, not by a destructor) and the garbage collected last, so that the last backend's nvFuser
    executors are freed here, between pairs, rather than inside the next pair's compile or capture.
    """
    import gc
    import sys

    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    torch._dynamo.reset()
    shared = sys.modules.get("dynamo_nvf.runtime.fusion_cache")
    if shared is not None:
        shared.SHARED_FUSIONS.clear()
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
