"""The region runtime's caches on the CPU: keyed by input description (not size), bounded (LRU).

nvFuser is not installable here, so a stand-in definition runs the region's eager graph. This is a
CPU unit test of the cache logic only; the GPU tests use the real nvFuser.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from dynamo_nvf import Settings
from dynamo_nvf.backend import plan_graph
from dynamo_nvf.lowering import BuiltFusion
from dynamo_nvf.passes.fuse import PLAN_KEY
from dynamo_nvf.runtime import region as region_mod
from dynamo_nvf.runtime.fusion_cache import SHARED_FUSIONS
from dynamo_nvf.runtime.stats import STATS, fallback_reasons, record_fallback


@pytest.fixture(autouse=True)
def _no_shared_stand_ins():
    """Stand-in definitions must never be shared with another test's regions."""
    SHARED_FUSIONS.clear()
    yield
    SHARED_FUSIONS.clear()


class _StandInDefinition:
    def __init__(self, eager):
        self.eager = eager
        self.fec = self

    def execute(self, args, _enable_options=()):
        return list(self.eager(*args))


def _sigmoid_affine(x):
    return torch.sigmoid(x) * 2 + 1


def _runtime(monkeypatch, cache_size=2, f=_sigmoid_affine, stand_in_validation=True, example=None):
    example = torch.randn(4, 4) if example is None else example
    gm = make_fx(f)(example)
    FakeTensorProp(gm).propagate(example)
    settings = Settings(plan_cpu_as_cuda=True, fusion_cache_size=cache_size)
    gm = plan_graph(gm, settings)
    plan = gm.meta[PLAN_KEY]
    (region_plan,) = plan.regions
    sub = getattr(gm, region_plan.name)
    runtime = region_mod.RegionRuntime(sub, region_plan, settings)
    runtime._nvf = object()  # pretend nvFuser is there; builds go to the stand-in below
    # The region was traced at one static size; these tests feed it other sizes and layouts (as a
    # dynamic-shape graph would), so the static no-key path is off here (tested on its own below).
    runtime._static = False
    monkeypatch.setattr(region_mod, "build_fusion",
                        lambda nvf, eager, args, static_sizes=False: BuiltFusion(_StandInDefinition(eager), "stand-in", [None]))
    monkeypatch.setattr(region_mod, "_runs_on_nvfuser", lambda args, home=None: "")
    if stand_in_validation:
        monkeypatch.setattr(region_mod, "_validate_outputs", lambda outputs, expected: None)
    return runtime


def test_sizes_share_a_definition_layouts_do_not(monkeypatch):
    runtime = _runtime(monkeypatch, cache_size=4)
    STATS.reset()
    for rows in (4, 8, 16, 32):
        runtime(torch.randn(rows, 4))
    assert STATS.fusions_built == 1 and STATS.cache_hits == 3
    runtime(torch.randn(4, 8).t())  # another layout
    runtime(torch.randn(1, 4))  # a size-1 (broadcast) dim
    assert STATS.fusions_built == 3


def test_cache_is_bounded_lru(monkeypatch):
    runtime = _runtime(monkeypatch, cache_size=2)
    STATS.reset()
    inputs = [torch.randn(4, 4), torch.randn(8, 4).t(), torch.randn(1, 4), torch.randn(4, 1)]
    for _ in range(50):
        for x in inputs:
            out = runtime(x)
            torch.testing.assert_close(out[0], torch.sigmoid(x) * 2 + 1)
    assert len(runtime._by_descriptor) <= 2
    assert len(runtime._by_exact) <= 16
    assert STATS.evictions > 0


def test_descriptor_matches_nvfusers_rules():
    from dynamo_nvf.runtime.region import _descriptor, tensor_descriptor

    assert tensor_descriptor((4, 8), (8, 1)) == ((True, True), (1, 0))
    assert tensor_descriptor((4, 8), (1, 4)) == ((True, True), (0, 1))
    assert tensor_descriptor((4, 8), (16, 1)) == ((False, True), (1, 0))
    # Broadcast dims are skipped when judging contiguity: inner stride 1 and inner stride 2
    # behind an expanded dim are different definitions.
    a = torch.randn(3, 1).expand(3, 4)
    b = torch.randn(3, 2)[:, :1].expand(3, 4)
    assert tensor_descriptor(a.shape, a.stride())[0] == (True, None)
    assert tensor_descriptor(b.shape, b.stride())[0] == (False, None)
    assert _descriptor(a) != _descriptor(b)
    assert _descriptor(torch.randn(4, 8)) == _descriptor(torch.randn(16, 3))


class _LayoutStrictDefinition(_StandInDefinition):
    """Accepts only the layout it was built for, as nvFuser validates inputs against a definition."""

    def __init__(self, eager, stride):
        super().__init__(eager)
        self.stride = stride

    def execute(self, args, _enable_options=()):
        if args[0].stride() != self.stride:
            raise RuntimeError("stride mismatch with contiguity info")
        return super().execute(args)


def test_static_region_skips_the_key_and_recovers_from_a_new_layout(monkeypatch):
    runtime = _runtime(monkeypatch)
    runtime._static = True
    monkeypatch.setattr(region_mod, "build_fusion", lambda nvf, eager, args, static_sizes=False: BuiltFusion(
        _LayoutStrictDefinition(eager, args[0].stride()), "stand-in", [None]))
    keys = []
    real_key = region_mod._exact_key
    monkeypatch.setattr(region_mod, "_exact_key", lambda args: keys.append(1) or real_key(args))
    STATS.reset()
    x = torch.randn(4, 4)
    runtime(x)
    first = len(keys)
    for _ in range(4):
        torch.testing.assert_close(runtime(x)[0], torch.sigmoid(x) * 2 + 1)
    assert first > 0 and len(keys) == first and runtime._fast is not None  # no key after the first call
    y = torch.randn(4, 4).t()  # a layout the static definition rejects: the keyed path builds anew
    torch.testing.assert_close(runtime(y)[0], torch.sigmoid(y) * 2 + 1)
    assert STATS.fusions_built == 2 and STATS.fallbacks == 0
    assert runtime._fast is None  # two descriptors seen: the region keys every call from now on
    torch.testing.assert_close(runtime(x)[0], torch.sigmoid(x) * 2 + 1)
    assert runtime._fast is None and STATS.nvfuser_calls == 7


def test_static_region_detection():
    from dynamo_nvf.runtime.region import static_region

    gm = make_fx(lambda x: torch.sigmoid(x) * 2)(torch.randn(4, 4))
    FakeTensorProp(gm).propagate(torch.randn(4, 4))
    assert static_region(gm)
    dyn = make_fx(lambda x: torch.sigmoid(x) * 2, tracing_mode="symbolic")(torch.randn(4, 4))
    assert not static_region(dyn)


class _ExpandedOutputDefinition(_StandInDefinition):
    """Returns its output stride-0 (as nvFuser does for an expanded value) unless rebuilt dense."""

    def __init__(self, eager, dense):
        super().__init__(eager)
        self.dense = dense

    def execute(self, args, _enable_options=()):
        (out,) = super().execute(args)
        return [out if self.dense else out[:1].expand_as(out)]


@pytest.mark.parametrize("rebuild_works", [True, False])
def test_expanded_outputs_are_rebuilt_dense_or_copied(monkeypatch, rebuild_works):
    runtime = _runtime(monkeypatch)
    builds = []

    def build(nvf, eager, args, materialize=frozenset(), pin=frozenset(), static_sizes=False):
        builds.append(materialize)
        if materialize and not rebuild_works:
            raise RuntimeError("cannot materialize")
        return BuiltFusion(_ExpandedOutputDefinition(eager, dense=bool(materialize)), "stand-in", [[1, 0]])

    monkeypatch.setattr(region_mod, "build_fusion", build)
    relayouts = []
    real_relayout = region_mod._relayout
    monkeypatch.setattr(region_mod, "_relayout", lambda t, order: relayouts.append(1) or real_relayout(t, order))
    x = torch.ones(4, 4)  # rows all equal, so the stand-in's expanded output has eager's values
    for _ in range(3):
        (out,) = runtime(x)
        torch.testing.assert_close(out, torch.sigmoid(x) * 2 + 1)
        assert out.stride() == (4, 1)
    assert builds == [frozenset(), frozenset({0})]
    (entry,) = runtime._by_descriptor.values()
    if rebuild_works:
        assert entry.fixups == [] and relayouts == []  # the kernel writes the dense output itself
    else:
        assert entry.fixups == [(0, [1, 0])] and len(relayouts) == 3  # copied on every call


def test_a_definition_failing_its_first_run_is_never_shared(monkeypatch):
    """Equal regions share definitions; one whose first run gives outputs unlike eager's must be
    dropped from the shared cache, not handed to the next equal region unchecked."""
    first = _runtime(monkeypatch, stand_in_validation=False)
    second = region_mod.RegionRuntime(first.eager, copy.deepcopy(first.plan), first.settings)
    second._nvf, second._static = object(), False
    assert first.plan.fusion_key and first.plan.fusion_key == second.plan.fusion_key

    class WrongDtype(_StandInDefinition):
        def execute(self, args, _enable_options=()):
            return [out.double() for out in super().execute(args)]

    monkeypatch.setattr(region_mod, "build_fusion", lambda nvf, eager, args, static_sizes=False: BuiltFusion(WrongDtype(eager), "bad", [None]))
    x = torch.randn(4, 4)
    with pytest.warns(RuntimeWarning) as caught:
        for runtime in (first, second):
            (out,) = runtime(x)
            torch.testing.assert_close(out, torch.sigmoid(x) * 2 + 1)  # eager's result, float32
    assert sum("runs in eager from now on" in str(w.message) for w in caught) == 2
    assert first.failed and second.failed and len(SHARED_FUSIONS) == 0


@pytest.mark.parametrize("rebuild_fixes_it", [True, False])
def test_an_output_aliasing_an_input_is_rebuilt_fresh_or_the_region_goes_eager(monkeypatch, rebuild_fixes_it):
    """nvFuser forwards meta ops of an input as views of it; where eager's output has its own
    storage (here x * 1 + 0), the runtime must not hand out the input's storage."""
    runtime = _runtime(monkeypatch, f=lambda x: x * 1 + 0, stand_in_validation=False)
    STATS.reset()

    class Forwarding(_StandInDefinition):
        def __init__(self, eager, fresh):
            super().__init__(eager)
            self.fresh = fresh

        def execute(self, args, _enable_options=()):
            return [args[0].clone() if self.fresh else args[0]]

    builds = []

    def build(nvf, eager, args, materialize=frozenset(), pin=frozenset(), static_sizes=False):
        builds.append(materialize)
        return BuiltFusion(Forwarding(eager, fresh=bool(materialize) and rebuild_fixes_it), "stand-in", [[1, 0]])

    monkeypatch.setattr(region_mod, "build_fusion", build)
    x = torch.randn(4, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            (out,) = runtime(x)
            torch.testing.assert_close(out, x)
            assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert builds[:2] == [frozenset(), frozenset({0})]
    fell_back = [w for w in caught if "runs in eager from now on" in str(w.message)]
    if rebuild_fixes_it:
        assert not fell_back and runtime.failed is None and STATS.fallbacks == 0
    else:
        assert len(fell_back) == 1 and "as views of an input" in str(fell_back[0].message)
        # counted once, and the reason kept for reports: the region's name and the error
        assert STATS.fallbacks == 1
        (reason,) = fallback_reasons(since=0)
        assert reason.startswith(runtime.plan.name) and "as views of an input" in reason, reason


def test_an_error_during_cuda_graph_capture_does_not_fail_the_region(monkeypatch):
    runtime = _runtime(monkeypatch)
    STATS.reset()
    monkeypatch.setattr(region_mod, "_capturing", lambda: True)
    with pytest.raises(region_mod.NvFuserRegionError, match="during CUDA-graph capture"):
        runtime._fail("nvFuser execution failed: boom", (torch.randn(4, 4),))
    assert runtime.failed is None and STATS.fallbacks == 0


def test_the_fallback_warning_names_a_views_only_region_by_its_views(monkeypatch):
    """With bookend=False a region can hold only views (seen on the H100: gpt_attention under
    nvf_untrimmed, whose warning read 'nvf_region_0 ()'); the warning must still say what it is."""
    runtime = _runtime(monkeypatch)
    runtime.plan.ops = ["aten.permute.default", "aten.view.default"]
    assert runtime.plan.compute_ops == []
    with pytest.warns(RuntimeWarning, match=r"nvf_region_\d+ \(aten.permute.default, aten.view.default\) runs in eager"):
        runtime._fail("nvFuser execution failed: boom", (torch.randn(4, 4),))
    assert runtime.failed


def test_fallback_reasons_are_those_counted_since():
    """perf/ reads the reasons of the fallbacks one measured pair counted (STATS.fallbacks before
    and after): the newest ones, as many as counted, none when nothing fell back."""
    start = STATS.fallbacks
    assert fallback_reasons(since=start) == []
    record_fallback("nvf_region_1 (aten.mul.Tensor): boom")
    record_fallback("nvf_region_2 (aten.add.Tensor): bang")
    assert STATS.fallbacks == start + 2
    assert fallback_reasons(since=start) == ["nvf_region_1 (aten.mul.Tensor): boom", "nvf_region_2 (aten.add.Tensor): bang"]
    assert fallback_reasons(since=start + 1) == ["nvf_region_2 (aten.add.Tensor): bang"]


class _FailsOnTransposedInputs(_StandInDefinition):
    """nvFuser 0.2.36's error for a LayerNorm backward whose input is transposed in memory
    (scripts/nvfuser_repros/transposed_input_norm_backward.py): row-major inputs run."""

    def execute(self, args, _enable_options=()):
        if any(not a.is_contiguous() for a in args if isinstance(a, torch.Tensor)):
            raise RuntimeError("validation.cpp:1266 Expected last_alloc_dim == vec_alloc_id. Vectorized dim for "
                               "producer has to be from an inner most position")
        return super().execute(args)


def test_a_region_failing_on_a_transposed_input_runs_on_row_major_copies(monkeypatch):
    # Traced with the transposed input, as a static graph is: the output keeps eager's layout for it
    # (the definition pins it, as the lowering pins every output to its traced strides).
    runtime = _runtime(monkeypatch, example=torch.randn(8, 4).t())
    monkeypatch.setattr(region_mod, "build_fusion",
                        lambda nvf, eager, args, static_sizes=False: BuiltFusion(_FailsOnTransposedInputs(eager),
                                                                                 "stand-in", [[0, 1]]))
    STATS.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: the region still runs on "nvFuser"
        for _ in range(3):
            x = torch.randn(8, 4).t()  # [4, 8], transposed in memory
            (out,) = runtime(x)
            want = _sigmoid_affine(x)
            torch.testing.assert_close(out, want)
            assert out.stride() == want.stride() == (1, 4)
    assert runtime.failed is None and runtime._pieces is None and STATS.fallbacks == 0
    assert STATS.fusions_built == 2 and STATS.nvfuser_calls == 3  # the transposed build, then the row-major one
    assert runtime.plan.executor == "nvfuser" and "row-major copies" in runtime.plan.executor_reason


def test_a_region_failing_on_row_major_copies_too_falls_back_once(monkeypatch):
    runtime = _runtime(monkeypatch, example=torch.randn(8, 4).t())

    class AlwaysFails(_StandInDefinition):
        def execute(self, args, _enable_options=()):
            raise RuntimeError("Vectorized dim for producer has to be from an inner most position")

    monkeypatch.setattr(region_mod, "build_fusion",
                        lambda nvf, eager, args, static_sizes=False: BuiltFusion(AlwaysFails(eager), "stand-in", [None]))
    STATS.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            x = torch.randn(8, 4).t()
            (out,) = runtime(x)
            torch.testing.assert_close(out, _sigmoid_affine(x))
    assert runtime.failed is not None and not runtime._row_major_inputs
    assert STATS.fusions_built == 2  # the transposed build and one row-major retry, no more
    assert sum("from now on" in str(w.message) for w in caught) == 1


def test_a_static_region_keeps_its_fast_path_after_the_row_major_retry(monkeypatch):
    """The failed transposed definition is forgotten (and never shared): a static region's only
    definition is then the row-major one, which the no-key fast path serves."""
    runtime = _runtime(monkeypatch, example=torch.randn(8, 4).t())
    runtime._static = True
    monkeypatch.setattr(region_mod, "build_fusion",
                        lambda nvf, eager, args, static_sizes=False: BuiltFusion(_FailsOnTransposedInputs(eager),
                                                                                 "stand-in", [[0, 1]]))
    for _ in range(4):
        x = torch.randn(8, 4).t()
        torch.testing.assert_close(runtime(x)[0], _sigmoid_affine(x))
    assert len(runtime._by_descriptor) == 1 and runtime._fast is not None and len(SHARED_FUSIONS) <= 1


def test_a_failed_row_major_build_leaves_the_inputs_as_they_are(monkeypatch):
    """Where the retry's build fails too, the region goes to pieces or eager as before, and its
    calls stop copying their inputs."""
    runtime = _runtime(monkeypatch, example=torch.randn(8, 4).t())
    builds = []

    def build(nvf, eager, args, static_sizes=False):
        builds.append(args[0].is_contiguous())
        if builds[-1]:
            raise RuntimeError("no definition for this layout either")
        return BuiltFusion(_FailsOnTransposedInputs(eager), "stand-in", [[0, 1]])

    monkeypatch.setattr(region_mod, "build_fusion", build)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            x = torch.randn(8, 4).t()
            torch.testing.assert_close(runtime(x)[0], _sigmoid_affine(x))
    assert builds[:2] == [False, True] and not runtime._row_major_inputs
    assert runtime.plan.executor in ("pieces", "eager") and "row-major copies" not in runtime.plan.executor_reason
