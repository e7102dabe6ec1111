"""unfuse_addmm_bias: a float32 addmm whose uses are all pointwise becomes mm plus a bias add inside the
region that follows (inductor's rule); half/bfloat16, a saved or otherwise used result, scaled addmms
and the option off keep the addmm. Results and strides match eager."""

from __future__ import annotations

import pytest
import torch

from helpers import assert_same_layout, check_inference, check_training, cuda_plans, region_ops

PLAN = {"plan_cpu_as_cuda": True}


def _mlp(dim: int = 32, hidden: int = 64) -> torch.nn.Module:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, dim))
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def _eager_targets(plans) -> list[str]:
    return [n.op for p in plans for n in p.eager_nodes]


def test_linear_then_gelu_moves_the_bias_into_the_gelu_region():
    m = _mlp()
    x = torch.randn(8, 32)
    plans = check_inference(m, [x], PLAN)
    eager = _eager_targets(plans)
    assert eager.count("aten.addmm.default") == 1, eager  # the last linear feeds the output: kept
    assert "aten.mm.default" in eager
    (ops,) = region_ops(plans)
    assert ops[0] == "aten.add.Tensor" and "aten.erf.default" in ops, ops
    assert any("addmm" in note and "bias add moved" in note for p in plans for note in p.rewrites)
    with torch.no_grad():
        out = torch.compile(m, backend="nvf_bookend", options=PLAN)(x)
        assert_same_layout(out, m(x))


def test_fresh_inputs_match_eager():
    m = _mlp()
    compiled = torch.compile(m, backend="nvf_bookend", options=PLAN)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(8, 32)
            torch.testing.assert_close(compiled(x), m(x), rtol=1.3e-6, atol=1e-5)


def test_residual_add_after_a_linear_is_pointwise_too():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)

    def f(x, r):
        return torch.nn.functional.layer_norm(lin(x) + r, (16,))

    with torch.no_grad():
        plans = check_inference(f, [torch.randn(4, 16), torch.randn(4, 16)], PLAN)
    assert "aten.addmm.default" not in _eager_targets(plans)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_addmm_stays_fused(dtype):
    plans = cuda_plans(_mlp().to(dtype), (8, 32), dtype=dtype, fake=False)
    assert _eager_targets(plans).count("aten.addmm.default") == 2
    assert not any(r.startswith("addmm ") for p in plans for r in p.rewrites)


def test_a_result_used_by_a_non_pointwise_op_stays_fused():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)

    def f(x):
        y = lin(x)
        return y.relu(), y.sum(0)  # a reduction reads it too

    with torch.no_grad():
        plans = check_inference(f, [torch.randn(4, 16)], PLAN)
    assert "aten.addmm.default" in _eager_targets(plans)


def test_training_keeps_a_saved_addmm_and_gradients_match():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    plans = check_training(m, [torch.randn(8, 32)], PLAN, params=list(m.parameters()))
    forward = [p for p in plans if p.kind == "forward"]
    # The first linear's result is also saved for GELU's backward (an output of the forward graph).
    assert _eager_targets(forward).count("aten.addmm.default") == 2


def test_scaled_addmm_stays_fused():
    def f(b, x, w):
        return torch.addmm(b, x, w, beta=0.5).relu()

    with torch.no_grad():
        plans = check_inference(f, [torch.randn(8), torch.randn(4, 16), torch.randn(16, 8)], PLAN)
    assert "aten.addmm.default" in _eager_targets(plans)


def test_option_off_keeps_addmm():
    m = _mlp()
    plans = check_inference(m, [torch.randn(8, 32)], {**PLAN, "unfuse_addmm_bias": False})
    assert _eager_targets(plans).count("aten.addmm.default") == 2
    assert not any(r.startswith("addmm ") for p in plans for r in p.rewrites)
