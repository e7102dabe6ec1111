"""GPU tests of CUDA-graph mode (`mode="reduce-overhead"`) and of the lean per-call path.

Replays are told apart from runs by the runtime's counters: a replayed CUDA graph runs no Python, so
STATS.nvfuser_calls stops growing once a graph is recorded, while the results keep matching eager.
Skipped cleanly without CUDA or nvFuser; `make test-gpu` runs them on the device.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch

import programs
from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import recording
from dynamo_nvf.runtime.cudagraphs import CAPTURED
from dynamo_nvf.runtime.stats import STATS
from helpers import assert_same, compile_fn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason=f"needs CUDA and nvFuser: {nvf_env.unavailable_reason()}"),
]

DEV = "cuda"


def _graphs_compile(model, **options):
    torch._dynamo.reset()
    if options:
        return torch.compile(model, backend="nvf_bookend", options={"cuda_graphs": True, **options})
    return torch.compile(model, backend="nvf_bookend", mode="reduce-overhead")


def _step(fn):
    torch.compiler.cudagraph_mark_step_begin()
    return fn()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inference_is_captured_and_replayed(dtype):
    torch.manual_seed(0)
    model = programs.TransformerBlock(64, 4).to(DEV, dtype).eval()
    compiled = _graphs_compile(model)
    STATS.reset()
    with torch.no_grad(), recording() as rec:
        for _ in range(3):  # warm-up, record, first replay
            x = torch.randn(4, 16, 64, device=DEV, dtype=dtype)
            assert_same(_step(lambda: compiled(x)).clone(), model(x))
        calls = STATS.nvfuser_calls
        for _ in range(5):
            x = torch.randn(4, 16, 64, device=DEV, dtype=dtype)  # fresh inputs, copied into the graph
            assert_same(_step(lambda: compiled(x)).clone(), model(x))
    assert calls > 0 and STATS.nvfuser_calls == calls, "replays must not run the regions from Python"
    assert STATS.fallbacks == 0
    assert [p.cuda_graph for p in rec.plans] == [CAPTURED]


def _train_like_eager(compiled, model, ref, shape, steps: int, dtype=torch.float32, after_step=None,
                      out_tol=None) -> None:
    """`steps` training steps of `compiled` (a graph-mode compile of `model`) on fresh inputs, each
    output (`assert_same`, or within `out_tol`) and parameter gradient compared with `ref`'s (an eager
    copy of `model`)."""
    for step in range(steps):
        x = torch.randn(*shape, device=DEV, dtype=dtype)
        for m in (model, ref):
            m.zero_grad(set_to_none=True)
        out = _step(lambda: compiled(x))
        out.float().pow(2).mean().backward()
        expected = ref(x)
        expected.float().pow(2).mean().backward()
        if out_tol is None:
            assert_same(out.detach().clone(), expected.detach())
        else:
            torch.testing.assert_close(out.detach(), expected.detach(), rtol=out_tol, atol=out_tol)
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=tol, atol=tol)
        if after_step is not None:
            after_step(step)


def test_training_forward_and_backward_are_captured():
    torch.manual_seed(0)
    ref = programs.TransformerBlock(64, 4).to(DEV)
    model = copy.deepcopy(ref)
    compiled = _graphs_compile(model)
    STATS.reset()
    seen = {}
    with recording() as rec:
        _train_like_eager(compiled, model, ref, (4, 16, 64), steps=6,
                          after_step=lambda step: seen.setdefault("calls", STATS.nvfuser_calls) if step == 2 else None)
    calls = seen["calls"]
    assert STATS.nvfuser_calls == calls and STATS.fallbacks == 0
    assert sorted(p.kind for p in rec.plans) == ["backward", "forward"]
    assert all(p.cuda_graph == CAPTURED for p in rec.plans)


def _recorded_nodes(device_index: int = 0) -> list:
    """Every recorded CUDA graph of cudagraph trees' manager on this device (tree order)."""
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.get_manager(device_index, create_if_none_exists=False)
    nodes, todo = [], [n for ns in manager.roots.values() for n in ns] if manager is not None else []
    while todo:
        node = todo.pop()
        nodes.append(node)
        todo.extend(n for ns in node.children.values() for n in ns)
    return nodes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_replays_rebuild_no_output_that_shares_a_storage(dtype):
    """recompute_saved_views: q, k and v of one qkv projection (and the attention output's views) are
    recomputed in the backward, so no two outputs of a recorded graph share a storage (cudagraph trees
    rebuild such outputs on every replay); results still match eager on every replay."""
    from torch._inductor.cudagraph_trees import AliasesNewOutput, AliasesPriorGraphOutput

    torch.manual_seed(0)
    ref = programs.QkvAttention().to(DEV, dtype)
    model = copy.deepcopy(ref)
    compiled = _graphs_compile(model)
    _train_like_eager(compiled, model, ref, (4, 16, 32), steps=5, dtype=dtype,
                      out_tol=1e-4 if dtype == torch.float32 else 2e-2)
    nodes = _recorded_nodes()
    assert len(nodes) == 2, nodes  # the forward and the backward
    for node in nodes:
        shared = [i for i, alias in enumerate(node.output_storage_alias)
                  if isinstance(alias, (AliasesNewOutput, AliasesPriorGraphOutput))]
        assert shared == [], f"outputs {shared} share a storage with another output"


def test_dropout_under_graphs_draws_a_fresh_mask_each_replay():
    p = 0.3

    def f(x):
        return torch.nn.functional.dropout(x * 2.0, p=p, training=True) + 1.0

    compiled = _graphs_compile(f)
    x = torch.ones(512, 512, device=DEV, requires_grad=True)
    masks = []
    for _ in range(5):
        x.grad = None
        out = _step(lambda: compiled(x))
        kept = out != 1.0
        torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1.0 + 2.0 / (1 - p)))
        assert abs((1 - kept.float().mean().item()) - p) < 0.02
        out.backward(torch.ones_like(out))
        torch.testing.assert_close(x.grad, kept.float() * (2.0 / (1 - p)))  # forward's mask
        masks.append(kept.clone())
    assert all(not torch.equal(a, b) for a, b in zip(masks[2:], masks[3:])), "replays repeated a mask"


def test_cpu_scalar_input_runs_uncaptured_with_reason(caplog):
    def f(x, s):
        return torch.sigmoid(x) * s + 1.0

    compiled = _graphs_compile(f, strict=False)
    x, s = torch.randn(64, 64, device=DEV), torch.tensor(3.0)
    with caplog.at_level(logging.WARNING, logger="dynamo_nvf"), recording() as rec:
        for _ in range(3):
            assert_same(_step(lambda: compiled(x, s)), f(x, s))
    (plan,) = rec.plans
    assert plan.cuda_graph.startswith("not captured: a value lives off the GPU")
    assert any("without CUDA graphs" in r.getMessage() for r in caplog.records)


def test_dynamic_shapes_past_the_limit_run_uncaptured(caplog):
    def f(x):
        return torch.nn.functional.gelu(x) * 2.0

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="nvf_bookend", dynamic=True,
                             options={"cuda_graphs": True, "cuda_graph_max_shapes": 2})
    with caplog.at_level(logging.WARNING, logger="dynamo_nvf"):
        for rows in (8, 16, 32, 64, 8):
            for _ in range(3):
                x = torch.randn(rows, 32, device=DEV)
                assert_same(_step(lambda: compiled(x)).clone(), f(x))
    assert sum("cuda_graph_max_shapes" in r.getMessage() for r in caplog.records) == 1


def test_steady_state_call_does_not_sync():
    """The lean path (no CUDA graphs) must never make the host wait for the GPU in steady state."""
    torch.manual_seed(0)
    model = programs.TransformerBlock(64, 4).to(DEV)
    compiled = compile_fn(model)
    x = torch.randn(4, 16, 64, device=DEV, requires_grad=True)
    for _ in range(3):
        compiled(x).sum().backward()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        compiled(x).sum().backward()
        with torch.no_grad():
            compiled(x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_static_regions_skip_the_cache_key_on_the_gpu():
    torch.manual_seed(0)
    model = programs.TransformerBlock(64, 4).to(DEV).eval()
    compiled = compile_fn(model)
    x = torch.randn(4, 16, 64, device=DEV)
    with torch.no_grad(), recording() as rec:
        for _ in range(3):
            assert_same(compiled(x), model(x))
    runtimes = [n.target for gm in rec.graph_modules for n in gm.graph.nodes
                if type(n.target).__name__ == "RegionRuntime"]
    assert runtimes and all(r._fast is not None for r in runtimes)


def test_explain_under_cuda_graphs_says_captured():
    import dynamo_nvf

    torch.manual_seed(0)
    model = programs.TransformerBlock(64, 4).to(DEV)
    report = dynamo_nvf.explain(model, torch.randn(4, 16, 64, device=DEV, requires_grad=True),
                                options={"cuda_graphs": True})
    assert [g.cuda_graph for g in report.graphs] == [CAPTURED, CAPTURED]
    assert "CUDA graph: captured" in str(report)


class CachedBias(torch.nn.Module):
    """timm LeViT's attention bias in eval mode: computed on the first call and kept in a dict across
    calls, so a later graph reads an output of an earlier one."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(4, 16))
        self.register_buffer("idx", torch.randint(0, 16, (16, 16)))
        self.cache: dict[str, torch.Tensor] = {}

    def biases(self, device: torch.device) -> torch.Tensor:
        key = str(device)
        if key not in self.cache:
            self.cache[key] = self.bias[:, self.idx]
        return self.cache[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x @ x.transpose(-1, -2) * 0.25 + self.biases(x.device), -1) @ x


def test_a_kept_output_that_a_replay_overwrote_raises_torchs_error_and_leaves_regions_whole():
    """Reading an output that a later replay overwrote fails as under inductor's reduce-overhead, with
    torch's advice in the error; the regions that read it are not split or sent to eager for it. With
    the cache filled outside torch.compile (torch's advice) the model, compiled again (the error
    leaves torch 2.11's CUDA-graph tree with a half-recorded node that asserts on its next call),
    matches eager."""
    torch.manual_seed(0)
    model = CachedBias().to(DEV).eval()
    compiled = _graphs_compile(model)
    STATS.reset()
    with torch.no_grad(), pytest.raises(RuntimeError, match="overwritten"):
        for _ in range(6):
            compiled(torch.randn(2, 4, 16, 16, device=DEV))
    assert STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
    with torch.no_grad():
        model.cache = {str(torch.empty(0, device=DEV).device): model.bias[:, model.idx].clone()}
    compiled = _graphs_compile(model)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 4, 16, 16, device=DEV)
            assert_same(_step(lambda: compiled(x)).clone(), model(x))
    assert STATS.fallbacks == 0 and STATS.split_regions == 0, STATS.snapshot()
