"""static_resize_sizes: regions that resize (pad, slice, cat) define their tensor inputs with concrete
sizes, other regions stay symbolic, and a definition with concrete sizes never serves other sizes.

Plans are checked as a GPU would get them (CPU tensors planned as CUDA); the runtime's caches with a
stand-in definition that runs the region's eager graph (nvFuser cannot be installed here).
tests/test_gpu_static_sizes.py compiles a RoPE backward with real nvFuser.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from dynamo_nvf import Settings
from dynamo_nvf.backend import plan_graph, recording
from dynamo_nvf.lowering import BuiltFusion, _define_input
from dynamo_nvf.ops.lowerings import RESIZE_OPS
from dynamo_nvf.ops.static_sizes import region_static_sizes, resizing_ops
from dynamo_nvf.passes.fuse import PLAN_KEY
from dynamo_nvf.plan_text import render_plan_text
from dynamo_nvf.ops.registry import op_name
from dynamo_nvf.runtime import region as region_mod
from dynamo_nvf.runtime.fusion_cache import SHARED_FUSIONS
from dynamo_nvf.runtime.stats import STATS
from helpers import assert_same, clone_inputs, compile_fn

RESIZE_NAMES = {op_name(op) for op in RESIZE_OPS}


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rope_after_matmul(x, w, cos, sin):
    """A pointwise region without resizes, a matmul, then RoPE (slices and a cat; pads in backward)."""
    h = torch.sigmoid(x) * 2.0 + 1.0
    q = h @ w
    return q * cos + _rotate_half(q) * sin


def _inputs(rows=8, dim=16):
    return [torch.randn(rows, dim, requires_grad=True), torch.randn(dim, dim, requires_grad=True),
            torch.randn(rows, dim), torch.randn(rows, dim)]


def _regions(options):
    args = _inputs()
    expected_args = clone_inputs(args, requires_grad=True)
    with recording() as rec:
        out = compile_fn(rope_after_matmul, {"plan_cpu_as_cuda": True, **options})(*args)
        out.sum().backward()
    expected = rope_after_matmul(*expected_args)
    expected.sum().backward()
    assert_same(out, expected)
    for got, want in zip(args[:2], expected_args[:2]):
        torch.testing.assert_close(got.grad, want.grad)
    return rec.plans, [r for p in rec.plans for r in p.regions]


def test_only_regions_that_resize_get_concrete_sizes():
    plans, regions = _regions({"static_resize_sizes": True})
    resizing = [r for r in regions if RESIZE_NAMES & set(r.ops)]
    others = [r for r in regions if not RESIZE_NAMES & set(r.ops)]
    assert resizing and others, [r.ops for r in regions]
    assert {p.kind for p in plans} == {"forward", "backward"}
    assert any("aten.constant_pad_nd.default" in r.ops for r in resizing)  # slice's gradient, backward
    for r in resizing:
        assert r.static_sizes and r.sizes.startswith("concrete input sizes"), (r.ops, r.sizes)
        assert all(op in r.sizes for op in RESIZE_NAMES & set(r.ops))
    assert all(not r.static_sizes and r.sizes == "" for r in others)
    text = "\n".join(render_plan_text(p) for p in plans)
    assert text.count("sizes: concrete input sizes") == len(resizing)
    assert all("static_sizes" in r for p in plans for r in p.to_dict()["regions"])


def test_off_every_region_symbolic():
    assert Settings().static_resize_sizes is True  # on by default: nvFuser fails some symbolic resizes
    _, regions = _regions({"static_resize_sizes": False})
    assert any(RESIZE_NAMES & set(r.ops) for r in regions)
    assert all(not r.static_sizes and r.sizes == "" for r in regions)


def _traced(f, *shapes):
    args = [torch.randn(s) for s in shapes]
    gm = make_fx(f)(*args)
    FakeTensorProp(gm).propagate(*args)
    return gm


def test_decision_reads_the_region_graph():
    pad = _traced(lambda x: torch.nn.functional.pad(x.sigmoid(), (1, 2)) * 2, (4, 4))
    plain = _traced(lambda x: x.sigmoid() * 2, (4, 4))
    assert resizing_ops(pad) == ["aten.constant_pad_nd.default"]
    assert region_static_sizes(pad, True)[0] and not region_static_sizes(pad, False)[0]
    assert region_static_sizes(plain, True) == (False, "")
    assert region_static_sizes(pad, False) == (False, "")


def test_a_select_of_a_computed_value_resizes():
    """nvFuser gets a select of a value the region computes as a unit slice (ops/lowerings.py), so
    such a region counts as resizing; a select of an input stays nvFuser's select."""
    computed = _traced(lambda x: x.sigmoid()[:, 0] * 2, (4, 4))
    of_input = _traced(lambda x: x[:, 0].sigmoid() * 2, (4, 4))
    assert resizing_ops(computed) == ["aten.select.int"]
    assert region_static_sizes(computed, True)[0]
    assert resizing_ops(of_input) == [] and region_static_sizes(of_input, True) == (False, "")


def test_inputs_are_defined_with_concrete_sizes_only_when_asked():
    calls = []
    fd = SimpleNamespace(define_tensor=lambda **kw: calls.append(kw) or object())
    ctx = SimpleNamespace(fd=fd, dtype=lambda dtype: str(dtype))
    x = torch.randn(3, 5)[:, :4]
    for static in (False, True):
        _define_input(ctx, x, static)
    symbolic, concrete = calls
    assert symbolic["static_sizes"] is False and concrete["static_sizes"] is True
    assert concrete["sizes"] == [3, 4] and concrete["strides"] == [5, 1]


def test_descriptor_has_the_sizes_only_for_concrete_definitions():
    a, b = torch.randn(4, 8), torch.randn(16, 8)
    assert region_mod._descriptor(a) == region_mod._descriptor(b)
    assert region_mod._descriptor(a, True) != region_mod._descriptor(b, True)
    assert region_mod._descriptor(a, True) == region_mod._descriptor(torch.randn(4, 8), True)
    assert region_mod._descriptor(a, True) != region_mod._descriptor(a)


class _StandIn:
    """Runs the region's eager graph; with concrete sizes, only for the sizes it was built for (as
    nvFuser validates inputs against constant extents)."""

    def __init__(self, eager, sizes):
        self.eager, self.sizes, self.fec = eager, sizes, self

    def execute(self, args, _enable_options=()):
        if self.sizes is not None and [tuple(a.shape) for a in args] != self.sizes:
            raise RuntimeError("input sizes differ from the definition's concrete sizes")
        return list(self.eager(*args))


def _padded(x):
    return torch.nn.functional.pad(torch.sigmoid(x) * 2.0, (0, 3)) + 1.0


@pytest.fixture
def runtime_for(monkeypatch):
    """RegionRuntimes of `_padded`'s one region with a stand-in nvFuser; builds are recorded."""
    builds = []

    def build(nvf, eager, args, materialize=frozenset(), pin=frozenset(), static_sizes=False):
        builds.append(static_sizes)
        sizes = [tuple(a.shape) for a in args] if static_sizes else None
        return BuiltFusion(_StandIn(eager, sizes), "stand-in", [None])

    monkeypatch.setattr(region_mod, "build_fusion", build)
    monkeypatch.setattr(region_mod, "_runs_on_nvfuser", lambda args, home=None: "")
    monkeypatch.setattr(region_mod, "_validate_outputs", lambda outputs, expected: None)
    SHARED_FUSIONS.clear()
    STATS.reset()

    def make(static: bool):
        gm = _traced(_padded, (4, 4))
        settings = Settings(plan_cpu_as_cuda=True, static_resize_sizes=static)
        gm = plan_graph(gm, settings)
        (plan,) = gm.meta[PLAN_KEY].regions
        runtime = region_mod.RegionRuntime(getattr(gm, plan.name), plan, settings)
        runtime._nvf = object()
        runtime._static = False  # fed other sizes below, as a dynamic-shape graph is
        return runtime

    yield make, builds
    SHARED_FUSIONS.clear()


@pytest.mark.parametrize("static", [False, True])
def test_a_concrete_definition_serves_only_its_sizes(runtime_for, static):
    make, builds = runtime_for
    runtime = make(static)
    assert runtime.plan.static_sizes is static
    sizes = [(4, 4), (8, 4), (4, 4), (6, 4), (8, 4)]
    for shape in sizes:
        x = torch.randn(shape)
        (out,) = runtime(x)
        torch.testing.assert_close(out, _padded(x))
    assert runtime.failed is None and runtime.plan.executor == "nvfuser"
    assert builds == ([True] * 3 if static else [False])  # one per distinct size, or one for all
    # An equal region (same fusion key) reuses a definition only for sizes it was built for.
    other = make(static)
    other(torch.randn(8, 4))
    assert len(builds) == (3 if static else 1) and other.plan.fusion_reused
    other(torch.randn(5, 4))
    assert len(builds) == (4 if static else 1)
