"""A compiled graph takes its inputs as one list it clears, and frees each input after its last use:
a backward's saved activation is gone before the ops after its last reader run (as inductor's
generated code does), not held until the graph returns."""

from __future__ import annotations

import weakref

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from dynamo_nvf.backend import _GraphCompiler
from dynamo_nvf.runtime.boxed_forward import boxed_module, frees_inputs_early
from dynamo_nvf.settings import Settings
from helpers import compile_fn

#: The input the probe asks about, and what it saw each time it ran.
WATCHED: list = [None]
SEEN: list[bool] = []


@torch.library.custom_op("dynamo_nvf_test::freed_probe", mutates_args=())
def freed_probe(t: torch.Tensor) -> torch.Tensor:
    """Records whether the watched input has been freed by the time it runs."""
    SEEN.append(WATCHED[0]() is None)
    return t.clone()


@freed_probe.register_fake
def _(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(t)


def program(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # x's last reader is the first region; the probe (left to ATen) runs after it, y's reader after that
    return torch.ops.dynamo_nvf_test.freed_probe(torch.sin(x) * 2.0 + 1.0) * y + y


def _graph() -> torch.fx.GraphModule:
    return make_fx(program, tracing_mode="fake")(torch.randn(64, 32), torch.randn(64, 32))


def _call_watching_x(compiled, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    SEEN.clear()
    x = x.clone()  # only the argument list holds this one
    WATCHED[0] = weakref.ref(x)
    args = [x, y]
    del x
    out = compiled(args)
    assert args == []  # the list is cleared on entry
    return out


def test_a_boxed_module_frees_an_input_after_its_last_use():
    gm = _graph()
    assert frees_inputs_early(gm.graph)
    run = boxed_module(gm)
    assert run._boxed_call
    x, y = torch.randn(64, 32), torch.randn(64, 32)
    out = _call_watching_x(run, x, y)
    assert SEEN == [True]
    torch.testing.assert_close(out if isinstance(out, torch.Tensor) else out[0], program(x, y))


@pytest.mark.parametrize("kind", ["inference", "forward", "backward"])
@pytest.mark.parametrize("lean_views", [True, False])
def test_compiled_graphs_free_their_inputs_early(kind, lean_views):
    """The function the backend returns to aot_autograd, for every kind of graph."""
    gm = _graph()
    examples = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    compiler = _GraphCompiler(Settings.from_options({"plan_cpu_as_cuda": True, "strict": True,
                                                     "lean_views": lean_views}))
    compiled = compiler(gm, examples, kind=kind)
    assert compiler.plans[-1].regions, "the program has regions"
    x, y = torch.randn(64, 32), torch.randn(64, 32)
    out = _call_watching_x(compiled, x, y)
    assert SEEN == [True]
    got = out if isinstance(out, torch.Tensor) else out[0]
    torch.testing.assert_close(got, program(x, y))


#: weakrefs to the saved tensors of the compiled step, and how many were gone each time the backward
#: probe ran.
SAVED: list = []
DEAD_AT_PROBE: list[int] = []


@torch.library.custom_op("dynamo_nvf_test::marked", mutates_args=())
def marked(t: torch.Tensor) -> torch.Tensor:
    return t.clone()


@marked.register_fake
def _(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(t)


@torch.library.custom_op("dynamo_nvf_test::marked_backward", mutates_args=())
def marked_backward(grad: torch.Tensor) -> torch.Tensor:
    """Runs in the middle of the compiled backward (left to ATen): counts the saved tensors gone."""
    DEAD_AT_PROBE.append(sum(ref() is None for ref in SAVED))
    return grad.clone()


@marked_backward.register_fake
def _(grad: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(grad)


marked.register_autograd(lambda ctx, grad: marked_backward(grad))


def training_program(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = torch.ops.dynamo_nvf_test.marked(torch.sin(x) * w)
    return (torch.cos(y) * w).sum()  # cos' backward reads a saved tensor before marked_backward runs


def test_a_training_backward_frees_a_saved_activation_after_its_last_reader():
    """Through torch.compile: the backward's saved activation that the cos backward reads is gone
    by the time the ops after that run, and the gradients are eager's."""
    compiled = compile_fn(training_program, {"plan_cpu_as_cuda": True, "strict": True})
    x, w = torch.randn(64, 32, requires_grad=True), torch.randn(64, 32, requires_grad=True)
    out = compiled(x, w)
    node = out.grad_fn
    while node is not None and not hasattr(node, "saved_tensors"):
        node = node.next_functions[0][0]
    saved = [t for t in node.saved_tensors if isinstance(t, torch.Tensor) and t is not x and t is not w]
    assert saved, "the forward saves an activation"
    SAVED[:] = [weakref.ref(t) for t in saved]
    del saved, node
    DEAD_AT_PROBE.clear()
    out.backward()
    assert DEAD_AT_PROBE == [len(SAVED)]
    xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    training_program(xe, we).backward()
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(w.grad, we.grad)
