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
    assert frees_inputs_early(gm)
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
