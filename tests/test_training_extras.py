"""Mixed precision and RNG: an autocast training step, and dropout whose mask, scaling and backward
are right, whether the mask is drawn inside a region (nvFuser's Philox, the default) or by ATen."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from dynamo_nvf.backend import recording
from helpers import DEVICES, check_training, compile_fn, cuda_plans, device_options



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("device", DEVICES)
def test_autocast_training_step(device, dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 8)).to(device)
    reference = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 8)).to(device)
    reference.load_state_dict(model.state_dict())
    compiled = compile_fn(model, device_options(device, strict=True))
    x = torch.randn(16, 32, device=device)
    for net, run in ((model, compiled), (reference, reference)):
        with torch.autocast(device, dtype=dtype):
            loss = run(x).float().pow(2).mean()
        loss.backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_mask_scaling_and_backward(device):
    p = 0.3

    def f(x):
        return torch.nn.functional.dropout(x * 2.0, p=p, training=True) + 1.0

    compiled = compile_fn(f, device_options(device, strict=True))
    x = torch.ones(256, 256, device=device, requires_grad=True)
    out = compiled(x)
    kept = out != 1.0
    # Kept elements carry 2 / (1 - p); dropped ones 0.
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1.0 + 2.0 / (1 - p)))
    rate = 1 - kept.float().mean().item()
    assert abs(rate - p) < 0.02, rate
    out.backward(torch.ones_like(out))
    # The backward uses the forward's mask: gradient 2/(1-p) where kept, 0 where dropped.
    torch.testing.assert_close(x.grad, kept.float() * (2.0 / (1 - p)))
    # A second call draws a new mask.
    assert not torch.equal(compiled(x) != 1.0, kept)


def test_adam_step_graph_plans_without_cycles():
    """An Adam step's aten graph once made two regions depend on each other through a region that
    started before both (the cycle check stopped at the union's last node). It must plan (strict
    raises on a planning failure) and update the parameters exactly as eager's Adam."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    model = copy.deepcopy(ref)
    for m in (ref, model):
        for p in m.parameters():
            p.grad = torch.ones_like(p) * 0.5
    ref_opt, opt = torch.optim.Adam(ref.parameters(), lr=1e-2), torch.optim.Adam(model.parameters(), lr=1e-2)
    step = torch.compile(opt.step, backend="nvf_bookend", options={"plan_cpu_as_cuda": True, "strict": True})
    with recording() as rec:
        for _ in range(3):
            ref_opt.step()
            step()
    assert any(len(p.regions) >= 2 for p in rec.plans)
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _dropout_plans(options):
    def f(x):
        return torch.nn.functional.dropout(x * 2.0, p=0.25, training=True) + 1.0

    compiled = compile_fn(f, {"plan_cpu_as_cuda": True, "strict": True, **options})
    with recording() as rec:
        compiled(torch.randn(32, 32, requires_grad=True)).sum().backward()
    return rec.plans


def test_dropout_is_planned_into_the_region_by_default():
    forward = [p for p in _dropout_plans({}) if p.kind == "forward"][0]
    (region,) = forward.regions
    assert "aten.native_dropout.default" in region.ops
    assert not [n for n in forward.eager_nodes if "dropout" in n.op]


def test_fuse_dropout_false_leaves_it_to_aten_with_a_reason():
    forward = [p for p in _dropout_plans({"fuse_dropout": False}) if p.kind == "forward"][0]
    assert all("aten.native_dropout.default" not in r.ops for r in forward.regions)
    (dropout,) = [n for n in forward.eager_nodes if n.op == "aten.native_dropout.default"]
    assert "fuse_dropout=True" in dropout.reason


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_backward_recomputes_from_its_input(dtype):
    """Autograd saves softmax's output through a detach. As a detach, min-cut could not recompute it,
    so the forward wrote the full output for the backward to read; as an alias (inductor's table),
    the forward saves only the input's row max and sum and the backward recomputes the output."""
    rows, cols = 64, 128
    plans = cuda_plans(lambda x: torch.softmax(x, dim=-1).float().sum(), (rows, cols), train=True, dtype=dtype,
                       fake=False)
    forward = next(p for p in plans if p.kind == "forward")
    backward = next(p for p in plans if p.kind == "backward")
    saved = [t.shape for r in forward.regions for t in r.outputs]
    assert [rows, cols] not in [list(s) for s in saved], saved
    assert sorted(list(s) for s in saved) == [[], [rows, 1], [rows, 1]], saved
    (bwd_region,) = backward.regions
    assert "aten.exp.default" in bwd_region.ops, bwd_region.ops
    # The recompute gives the same gradient as eager.
    x = torch.randn(rows, cols, dtype=dtype)
    check_training(lambda x: torch.softmax(x, dim=-1) * 3.0, [x], {"plan_cpu_as_cuda": True, "strict": True})
