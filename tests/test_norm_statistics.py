"""recompute_norm_statistics: a norm's mean and reciprocal std are recomputed in the backward, not
saved by the forward (fewer saved tensors, each of which costs host time per training step)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.checkpoint import CheckpointPolicy

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import recording
from dynamo_nvf.passes.norm_statistics import NORM_STATISTIC_KEY, recompute_norm_statistics
from helpers import DEVICES, check_training, compile_fn, device_options

aten = torch.ops.aten
D = 64


class NormBlock(nn.Module):
    """Linear, LayerNorm, RMSNorm: two norms whose backwards read their statistics."""

    def __init__(self, dtype=torch.float32, device="cpu") -> None:
        super().__init__()
        self.lin = nn.Linear(D, D, dtype=dtype, device=device)
        self.ln = nn.LayerNorm(D, dtype=dtype, device=device)
        self.rms = nn.RMSNorm(D, eps=1e-6, dtype=dtype, device=device)
        with torch.no_grad():
            for p in (self.ln.weight, self.ln.bias, self.rms.weight):
                p.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return self.rms(self.ln(self.lin(x) + r)) * 1.5


def _graphs(recompute: bool, dtype=torch.float32):
    """(forward graph's outputs, backward graph module, plans) of one training step on the CPU."""
    block = NormBlock(dtype)
    x, r = (torch.randn(4, 16, D, dtype=dtype, requires_grad=True) for _ in range(2))
    compiled = compile_fn(block, {"plan_cpu_as_cuda": True, "recompute_norm_statistics": recompute})
    with recording() as rec:
        compiled(x, r).sum().backward()
    forward, backward = rec.graph_modules
    outputs = list(forward.graph.find_nodes(op="output"))[0].args[0]
    return outputs, backward, rec.plans


def _per_row(nodes) -> list:
    """The nodes of one value per row ([4, 16, 1]) among `nodes`."""
    return [n for n in nodes if isinstance(n, torch.fx.Node) and list(n.meta["val"].shape) == [4, 16, 1]]


def test_the_forward_saves_no_statistics_and_the_backward_recomputes_them():
    saved_outputs, _, saved_plans = _graphs(recompute=False)
    outputs, _, plans = _graphs(recompute=True)
    # Statistics were saved (which of mean, var, rstd is min-cut's choice); now none is, and nothing
    # replaces them.
    assert len(_per_row(saved_outputs)) >= 2, saved_outputs
    assert _per_row(outputs) == [], outputs
    assert len(outputs) == len(saved_outputs) - len(_per_row(saved_outputs))
    # The backward's regions compute them; explain() says so in the backward plan's rewrites.
    (backward_plan,) = [p for p in plans if p.kind == "backward"]
    ops = [op for r in backward_plan.regions for op in r.ops]
    assert "aten.var_mean.correction" in ops and "aten.mean.dim" in ops, ops
    assert not any("var_mean" in op for p in saved_plans if p.kind == "backward" for r in p.regions for op in r.ops)
    assert any(note.startswith("recompute_norm_statistics: the row statistics of 2 norm(s)")
               for note in backward_plan.rewrites), backward_plan.rewrites


def _joint(fn, *shapes):
    """A joint-like graph: placeholders named as aot_autograd names them (primals, then tangents)."""
    return make_fx(fn, tracing_mode="fake")(*(torch.randn(s) for s in shapes))


def test_only_a_norms_row_statistics_are_tagged():
    def joint(primals_1, primals_2, tangents_1):
        var, mean = torch.var_mean(primals_1, [1], correction=0, keepdim=True)
        rstd = torch.rsqrt(var + 1e-5)
        y = (primals_1 - mean) * rstd
        rms = torch.rsqrt((primals_2 * primals_2).mean(-1, keepdim=True) + 1e-6)
        plain = primals_1.mean(-1, keepdim=True)  # not a mean of squares: not a norm's statistic
        z = primals_2 * rms * plain
        # "backward": reads the statistics and the plain mean
        return y, z, tangents_1 * rstd * mean * rms * plain

    gm = recompute_norm_statistics(_joint(joint, (8, 32), (8, 32), (8, 1)))
    tagged = {n.target for n in gm.graph.nodes if n.meta.get("recompute") == CheckpointPolicy.MUST_RECOMPUTE}
    assert {aten.var_mean.correction, aten.rsqrt.default, aten.mean.dim, aten.mul.Tensor} <= tagged
    means = [n for n in gm.graph.nodes if n.target is aten.mean.dim]
    assert [n.meta.get(NORM_STATISTIC_KEY, False) for n in means] == [True, False]
    # Nothing full-size except the square that only the statistic reads.
    full = [n for n in gm.graph.nodes if n.meta.get(NORM_STATISTIC_KEY) and isinstance(n.meta["val"], torch.Tensor)
            and list(n.meta["val"].shape) == [8, 32]]
    assert [n.target for n in full] == [aten.mul.Tensor] and full[0].args == (full[0].args[0],) * 2


def test_an_inference_graph_is_left_alone():
    def forward_only(primals_1):
        var, mean = torch.var_mean(primals_1, [1], correction=0, keepdim=True)
        return (primals_1 - mean) * torch.rsqrt(var + 1e-5)

    gm = recompute_norm_statistics(_joint(forward_only, (8, 32)))
    assert not any("recompute" in n.meta for n in gm.graph.nodes)


def test_statistics_over_leading_dims_are_not_a_norms():
    """A batch norm's statistics (over every dim but the channels) are not a row's: left saved."""
    def joint(primals_1, tangents_1):
        var, mean = torch.var_mean(primals_1, [0], correction=0, keepdim=True)
        rstd = torch.rsqrt(var + 1e-5)
        return (primals_1 - mean) * rstd, tangents_1 * rstd

    gm = recompute_norm_statistics(_joint(joint, (8, 32), (1, 32)))
    assert not any("recompute" in n.meta for n in gm.graph.nodes)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_gradients_match_eager(device, dtype):
    torch.manual_seed(0)
    block = NormBlock(dtype, device)
    reference = copy.deepcopy(block).float()
    x, r = (torch.randn(4, 128, D, device=device, dtype=dtype) for _ in range(2))
    plans = check_training(block, [x, r], device_options(device, strict=True, recompute_norm_statistics=True),
                           params=list(block.parameters()), reference=reference)
    (backward_plan,) = [p for p in plans if p.kind == "backward"]
    assert any("aten.var_mean.correction" in r.ops for r in backward_plan.regions)


def _cuda_kernels(fn) -> list[str]:
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
            and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
@pytest.mark.parametrize("cuda_graphs", [False, True], ids=["eager_launch", "graphs"])
def test_recomputing_adds_no_kernel(cuda_graphs):
    """The recomputed reductions join the norm backwards' kernels: a training step launches as many
    kernels as with the statistics saved (BERT-style rows, bf16)."""
    counts = {}
    for recompute in (False, True):
        torch.manual_seed(0)
        block = NormBlock(torch.bfloat16, "cuda")
        x, r = (torch.randn(2, 256, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
        compiled = compile_fn(block, {"recompute_norm_statistics": recompute, "strict": True,
                                      "cuda_graphs": cuda_graphs})

        def step():
            if cuda_graphs:
                torch.compiler.cudagraph_mark_step_begin()
            x.grad = r.grad = None
            compiled(x, r).sum().backward()

        for _ in range(3):
            step()
        counts[recompute] = len(_cuda_kernels(step))
    assert counts[True] == counts[False], counts
