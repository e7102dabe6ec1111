"""Region outputs never alias region inputs where eager's would not (CPU: the FX rule; GPU: storage).

nvFuser returns meta ops of a fusion input (set, views, same-dtype casts) as views of the input's
storage, so a region output that eager computes as a copy (a clone, a same-dtype `_to_copy`) must be
materialized by the fusion; `lowering.copies_an_input` says which.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.lowering import copies_an_input
from helpers import compile_fn


def _output_node(fn, *shapes):
    inputs = [torch.randn(s) for s in shapes]
    gm = make_fx(fn)(*inputs)
    FakeTensorProp(gm).propagate(*inputs)
    (out,) = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return out


@pytest.mark.parametrize("fn, expected", [
    (lambda x: [torch.clone(x)], True),
    (lambda x: [torch.clone(x).view(16)], True),
    (lambda x: [torch.clone(x.t())], True),
    (lambda x: [x.to(torch.float32, copy=True)], True),
    (lambda x: [x.view(16)], False),  # a view in eager too
    (lambda x: [torch.relu(x)], False),  # computed
    (lambda x: [x.to(torch.float64)], False),  # a real conversion
    (lambda x: [torch.clone(x) * 2], False),
])
def test_copies_an_input(fn, expected):
    assert copies_an_input(_output_node(fn, (4, 4))) is expected


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_cloned_region_output_has_its_own_storage():
    def f(x, y):
        a = x.clone()  # a region output that is only a copy of a region input
        return a, torch.sigmoid(y) + a

    x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    a, b = compile_fn(f, {"strict": True, "min_region_size": 1})(x, y)
    assert a.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    x.add_(1.0)  # a write to the input must not show in the copy
    torch.testing.assert_close(a, x - 1.0)
    torch.testing.assert_close(b, torch.sigmoid(y) + a)


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
@pytest.mark.parametrize("name, fn, make", [
    ("cat of one", lambda x: torch.cat([x]) * 1, lambda: torch.randn(64, 64, device="cuda")),
    ("sum over size-1 dims", lambda x: x.sum(1), lambda: torch.randn(64, 1, device="cuda")),
    ("floor of ints", lambda x: torch.floor(x), lambda: torch.randint(0, 9, (64, 64), device="cuda")),
])
def test_forwarded_inputs_never_leave_a_region_as_views(name, fn, make):
    """Meta ops nvFuser forwards (beyond clone) are caught on the first run and rebuilt fresh."""
    x = make()
    out = compile_fn(fn, {"min_region_size": 1})(x)
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr(), name
    torch.testing.assert_close(out, fn(x))
