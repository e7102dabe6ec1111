"""Backend options, held in one dataclass: `torch.compile(..., options={...})` maps onto it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping, Optional

from dynamo_nvf.ops.fast_math import MODES as FAST_MATH_MODES

log = logging.getLogger("dynamo_nvf")


@dataclass(frozen=True)
class Settings:
    """Options of the `nvf_bookend` backend.

    Every field can be passed as `torch.compile(fn, backend="nvf_bookend", options={name: value})`.
    docs/options.md says what each does, when to change it, and the measurement behind its default.
    """

    #: Trim metadata-only nodes (views, permutes, ...) off the start and end of each region so that
    #: PyTorch runs them as zero-copy aliases (the bookend pass). False sends regions untrimmed.
    bookend: bool = True
    #: A region must keep at least this many compute (non-metadata) nodes, after trimming, to be sent
    #: to nvFuser; smaller regions run in eager. One op gains nothing from fusion but pays nvFuser's
    #: host cost (Thunder #1251), so the default is 2. Set 1 to send single ops (tests do). Two kinds
    #: of lone op are regions whatever this says: a copy that changes layout (a transpose, nvFuser's
    #: transpose scheduler beats ATen's strided copy), and, under CUDA graphs (where a replay costs no
    #: host time per region), a pointwise op that broadcasts an operand into a result not laid out
    #: row-major: ConvNeXt's downsampling bias add on a channels-last tensor took 1.6 us as a region
    #: against 2.7 for ATen's broadcast kernel (scripts/repros/convnext_head.py at commit 2828583, H100, 2026-11-25;
    #: bookend._is_strided_broadcast).
    min_region_size: int = 2
    #: Cap on a region's inputs plus outputs (the NVRTC kernel-argument limit of seed 002).
    max_region_io: int = 128
    #: Raise instead of falling back to eager on an nvFuser error (for tests).
    strict: bool = False
    #: On each definition's first run, also run the region in eager PyTorch on the same inputs and
    #: compare: values within 5% of each output's norm (gross errors, not rounding), and strides
    #: equal to eager's. A region that differs warns once, naming the output and the error,
    #: and runs in eager from then on. A debugging aid (one extra eager run per definition); off by
    #: default.
    verify_regions: bool = False
    #: Plan CPU tensors as if they were CUDA tensors. The regions then still run eagerly (nvFuser needs
    #: CUDA); explain() and CPU tests use it to show and check the plan a GPU would get.
    plan_cpu_as_cuda: bool = False
    #: Fusion definitions kept per region (LRU), keyed by the inputs' dtypes, ranks and layouts.
    fusion_cache_size: int = 32
    #: Fuse `aten.embedding` (a row gather) into the region of the ops that use it. Off: ATen's
    #: embedding kernel runs it. On by default because it measured better: perf embedding_scale_add_f32
    #: on an H200, 23.0 us and 1 kernel fused against 38.2 us and 2 kernels with ATen's gather
    #: (backend nvf_aten_embedding runs the latter).
    fuse_embedding: bool = True
    #: Draw dropout's mask, and stochastic depth's (`bernoulli`, timm's drop path), inside the region
    #: (nvFuser's Philox, seeded from torch's CUDA generator, so
    #: `torch.manual_seed` still makes runs repeatable and CUDA-graph replays draw fresh masks), as
    #: inductor does by default. The masks then differ from eager's while their statistics match.
    #: False keeps `native_dropout` and `bernoulli` in ATen, for masks bit-identical to eager's under the same seed
    #: (inductor's `fallback_random`). On by default because ATen's dropout kernel is a full extra
    #: pass: perf dropout_residual_layernorm_fwd_f32 on an H100 spent 118 of 255 us in it.
    fuse_dropout: bool = True
    #: Cross-entropy's `nll_loss` forward and backward as masks of a class index (`arange(C) == target`)
    #: instead of ATen's gather and zeros-plus-scatter kernels, as inductor's decompositions and its
    #: scatter-on-zeros rewrite do: the loss joins the log-softmax's region, the backward's one-hot
    #: gradient joins its backward region, and min-cut may recompute the log-probabilities rather
    #: than write them (3 fewer full passes over the logits per step). On by default: GPU kernel time
    #: per training step on an H100 (perf.interleave, 2026-11-23), LLaMA-, GPT-2- and BERT-style,
    #: 0.361 / 0.356 / 0.559 ms with both this and fuse_data_movement off, 0.322 / 0.337 / 0.527 with
    #: both on (perf backend nvf_aten_glue runs them off). An out-of-range target adds no loss (but
    #: counts in the mean's denominator) instead of raising a device-side assert.
    fuse_cross_entropy: bool = True
    #: Copies ATen runs as kernels of their own become data movement inside regions: a unit-step
    #: slice's or a select's gradient (`slice_backward`, `select_backward`: zeros plus a copy, two
    #: kernels and a full write; RoPE's halves, a ViT's class token) a zero pad, and `stack` (an
    #: unbind's gradient) a cat. On by default (measured with fuse_cross_entropy, above).
    fuse_data_movement: bool = True
    #: An embedding's weight gradient over more than 3072 indices (where ATen sorts them) as atomic
    #: adds into f32 zeros (`index_add`), as inductor computes it; rounded to the weight's dtype once,
    #: at the end. Off, or under `torch.use_deterministic_algorithms(True)`, ATen's sort-based
    #: kernels run (deterministic). Why: on an H100 a BERT-style training step at 4096 tokens spent
    #: 112 us of GPU time in the sort's 12 kernels, against 30 us for inductor's atomic adds.
    atomic_embedding_backward: bool = True
    #: The fewest indices whose embedding gradient `atomic_embedding_backward` computes with atomic adds;
    #: -1 (the default) is ATen's own switch from its direct kernel to sorting (more than 3072). Below
    #: it the atomic path measured no better: BERT-style training at 512 indices on an H100 (2026-11-24,
    #: perf backend nvf_atomic_embedding_all, scripts/block_kernels.py) 461.9 against 462.4 us of
    #: GPU time per step, the 28.3 us of ATen's direct kernel traded for zeros, adds and a cast.
    atomic_embedding_backward_min_indices: int = -1
    #: A bfloat16/float16 embedding's weight gradient over at most 3072 indices (below the atomic
    #: path) as matmuls on the tensor cores, f32-accumulated and rounded once as ATen's kernel is
    #: (decompositions._embedding_dense_backward_as_matmul): a one-hot matmul where the vocabulary is
    #: at most the indices, else each token's row sum (tokens-by-tokens equality matrix times the
    #: gradient) written into zeros at its id. ATen's kernel runs only 24 blocks for d 768 (14 us per
    #: embedding at BERT's 512 tokens on an H100). Off, or under deterministic algorithms: ATen's.
    matmul_embedding_backward: bool = True
    #: Cut a region that reduces one tensor over its rows (a norm's dx) and over its columns (the
    #: norm's weight and bias gradients) in two when the tensor has at most this many rows: the column
    #: sums, with recomputed copies of what feeds them, become a region of their own
    #: (passes/split_reductions.py says why). 0 never cuts; -1 (the default) cuts at up to
    #: `AUTO_SPLIT_ROWS` rows with CUDA graphs on, and only regions one of whose column sums reads a
    #: row reduction (a linear's bias gradient, a sum of dx), never without graphs. Why: on an H100
    #: (perf.interleave, 2026-11-23, with unflatten_reductions) cutting took GPU kernel time per
    #: training step from 0.544 to 0.493 ms (BERT-style, 512 rows) and 0.388 to 0.348 (ViT-S, 394
    #: rows), but from 1.776 to 1.855 at 4096 rows (BERT-style, large) and 0.164 to 0.203 for a
    #: LayerNorm of 8192 rows; and without graphs each extra region costs host time that such small
    #: steps are bound by (BERT-style small step 1.07x -> 1.16x inductor's). Under graphs a replay
    #: costs no host time per region, so there the GPU time decides. The loss: a GPT-2-style step
    #: (256 rows) measured 3% more GPU time cut; LLaMA-style RMSNorm regions are not cut (0% if cut).
    #: Those measurements had unflatten_reductions on (the default), which puts the bias gradients
    #: into the norm backwards' regions. A region unpermute_reductions rewrote is cut at any size,
    #: graphs or not, unless this is 0. Under -1, a norm backward over rows of at most
    #: `NARROW_NORM_COLS` columns is cut at any row count under graphs (given a segment boundary
    #: without them), whether or not its column sums read a row reduction (a norm backward's
    #: signature: split_reductions._normalises_rows).
    split_norm_backward_rows: int = -1
    #: Ask nvFuser, while planning on a GPU, whether it could run a backward region that reduces one
    #: tensor over rows and columns, but that the row rules above keep whole, as one kernel
    #: (`nvfuser_direct.schedule.find_compatible_schedulers`, dynamo_nvf/segmenter.py). Where it could
    #: not (it would segment the region anyway), time the whole region and the cut's two regions on
    #: random inputs, and cut the column sums off into a region of their own, with CUDA graphs or
    #: without, if that measured faster. explain() lists each answer and timing among the plan's
    #: rewrites. Why: on an H100 (2026-11-25, perf.interleave --gpu) a bf16 LayerNorm training step
    #: over [2048, 32768] took 1.14x inductor's GPU time whole and 0.65x cut, while a cut f32 RMSNorm
    #: or LayerNorm there was no faster (kept whole by the timing); passes/split_reductions.py gives
    #: the numbers. A question costs 10-350 ms of compile time per distinct region, a timing 1.5-3.5 s;
    #: regions within the row rules are never asked.
    ask_segmenter: bool = True
    #: A region that no single nvFuser scheduler takes whole (asked of nvFuser on its first call, per
    #: fusion key; needs ask_segmenter), whose reductions all keep the innermost dim (a channels-last
    #: BatchNorm's), runs as pieces, one per stage of its reductions (runtime/split_region.
    #: split_by_stage), each compiled as a fusion of its own. None (the default): on with cuda_graphs,
    #: off without. Why: on an H100 (2026-11-27, docs/options.md) timm ResNet-50 training under CUDA
    #: graphs took 6.51 ms per step split against 7.51 whole, first call 54 s against 84, peak 1240
    #: MiB against 1719 (without graphs); without graphs the pieces' calls cost more host time than the
    #: GPU time they save (12.09 against 9.24 ms per step).
    split_by_stage: Optional[bool] = None
    #: Without CUDA graphs, where split_norm_backward would cut a norm backward under graphs (the same
    #: rules: up to AUTO_SPLIT_ROWS rows, or narrow rows at any count), keep the region whole and have
    #: its column sums read their inputs through nvFuser's `segment_set` instead: nvFuser runs the row part and the column sums as separate kernels of one
    #: region call, most of the cut's GPU time saved without a second region's host time, and smaller
    #: kernels to compile than the inner-outer persistent one. Why: on an H100 (2026-11-24,
    #: scripts/block_kernels.py and perf.interleave, 5 rounds), against it off (perf
    #: backend nvf_whole_norm_bwd), GPU time per training step 528.6 -> 470.2 us (BERT-style small,
    #: 512 rows; inductor 459.3), 376.2 -> 334.3 (ViT-S small, 394 rows) but 333.7 -> 341.5 (GPT-2-style
    #: small, 256 rows; inductor 359); step time 1.024x, 1.015x, 0.963x (within the rounds' spread);
    #: nvFuser's first-call compile of the BERT-style step 19.9 -> 15.6 s.
    segment_norm_backward: bool = True
    #: Reduce the tensor a flattening view was taken of, over the dims the view merged, instead of the
    #: view (`sum(view(dy, [B*T, C]), [0])` becomes `sum(dy, [0, 1])`; passes/unflatten_reductions.py):
    #: a reshape between reductions makes nvFuser segment the region (every segmented region of a
    #: BERT-style training step on an H100 was one). On an H100 (perf.interleave, 2026-11-24),
    #: against it off: GPU time per training step 1.758 against 1.839 ms (BERT-style, large batch),
    #: equal within 3% on BERT, ViT and ConvNeXt small batches; step time 0.95x (BERT large), 0.91x
    #: (ConvNeXt large), 0.98x (ConvNeXt small), 1.0x (BERT, ViT small); fewer kernels everywhere.
    #: On its own it let nvFuser compile ConvNeXt's head backward, which nvFuser 0.2.36 computes
    #: wrongly (scripts/nvfuser_repros/wrong_reduction_of_expanded_output.py); passes/known_bugs.py keeps that pattern in eager, and
    #: perf.grad_check found ConvNeXt's, BERT's and ViT's gradients within bound with it on.
    unflatten_reductions: bool = True
    #: Sum a permute's input instead of the permute (`sum(permute(dx, [0, 3, 1, 2]), [0, 2, 3])` becomes
    #: `sum(dx, [0, 1, 2])`; passes/unpermute_reductions.py) where that makes a region's reductions
    #: agree, and then give that region's column sums a region of their own (split_norm_backward, at
    #: any size unless split_norm_backward_rows is 0): ConvNeXt's channels-last LayerNorm backward
    #: regions, which nvFuser otherwise segments with f32 intermediates in between. The value is the
    #: fewest rows (N*H*W) a rewritten region sums over; 0 never rewrites; -1 (the default) rewrites at
    #: every size under CUDA graphs and from `AUTO_UNPERMUTE_ROWS` rows without. Why: on an H100
    #: (perf.interleave, 2026-11-24), ConvNeXt training step, default then rewritten at
    #: every size (perf backend nvf_unpermute_split), inductor: GPU ms 10.53 -> 7.67, 6.45 and step ms
    #: 12.14 -> 9.37, 8.51 at the large batch (50176 to 200704 rows); GPU ms 0.934 -> 0.787, 0.617 but
    #: step ms 6.80 -> 7.21, 5.29 at the small batch (1568 to 6272 rows), where the extra regions' host
    #: time costs more than the GPU time saved (without graphs a step at that size is host-bound).
    #: The rewrite without the split measured +3% GPU time at the small batch, and one of its regions
    #: failed to compile ("Vectorized dim for producer has to be from an inner most position").
    unpermute_reductions: int = -1
    #: Run each view left between regions (around matmuls and attention) as one `_reinterpret_tensor`
    #: of the tensor its chain starts from, where that tensor's layout is known (passes/lean_views.py):
    #: less host time per call. False keeps the aten view calls (for measuring the difference).
    lean_views: bool = True
    #: Replay a static region's nvFuser kernels (every segment, with the work buffers nvFuser
    #: allocates and zeroes) through a small C launcher once the region has run, instead of calling
    #: fec.execute (runtime/direct_launch.py; read back from one captured CUDA graph, checked bit for
    #: bit first; never under cuda_graphs). On an H100 (2026-11-24, scripts/direct_launch_cost.py at commit 2828583) a
    #: call cost 5-57 us against fec.execute's 9-100, and in one interleaved perf run (7 rounds) the
    #: small-batch model steps took 0.83x the time they took with it off on the geomean (0.71x-0.90x;
    #: faster in 68 of 70 rounds). It needs a C compiler and Python's headers (built once, cached under
    #: ~/.cache/dynamo_nvf); without them explain() says so and fec.execute runs. False: always
    #: fec.execute (perf backend nvf_fec_execute).
    direct_launch: bool = True
    #: Run each compiled aten graph (forward, backward, inference) as a CUDA graph through torch's
    #: cudagraph trees, as `torch.compile(mode="reduce-overhead")` does for inductor: one replay per
    #: call instead of one host launch per region and eager op. Graphs that cannot be captured safely
    #: (CPU tensors, mutated non-static inputs, ops that sync) run uncaptured, with one log line saying
    #: why. `mode="reduce-overhead"` turns it on.
    cuda_graphs: bool = False
    #: With cuda_graphs, a training step's forward saves the tensor a chain of views starts from, not
    #: the views (q, k and v of one qkv projection; the attention output and its reshape): the backward
    #: graph recomputes them, for free under a replay, and cudagraph trees no longer rebuild outputs that
    #: share a storage on every replay (passes/saved_views.py). No effect without cuda_graphs.
    recompute_saved_views: bool = True
    #: With cuda_graphs, a graph with dynamic shapes records one CUDA graph per distinct set of sizes
    #: (each holds its own memory); sizes seen after this many run uncaptured.
    cuda_graph_max_shapes: int = 8
    #: Keep compiled kernels on disk for later processes (nvFuser's kernel_db, one private copy per
    #: process; see runtime/kernel_cache.py). Off until its gain is measured on the GPU.
    kernel_cache: bool = False
    #: Where the kernel cache lives ('' = $XDG_CACHE_HOME or ~/.cache, then dynamo_nvf/kernels).
    kernel_cache_dir: str = ""
    #: Size cap of the kept snapshots, in MiB.
    kernel_cache_max_mb: int = 1024
    #: Rewrite explicit attention, `softmax(q @ k.transpose(-2, -1) * scale + mask) @ v`, into one
    #: `scaled_dot_product_attention` call before aot_autograd (as inductor's fuse_attention does), so
    #: that ATen's fused flash / memory-efficient / cuDNN kernels run it, forward and backward, instead
    #: of two matmuls around a softmax region. Only where SDPA computes the same function
    #: (`dynamo_nvf/passes/attention.py` lists the conditions); explain() shows each rewrite.
    fuse_attention: bool = True
    #: Hand SDPA the key/value heads of grouped-query attention as they are, with `enable_gqa=True`,
    #: where the code repeats them first (LLaMA's `repeat_kv`: expand + reshape, or repeat_interleave):
    #: no K/V copies forward, no sum of their gradients backward. Half precision only, where the
    #: fused kernels take grouped heads (passes/gqa_attention.py has the conditions and measurements).
    grouped_query_attention: bool = True
    #: Split a float32 `addmm` whose every use is pointwise into `mm` plus a bias add that joins the
    #: pointwise region after it (inductor's unfuse_bias_add_to_pointwise, with its rule that half and
    #: bfloat16 addmms stay fused; passes/unfuse_addmm.py says why). False keeps cuBLAS's bias epilogue.
    unfuse_addmm_bias: bool = True
    #: Pad a half-precision matmul's dims that are not multiples of 8 (a vocabulary of 50257) with
    #: zeros and slice the result back, where cuBLAS's misaligned kernels lose more than the copies
    #: cost (inductor's pad_mm; passes/pad_matmuls.py has the cost model and measurements: GPT-2's
    #: head 3.34 -> 0.46 ms forward on an H100). False keeps every matmul as written (less memory).
    pad_matmuls: bool = True
    #: In inference graphs, return a padded matmul's result as the slice of the padded product that it
    #: is (logits [B, L, 50257] with a row stride of 50264, the layout inductor returns) instead of
    #: copying it to eager's contiguous strides: one copy of the logits less per call. Code that needs
    #: eager's strides of such an output (`.view(-1)` of the logits) keeps the default False.
    padded_matmul_outputs: bool = False
    #: Move a permute inside a region above the pointwise ops that feed it, onto the region's inputs,
    #: where that hands nvFuser row-major inputs (passes/hoist_permutes.py): ConvNeXt's channels-last
    #: LayerNorms then run at about twice the speed (H100, bf16: 6.08 -> 2.85 us at [2, 96, 56, 56]).
    hoist_permutes: bool = True
    #: Move a permute inside a region below the pointwise ops that consume it, onto the region's output,
    #: where the region then reads and writes only row-major tensors (passes/sink_permutes.py):
    #: ConvNeXt's residual add of a channels-last input and the MLP's permuted NHWC output took 582 us
    #: in nvFuser against inductor's 76 on an H100 (f32, [64, 96, 56, 56], 2026-11-25). Forward and
    #: inference graphs only.
    sink_permutes: bool = True
    #: Give a large transposed read that a concatenation in its region reads a region of its own, which
    #: writes it row-major (passes/split_transposes.py): ViT's patch tokens, CLS concat, position add
    #: and first LayerNorm took 129 us in nvFuser against inductor's 31, and 31 once split (H100, f32,
    #: batch 64, 2026-11-25). Forward and inference graphs only.
    split_transposes: bool = True
    #: Copy a large token tensor held transposed in memory ([..., T, C] stored [..., C, T]) row-major, in
    #: a region of its own, for a region that normalizes its rows (passes/row_major_norm_inputs.py):
    #: MLP-Mixer's residual stream, whose LayerNorms nvFuser read strided (870 us per training step's
    #: forward against inductor's 170; kernel time 5.30 -> 5.00 ms with it, 2 x H200, bf16, 2026-11-28).
    row_major_norm_inputs: bool = True
    #: Run a 2-D average pool in the region around it as the mean over its window's taps
    #: (passes/avg_pool_taps.py) instead of ATen's pooling kernel between regions: PoolFormer's token
    #: mixers, DenseNet's transition pools; True: in every graph, its gradient likewise. None (the
    #: default): in inference graphs only, as max pools: PoolFormer's inference step 0.97x inductor's
    #: against 1.19x without them, DenseNet-121's level (1.12x both), first calls 2.3x and 1.3x (H200,
    #: docs/options.md); in PoolFormer's training step a region with the taps' gradient fails nvFuser's
    #: compile and runs as pieces, one in eager (step 15.4 ms against 6.2 without). False: never.
    avg_pool_taps: Optional[bool] = None
    #: Run a conv net's convolutions and the regions between them channels-last where inductor's
    #: layout heuristics would (passes/conv_layout.py), eager's strides at the graph's outputs: NCHW
    #: made cuDNN convert activations around every convolution (146 nchwToNhwc and 66 nhwcToNchw
    #: kernels, 1.1 ms, per ResNet-50 bf16 training step on an H100, issue 42).
    channels_last_convs: bool = True
    #: Compute a region whose activations are channels-last in NHWC order, its 4-D inputs and outputs
    #: zero-copy permutes (passes/channels_last_regions.py): nvFuser then reads a BatchNorm's statistics
    #: as the outer reduction memory holds, and its pointwise kernels row-major (docs/options.md).
    channels_last_regions: bool = True
    #: Convert a convolution's NCHW weight to channels-last in the graph where cuDNN runs it
    #: channels-last (its input is), instead of ATen's strided copy inside every call
    #: (passes/conv_weight_layout.py): a parameter in a region of its own under CUDA graphs (0.7 us less
    #: for ConvNeXt's downsampling convolution on an H100, scripts/repros/convnext_head.py at commit
    #: 2828583, 2026-11-25); a computed weight (weight standardization) in the region computing it, always.
    channels_last_conv_weights: bool = True
    #: Convert the NCHW input of a patch-embedding convolution (kernel = stride >= 8, no padding) to
    #: channels-last in a region of its own (passes/conv_input_layout.py): cuDNN runs ViT's 16x16 patch
    #: conv channels-last anyway and converts the image (144 us) and its output (12 us) itself, where
    #: nvFuser's conversion took 27 us (H100, f32, batch 64, 2026-11-25). Images of at least 4M elements
    #: only (at batch 2 it was slower). In training (the joint graph) the tokens come out row-major too:
    #: MLP-Mixer's step 5.02 -> 4.13 ms of GPU time, inductor 3.82 (H200, bf16, 2026-11-28).
    channels_last_patch_inputs: bool = True
    #: Give a region's sum, mean, amax or amin whose input lies in memory in another order than its
    #: logical dims (a channels-last tensor) a permute of that input into memory order, where the orders
    #: disagree on whether the innermost dim is reduced (passes/memory_order_reductions.py): nvFuser
    #: otherwise schedules an inner reduction over strided memory. ConvNeXt's head (mean over H and W
    #: of a channels-last tensor) took 5.5 us that way on an H100 (2026-11-25). Forward and inference
    #: graphs only (the pass's docstring says why).
    memory_order_reductions: bool = True
    #: Move the slices of a pointwise op inside a region above it, onto its operands, where every user
    #: of the op is such a slice (passes/hoist_slices.py): nvFuser's resize scheduler then reads slices of
    #: its inputs in one kernel where a sliced intermediate split LLaMA's RoPE backward into two to four.
    hoist_slices: bool = True
    #: Compile regions with nvFuser's fast math (approximate exp, log and division, as inductor's
    #: Triton kernels compute them; denormals flush to zero): "auto" for regions that compute an
    #: exponential or a logarithm and no op that fast math makes less accurate than inductor's
    #: (sine, cosine, tanh, power), "on" for every region without such an op, "off" for none
    #: (ops/fast_math.py). On an H100, LLaMA's SwiGLU forward took 1.54 us with it against 2.28.
    fast_math: str = "auto"
    #: Define the tensor inputs of a region that resizes (pad, slice, cat; a select of a computed
    #: value, which lowers as a slice) with their concrete sizes
    #: instead of symbolic ones (ops/static_sizes.py): nvFuser's resize scheduler fails to compile some
    #: such fusions with symbolic extents (an f32 RoPE backward: "Invalid domains to map"; a bf16
    #: reduction-resize-join: SIGSEGV). Such a definition serves one set of input sizes; each new size
    #: compiles another.
    static_resize_sizes: bool = True

    def atomic_embedding_min_indices(self) -> int:
        """The fewest indices of an atomic embedding gradient (the option, or ATen's threshold for -1)."""
        if self.atomic_embedding_backward_min_indices >= 0:
            return self.atomic_embedding_backward_min_indices
        from dynamo_nvf.decompositions import ATOMIC_EMBEDDING_MIN_INDICES

        return ATOMIC_EMBEDDING_MIN_INDICES

    def launches_directly(self) -> bool:
        """direct_launch where it saves host time: not under CUDA graphs."""
        return self.direct_launch and not self.cuda_graphs

    def splits_by_stage(self) -> bool:
        """split_by_stage, with None read as: where CUDA graphs replay the pieces without host time."""
        return self.cuda_graphs if self.split_by_stage is None else self.split_by_stage

    def pools_as_taps(self, kind: str) -> bool:
        """avg_pool_taps, with None read as: in inference graphs (whose pools have no gradient)."""
        return kind == "inference" if self.avg_pool_taps is None else self.avg_pool_taps

    def recomputes_saved_views(self) -> bool:
        """recompute_saved_views where it saves host time: under CUDA graphs."""
        return self.recompute_saved_views and self.cuda_graphs

    def unflattens(self) -> bool:
        """Whether the unflatten pass runs."""
        return self.unflatten_reductions

    def unpermute_min_rows(self) -> Optional[int]:
        """The fewest rows a region needs for unpermute_reductions to rewrite it; None: never."""
        if self.unpermute_reductions == 0:
            return None
        if self.unpermute_reductions > 0:
            return self.unpermute_reductions
        return 1 if self.cuda_graphs else AUTO_UNPERMUTE_ROWS

    def norm_backward_split_rows(self) -> int:
        """The row limit split_norm_backward applies: the option, or the automatic choice for -1."""
        if self.split_norm_backward_rows >= 0:
            return self.split_norm_backward_rows
        return AUTO_SPLIT_ROWS if self.cuda_graphs else 0

    def norm_backward_segment_rows(self) -> int:
        """The row limit of segment_norm_backward's kernel boundaries: the cut's graphs rule, applied
        where graphs are off (and the cut's limit is automatic); 0 marks nothing."""
        if self.segment_norm_backward and not self.cuda_graphs and self.split_norm_backward_rows < 0:
            return AUTO_SPLIT_ROWS
        return 0

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> "Settings":
        """Builds settings from torch.compile's `options`, rejecting unknown names and wrong types."""
        if not options:
            return cls()
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(
                f"unknown nvf_bookend option(s) {unknown}; known options: {sorted(known)}"
            )
        values: dict[str, Any] = {}
        for name, value in options.items():
            default = getattr(cls, name)
            if name in _OPTIONAL_BOOLS:
                if value is not None and not isinstance(value, bool):
                    raise TypeError(f"option {name!r} takes a bool or None, got {value!r}")
            elif isinstance(default, bool):
                if not isinstance(value, bool):
                    raise TypeError(f"option {name!r} takes a bool, got {value!r}")
            elif isinstance(default, int) and (not isinstance(value, int) or isinstance(value, bool)):
                raise TypeError(f"option {name!r} takes an int, got {value!r}")
            elif isinstance(default, str) and not isinstance(value, str):
                raise TypeError(f"option {name!r} takes a str, got {value!r}")
            values[name] = value
        if values.get("min_region_size", 1) < 1:
            raise ValueError("min_region_size must be at least 1")
        if values.get("max_region_io", 2) < 2:
            raise ValueError("max_region_io must be at least 2")
        if values.get("split_norm_backward_rows", 0) < -1:
            raise ValueError("split_norm_backward_rows must be -1 (auto), 0 (never) or a number of rows")
        if values.get("unpermute_reductions", 0) < -1:
            raise ValueError("unpermute_reductions must be -1 (auto), 0 (never) or a number of rows")
        if values.get("fast_math", "auto") not in FAST_MATH_MODES:
            raise ValueError(f"fast_math must be one of {', '.join(map(repr, FAST_MATH_MODES))}, "
                             f"got {values['fast_math']!r}")
        if values.get("cuda_graph_max_shapes", 1) < 1:
            raise ValueError("cuda_graph_max_shapes must be at least 1")
        return cls(**values)

    def with_mode(self, mode: Optional[str]) -> "Settings":
        """Applies a `torch.compile(mode=...)` value (see `COMPILE_MODES`); an unknown mode is an error."""
        if mode is None:
            return self
        if mode not in COMPILE_MODES:
            raise ValueError(
                f"nvf_bookend: unknown mode {mode!r}; torch.compile modes are {sorted(COMPILE_MODES)}"
            )
        changes, note = COMPILE_MODES[mode]
        if note:
            log.warning("dynamo_nvf: mode=%r: %s", mode, note)
        return replace(self, **changes) if changes else self


#: Options that take a bool or None (None: a choice made from the other options).
_OPTIONAL_BOOLS = frozenset({"split_by_stage", "avg_pool_taps"})

#: Rows up to which a norm backward's column sums get a region of their own under CUDA graphs (see
#: `Settings.split_norm_backward_rows`): between the 512 rows where cutting measured 9% less GPU time
#: and the 4096 where it measured 4% more.
AUTO_SPLIT_ROWS = 1024

#: Row width (the normalised columns) up to which a norm backward's column sums get their own kernels at
#: any row count, by default: a region of their own under CUDA graphs, a segment boundary without (see
#: `Settings.split_norm_backward_rows`, `segment_norm_backward`). nvFuser 0.2.36's inner-outer persistent
#: kernel runs such narrow rows with blocks of C/8 threads (12 for ConvNeXt's 96 channels): on an H100
#: (2026-11-25, scripts/repros/convnext_norms.py at commit 2828583) a LayerNorm forward and backward over
#: [2, 56, 56, 96] bf16 took 47.5-47.8 us whole, 17.5 behind a segment boundary and 17.7-18.5 cut
#: (inductor 13.9-14.1); over [2, 28, 28, 192], 19.5-19.7 whole, 11.4-11.6 segmented, 9.3 cut (inductor
#: 8.7-8.9). ConvNeXt-style training's four such regions had taken 26-81 us each against inductor's
#: 10-17. Norm backwards only (split_reductions._normalises_rows): nothing else was measured. The
#: models' wider norms (384-768) keep the row rules.
NARROW_NORM_COLS = 256

#: Rows (N*H*W) from which unpermute_reductions rewrites a region without CUDA graphs (see
#: `Settings.unpermute_reductions`): between ConvNeXt's 6272 rows (small batch, stage 1), where the
#: rewrite and its split cost more host time than they saved GPU time, and 50176 (large batch, stage 2),
#: where they saved 27% of the step's GPU time.
AUTO_UNPERMUTE_ROWS = 16384

#: torch.compile's documented modes -> (settings they set, a note logged when part of the mode has no
#: meaning here). Inductor's autotuning has no counterpart: nvFuser picks its schedules itself.
COMPILE_MODES: dict[str, tuple[dict[str, Any], str]] = {
    "default": ({}, ""),
    "reduce-overhead": ({"cuda_graphs": True}, ""),
    "max-autotune": (
        {"cuda_graphs": True},
        "nvf_bookend has no autotuning (nvFuser picks its own schedules); CUDA graphs are on, as in "
        "inductor's max-autotune",
    ),
    "max-autotune-no-cudagraphs": (
        {},
        "nvf_bookend has no autotuning (nvFuser picks its own schedules); runs as mode='default'",
    ),
}
