"""Pad a half-precision matmul's misaligned dims: `mm(a, b)` whose M, K or N is not a multiple of 8
becomes `mm(pad(a), pad(b))[:M, :N]` with zero padding (inductor's pad_mm, torch/_inductor/fx_passes/
pad_mm.py).

Why: cuBLAS runs bf16/fp16 tensor-core GEMMs fast only on 16-byte aligned rows. A language model's
head has the vocabulary as a dim (GPT-2 50257, RoBERTa 50265, Whisper 51865): its logits, their
gradient and the embedding gradient are matmuls with a leading dimension that is not a multiple of 8.
On an H100 (bf16, 4096 tokens x 768 x 50257; `python scripts/matmul_alignment.py`, 2026-11-26) the
forward product took 3.34 ms and 0.46 ms with N padded to a multiple of 64; the input gradient 2.44 ms
and 0.40 ms with K padded; the weight gradient 2.21 ms and 0.41 ms. Copying the 412 MB logits took
0.27 ms. Eager PyTorch runs the slow kernels; inductor pads, which was most of its 3x lead over this
backend on GPT-2 and RoBERTa training (issue 42's zoo).

Where the operand is a transpose (`t`, `transpose`, a 2-D `permute`) the pad goes on the tensor under
it, so the padded tensor is written once, in its own layout, and shared by every matmul that reads it
(a logits gradient feeds both the input and the weight gradient). A pad of a computed operand reads
it from memory (`READS_OPERAND`): in the region that computes it, nvFuser split GPT-2's logits
gradient at the pad into four kernels passing f32 copies, 2.5 ms on an H100 for what one pointwise
kernel and a copy do. The result is sliced back to `[M, N]`. Where that slice has
other strides than the matmul's result had and it reaches the graph's output through views (a
forward's logits, saved for the backward or returned) or is read by explicit strides (`as_strided`),
one contiguous copy restores eager's strides: outputs keep eager's layout, the backward graph sees the
strides it was traced with, and `as_strided` reads the storage it was written for. Inductor returns
the slice as it is (GPT-2's logits [8, 256, 50257] with a row stride of 50264, torch 2.11 on an
H200); with the `padded_matmul_outputs` option an inference graph does too, saving the copy (112 us
of the 602 us of GPU kernel time of that GPT-2 inference call, H200, 2026-11-28).

Which matmuls: CUDA (or planned as CUDA), float16 or bfloat16, static sizes (or, in a dynamic-shape
graph, an mm or addmm with symbolic dims and plain-int strides: only its static dims are padded, by
the cost model at the symbolic dims' example values; GPT-2's head at length 512 took 3.28 ms where
inductor's padded one took 0.45, H100, 2026-11-27; a CPU plan of BART's training step left its
tied-embedding weight gradient, whose reduced dim is the symbolic token count, misaligned), and only
where the
measured slowdown pays for the copies: the aligned product's time (FLOPs at `ALIGNED_TFLOPS`) times
`MISALIGNED_SLOWDOWN - 1` must exceed, twice over, the time to copy the padded operands and the
restoring copy (bytes at `COPY_BYTES_PER_S`, plus `COPY_LAUNCH_S` per copy). Small misaligned matmuls
(a classifier's weight gradient at a batch of 2) are left alone: padding costs more than they lose.

Pure: GraphModule in (aot_autograd's aten graph, before partitioning), GraphModule out.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.fx import GraphModule, Node

from dynamo_nvf._compat import hint_int
from dynamo_nvf.ops.metadata import EXPLICIT_STRIDES, is_metadata, static_sizes, tensor_val, views_for
from dynamo_nvf.passes import add_note, call_like
from dynamo_nvf.passes.partition import READS_MEMORY_KEY
from dynamo_nvf.passes.wide_pads import can_compute_wide

aten = torch.ops.aten

#: Why a pad of a computed operand reads it from memory (partition.READS_MEMORY_KEY).
READS_OPERAND = ("a matmul operand's pad reads it from memory: after the ops that compute it in one region, "
                 "nvFuser split the region at the pad into resize and pointwise kernels that passed the "
                 "whole operand in f32 (GPT-2's logits gradient, H100: four kernels, 2.5 ms)")
#: Elements per 16 bytes: the row alignment cuBLAS's fast half-precision kernels want.
ALIGNMENT = 8
PADDED_DTYPES = frozenset({torch.float16, torch.bfloat16})
#: An aligned bf16 GEMM's throughput on an H100 (dense, large shapes), for the cost model only.
ALIGNED_TFLOPS = 600.0
#: Misaligned against aligned GEMM time, at least (measured 5.4x to 7.3x; module docstring).
MISALIGNED_SLOWDOWN = 4.0
#: Device memory bandwidth a copy reaches (read plus write counted as bytes moved).
COPY_BYTES_PER_S = 2.5e12
#: Time of one more copy kernel regardless of its size (launch and tail; an H100 runs a small copy
#: in about 2 us and the host spends about as long issuing it).
COPY_LAUNCH_S = 4e-6
#: Transposes the pad moves under.
TRANSPOSES = frozenset({aten.t.default, aten.transpose.int, aten.permute.default})

NOTE = "matmul {name}: {dims} padded to a multiple of {align} for cuBLAS (pad_matmuls)"


def _padded(n: int) -> int:
    return 0 if n % ALIGNMENT == 0 or n == 1 else ALIGNMENT - n % ALIGNMENT


def _is_2d_transpose(node: Node) -> bool:
    if not isinstance(node, Node) or node.op != "call_function" or node.target not in TRANSPOSES:
        return False
    src = tensor_val(node.args[0])
    if src is None or src.dim() != 2:
        return False
    if node.target is aten.permute.default:
        return list(node.args[1]) == [1, 0]
    if node.target is aten.transpose.int:
        return node.args[1] % 2 != node.args[2] % 2  # transpose(0, 0) is no transpose
    return True


def _worth_it(batch: int, m: int, k: int, n: int, pads: tuple[int, int, int], itemsize: int,
              copies: int, free: tuple[bool, bool] = (False, False)) -> bool:
    """The cost model: the misaligned GEMM's loss against the copies padding adds (none for an
    operand `free` says is computed at the padded width, wide_pads)."""
    pm, pk, pn = pads
    flops = 2.0 * batch * m * k * n
    loss_s = flops / (ALIGNED_TFLOPS * 1e12) * (MISALIGNED_SLOWDOWN - 1.0)
    moved, kernels = 0, copies
    if (pm or pk) and not free[0]:
        moved += 2 * batch * (m + pm) * (k + pk)
        kernels += 1
    if (pk or pn) and not free[1]:
        moved += 2 * batch * (k + pk) * (n + pn)
        kernels += 1
    moved += copies * 2 * batch * m * n
    return loss_s > 2.0 * (moved * itemsize / COPY_BYTES_PER_S + kernels * COPY_LAUNCH_S)


class _Padder:
    """Makes (and shares) the padded operands of one graph."""

    def __init__(self, gm: GraphModule, mode: object) -> None:
        self.gm = gm
        self.mode = mode
        self.cache: dict[tuple[Node, tuple[int, ...]], Node] = {}

    def pad(self, x: Node, rows: int, cols: int, like: Node) -> Node:
        """`x` (the last two dims [R, C]) with `rows` zero rows and `cols` zero columns appended."""
        if not rows and not cols:
            return x
        if _is_2d_transpose(x):  # pad the tensor under the transpose, then transpose again
            inner = self.pad(x.args[0], cols, rows, like)
            with self.gm.graph.inserting_before(like):
                return call_like(self.gm, aten.t.default, (inner,), like, self.mode)
        key = (x, (rows, cols))
        if key not in self.cache:  # before the first matmul that reads it: the later ones come after
            with self.gm.graph.inserting_before(like):
                self.cache[key] = call_like(self.gm, aten.constant_pad_nd.default, (x, [0, cols, 0, rows], 0.0),
                                            like, self.mode)
            if x.op == "call_function":
                self.cache[key].meta[READS_MEMORY_KEY] = READS_OPERAND
        return self.cache[key]


def _read_by_matmul(node: Node) -> bool:
    """`node` is a matmul this pass may pad, or a transpose only such matmuls read."""
    if _is_2d_transpose(node):
        return all(_matmul_shape(u) is not None for u in node.users)
    return _matmul_shape(node) is not None


def _computed_wide(x: Node, rows: int, cols: int) -> bool:
    """Whether padding `x` (last two dims) by `rows` and `cols` costs no copy: only columns of the
    tensor under a transpose or of `x` itself are added, and wide_pads computes it that wide."""
    if _is_2d_transpose(x):
        x, rows, cols = x.args[0], cols, rows
    return isinstance(x, Node) and not rows and cols > 0 and can_compute_wide(x, cols, _read_by_matmul)


def _needs_eager_strides(node: Node, outputs: bool = True) -> bool:
    """True when `node`, or a view of it, is an output of the graph (unless `outputs` is False) or is
    read by explicit strides (`as_strided` reads storage as eager laid it out)."""
    for user in node.users:
        if user.op == "output":
            if outputs:
                return True
            continue
        if user.op != "call_function":
            continue
        if user.target in EXPLICIT_STRIDES:
            return True
        if is_metadata(user) and _needs_eager_strides(user, outputs):
            return True
    return False


def _refresh_views(node: Node) -> bool:
    """Recomputes the fake values of the views of `node` (its strides changed); False, changing
    nothing, where a view cannot be taken of them (a reshape that needs a copy)."""
    views = views_for(node, node.meta["val"], eager_strides=False)
    for view, val in (views or {}).items():
        view.meta["val"] = val
    return views is not None


def _matmul_shape(node: Node) -> Optional[tuple[int, int, int, int, Node, Node, Optional[Node]]]:
    """(batch, M, K, N, a, b, bias) of an mm, addmm (1-D bias) or bmm this pass may pad."""
    if node.op != "call_function":
        return None
    bias = None
    if node.target is aten.mm.default and len(node.args) == 2:
        a, b = node.args
    elif node.target is aten.bmm.default and len(node.args) == 2:
        a, b = node.args
    elif node.target is aten.addmm.default and len(node.args) == 3 \
            and node.kwargs.get("beta", 1) == 1 and node.kwargs.get("alpha", 1) == 1:
        bias, a, b = node.args
        bias_val = tensor_val(bias)
        if bias_val is None or bias_val.dim() != 1 or static_sizes(bias_val) is None:
            return None
    else:
        return None
    a_val, b_val, out = tensor_val(a), tensor_val(b), tensor_val(node)
    if a_val is None or b_val is None or out is None or out.dtype not in PADDED_DTYPES:
        return None
    a_sizes, b_sizes = static_sizes(a_val), static_sizes(b_val)
    if node.target is not aten.bmm.default:
        a_sizes = a_sizes or _hinted_sizes(a_val)
        b_sizes = b_sizes or _hinted_sizes(b_val)
    if a_sizes is None or b_sizes is None:
        return None
    batch = a_sizes[0] if len(a_sizes) == 3 else 1
    m, k = a_sizes[-2:]
    n = b_sizes[-1]
    return batch, m, k, n, a, b, bias


class SymbolicDim(int):
    """A symbolic dim (a dynamic batch or sequence length) by its hint: the cost model reads it, and
    it is never padded (its alignment is unknown, and a symbolic slice of the product would need a
    guard)."""


def _hinted_sizes(val: torch.Tensor) -> Optional[list[int]]:
    """The sizes of a 2-D operand with symbolic dims, each a SymbolicDim at its example value, where
    its strides are plain ints (so that padding its static dims and slicing the product back touch
    static dims alone); None otherwise, or where a dim has no example value (an unbacked size)."""
    if val.dim() != 2 or not all(isinstance(s, int) for s in val.stride()):
        return None
    try:
        return [s if isinstance(s, int) else SymbolicDim(hint_int(s)) for s in val.shape]
    except Exception:  # noqa: BLE001 - no hint: leave the product as it is
        return None


def pad_matmuls(gm: GraphModule, plan_cpu_as_cuda: bool = False, padded_outputs: bool = False) -> GraphModule:
    """Pads each half-precision matmul whose misaligned dims cost more than the padding; notes each.
    `padded_outputs` (an inference graph, by the user's choice): the graph may return the slice of
    the padded product, with its strides, instead of a copy with eager's."""
    padders: dict[int, _Padder] = {}
    rewritten = 0
    for node in list(gm.graph.nodes):
        found = _matmul_shape(node)
        if found is None:
            continue
        val = node.meta["val"]
        mode = getattr(val, "fake_mode", None)
        if mode is None or not (val.device.type == "cuda" or plan_cpu_as_cuda):
            continue
        batch, m, k, n, a, b, bias = found
        pads = tuple(0 if isinstance(d, SymbolicDim) else _padded(d) for d in (m, k, n))
        if not any(pads):
            continue
        pm, pk, pn = pads
        if (pm or pn) and node.target is aten.bmm.default:
            pm = pn = 0  # a batched slice is a strided view the next region must read; K alone is enough
            if not pk:
                continue
        # a slice of rows keeps the product's strides
        restore = bool(pn) and _needs_eager_strides(node, outputs=not padded_outputs)
        free = (_computed_wide(a, pm, pk), _computed_wide(b, pk, pn))
        if not _worth_it(batch, m, k, n, (pm, pk, pn), val.element_size(), int(restore), free):
            continue
        padder = padders.setdefault(id(mode), _Padder(gm, mode))
        new_a = padder.pad(a, pm, pk, node)
        new_b = padder.pad(b, pk, pn, node)
        with gm.graph.inserting_before(node):
            if bias is not None:
                padded = pn and tensor_val(bias).shape[0] != 1  # a one-element bias broadcasts to any N
                new_bias = call_like(gm, aten.constant_pad_nd.default, (bias, [0, pn], 0.0), node, mode) if padded else bias
                product = call_like(gm, node.target, (new_bias, new_a, new_b), node, mode, dict(node.kwargs))
            else:
                product = call_like(gm, node.target, (new_a, new_b), node, mode)
            result = product
            if pm:
                result = call_like(gm, aten.slice.Tensor, (result, 0, 0, m), node, mode)
            if pn:
                result = call_like(gm, aten.slice.Tensor, (result, -1, 0, n), node, mode)
        node.replace_all_uses_with(result)
        gm.graph.erase_node(node)
        if result.meta["val"].stride() != val.stride() and (restore or not _refresh_views(result)):
            with gm.graph.inserting_after(result):
                dense = call_like(gm, aten.clone.default, (result,), result, mode,
                                  {"memory_format": torch.contiguous_format})
            result.replace_all_uses_with(dense, delete_user_cb=lambda user: user is not dense)
            _refresh_views(dense)
        dims = ", ".join(f"{d}={s}" for d, s, p in (("M", m, pm), ("K", k, pk), ("N", n, pn)) if p)
        add_note(gm, NOTE.format(name=node.name, dims=dims, align=ALIGNMENT))
        rewritten += 1
    if rewritten:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return gm
