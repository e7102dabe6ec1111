"""CUDA-graph mode on the CPU: torch.compile's `mode=` values, the option, and the reasons a graph is
not captured (checked on fake CUDA graphs, since this machine cannot capture anything)."""

from __future__ import annotations

import logging

import pytest
import torch
import torch._dynamo
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._subclasses.fake_tensor import FakeTensorMode

import dynamo_nvf
from dynamo_nvf.runtime.boxed_forward import boxed
from dynamo_nvf.runtime.cudagraphs import graph_skip_reason
from dynamo_nvf.settings import COMPILE_MODES, Settings
from helpers import assert_same, compile_fn


def _block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w) * 2 + 1


# -- mode= -------------------------------------------------------------------------------------------


def test_modes_map_onto_settings(caplog):
    base = Settings()
    assert base.with_mode(None) == base and base.with_mode("default") == base
    assert base.with_mode("reduce-overhead").cuda_graphs
    with caplog.at_level(logging.WARNING, logger="dynamo_nvf"):
        assert base.with_mode("max-autotune").cuda_graphs
        assert not base.with_mode("max-autotune-no-cudagraphs").cuda_graphs
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 2 and all("no autotuning" in n for n in notes)
    # Every mode torch.compile documents is handled.
    doc = torch.compile.__doc__ or ""
    for mode in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        assert mode in COMPILE_MODES and mode in doc


def test_unknown_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown mode 'bogus'"):
        Settings().with_mode("bogus")
    compiled = torch.compile(_block, backend="nvf_bookend", mode="bogus")
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"unknown mode 'bogus'.*reduce-overhead"):
        compiled(torch.randn(4, 8), torch.randn(8, 8))


def test_cuda_graph_max_shapes_is_validated():
    with pytest.raises(ValueError, match="cuda_graph_max_shapes"):
        Settings.from_options({"cuda_graph_max_shapes": 0})


# -- without CUDA: runs uncaptured, says why, same results ----------------------------------------------


def test_reduce_overhead_without_cuda_runs_uncaptured_and_says_why(caplog):
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    torch._dynamo.reset()
    compiled = torch.compile(_block, backend="nvf_bookend", mode="reduce-overhead")
    with caplog.at_level(logging.INFO, logger="dynamo_nvf"), dynamo_nvf.recording() as rec:
        out = compiled(x, w)
        out.sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    expected = _block(x2, w2)
    expected.sum().backward()
    assert_same(out, expected)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)
    assert [(p.kind, p.cuda_graph) for p in rec.plans] == [
        ("forward", "not captured: CUDA is not available"),
        ("backward", "not captured: its forward graph was not captured (CUDA is not available)"),
    ]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "without CUDA graphs" in r.getMessage()]
    assert len(warnings) == 1 and "forward graph" in warnings[0].getMessage()


def test_cuda_graphs_option_shows_in_explain():
    report = dynamo_nvf.explain(_block, torch.randn(4, 8), torch.randn(8, 8),
                                options={"cuda_graphs": True})
    assert [g.cuda_graph for g in report.graphs] == ["not captured: CUDA is not available"]
    assert "CUDA graph: not captured: CUDA is not available" in str(report)
    assert report.to_dict()["graphs"][0]["cuda_graph"] == "not captured: CUDA is not available"
    plain = dynamo_nvf.explain(_block, torch.randn(4, 8), torch.randn(8, 8))
    assert [g.cuda_graph for g in plain.graphs] == [""] and "CUDA graph:" not in str(plain)


def test_matmul_only_program_keeps_the_compiled_graph_under_cuda_graphs():
    """A program without regions would normally run as Dynamo's graph; with CUDA graphs asked for, it
    must still go through the (capturing) compiled graph."""
    def matmul_only(a, b):
        return a @ b

    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with dynamo_nvf.recording() as rec:
        out = compile_fn(matmul_only, {"cuda_graphs": True})(a, b)
    assert_same(out, a @ b)
    assert rec.plans and rec.plans[0].cuda_graph.startswith("not captured")


# -- graph-level reasons, on fake CUDA graphs -----------------------------------------------------------


def _aot_graphs(fn, *shapes, device="cuda", train=False):
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=capture, bw_compiler=capture, keep_inference_input_mutations=True)
    torch._dynamo.reset()
    with FakeTensorMode():
        inputs = [torch.randn(s, device=device, requires_grad=train) for s in shapes]
        out = torch.compile(fn, backend=backend)(*inputs)
        if train:
            out.sum().backward()
    return graphs


# Fake CUDA tensors cannot run backward or in-place ops on a CPU-only torch build, so those graphs
# are traced on the CPU and checked with the CPU standing for the GPU (`accelerator="cpu"`).


def test_capturable_graphs_have_no_skip_reason():
    (gm,) = _aot_graphs(_block, (4, 8), (8, 8))  # fake CUDA, inference
    assert graph_skip_reason(gm, static_inputs=[]) is None
    forward, backward = _aot_graphs(_block, (4, 8), (8, 8), device="cpu", train=True)
    assert graph_skip_reason(forward, [], accelerator="cpu") is None
    assert graph_skip_reason(backward, [], accelerator="cpu") is None


def test_cpu_values_are_not_captured():
    (gm,) = _aot_graphs(_block, (4, 8), (8, 8), device="cpu")
    assert graph_skip_reason(gm, []).startswith("a value lives off the GPU")


def test_mutated_inputs_are_captured_only_when_static():
    def add_in_place(x, y):
        x.add_(y)
        return x * 2

    (gm,) = _aot_graphs(add_in_place, (4, 8), (4, 8), device="cpu")
    reason = graph_skip_reason(gm, [], accelerator="cpu")
    assert reason is not None and reason.startswith("mutates input(s) that are not parameters or buffers")
    assert graph_skip_reason(gm, [0], accelerator="cpu") is None  # a static input (a buffer) may be written


def test_data_dependent_ops_are_not_captured():
    from torch.fx.experimental.proxy_tensor import make_fx

    def uses_item(x):
        return x * x.sum().item()  # a host read of device data

    gm = make_fx(uses_item, tracing_mode="symbolic")(torch.randn(4, 8))
    reason = graph_skip_reason(gm, [], accelerator="cpu")
    assert reason is not None and reason.startswith("an op a CUDA graph cannot replay")


def test_dynamic_shapes_past_the_limit_run_uncaptured_and_the_backward_follows(caplog):
    from dynamo_nvf.runtime.cudagraphs import CudaGraphs, _FollowForward, _ShapeLimit

    state = CudaGraphs(num_dynamo_inputs=1, max_shapes=2)
    calls = []

    def record(name):
        def run(args):
            calls.append((name, tuple(args)))
            args.clear()
            return name
        return run

    forward = _ShapeLimit(record("fw captured"), record("fw eager"), [0], 2, "forward graph 0", state)
    backward = _FollowForward(record("bw captured"), record("bw eager"), state)
    with caplog.at_level(logging.WARNING, logger="dynamo_nvf"):
        for size in (8, 16, 32, 8, 64, 16):
            forward([size, "x"])
            backward(["saved", "grad"])
    assert [name for name, _ in calls] == [
        "fw captured", "bw captured", "fw captured", "bw captured",  # 8, 16: recorded
        "fw eager", "bw eager",  # 32: past cuda_graph_max_shapes=2
        "fw captured", "bw captured",  # 8 again: its graph replays
        "fw eager", "bw eager", "fw captured", "bw captured",  # 64 uncaptured; 16 replays
    ]
    assert sum("cuda_graph_max_shapes" in r.getMessage() for r in caplog.records) == 1


def test_no_garbage_collection_while_a_captured_graph_runs(monkeypatch):
    """A captured graph's call (where cudagraph trees may record) runs with Python's cyclic collector
    paused, so that no dead region's nvFuser executor is freed during a capture; afterwards the
    collector is as it was (also when nested, or when the user had turned it off)."""
    import gc

    from dynamo_nvf.plan import GraphPlan
    from dynamo_nvf.runtime import cudagraphs

    seen = []

    def fake_cudagraphify(model, inputs, static_input_idxs, **kwargs):
        def call(args):
            seen.append(gc.isenabled())
            with cudagraphs.COLLECTION_PAUSE:  # nested, as a backward inside a forward's pause would be
                seen.append(gc.isenabled())
            seen.append(gc.isenabled())
            return model(args)
        return call

    _capturable(monkeypatch, fake_cudagraphify)
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x: x * 2, tracing_mode="fake")(torch.ones(2))
    state = cudagraphs.CudaGraphs(num_dynamo_inputs=1, max_shapes=2)
    plan = GraphPlan(kind="inference", graph_id=0)
    wrapped = state.wrap(gm, boxed(gm.forward), [torch.ones(2)], "inference", plan)
    assert plan.cuda_graph == cudagraphs.CAPTURED
    was_enabled = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            seen.clear()
            out = wrapped([torch.ones(2)])
            assert torch.equal(out, torch.full((2,), 2.0))
            assert seen == [False, False, False]
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was_enabled else gc.disable)()


@pytest.mark.parametrize("failing_call", [0, 1, 2])
def test_a_graph_cudagraph_trees_refuse_while_warming_up_runs_uncaptured(monkeypatch, caplog, failing_call):
    """cudagraph trees' own checks can refuse a graph during its first calls (warm-up, recording):
    that call is run again uncaptured on the same inputs, the graph stays uncaptured, one warning."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.plan import GraphPlan
    from dynamo_nvf.runtime import cudagraphs

    calls = {"plain": 0}
    _fake_tree(monkeypatch, calls, lambda kind, n: n == failing_call + 1)

    def plain(args):
        calls["plain"] += 1
        return gm(*args)

    plain._boxed_call = True
    gm = make_fx(lambda x: x * 2, tracing_mode="fake")(torch.ones(2))
    state = cudagraphs.CudaGraphs(num_dynamo_inputs=1, max_shapes=2)
    plan = GraphPlan(kind="inference", graph_id=0)
    wrapped = state.wrap(gm, plain, [torch.ones(2)], "inference", plan)
    with caplog.at_level(logging.WARNING, logger="dynamo_nvf"):
        for i in range(5):
            x = torch.randn(2)
            out = wrapped([x])
            assert torch.equal(out, x * 2)
    assert calls["forward"] == failing_call + 1  # the tree: never again after the refusal
    # The tree ran the graph on its calls; the refused call ran again uncaptured, then every later one.
    assert calls["plain"] == (failing_call + 1) + (5 - failing_call)
    assert sum("runs without CUDA graphs from now on" in r.getMessage() for r in caplog.records) == 1
    assert state.forward_skip is not None  # a backward compiled later follows the forward uncaptured
    assert plan.cuda_graph.startswith("not captured: cudagraph trees refused it"), plan.cuda_graph


def _capturable(monkeypatch, fake_cudagraphify):
    """Graphs pass the capture checks on this GPU-less machine, and cudagraphify_impl is the fake."""
    from torch._inductor import cudagraph_trees

    from dynamo_nvf.runtime import cudagraphs

    monkeypatch.setattr(cudagraph_trees, "cudagraphify_impl", fake_cudagraphify)
    monkeypatch.setattr(cudagraphs, "skip_reason", lambda gm, static: None)
    monkeypatch.setattr(cudagraphs, "_device_index", lambda gm: 0)


def _fake_tree(monkeypatch, calls, refuse):
    """cudagraphify_impl replaced by a tree that runs the graph and then refuses when `refuse(kind, n)`."""
    from torch._inductor import cudagraph_trees

    def fake_cudagraphify(model, inputs, static_input_idxs, **kwargs):
        kind = "backward" if kwargs.get("is_backward") else "forward"

        def call(args):
            calls[kind] = calls.get(kind, 0) + 1
            out = model(list(args))
            args.clear()
            if refuse(kind, calls[kind]):
                raise RuntimeError("These storage data ptrs are not allocated in pool (0, 1) but should be")
            return out
        return call

    _capturable(monkeypatch, fake_cudagraphify)
    monkeypatch.setattr(cudagraph_trees, "get_manager", lambda *a, **k: None)


def test_a_backward_follows_its_refused_forward_uncaptured(monkeypatch):
    """A forward refused on its second call runs uncaptured from then on, and so does its backward
    (a captured backward fed by an uncaptured forward's activations would re-record every step)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.plan import GraphPlan
    from dynamo_nvf.runtime import cudagraphs

    calls: dict = {}
    _fake_tree(monkeypatch, calls, lambda kind, n: kind == "forward" and n == 2)
    fw = make_fx(lambda x: x * 2, tracing_mode="fake")(torch.ones(2))
    bw = make_fx(lambda g: g * 3, tracing_mode="fake")(torch.ones(2))
    state = cudagraphs.CudaGraphs(num_dynamo_inputs=1, max_shapes=2)
    forward = state.wrap(fw, boxed(fw.forward), [torch.ones(2)], "forward", GraphPlan(kind="forward", graph_id=0))
    backward = state.wrap(bw, boxed(bw.forward), [torch.ones(2)], "backward", GraphPlan(kind="backward", graph_id=1))
    for step in range(4):
        x = torch.randn(2)
        assert torch.equal(forward([x]), x * 2)
        assert torch.equal(backward([x]), x * 3)
    assert calls == {"forward": 2, "backward": 1}  # the backward left the tree with its forward


def test_a_refused_graph_that_updates_a_buffer_updates_it_once(monkeypatch):
    """The tree's warm-up already ran the graph when it refused it: the retry must not apply an input
    mutation (a BatchNorm's running stats) a second time."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.plan import GraphPlan
    from dynamo_nvf.runtime import cudagraphs

    def step(x, buf):
        buf.add_(1.0)
        return x * 2

    calls: dict = {}
    _fake_tree(monkeypatch, calls, lambda kind, n: n == 1)
    gm = make_fx(step)(torch.ones(2), torch.zeros(1))
    assert cudagraphs.mutated_inputs(gm) == {1}
    state = cudagraphs.CudaGraphs(num_dynamo_inputs=2, max_shapes=2)
    wrapped = state.wrap(gm, boxed(gm.forward), [torch.ones(2), torch.zeros(1)], "inference",
                         GraphPlan(kind="inference", graph_id=0))
    buf = torch.zeros(1)
    wrapped([torch.ones(2), buf])
    assert buf.item() == 1.0
    wrapped([torch.ones(2), buf])
    assert buf.item() == 2.0 and calls == {"forward": 1}
