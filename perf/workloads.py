"""Workload registry: the plain PyTorch programs every backend is timed on.

A workload is a *build* function ``build(device, dtype, tiny) -> callable`` (a
function or an ``nn.Module``) plus an input factory
``make_inputs(device, dtype, tiny) -> tuple``.  ``tiny=True`` gives shapes small
enough that the GPU work is negligible, so the wall clock of a call measures the
host-side cost (dispatch, guards, launches) of each backend.  Shapes are baked
into the built callables as Python ints (closures / module sizes), which dynamo
treats as constants: that is what a real traced program looks like.

Nothing here times anything; :mod:`perf.measure` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

import torch
from torch import nn

from perf.seed_programs import seed001_bias_gelu_backward

Build = Callable[[torch.device, torch.dtype, bool], Callable]
MakeInputs = Callable[[torch.device, torch.dtype, bool], tuple]
BytesMoved = Callable[[tuple], int]

KINDS = ("forward", "train")
DTYPE_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}


@dataclass(frozen=True)
class Instance:
    """A built workload: what a backend compiles, its inputs, and how to drive one call.

    ``fn`` is what gets wrapped by a backend.  For "train" workloads ``fn`` returns a
    scalar loss and ``backward`` is True, so the driver calls ``.backward()`` on it:
    the backend then owns the forward and (through AOT autograd) the backward graph.
    ``grads`` are cleared before every call so each call does the same work.
    """

    fn: Callable
    inputs: tuple
    grads: tuple[torch.Tensor, ...] = ()
    backward: bool = False

    def call(self, fn: Optional[Callable] = None):
        """Run one step with ``fn`` (default: the uncompiled ``self.fn``)."""
        for t in self.grads:
            t.grad = None
        out = (self.fn if fn is None else fn)(*self.inputs)  # no `or`: compiled modules define __len__
        if self.backward:
            out.backward()
        return out


@dataclass(frozen=True)
class Workload:
    """Registry entry; see the module docstring for the build/make_inputs contract."""

    name: str
    build: Build
    make_inputs: MakeInputs
    kind: str = "forward"
    dtype: torch.dtype = torch.float32
    tags: frozenset[str] = field(default_factory=frozenset)
    quick: bool = False
    bytes_moved: Optional[BytesMoved] = None
    description: str = ""
    step_included: bool = False  # build() returns a whole training step (does its own backward)
    default: bool = True  # in a plain run; False: only with --all, --only or an opt-in tag
    #: Tags that bring a non-default workload into a run (``--tag model`` selects the model tier).
    opt_in_tags: frozenset[str] = field(default_factory=frozenset)
    #: "gpu": GPU time with the host hidden, plus host time on tiny inputs (blocks, seeds);
    #: "step": step time as a user sees it, host included, plus enqueue/kernel time (models).
    timing: str = "gpu"
    #: build() returns a module whose forward returns the training loss (targets are inputs);
    #: inputs then get no gradient, as in real training.
    returns_loss: bool = False
    cost: float = 1.0  # relative run time, what --shard balances
    #: check(instance, step, kind) -> (first-call seconds, record fields): runs the first (compiling)
    #: call and checks its results (the zoo's fp64 accuracy check, perf/zoo.py)
    check: Optional[Callable] = None
    #: profile CPU ops too: the ATen ops left to ATen, ranked by their GPU time (perf.measure.profile_ops)
    aten_ops: bool = False
    #: measure(runner, workload, backend) -> record: a measurement of its own (the zoo's dynamic-shape run)
    measure: Optional[Callable] = None

    def instantiate(self, device: "torch.device | str", tiny: bool = False, seed: int = 0) -> Instance:
        """Build the callable and its inputs on ``device`` (seeded, so backends see equal data)."""
        device = torch.device(device)
        torch.manual_seed(seed)
        built = self.build(device, self.dtype, tiny)
        inputs = tuple(self.make_inputs(device, self.dtype, tiny))
        if self.step_included:  # the step clears the grads of its .params, if it names them
            return Instance(fn=built, inputs=inputs, grads=tuple(getattr(built, "params", ())))
        params: list[torch.Tensor] = list(built.parameters()) if isinstance(built, nn.Module) else []
        if self.kind == "forward":
            for p in params:
                p.requires_grad_(False)
            return Instance(fn=built, inputs=inputs)
        if self.returns_loss:
            return Instance(fn=built, inputs=inputs, grads=tuple(params), backward=True)
        # train: activations need grads too (a block inside a network gets d(input)).
        acts = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
        for t in acts:
            t.requires_grad_(True)
        return Instance(fn=_loss_of(built), inputs=inputs, grads=tuple(params + acts), backward=True)

    def meta(self) -> dict:
        """JSON-friendly description stored next to the results."""
        return {
            "kind": self.kind,
            "dtype": str(self.dtype).replace("torch.", ""),
            "tags": sorted(self.tags),
            "quick": self.quick,
            "default": self.default,
            "has_bytes_moved": self.bytes_moved is not None,
            "description": self.description,
            "timing": self.timing,
            "cost": self.cost,
        }


def _loss_of(model: Callable) -> Callable:
    def loss_fn(*inputs):
        return model(*inputs).float().sum()

    return loss_fn


REGISTRY: dict[str, Workload] = {}


def register(wl: Workload) -> Workload:
    """Add a workload; names are unique so results files can be keyed by name."""
    if wl.kind not in KINDS:
        raise ValueError(f"{wl.name}: kind must be one of {KINDS}, got {wl.kind!r}")
    if wl.name in REGISTRY:
        raise ValueError(f"workload {wl.name!r} registered twice")
    REGISTRY[wl.name] = wl
    return wl


def workload(
    name: Optional[str] = None,
    *,
    make_inputs: MakeInputs,
    kind: str = "forward",
    dtype: torch.dtype = torch.float32,
    tags: Iterable[str] = (),
    quick: bool = False,
    bytes_moved: Optional[BytesMoved] = None,
    step_included: bool = False,
    description: Optional[str] = None,
) -> Callable[[Build], Build]:
    """Decorator registering a build function as a workload (name defaults to its __name__)."""

    def deco(build: Build) -> Build:
        doc = description if description is not None else (build.__doc__ or "").strip().split("\n")[0]
        register(
            Workload(
                name=name or build.__name__,
                build=build,
                make_inputs=make_inputs,
                kind=kind,
                dtype=dtype,
                tags=frozenset(tags),
                quick=quick,
                bytes_moved=bytes_moved,
                description=doc,
                step_included=step_included,
            )
        )
        return build

    return deco


def select(
    only: Sequence[str] = (),
    tags: Sequence[str] = (),
    quick: bool = False,
    all_: bool = False,
) -> list[Workload]:
    """Pick workloads in registry order.

    ``only`` entries are exact names or fnmatch patterns; an entry matching nothing raises
    KeyError (a typo should not silently benchmark nothing).  Without ``only``: the --quick
    set if ``quick``, every workload if ``all_``, else the default set; the workloads a named
    tag opts in (``opt_in_tags``: ``model`` brings the model tier) join the quick or default
    set.  ``tags`` then keeps workloads having any of the tags.
    """
    from fnmatch import fnmatchcase

    chosen = list(REGISTRY.values())
    if only:
        keep: set[str] = set()
        for pat in (p.strip() for entry in only for p in entry.split(",") if p.strip()):
            hits = [n for n in REGISTRY if fnmatchcase(n, pat)]
            if not hits:
                raise KeyError(f"no workload matches {pat!r}")
            keep.update(hits)
        chosen = [w for w in chosen if w.name in keep]
    elif quick:
        chosen = [w for w in chosen if w.quick or w.opt_in_tags & set(tags)]
    elif not all_:
        chosen = [w for w in chosen if w.default or w.opt_in_tags & set(tags)]
    if tags:
        chosen = [w for w in chosen if w.tags & set(tags)]
    return chosen


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' (1 <= i <= n) -> (i, n); ValueError otherwise."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard wants i/n, e.g. 1/2, got {text!r}") from None
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text}: need 1 <= i <= n")
    return i, n


def shard(workloads: Sequence[Workload], index: int, count: int) -> list[Workload]:
    """Shard ``index`` of ``count`` (1-based) of a selection, balanced by ``Workload.cost``.

    Longest cost first, each to the least-loaded shard (ties: the lower shard); deterministic,
    so every call of a sharded run agrees on the split.  Each shard keeps registry order, and a
    workload's backends all run in the same shard (its ratios come from one process).
    """
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"bad shard {index}/{count}")
    loads = [0.0] * count
    owner: dict[str, int] = {}
    for w in sorted(workloads, key=lambda w: -w.cost):  # stable: registry order among equals
        k = min(range(count), key=lambda j: (loads[j], j))
        loads[k] += w.cost
        owner[w.name] = k
    return [w for w in workloads if owner[w.name] == index - 1]


# --------------------------------------------------------------------------- helpers


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _read_write(arg: int = 0, reads: int = 1, writes: int = 1) -> BytesMoved:
    """Bytes of an elementwise-ish op: ``reads`` inputs and ``writes`` outputs shaped like arg."""

    def bytes_moved(inputs: tuple) -> int:
        return (reads + writes) * _nbytes(inputs[arg])

    return bytes_moved


def _randn(shape: Sequence[int], device, dtype) -> torch.Tensor:
    return torch.randn(*shape, device=device, dtype=dtype)


# Seed shapes: (batch, seq, hidden); tiny keeps the same rank and view structure.
_BSH = {False: (64, 128, 3072), True: (2, 8, 64)}


def _x2d(device, dtype, tiny: bool) -> tuple:
    b, s, h = _BSH[tiny]
    return (_randn((b * s, h), device, dtype),)


def _x3d(device, dtype, tiny: bool) -> tuple:
    return (_randn(_BSH[tiny], device, dtype),)


def _gelu_erf(y: torch.Tensor) -> torch.Tensor:
    return y * 0.5 * (1.0 + torch.erf(y * 0.7071067811865476))


# --------------------------------------------------------------------------- seeds

_SEED = ("seed", "f32")


@workload(make_inputs=_x2d, tags=_SEED, quick=True, bytes_moved=_read_write())
def gelu_views(device, dtype, tiny: bool) -> Callable:
    """erf-GELU between a view in and a view out: the bookend case."""
    b, s, h = _BSH[tiny]

    def gelu_views(x):
        y = x.view(b, s, h)
        g = y * 0.5 * (1.0 + torch.erf(y * 0.7071067811865476))
        return g.view(b * s, h)

    return gelu_views


@workload(make_inputs=_x2d, tags=_SEED, quick=True, bytes_moved=_read_write())
def gelu_views_out(device, dtype, tiny: bool) -> Callable:
    """gelu_views that also returns the input view (an aliasing output)."""
    b, s, h = _BSH[tiny]

    def gelu_views_out(x):
        y = x.view(b, s, h)
        g = y * 0.5 * (1.0 + torch.erf(y * 0.7071067811865476))
        return g.view(b * s, h), y

    return gelu_views_out


@workload(make_inputs=_x3d, tags=_SEED, bytes_moved=_read_write())
def gelu_noviews(device, dtype, tiny: bool) -> Callable:
    """Same math as gelu_views with no views: the 'views cost nothing' reference."""

    def gelu_noviews(x):
        return x * 0.5 * (1.0 + torch.erf(x * 0.7071067811865476))

    return gelu_noviews


_TRANSPOSE = {False: (64, 12, 128, 64), True: (2, 2, 8, 16)}  # batch, heads, seq, head_dim


def _transpose_inputs(device, dtype, tiny: bool) -> tuple:
    b, nh, s, d = _TRANSPOSE[tiny]
    return (_randn((b * nh, s, d), device, dtype),)


@workload(make_inputs=_transpose_inputs, tags=_SEED, quick=True, bytes_moved=_read_write())
def transpose_views(device, dtype, tiny: bool) -> Callable:
    """Head merge: view/permute/contiguous/view/view; one real copy between views."""
    b, nh, s, d = _TRANSPOSE[tiny]

    def transpose_views(x):
        y = x.view(b, nh, s, d).permute(0, 2, 1, 3).contiguous()
        return y.view(b, s, nh * d).view(b * s, nh * d)

    return transpose_views


@workload(make_inputs=_x2d, tags=_SEED, quick=True)
def lone_reshape(device, dtype, tiny: bool) -> Callable:
    """A single view and nothing else: should cost no kernel at all."""
    b, s, h = _BSH[tiny]

    def lone_reshape(x):
        return x.view(b, s, h)

    return lone_reshape


@workload(make_inputs=_x3d, tags=_SEED)
def metadata_only(device, dtype, tiny: bool) -> Callable:
    """Views, permutes, (un)squeezes only; no compute, so no kernel should run."""
    b, s, h = _BSH[tiny]

    def metadata_only(x):
        y = x.permute(0, 2, 1).unsqueeze(0)  # (1, b, h, s)
        y = y.transpose(2, 3).squeeze(0)  # back to (b, s, h) layout
        flat = y.view(b * s, h).unsqueeze(1)  # (b*s, 1, h)
        return flat, x.transpose(0, 1), y[:, :1].expand(b, s, h)

    return metadata_only


_BGB = {False: (16, 512, 4096), True: (2, 8, 64)}


def _bias_gelu_bwd_inputs(device, dtype, tiny: bool) -> tuple:
    shape = _BGB[tiny]
    return (1.0, 2.0, 3.0, 4.0) + tuple(_randn(shape, device, dtype) for _ in range(3))


def _bias_gelu_bwd_bytes(inputs: tuple) -> int:
    t4 = inputs[4]
    return 4 * _nbytes(t4) + t4.shape[-1] * t4.element_size()  # read t4,t5,t6; write t38, t19


@workload(make_inputs=_bias_gelu_bwd_inputs, tags=_SEED, quick=True, bytes_moved=_bias_gelu_bwd_bytes)
def bias_gelu_bwd(device, dtype, tiny: bool) -> Callable:
    """Seed 001: tanh-GELU backward with a bias-grad reduction and Python-float scalars."""

    bias_gelu_bwd = seed001_bias_gelu_backward
    return bias_gelu_bwd


@workload(make_inputs=_x2d, tags=_SEED, quick=True, bytes_moved=_read_write())
def view_add_view_mul_view(device, dtype, tiny: bool) -> Callable:
    """Seed 000 study: views interleaved between two elementwise ops."""
    b, s, h = _BSH[tiny]

    def view_add_view_mul_view(x):
        a = x.view(b, s, h)
        bb = a + a
        c = bb.view(b * s, h)
        d = c * c
        return d.view(b, s, h)

    return view_add_view_mul_view


# --------------------------------------------------------------------------- blocks


class RMSNorm(nn.Module):
    """Hand-written RMSNorm (no fused op in eager), the common LLM normalization."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class DropoutResidualLayerNorm(nn.Module):
    """LayerNorm(dropout(x) + residual), dropout in train mode (exercises RNG)."""

    def __init__(self, dim: int, p: float = 0.1, device=None, dtype=None):
        super().__init__()
        self.dropout = nn.Dropout(p)
        self.norm = nn.LayerNorm(dim, device=device, dtype=dtype)

    def forward(self, x, residual):
        return self.norm(self.dropout(x) + residual)


class GptMlp(nn.Module):
    def __init__(self, d: int, hidden: int, device=None, dtype=None):
        super().__init__()
        self.fc = nn.Linear(d, hidden, device=device, dtype=dtype)
        self.act = nn.GELU()
        self.proj = nn.Linear(hidden, d, device=device, dtype=dtype)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class GptAttention(nn.Module):
    """Hand-written causal attention (qkv projection, masked softmax, output projection).

    Written out rather than SDPA so the softmax/mask/view/permute chain is visible to the
    backend, which is what this suite is about.
    """

    def __init__(self, d: int, heads: int, seq: int, device=None, dtype=None):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, device=device, dtype=dtype)
        self.proj = nn.Linear(d, d, device=device, dtype=dtype)
        mask = torch.ones(seq, seq, dtype=torch.bool, device=device).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, hd).permute(2, 0, 3, 1, 4).unbind(0)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:s, :s], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        return self.proj(y)


_NORM = {False: (8192, 4096), True: (16, 64)}  # rows, features
_GPT = {False: (8, 512, 1024, 16), True: (2, 8, 64, 4)}  # batch, seq, d_model, heads


def _rows(device, dtype, tiny: bool) -> tuple:
    return (_randn(_NORM[tiny], device, dtype),)


def _rows2(device, dtype, tiny: bool) -> tuple:
    return (_randn(_NORM[tiny], device, dtype), _randn(_NORM[tiny], device, dtype))


def _tokens(device, dtype, tiny: bool) -> tuple:
    b, s, d, _ = _GPT[tiny]
    return (_randn((b, s, d), device, dtype),)


def _build_layernorm(device, dtype, tiny):
    return nn.LayerNorm(_NORM[tiny][1], device=device, dtype=dtype)


def _build_rmsnorm(device, dtype, tiny):
    return RMSNorm(_NORM[tiny][1], device=device, dtype=dtype)


def _build_softmax(device, dtype, tiny):
    return Softmax()


def _build_drln(device, dtype, tiny):
    return DropoutResidualLayerNorm(_NORM[tiny][1], device=device, dtype=dtype).train()


def _build_gpt_mlp(device, dtype, tiny):
    _, _, d, _ = _GPT[tiny]
    return GptMlp(d, 4 * d, device=device, dtype=dtype)


def _build_gpt_attention(device, dtype, tiny):
    _, s, d, heads = _GPT[tiny]
    return GptAttention(d, heads, s, device=device, dtype=dtype)


# name, build, inputs, forward bytes_moved (None: compute bound), quick member (fwd f32 only)
_BLOCKS: list[tuple[str, Build, MakeInputs, Optional[BytesMoved], bool]] = [
    ("layernorm", _build_layernorm, _rows, _read_write(), False),
    ("rmsnorm", _build_rmsnorm, _rows, _read_write(), False),
    ("softmax", _build_softmax, _rows, _read_write(), False),
    ("dropout_residual_layernorm", _build_drln, _rows2, _read_write(reads=2), False),
    ("gpt_mlp", _build_gpt_mlp, _tokens, None, False),
    ("gpt_attention", _build_gpt_attention, _tokens, None, False),
]

_KIND_SUFFIX = {"forward": "fwd", "train": "train"}


def _register_blocks() -> None:
    for base, build, inputs, moved, quick in _BLOCKS:
        for kind in KINDS:
            for dtype, dsuf in DTYPE_SUFFIX.items():
                fwd = kind == "forward"
                what = "forward" if fwd else "forward+backward of out.float().sum()"
                register(
                    Workload(
                        name=f"{base}_{_KIND_SUFFIX[kind]}_{dsuf}",
                        build=build,
                        make_inputs=inputs,
                        kind=kind,
                        dtype=dtype,
                        tags=frozenset({"block", base, dsuf, _KIND_SUFFIX[kind]}),
                        quick=quick and fwd and dtype == torch.float32,
                        bytes_moved=moved if fwd else None,
                        description=f"{base} {what}, {dsuf}",
                        # bf16 training adds compile time but little beyond f32 train + bf16 fwd
                        default=fwd or dtype == torch.float32,
                    )
                )


_register_blocks()


#: Wide rows (rows, features): nvFuser 0.2.36 has no one-kernel (inner-outer persistent) schedule for a
#: LayerNorm's backward here, nor for an f32 RMSNorm's, where ask_segmenter cuts the column sums off
#: (passes/split_reductions.py); the bf16 RMSNorm keeps its one kernel.
_WIDE_NORM = {False: (2048, 32768), True: (16, 64)}


def _wide_rows(device, dtype, tiny: bool) -> tuple:
    return (_randn(_WIDE_NORM[tiny], device, dtype),)


def _build_wide_layernorm(device, dtype, tiny):
    return nn.LayerNorm(_WIDE_NORM[tiny][1], device=device, dtype=dtype)


def _build_wide_rmsnorm(device, dtype, tiny):
    return RMSNorm(_WIDE_NORM[tiny][1], device=device, dtype=dtype)


def _register_wide_norms() -> None:
    for base, build in (("layernorm", _build_wide_layernorm), ("rmsnorm", _build_wide_rmsnorm)):
        for dtype, dsuf in DTYPE_SUFFIX.items():
            register(
                Workload(
                    name=f"{base}_wide_train_{dsuf}",
                    build=build,
                    make_inputs=_wide_rows,
                    kind="train",
                    dtype=dtype,
                    tags=frozenset({"block", base, "wide", dsuf, "train"}),
                    description=f"{base} over {_WIDE_NORM[False][1]} features, forward+backward of "
                                f"out.float().sum(), {dsuf}",
                )
            )


_register_wide_norms()


# --------------------------------------------------------------------------- embedding

_EMB = {False: (16, 512, 32000, 1024), True: (2, 8, 64, 16)}  # batch, seq, vocab, dim


def _token_inputs(device, dtype, tiny: bool) -> tuple:
    b, s, v, _ = _EMB[tiny]
    return (torch.randint(0, v, (b, s), device=device),)


def embedding_scale_add(device, dtype, tiny: bool) -> Callable:
    """Token embedding * sqrt(d) + positions: the fused row gather against ATen's (nvf_aten_embedding)."""
    b, s, v, d = _EMB[tiny]
    emb = nn.Embedding(v, d, device=device, dtype=dtype)
    pos = _randn((s, d), device, dtype)
    scale = math.sqrt(d)

    def embedding_scale_add(tokens):
        return emb(tokens) * scale + pos

    return embedding_scale_add


for _dtype, _suffix in DTYPE_SUFFIX.items():
    workload(f"embedding_scale_add_{_suffix}", make_inputs=_token_inputs, dtype=_dtype,
             tags=("embedding", "block", _suffix, "fwd"))(embedding_scale_add)


# --------------------------------------------------------------------------- training step

_MLP = {False: (4096, 512, 2048), True: (16, 32, 64)}  # tokens, d, hidden


def _mlp_step_inputs(device, dtype, tiny: bool) -> tuple:
    n, d, _ = _MLP[tiny]
    return (_randn((n, d), device, dtype), _randn((n, d), device, dtype))


@workload(make_inputs=_mlp_step_inputs, kind="train", tags=("train_step", "train", "f32"), step_included=True)
def mlp_train_step(device, dtype, tiny: bool) -> Callable:
    """Linear-LayerNorm-GELU-Linear + Adam: forward, backward, step, zero_grad, all compiled."""
    _, d, hidden = _MLP[tiny]
    model = nn.Sequential(
        nn.Linear(d, hidden, device=device, dtype=dtype),
        nn.LayerNorm(hidden, device=device, dtype=dtype),
        nn.GELU(),
        nn.Linear(hidden, d, device=device, dtype=dtype),
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def mlp_train_step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    mlp_train_step.model = model  # type: ignore[attr-defined]  (kept reachable for tests)
    return mlp_train_step


# --------------------------------------------------------------------------- models (the model tier)

_DTYPES = {suffix: dtype for dtype, suffix in DTYPE_SUFFIX.items()}
_BATCH_TAGS = ("small", "large")


def _register_models() -> None:
    """perf/models.py's networks: every (kind, dtype, batch) combination is registered; the
    model-tier ones (models.TIER) join a run with ``--tag model`` (or ``--tag llama``, ...), the
    others only with ``--all`` or ``--only``."""
    from perf.models import ALL_COMBINATIONS, COST, MODELS, TIER, build_model, model_inputs, workload_name

    for spec in MODELS.values():
        for kind, dsuf, batch in ALL_COMBINATIONS:
            train = kind == "train"

            def build(device, dtype, tiny, _s=spec, _b=batch, _t=train):
                return build_model(_s, _b, _t, device, dtype, tiny)

            def make_inputs(device, dtype, tiny, _s=spec, _b=batch, _t=train):
                return model_inputs(_s, _b, _t, device, dtype, tiny)

            what = "training step (forward, cross-entropy, backward; no optimizer step)" if train else "inference"
            register(
                Workload(
                    name=workload_name(spec.name, kind, dsuf, batch),
                    build=build,
                    make_inputs=make_inputs,
                    kind="train" if train else "forward",
                    dtype=_DTYPES[dsuf],
                    tags=frozenset({"model", spec.name, kind, dsuf, batch}),
                    description=f"{spec.description}; {what}, {batch} batch ({spec.batches[batch]})",
                    default=False,
                    opt_in_tags=frozenset({"model", spec.name}) if (kind, dsuf, batch) in TIER else frozenset(),
                    timing="step",
                    returns_loss=train,
                    cost=COST[kind],
                )
            )


def _register_external_models() -> None:
    """transformers / timm models (perf/external_models.py), where the library is installed."""
    from perf import external_models as ext
    from perf.models import COST

    for spec in ext.available_specs():
        for kind, dsuf in ext.COMBINATIONS:
            train = kind == "train"

            def build(device, dtype, tiny, _s=spec, _t=train):
                return ext.build(_s, _t, device, dtype, tiny)

            def make_inputs(device, dtype, tiny, _s=spec, _t=train):
                return ext.inputs(_s, _t, device, dtype, tiny)

            register(
                Workload(
                    name=f"{spec.name}_{kind}_{dsuf}_small",
                    build=build,
                    make_inputs=make_inputs,
                    kind="train" if train else "forward",
                    dtype=_DTYPES[dsuf],
                    tags=frozenset({"model", spec.tag, spec.family, kind, dsuf, "small"}),
                    description=f"{spec.description}; {'training step' if train else 'inference'}, small batch",
                    default=False,
                    opt_in_tags=frozenset({spec.tag}),
                    timing="step",
                    returns_loss=train,
                    cost=COST[kind] * 1.5,
                )
            )


def _register_zoo() -> None:
    """The zoo (perf/zoo_models.txt), for each suite whose library is installed; opt-in (--tag zoo)."""
    from perf import zoo
    from perf.models import COST

    kinds = {"fwd": ("forward", "inference (eval, no grad)"),
             "train": ("train", "training step: forward, cross-entropy, backward, SGD step (eager)")}
    for entry in zoo.read_list():
        if not zoo.library_available(entry.library):
            continue
        for kind, (wl_kind, what) in kinds.items():
            train = kind == "train"

            def build(device, dtype, tiny, _e=entry, _t=train):
                return zoo.training_step(_e, device, dtype) if _t else zoo.build_model(_e, device, False, dtype)

            def make_inputs(device, dtype, tiny, _e=entry, _t=train):
                return zoo.training_inputs(_e, device, tiny, dtype) if _t else zoo.model_inputs(_e, device, tiny, dtype=dtype)

            register(
                Workload(
                    name=entry.workload(kind),
                    build=build,
                    make_inputs=make_inputs,
                    kind=wl_kind,
                    dtype=zoo.DTYPE,
                    tags=frozenset({"zoo", entry.suite, entry.name, kind, "bf16"}),
                    description=f"{entry.model} ({entry.cut}), batch {entry.batch}, size {entry.size}; {what}",
                    default=False,
                    opt_in_tags=frozenset({"zoo"}),
                    timing="step",
                    step_included=train,
                    cost=COST[kind],
                    check=lambda inst, step, _k=kind, _n=entry.workload(kind): zoo.checked_first_call(inst, step, _k, _n),
                    aten_ops=True,
                )
            )
        if entry.suite == "hf" and zoo.HF_MODELS[entry.model].inputs in zoo.TEXT_INPUTS:
            lengths = zoo.dynamic_lengths(entry)
            register(
                Workload(
                    name=entry.workload("dyn"),
                    build=lambda device, dtype, tiny, _e=entry: zoo.build_model(_e, device, train=False),
                    make_inputs=lambda device, dtype, tiny, _e=entry: zoo.model_inputs(_e, device, tiny),
                    kind="forward",
                    dtype=zoo.DTYPE,
                    tags=frozenset({"zoo", entry.suite, entry.name, "dyn", "bf16"}),
                    description=f"{entry.model} ({entry.cut}), batch {entry.batch}; inference at sequence lengths "
                                f"{', '.join(map(str, lengths))} in one process (recompiles, step time per length)",
                    default=False,
                    opt_in_tags=frozenset({"zoo"}),
                    timing="dynamic",
                    cost=2.0,
                    measure=lambda runner, wl, be, _e=entry: runner.measure_lengths(
                        be, lambda: zoo.build_model(_e, "cuda", train=False),
                        lambda n: zoo.model_inputs(_e, "cuda", False, n), zoo.dynamic_lengths(_e)),
                )
            )


_register_models()
_register_external_models()
_register_zoo()
