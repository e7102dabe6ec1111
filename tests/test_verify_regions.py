"""verify_regions: a region's first nvFuser outputs checked against eager's (values and strides)."""

import warnings

import pytest
import torch

import programs
from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.runtime.region import verify_against_eager
from dynamo_nvf.runtime.stats import STATS
from dynamo_nvf.settings import Settings
from helpers import check_training


def test_equal_outputs_pass_and_dtype_noise_is_tolerated():
    torch.manual_seed(0)
    want = torch.randn(32, 64, dtype=torch.bfloat16)
    noisy = (want.float() * (1 + 4e-3 * torch.randn(32, 64))).to(torch.bfloat16)
    assert verify_against_eager([want.clone(), noisy], [want, want]) == ""


def test_wrong_values_are_named():
    want = torch.randn(16, 8)
    problem = verify_against_eager([want * 1.2], [want])
    assert problem.startswith("output 0 torch.float32[16, 8]: relative error 0.2")


def test_strides_must_match_eagers_on_dims_longer_than_one():
    want = torch.randn(4, 6)
    assert "strides" in verify_against_eager([want.t().contiguous().t()], [want])
    # A size-1 dim's stride is never used: no complaint.
    assert verify_against_eager([torch.randn(4, 1, 6).as_strided((4, 1, 6), (6, 1, 1))],
                                [torch.randn(4, 1, 6)]).startswith("output 0 torch.float32")


def test_nans_infinities_and_integers():
    want = torch.tensor([1.0, float("nan")])
    assert verify_against_eager([want.clone()], [want]) == ""
    assert "NaNs differ" in verify_against_eager([torch.tensor([1.0, 2.0])], [want])
    inf = float("inf")
    assert verify_against_eager([torch.tensor([inf, 1.0])], [torch.tensor([inf, 1.0])]) == ""
    assert "+inf differ" in verify_against_eager([torch.tensor([1e6, 5.0])], [torch.tensor([inf, 1.0])])
    assert "inf differ" in verify_against_eager([torch.tensor([inf, 1.0])], [torch.tensor([-inf, 1.0])])
    assert "relative error" in verify_against_eager([torch.tensor([-inf, 9.0])], [torch.tensor([-inf, 1.0])])
    assert "values differ" in verify_against_eager([torch.tensor([1, 3])], [torch.tensor([1, 2])])


def test_a_few_flipped_mask_elements_pass_many_do_not():
    want = torch.zeros(10_000, dtype=torch.bool)
    few, many = want.clone(), want.clone()
    few[:5] = True
    many[:50] = True
    assert verify_against_eager([few], [want]) == ""
    assert "50 of 10000" in verify_against_eager([many], [want])


def test_zero_outputs_empty_outputs_and_non_tensors():
    zeros = torch.zeros(64)
    assert verify_against_eager([torch.full((64,), 1e-9)], [zeros]) == ""   # rounding-sized
    assert "relative error" in verify_against_eager([torch.full((64,), 1e-2)], [zeros])
    empty = torch.empty(0, 4)
    assert verify_against_eager([torch.empty(4, 0).t()], [empty]) == ""     # strides of nothing
    got = [torch.ones(2), torch.ones(3)]
    assert verify_against_eager(got, [torch.ones(2), None, torch.ones(3)]) == ""  # aligned by tensor
    assert "eager's tensors are 1" in verify_against_eager(got, [torch.ones(2), 4])


def test_random_regions_are_recognised():
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.runtime.region import has_random_ops

    assert has_random_ops(make_fx(lambda x: torch.nn.functional.dropout(x, 0.5, True) * 2)(torch.randn(4)))
    assert not has_random_ops(make_fx(lambda x: x.sin() * 2)(torch.randn(4)))


def test_a_wrong_definition_warns_runs_eager_and_is_never_shared(monkeypatch):
    """The runtime path on the CPU, with a stand-in definition (test_runtime_cache's) that is off by 10%."""
    from dynamo_nvf.lowering import BuiltFusion
    from dynamo_nvf.runtime import region as region_mod
    from dynamo_nvf.runtime.fusion_cache import SHARED_FUSIONS
    from test_runtime_cache import _runtime, _StandInDefinition

    class OffByTenPercent(_StandInDefinition):
        def execute(self, args, _enable_options=()):
            return [out * 1.1 for out in super().execute(args)]

    SHARED_FUSIONS.clear()
    runtime = _runtime(monkeypatch)
    runtime.settings = Settings(plan_cpu_as_cuda=True, verify_regions=True)
    monkeypatch.setattr(region_mod, "build_fusion",
                        lambda nvf, eager, args, static_sizes=False: BuiltFusion(OffByTenPercent(eager), "off", [None]))
    x = torch.randn(4, 4)
    with pytest.warns(RuntimeWarning, match="verify_regions: nvFuser's result differs from eager's: output 0"):
        (out,) = runtime(x)
    torch.testing.assert_close(out, torch.sigmoid(x) * 2 + 1)  # eager's result reached the program
    (again,) = runtime(torch.randn(4, 4))  # eager from then on, no second warning
    assert runtime.failed and runtime.plan.executor == "eager" and len(SHARED_FUSIONS) == 0
    SHARED_FUSIONS.clear()


def test_a_correct_definition_passes(monkeypatch):
    from dynamo_nvf.runtime.fusion_cache import SHARED_FUSIONS
    from test_runtime_cache import _runtime

    SHARED_FUSIONS.clear()
    runtime = _runtime(monkeypatch)
    runtime.settings = Settings(plan_cpu_as_cuda=True, verify_regions=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            x = torch.randn(4, 4)
            (out,) = runtime(x)
            torch.testing.assert_close(out, torch.sigmoid(x) * 2 + 1)
    assert not runtime.failed and runtime.plan.executor == "nvfuser"
    SHARED_FUSIONS.clear()


def test_option_is_off_by_default():
    assert Settings.from_options({}).verify_regions is False
    assert Settings.from_options({"verify_regions": True}).verify_regions is True


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_verify_regions_accepts_correct_regions_on_the_gpu():
    """No false alarms: a training step of a transformer block, bf16 and f32, stays on nvFuser."""
    for dtype in (torch.float32, torch.bfloat16):
        STATS.reset()
        block = programs.TransformerBlock(64, 4).to("cuda", dtype)
        x = torch.randn(2, 16, 64, device="cuda", dtype=dtype)
        check_training(block, [x], {"strict": True, "verify_regions": True}, params=list(block.parameters()))
        assert STATS.fallbacks == 0 and STATS.nvfuser_calls > 0
