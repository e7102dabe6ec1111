"""The lean views pass: views between regions run as one `_reinterpret_tensor` of a trusted root, with
eager's values, strides and aliasing; untrusted roots (tangents, SDPA, other ATen ops) keep their views."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf.backend import recording
from dynamo_nvf.passes.lean_views import reinterpret_tensor
from helpers import DEVICES, assert_same, compile_fn, device_options


def _mlp_attention(x, w1, w2):
    """Matmuls with view chains around them, a transposed and a sliced output, and SDPA."""
    b, s, d = x.shape
    h = F.gelu(x @ w1.t()) * 2.0
    q = (h @ w2.t()).view(b, s, 2, d // 2).transpose(1, 2)
    att = F.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(b, s, d)
    return att.sigmoid() + 1.0, (h * 3.0).transpose(0, 1), h[:, 1:, ::2]


def _inputs(device, requires_grad=False):
    torch.manual_seed(0)
    return [torch.randn(2, 8, 16, device=device, requires_grad=requires_grad),
            torch.randn(32, 16, device=device, requires_grad=requires_grad),
            torch.randn(16, 32, device=device, requires_grad=requires_grad)]


def _code(options):
    compiled = compile_fn(_mlp_attention, options)
    with recording() as rec, torch.no_grad():
        compiled(*_inputs("cpu"))
    (plan,) = rec.plans
    return plan.code


def test_views_of_trusted_roots_become_one_reinterpret_each():
    code = _code({"plan_cpu_as_cuda": True})
    assert "reinterpret_tensor" in code
    # The weights' transposes and the matmul outputs' views are rewritten; nothing but SDPA's
    # output (an ATen op whose layout only its meta function predicts) keeps aten views.
    for op in ("aten.t.default", "aten._unsafe_view.default"):
        assert op not in code, code
    lines = code.splitlines()
    sdpa = next(i for i, line in enumerate(lines) if "scaled_dot_product" in line)
    sdpa_out = lines[sdpa + 1].split("=")[0].strip()  # getitem 0 of SDPA's outputs
    assert f"aten.transpose.int({sdpa_out}," in code, code
    assert sum("aten." in line and "scaled_dot_product" not in line and "aten.mm" not in line
               for line in lines) == 2, code  # that transpose and the view after it


def test_lean_views_false_keeps_the_aten_calls():
    code = _code({"plan_cpu_as_cuda": True, "lean_views": False})
    assert "reinterpret_tensor" not in code and "aten.t.default" in code


@pytest.mark.parametrize("device", DEVICES)
def test_values_strides_and_aliasing_match_eager(device):
    compiled = compile_fn(_mlp_attention, device_options(device, strict=True))
    inputs = _inputs(device)
    with torch.no_grad():
        actual, expected = compiled(*inputs), _mlp_attention(*inputs)
    assert_same(actual, expected)
    for a, e in zip(actual, expected):
        assert a.stride() == e.stride() and a.shape == e.shape


@pytest.mark.parametrize("device", DEVICES)
def test_training_with_a_non_contiguous_gradient(device):
    """Tangents keep their views: autograd may hand in any layout."""
    compiled = compile_fn(_mlp_attention, device_options(device, strict=True))
    eager_in, comp_in = _inputs(device, True), _inputs(device, True)
    outs_c, outs_e = compiled(*comp_in), _mlp_attention(*eager_in)
    grads = [torch.randn(*reversed(o.shape), device=device).transpose(0, -1).contiguous().transpose(0, -1)
             if o.dim() == 2 else torch.randn_like(o).transpose(0, 1).contiguous().transpose(0, 1)
             for o in outs_e]
    assert any(not g.is_contiguous() for g in grads)
    got = torch.autograd.grad(outs_c, comp_in, grads)
    want = torch.autograd.grad(outs_e, eager_in, grads)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_reinterpret_tensor_is_a_view_with_an_offset_increment():
    base = torch.arange(24.0)[4:]
    view = reinterpret_tensor(base, (2, 3), (1, 2), 2)
    assert view.storage_offset() == base.storage_offset() + 2
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    torch.testing.assert_close(view, base.as_strided((2, 3), (1, 2), base.storage_offset() + 2))


def test_reinterpret_tensor_goes_through_dispatch_for_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        base = torch.empty(4, 6)
        view = reinterpret_tensor(base, (6, 4), (1, 6), 0)
    assert isinstance(view, FakeTensor) and view.shape == (6, 4) and view.stride() == (1, 6)


def _viewing_graph():
    """An aten graph (with example values) of views of its input, rewritten by the pass."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.passes.lean_views import reinterpret_views

    def f(x):
        return x.t().reshape(4, 6)[1:, ::2] * 1.0, x.view(2, 12).transpose(0, 1)

    gm = make_fx(f, tracing_mode="fake")(torch.randn(6, 4))
    gm = reinterpret_views(gm, is_region=lambda target: False)
    assert sum(n.target is reinterpret_tensor for n in gm.graph.nodes) >= 2, gm.code
    return f, gm


def test_lean_forward_takes_the_raw_reinterpret_once_checked(monkeypatch):
    """Plain tensors and no dispatch mode: the graph calls torch's raw `_reinterpret_tensor` directly
    (one check per call, not per view), with eager's values, strides and storage."""
    import dynamo_nvf.runtime.lean_forward as lean_forward_module

    calls = []

    def counting(*args):
        calls.append(args[1:])
        return raw(*args)

    raw = lean_forward_module.raw_reinterpret
    monkeypatch.setattr(lean_forward_module, "raw_reinterpret", counting)
    f, gm = _viewing_graph()
    forward = lean_forward_module.compiled_forward(gm, lean_views=True)
    assert isinstance(forward, lean_forward_module.LeanForward)
    x = torch.randn(6, 4)
    got, want = forward([x]), f(x)
    assert len(calls) == sum(n.target is reinterpret_tensor for n in gm.graph.nodes)
    assert_same(got, want)
    assert got[1].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_lean_forward_goes_through_dispatch_under_a_mode_or_a_subclass():
    """A dispatch mode (a fake tensor tracing, a user's mode) or a subclass argument takes the checked
    graph, whose views the mode sees as as_strided calls."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from dynamo_nvf.runtime.lean_forward import compiled_forward

    class Recording(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func)
            return func(*args, **(kwargs or {}))

    f, gm = _viewing_graph()
    forward = compiled_forward(gm, lean_views=True)
    x = torch.randn(6, 4)
    with Recording() as mode:
        got = forward([x])
    assert torch.ops.aten.as_strided.default in mode.ops, mode.ops
    assert_same(got, f(x))

    class Marked(torch.Tensor):
        pass

    got = forward([x.as_subclass(Marked)])
    assert type(got[1]) is Marked  # as_strided through dispatch keeps the subclass; the raw call would not
    assert_same([g.as_subclass(torch.Tensor) for g in got], f(x))
