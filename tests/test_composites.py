"""lone_composites_eager (opt-in): without CUDA graphs, a GELU, SiLU or LayerNorm (or its backward) that
would be a region on its own runs as its ATen op; one a region fuses with other ops is decomposed into it."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn

from dynamo_nvf.ops.registry import LONE_COMPOSITE_REASON
from helpers import DEVICES, check_training, cuda_plans, device_options


class Mlp(nn.Module):
    """Linear, GELU, Linear (a transformer's MLP): the GELU sits between two matmuls, alone."""

    def __init__(self, d: int = 32, dtype=torch.float32, device="cpu") -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d, dtype=dtype, device=device)
        self.fc2 = nn.Linear(4 * d, d, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x)))


class Block(nn.Module):
    """The MLP, then a residual add, a LayerNorm and a SiLU (one region), a linear and a scale."""

    def __init__(self, d: int = 32, dtype=torch.float32, device="cpu") -> None:
        super().__init__()
        self.mlp = Mlp(d, dtype, device)
        self.ln = nn.LayerNorm(d, dtype=dtype, device=device)
        self.out = nn.Linear(d, d, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln(x + self.mlp(x))
        return self.out(nn.functional.silu(h)) * 2.0


ON = {"lone_composites_eager": True}


def _ops(plan) -> list[str]:
    return [op for region in plan.regions for op in region.ops]


def _eager(plan, op: str) -> list[str]:
    return [n.reason for n in plan.eager_nodes if n.op == op]


def _plans(module, shape, options=None, train=False, dtype=torch.bfloat16):
    module.requires_grad_(train)  # inference: an inference graph, not a forward saving for a backward
    return cuda_plans(lambda x: module(x), shape, options={**ON, **(options or {})}, train=train, dtype=dtype,
                      fake=False)


def test_lone_gelu_runs_as_its_aten_op():
    (plan,) = _plans(Mlp(dtype=torch.bfloat16), (4, 8, 32))
    assert plan.regions == []  # bf16 linears keep their bias: nothing else is left to fuse
    assert _eager(plan, "aten.gelu.default") == [LONE_COMPOSITE_REASON]
    assert any("composites run whole by ATen" in note and "gelu x1" in note for note in plan.rewrites)


@pytest.mark.parametrize("options", [{"cuda_graphs": True}, {"lone_composites_eager": False}],
                         ids=["cuda_graphs", "option_off"])  # option_off: the default
def test_decomposed_and_fused_as_before(options):
    """Under CUDA graphs a region costs no host time per call; with the option off nothing is held."""
    (plan,) = _plans(Mlp(dtype=torch.bfloat16), (4, 8, 32), options=options)
    (region,) = plan.regions
    assert "aten.erf.default" in region.ops
    assert not _eager(plan, "aten.gelu.default")
    assert not any("composites run whole" in note for note in plan.rewrites)


def test_composite_with_other_compute_is_decomposed_into_the_region():
    (plan,) = _plans(Block(dtype=torch.bfloat16), (4, 8, 32))
    # The residual add, the LayerNorm and the SiLU: one region, both composites decomposed (inference:
    # no mean or rstd output is left behind).
    (region,) = plan.regions
    assert {"aten.add.Tensor", "aten.var_mean.correction", "aten.sigmoid.default"} <= set(region.ops)
    assert len(region.outputs) == 1
    assert not _eager(plan, "aten.native_layer_norm.default") and not _eager(plan, "aten.silu.default")
    # The GELU stays whole (and the final scale, a region of one op, stays in eager as before).
    assert _eager(plan, "aten.gelu.default") == [LONE_COMPOSITE_REASON]


def test_training_graphs_hold_composites_too():
    plans = _plans(Block(), (4, 8, 32), train=True, dtype=torch.float32)
    forward, backward = (next(p for p in plans if p.kind == k) for k in ("forward", "backward"))
    # The GELU's input is saved for the backward, so its linear keeps its bias (unfuse_addmm_bias
    # wants pointwise uses only): the GELU is alone. The LayerNorm and SiLU fuse with the adds.
    assert _eager(forward, "aten.gelu.default") == [LONE_COMPOSITE_REASON]
    assert "aten.var_mean.correction" in _ops(forward) and "aten.sigmoid.default" in _ops(forward)
    # Backward: the GELU's gradient joins the sum of its linear's bias gradient; the LayerNorm's
    # backward its weight and bias gradients. Both decomposed, nothing held.
    gelu_region = next(r for r in backward.regions if "aten.erf.default" in r.ops)
    assert "aten.sum.dim_IntList" in gelu_region.ops
    assert not [n for n in backward.eager_nodes if n.reason == LONE_COMPOSITE_REASON]
    assert "aten.native_layer_norm_backward.default" not in _ops(backward)


def test_dynamic_sizes_decompose_in_aot_autograd():
    from helpers import compile_fn  # noqa: F401  (registers the backend)
    from dynamo_nvf.backend import recording

    torch._dynamo.reset()
    mlp = Mlp(dtype=torch.bfloat16).requires_grad_(False)
    compiled = torch.compile(lambda x: mlp(x), backend="nvf_bookend", dynamic=True,
                             options={"plan_cpu_as_cuda": True, **ON})
    with recording() as rec:
        compiled(torch.randn(4, 8, 32, dtype=torch.bfloat16))
    (plan,) = rec.plans
    assert "aten.erf.default" in _ops(plan) and not _eager(plan, "aten.gelu.default")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_gradients_match_eager(device, dtype):
    torch.manual_seed(0)
    block = Block(dtype=dtype, device=device)
    x = torch.randn(4, 8, 32, dtype=dtype, device=device)
    reference = None
    if dtype == torch.bfloat16:
        import copy
        reference = copy.deepcopy(block).float()
    check_training(block, [x], options={**device_options(device), **ON}, params=list(block.parameters()),
                   reference=reference)
