"""reinplace_fresh_accumulations: `index_add` into a fresh buffer that nothing else reads adds in place;
any other `self` (an input, a buffer read again, one computed from data) keeps the out-of-place op."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from dynamo_nvf.backend import plan_graph
from dynamo_nvf.settings import Settings

aten = torch.ops.aten
PLAN = Settings.from_options({"plan_cpu_as_cuda": True})


def _planned(f, *args):
    gm = make_fx(f, tracing_mode="fake")(*args)
    return plan_graph(gm, PLAN, "backward")


def _targets(gm) -> set:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def _check(f, *args, in_place: bool):
    gm = _planned(f, *args)
    assert (aten.index_add_.default in _targets(gm)) is in_place, gm.code
    assert (aten.index_add.default in _targets(gm)) is not in_place, gm.code
    for _ in range(2):  # fresh buffers on every call: the second call sees no first call's sums
        torch.testing.assert_close(gm(*args), f(*args), rtol=0, atol=0)


IDS = torch.tensor([0, 3, 3, 1, 0, 5])
SRC = torch.randn(6, 4)


def test_fresh_zeros_in_eager_add_in_place():
    _check(lambda ids, src: aten.index_add(torch.zeros(7, 4), 0, ids, src), IDS, SRC, in_place=True)


def test_fresh_zeros_made_by_a_region_add_in_place():
    def f(ids, src):
        scaled = src * 2.0 + 1.0  # a region that also makes the zeros (joined horizontally)
        return aten.index_add(torch.zeros(7, 4), 0, ids, scaled)

    _check(f, IDS, SRC, in_place=True)


def test_zeros_read_again_stay_out_of_place():
    def f(ids, src):
        zeros = torch.zeros(7, 4)
        return aten.index_add(zeros, 0, ids, src), zeros

    _check(f, IDS, SRC, in_place=False)


def test_a_graph_input_stays_out_of_place():
    _check(lambda base, ids, src: aten.index_add(base, 0, ids, src), torch.randn(7, 4), IDS, SRC, in_place=False)


def test_a_computed_buffer_stays_out_of_place():
    def f(base, ids, src):
        return aten.index_add(base * 3.0, 0, ids, src)

    _check(f, torch.randn(7, 4), IDS, SRC, in_place=False)
