"""Dynamic shapes: one graph for many sizes, symbolic sizes reaching the fusion as inputs, and one
fusion definition per input description, not per size."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from dynamo_nvf.backend import recording
from dynamo_nvf.runtime.stats import STATS
from helpers import DEVICES, assert_same, device_options



def fn(x):
    y = x.view(x.shape[0] * 2, -1)
    return (torch.nn.functional.gelu(y) * 2).sum(-1, keepdim=True) + y


def _compile(device, **kwargs):
    torch._dynamo.reset()
    counters.clear()
    options = device_options(device, strict=True)
    return torch.compile(fn, backend="nvf_bookend", options=options, **kwargs)


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_true_compiles_once(device):
    compiled = _compile(device, dynamic=True)
    STATS.reset()
    with recording() as rec:
        for rows in (4, 8, 16, 6):
            x = torch.randn(rows, 32, device=device)
            assert_same(compiled(x), fn(x))
    print(f"dynamic=True on {device}: sizes (4, 8, 16, 6) -> unique_graphs={counters['stats']['unique_graphs']}, "
          f"runtime {STATS.snapshot()}")
    assert counters["stats"]["unique_graphs"] == 1
    (plan,) = rec.plans
    (region,) = plan.regions
    assert any(isinstance(s, str) for s in region.inputs[0].shape)  # symbolic sizes
    if device == "cuda":
        assert STATS.fusions_built == 1 and STATS.nvfuser_calls == 4, STATS.snapshot()


@pytest.mark.parametrize("device", DEVICES)
def test_automatic_dynamic_recompiles_once(device):
    compiled = _compile(device)
    STATS.reset()
    for rows in (4, 8, 16, 6, 12):
        x = torch.randn(rows, 32, device=device)
        assert_same(compiled(x), fn(x))
    print(f"automatic dynamic on {device}: sizes (4, 8, 16, 6, 12) -> "
          f"unique_graphs={counters['stats']['unique_graphs']}, runtime {STATS.snapshot()}")
    # One static graph for the first size, then one dynamic graph for all the others.
    assert counters["stats"]["unique_graphs"] == 2
    if device == "cuda":
        assert STATS.fusions_built == 2 and STATS.nvfuser_calls == 5, STATS.snapshot()


def test_size_arithmetic_is_named_as_such_not_as_an_unsupported_op():
    """explain() says why each op stays out of a region: a product of symbolic sizes is host arithmetic."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="nvf_bookend", options=device_options("cpu"), dynamic=True)
    with recording() as rec:
        compiled(torch.randn(4, 32))
    (plan,) = rec.plans
    sized = [n for n in plan.nodes if n.op.startswith("operator.")]
    assert sized and all(n.reason.startswith("size arithmetic") for n in sized), [(n.op, n.reason) for n in sized]
def with_positions(x):
    """A language model's positions at any length: arange(L) of the symbolic length, in the region."""
    positions = torch.arange(x.shape[1], device=x.device)
    return x * (positions.unsqueeze(-1) + 1).to(x.dtype) + 0.5


@pytest.mark.parametrize("device", DEVICES)
def test_an_arange_of_a_symbolic_length_joins_its_region(device):
    torch._dynamo.reset()
    compiled = torch.compile(with_positions, backend="nvf_bookend", options=device_options(device, strict=True),
                             dynamic=True)
    STATS.reset()
    with recording() as rec:
        for length in (5, 9, 16):
            x = torch.randn(2, length, 8, device=device)
            assert_same(compiled(x), with_positions(x))
    (plan,) = rec.plans
    (region,) = plan.regions
    assert any(n.op == "aten.arange.default" and n.region is not None for n in plan.nodes), \
        [(n.op, n.region, n.reason) for n in plan.nodes]
    if device == "cuda":
        assert STATS.fusions_built == 1 and STATS.nvfuser_calls == 3 and STATS.fallbacks == 0, STATS.snapshot()


def half_positions(x):
    """arange of a symbolic float length (ceil(L / 2) elements): nvFuser's iota takes integer lengths."""
    positions = torch.arange(x.shape[1] / 2, dtype=torch.long, device=x.device)
    return x[:, : positions.shape[0]] * (positions.unsqueeze(-1) + 1).to(x.dtype)


def test_an_arange_of_a_symbolic_float_length_stays_in_aten():
    torch._dynamo.reset()
    compiled = torch.compile(half_positions, backend="nvf_bookend", options=device_options("cpu"), dynamic=True)
    with recording() as rec:
        for length in (5, 9):
            x = torch.randn(2, length, 8)
            assert_same(compiled(x), half_positions(x))
    aranges = [n for p in rec.plans for n in p.nodes if n.op == "aten.arange.default"]
    assert aranges and all(n.region is None and "symbolic length" in n.reason for n in aranges), \
        [(n.op, n.region, n.reason) for n in aranges]


class Embedded(torch.nn.Module):
    """Token and position embeddings at any batch and length (GPT-2's first ops)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(50, 16), torch.nn.Embedding(64, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return torch.nn.functional.gelu(self.tokens(ids) + self.positions(positions))


@pytest.mark.parametrize("device", DEVICES)
def test_embeddings_of_a_symbolic_batch_and_length_join_their_region(device):
    torch._dynamo.reset()
    model = Embedded().to(device)
    compiled = torch.compile(model, backend="nvf_bookend", options=device_options(device, strict=True), dynamic=True)
    STATS.reset()
    with torch.no_grad(), recording() as rec:
        for batch, length in ((2, 5), (3, 9), (4, 16)):
            ids = torch.randint(0, 50, (batch, length), device=device)
            assert_same(compiled(ids), model(ids))
    (plan,) = rec.plans
    (region,) = plan.regions
    ops = [(n.op, n.region, n.reason) for n in plan.nodes]
    assert all(n.region is not None for n in plan.nodes if n.op in ("aten.embedding.default", "aten.arange.default")), ops
    assert sum(n.op == "aten.embedding.default" for n in plan.nodes) == 2, ops
    if device == "cuda":
        assert STATS.fusions_built == 1 and STATS.nvfuser_calls == 3 and STATS.fallbacks == 0, STATS.snapshot()


def rotary(x, mask):
    """LLaMA's rotate_half on a static dim of a tensor of dynamic length, inside the region."""
    x = x * 0.5
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x + rotated) * mask.unsqueeze(-1)


@pytest.mark.parametrize("device", DEVICES)
def test_slices_of_tensors_of_dynamic_length_join_their_region(device):
    torch._dynamo.reset()
    compiled = torch.compile(rotary, backend="nvf_bookend", options=device_options(device, strict=True))
    STATS.reset()
    with recording() as rec:
        for length in (5, 9, 16):
            x, mask = torch.randn(2, length, 8, device=device), torch.rand(2, length, device=device)
            torch._dynamo.mark_dynamic(x, 1)  # the length alone, as a server's automatic dynamic shapes have it
            torch._dynamo.mark_dynamic(mask, 1)
            assert_same(compiled(x, mask), rotary(x, mask))
    (plan,) = rec.plans
    (region,) = plan.regions
    nodes = [(n.op, n.region, n.reason) for n in plan.nodes]
    slices = [n for n in plan.nodes if n.op == "aten.slice.Tensor"]
    assert len(slices) == 2 and all(n.region is not None for n in slices), nodes
    if device == "cuda":
        # The region resizes (slice, cat): static_resize_sizes defines it with concrete sizes, one
        # definition per length; Dynamo still compiled the graph once.
        assert region.static_sizes, region
        assert STATS.fusions_built == 3 and STATS.nvfuser_calls == 3 and STATS.fallbacks == 0, STATS.snapshot()


@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_gpu_a_symbolic_region_launches_directly_at_each_repeated_size(device):
    """Sizes a server repeats (6 and 16 rows, four calls each, interleaved) get a direct launcher each
    after their steady calls; every call matches eager; a size seen once stays on fec.execute."""
    from dynamo_nvf.runtime.fusion_cache import SHARED_FUSIONS

    SHARED_FUSIONS.clear()  # the first call compiles here, not in an earlier test of `fn`
    compiled = _compile(device, dynamic=True)
    STATS.reset()
    with recording() as rec:
        for rows in (6, 16) * 4 + (10,):
            x = torch.randn(rows, 32, device=device)
            assert_same(compiled(x), fn(x))
    (plan,) = rec.plans
    (region,) = plan.regions
    assert region.launch.startswith("direct per set of input sizes: 2 launcher(s)"), region.launch
    # 6 rows: its first call compiles, the next two are steady and build, the fourth launches directly;
    # 16 rows finds the definition compiled, so its first two calls are steady: two direct calls
    assert STATS.direct_launches == 1 + 2, STATS.snapshot()
    assert STATS.nvfuser_calls == 9 and STATS.fallbacks == 0, STATS.snapshot()


def test_a_slice_of_a_whole_dynamic_dim_is_an_alias_in_a_region():
    """HF's `mask[..., :L]` of a mask L long, as aot_autograd's graph keeps it: slice(x, 1, 0, s0)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.ops.registry import LOWERINGS

    def fn(x):
        return torch.ops.aten.slice.Tensor(x.sin(), 1, 0, x.shape[1]), torch.ops.aten.slice.Tensor(x, 1, 0, 3)

    gm = make_fx(fn, tracing_mode="symbolic")(torch.randn(2, 5))
    whole, part = [n for n in gm.graph.nodes if n.target is torch.ops.aten.slice.Tensor]
    check = LOWERINGS[torch.ops.aten.slice.Tensor].check
    assert check(whole) is None
    assert "dynamic size" in check(part)


def heads(x):
    """Attention's head split of a tensor of dynamic length, written with -1 (view(B, -1, H, D))."""
    y = torch.nn.functional.gelu(x * 2)
    return y.view(y.shape[0], -1, 2, 4).softmax(-1).view(y.shape[0], y.shape[1], -1) + x


@pytest.mark.parametrize("device", DEVICES)
def test_a_view_with_an_inferred_dim_of_dynamic_size_joins_its_region(device):
    torch._dynamo.reset()
    compiled = torch.compile(heads, backend="nvf_bookend", options=device_options(device, strict=True))
    STATS.reset()
    with recording() as rec:
        for length in (5, 9, 16):
            x = torch.randn(2, length, 8, device=device)
            torch._dynamo.mark_dynamic(x, 1)
            assert_same(compiled(x), heads(x))
    (plan,) = rec.plans
    nodes = [(n.op, n.region, n.reason) for n in plan.nodes]
    views = [n for n in plan.nodes if n.op == "aten.view.default"]
    assert views and all(n.region is not None for n in views), nodes
    assert len(plan.regions) == 1, nodes
    if device == "cuda":
        assert STATS.fusions_built == 1 and STATS.nvfuser_calls == 3 and STATS.fallbacks == 0, STATS.snapshot()


def filled(x):
    """T5's ones_like of a tensor of dynamic length, between pointwise ops."""
    y = x.sin()
    return torch.ones_like(y) * 3 - y


@pytest.mark.parametrize("device", DEVICES)
def test_a_full_like_of_dynamic_size_joins_its_region(device):
    torch._dynamo.reset()
    compiled = torch.compile(filled, backend="nvf_bookend", options=device_options(device, strict=True))
    STATS.reset()
    with recording() as rec:
        for length in (5, 9, 16):
            x = torch.randn(2, length, device=device)
            torch._dynamo.mark_dynamic(x, 1)
            assert_same(compiled(x), filled(x))
    (plan,) = rec.plans
    nodes = [(n.op, n.region, n.reason) for n in plan.nodes]
    assert any(n.op == "aten.full_like.default" for n in plan.nodes), nodes
    assert len(plan.regions) == 1 and all(n.region is not None for n in plan.nodes
                                          if n.op == "aten.full_like.default"), nodes
    if device == "cuda":
        assert STATS.fusions_built == 1 and STATS.nvfuser_calls == 3 and STATS.fallbacks == 0, STATS.snapshot()
