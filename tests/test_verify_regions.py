"""verify_regions: a region's first nvFuser outputs checked against eager's (values and strides)."""

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


def test_nans_and_integers():
    want = torch.tensor([1.0, float("nan")])
    assert verify_against_eager([want.clone()], [want]) == ""
    assert "NaNs differ" in verify_against_eager([torch.tensor([1.0, 2.0])], [want])
    assert "values differ" in verify_against_eager([torch.tensor([1, 3])], [torch.tensor([1, 2])])


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
