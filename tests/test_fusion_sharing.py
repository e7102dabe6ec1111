"""One compile per distinct fusion: equal regions (a stack of identical blocks, forward and backward,
a second compile of the same program) get equal fusion keys and share one definition.

The plan-level keys are checked as a GPU would get them (CPU tensors planned as CUDA). Sharing is
checked through the runtime with a stand-in definition that runs the region's eager graph (nvFuser
cannot be installed here); tests/test_gpu_fusion_sharing.py counts real nvFuser builds.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import programs

from dynamo_nvf.backend import recording
from dynamo_nvf.lowering import BuiltFusion
from dynamo_nvf.passes.fusion_key import region_fusion_key
from dynamo_nvf.runtime import region as region_mod
from dynamo_nvf.runtime.fusion_cache import SHARED_FUSIONS, SharedFusions
from dynamo_nvf.runtime.stats import STATS
from helpers import assert_same, compile_fn


def _stack(depth: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[programs.ResidualBlock() for _ in range(depth)])


def _keys(plans, kind):
    return [r.fusion_key for p in plans if p.kind == kind for r in p.regions]


def test_identical_blocks_get_equal_keys():
    plans = {}
    for depth in (3, 6):
        with torch.no_grad(), recording() as rec:
            compile_fn(_stack(depth), {"plan_cpu_as_cuda": True})(torch.randn(2, 8, 32))
        plans[depth] = rec.plans
    three, six = _keys(plans[3], "inference"), _keys(plans[6], "inference")
    assert three and all(len(k) == 16 for k in three)
    # Regions straddle blocks (a block's residual add fuses with the next block's LayerNorm), so a
    # stack has a first, a middle and a last kind of region; deeper stacks only repeat the middle.
    assert set(six) == set(three) and len(set(six)) <= 3 and len(six) == len(three) + 3
    # The key is in the JSON report too.
    assert all("fusion_key" in r for r in plans[6][0].to_dict()["regions"])


def test_keys_tell_different_computations_apart():
    def f(x):
        return torch.sigmoid(x) * 2.0

    def g(x):
        return torch.sigmoid(x) * 3.0

    def h(x):
        return torch.sigmoid(x) * 2.0

    keys = []
    for fn, shape, dtype in ((f, (4, 8), torch.float32), (g, (4, 8), torch.float32),
                             (h, (4, 8), torch.float32), (f, (4, 16), torch.float32),
                             (f, (4, 8), torch.bfloat16)):
        with torch.no_grad(), recording() as rec:
            compile_fn(fn, {"plan_cpu_as_cuda": True})(torch.randn(shape, dtype=dtype))
        (plan,) = rec.plans
        (region,) = plan.regions
        keys.append(region.fusion_key)
    f_key, g_key, h_key, wide_key, bf16_key = keys
    assert f_key == h_key  # same computation, different function objects
    assert len({f_key, g_key, wide_key, bf16_key}) == 4  # constant, size and dtype matter


def test_key_ignores_node_names():
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    def traced(fn):
        gm = make_fx(fn)(torch.randn(4, 4))
        FakeTensorProp(gm).propagate(torch.randn(4, 4))
        return gm

    a = traced(lambda x: torch.relu(x) + 1)
    b = traced(lambda x: torch.relu(x) + 1)
    for node in b.graph.nodes:
        node.name = f"renamed_{node.name}"
    assert region_fusion_key(a) == region_fusion_key(b)


class _StandIn:
    def __init__(self, eager):
        self.eager, self.fec = eager, self

    def execute(self, args, _enable_options=()):
        return list(self.eager(*args))


@pytest.fixture
def stand_in_nvfuser(monkeypatch):
    """Regions behave as on a GPU, with definitions that run their eager graph; builds are counted."""
    builds = []

    def build(nvf, eager, args, materialize=frozenset(), pin=frozenset(), static_sizes=False):
        builds.append(eager)
        return BuiltFusion(_StandIn(eager), "stand-in", [None] * len(_StandIn(eager).eager.graph.find_nodes(op="output")[0].args[0]))

    monkeypatch.setattr(region_mod.nvf_env, "nvfuser_available", lambda: True)
    monkeypatch.setattr(region_mod.nvf_env, "nvfuser_module", lambda: object())
    monkeypatch.setattr(region_mod, "build_fusion", build)
    monkeypatch.setattr(region_mod, "_runs_on_nvfuser", lambda args, home=None: "")
    SHARED_FUSIONS.clear()
    STATS.reset()
    yield builds
    SHARED_FUSIONS.clear()


def _train_step(depth: int):
    """Forward and backward of a `depth` stack, compared with eager; returns its regions."""
    model = _stack(depth)
    x = torch.randn(2, 8, 32, requires_grad=True)
    with recording() as rec:
        out = compile_fn(model, {"plan_cpu_as_cuda": True})(x)
        out.sum().backward()
    expected_x = x.detach().clone().requires_grad_()
    expected = _stack(depth)(expected_x)
    expected.sum().backward()
    assert_same(out, expected)
    torch.testing.assert_close(x.grad, expected_x.grad, rtol=1e-4, atol=1e-5)
    return [r for p in rec.plans for r in p.regions]


def test_a_stack_of_blocks_builds_each_distinct_fusion_once(stand_in_nvfuser):
    built = {}
    for depth in (3, 6):
        SHARED_FUSIONS.clear()
        STATS.reset()
        stand_in_nvfuser.clear()
        regions = _train_step(depth)
        distinct = {r.fusion_key for r in regions}
        assert STATS.fusions_built == len(stand_in_nvfuser) == len(distinct)
        assert STATS.fusions_reused == len(regions) - len(distinct)
        assert sum(r.fusion_reused for r in regions) == len(regions) - len(distinct)
        assert STATS.nvfuser_calls == len(regions) and STATS.eager_calls == 0
        assert all(r.executor == "nvfuser" for r in regions)  # reused definitions say so too
        built[depth] = (len(regions), STATS.fusions_built)
    (regions3, built3), (regions6, built6) = built[3], built[6]
    assert regions6 > regions3 and built6 == built3  # twice the depth, no more compiles


def test_a_second_compile_reuses_the_first_ones_fusions(stand_in_nvfuser):
    for _ in range(2):
        with torch.no_grad():
            compile_fn(_stack(2), {"plan_cpu_as_cuda": True})(torch.randn(2, 8, 32))
    first = STATS.fusions_built
    assert first > 0 and STATS.fusions_reused >= first  # the second compile built nothing new


def test_shared_cache_is_bounded():
    cache = SharedFusions(capacity=3)
    for i in range(10):
        cache.put(("k", i), object())
    assert len(cache) == 3 and cache.get(("k", 0)) is None and cache.get(("k", 9)) is not None


def test_explain_shows_keys_and_where_the_first_call_went():
    import dynamo_nvf

    report = dynamo_nvf.explain(_stack(6), torch.randn(2, 8, 32, requires_grad=True))
    totals = report.to_dict()["totals"]
    keys = {r.fusion_key for g in report.graphs for r in g.regions}
    assert totals["distinct_fusions"] == len(keys) < totals["regions"]
    assert all(g.planning_ms is not None and g.planning_ms > 0 for g in report.graphs)
    assert totals["first_call_ms"] > totals["planning_ms"] > 0
    assert totals["dynamo_aot_eager_ms"] > 0  # nothing ran on nvFuser here: the rest is Dynamo/aot/eager
    text = str(report)
    assert all(f"fusion {k}" in text for k in keys) and "first_call_ms" in text
