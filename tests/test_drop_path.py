"""Stochastic depth (timm's drop path: `x.new_empty([B, 1, ...]).bernoulli_(keep)`, scaled and
multiplied into a residual branch) is drawn inside the residual block's region with `fuse_dropout`,
as dropout is: no ATen bernoulli and no region boundary around the mask. CPU tests plan as for CUDA
(regions run eagerly); `gpu` tests draw with nvFuser's Philox."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import recording
from dynamo_nvf.runtime.stats import STATS
from helpers import compile_fn

ON = {"plan_cpu_as_cuda": True, "strict": True}
CUDA = pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")


def drop_path(x: torch.Tensor, drop_prob: float) -> torch.Tensor:
    """timm.layers.drop_path in training, scale_by_keep=True."""
    keep = 1.0 - drop_prob
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    return x * mask.div_(keep)


class Block(torch.nn.Module):
    """A pre-norm residual MLP block with drop path on its branch (Swin's, ConvNeXt's, ViT's)."""

    def __init__(self, dim: int = 32, drop_prob: float = 0.25) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, dim)
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + drop_path(torch.nn.functional.gelu(self.fc(self.norm(x))), self.drop_prob)


def _plans(options: dict, device: str = "cpu"):
    torch.manual_seed(0)
    model = Block().to(device).train()
    compiled = compile_fn(model, options)
    with recording() as rec:
        compiled(torch.randn(16, 8, 32, device=device, requires_grad=True)).sum().backward()
    return [p for p in rec.plans if p.kind == "forward"][0]


def test_drop_path_mask_is_drawn_in_the_branchs_region():
    forward = _plans(ON)
    left = [n.op for n in forward.eager_nodes if "trimmed" not in (n.reason or "")]
    assert not [op for op in left if "bernoulli" in op or "new_empty" in op], left
    (region,) = [r for r in forward.regions if "aten.bernoulli.p" in r.ops]
    assert "aten.erf.default" in region.ops and "aten.add.Tensor" in region.ops, region.ops  # GELU, residual


def test_fuse_dropout_false_leaves_the_mask_to_aten_with_a_reason():
    forward = _plans({**ON, "fuse_dropout": False})
    (bernoulli,) = [n for n in forward.eager_nodes if n.op == "aten.bernoulli.p"]
    assert "fuse_dropout=True" in bernoulli.reason


def test_an_empty_tensor_another_op_fills_stays_an_allocation():
    """`new_empty` joins a region only as a bernoulli's draw: filled by another op (uniform_, which
    stays in ATen) it stays an allocation, not a buffer of zeros written by the region before it."""
    def f(x):
        y = (x * 2).exp()
        return y * y.new_empty(y.shape).uniform_()

    with recording() as rec:
        compile_fn(f, ON)(torch.randn(8, 4))
    (empty,) = [n for p in rec.plans for n in p.nodes if n.op == "aten.new_empty.default"]
    assert empty.region is None and "bernoulli" in empty.reason, empty.reason


def _check_mask(compiled, device: str, dtype: torch.dtype) -> None:
    """Each sample's branch kept whole (scaled by 1/keep) or dropped whole, at the drop rate; the
    gradient through the branch uses the same mask; a second call draws another."""
    drop = 0.25

    def run():
        x = torch.ones(4096, 4, 8, device=device, dtype=dtype, requires_grad=True)
        out = compiled(x, drop)
        out.backward(torch.ones_like(out))
        return x, out

    x, out = run()
    kept = out[:, 0, 0] != 1.0
    tol = {} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1.0 + 2.0 / (1 - drop)), **tol)
    torch.testing.assert_close(out[~kept], torch.ones_like(out[~kept]))
    assert abs((1 - kept.float().mean().item()) - drop) < 0.03, kept.float().mean()
    expected_grad = 1.0 + kept.to(dtype)[:, None, None] * (2.0 / (1 - drop))
    torch.testing.assert_close(x.grad, expected_grad.expand_as(x.grad), **tol)
    _, again = run()
    assert not torch.equal(again[:, 0, 0] != 1.0, kept), "a second call drew the same mask"


def _branch(x: torch.Tensor, drop: float) -> torch.Tensor:
    return x + drop_path(x * 2.0, drop)


def test_drop_path_mask_scaling_and_backward():
    _check_mask(compile_fn(_branch, ON), "cpu", torch.float32)


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_gpu_drop_path_is_drawn_by_nvfuser(dtype):
    STATS.reset()
    compiled = compile_fn(_branch, {"strict": True})
    _check_mask(compiled, "cuda", dtype)
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
    torch.manual_seed(7)
    first = compiled(torch.ones(4096, 4, 8, device="cuda", dtype=dtype), 0.25)
    torch.manual_seed(7)
    assert torch.equal(compiled(torch.ones(4096, 4, 8, device="cuda", dtype=dtype), 0.25), first), \
        "torch.manual_seed no longer repeats the mask"


@pytest.mark.gpu
@CUDA
def test_gpu_drop_path_block_is_one_region_without_an_aten_bernoulli():
    from helpers import steady_state_kernels

    torch.manual_seed(0)
    model = Block(64).cuda().train()
    compiled = compile_fn(model, {"strict": True})
    _, names = steady_state_kernels(compiled, [torch.randn(32, 16, 64, device="cuda")])
    assert not [n for n in names if "bernoulli" in n.lower()], names
    _plan = _plans({"strict": True}, "cuda")
    assert len([r for r in _plan.regions if "aten.bernoulli.p" in r.ops]) == 1


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("op", ["bernoulli", "dropout"])
def test_gpu_masks_of_a_broadcast_inside_the_region_draw_every_element(op):
    """A mask drawn for `x.expand(64, 32) * 1` (dense in eager, a broadcast in the fusion): one draw
    per element, as eager's, not one per column repeated down the rows."""
    def f(x):
        wide = x.expand(64, 32) * 1.0
        if op == "bernoulli":
            return torch.bernoulli(wide, 0.5) + wide
        return torch.nn.functional.dropout(wide, p=0.5, training=True) + wide

    STATS.reset()
    out = compile_fn(f, {"strict": True})(torch.ones(1, 32, device="cuda"))
    assert STATS.nvfuser_calls > 0 and STATS.fallbacks == 0, STATS.snapshot()
    rows = out.unique(dim=0)
    assert rows.shape[0] > 32, f"{rows.shape[0]} distinct rows of 64: the draws repeat along the broadcast"
