"""compute_pads_wide: a column pad of an elementwise function of a wider value's slice becomes that
function computed at the padded width and masked; the graph's values stay eager's; anything else under
the pad (a scan along the padded dim, a value that is not such a slice, a second reader) keeps it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from dynamo_nvf.passes.wide_pads import compute_pads_wide

N, P = 50, 6  # a vocabulary of 50, padded to 56


def _graph(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args)


def _pads(gm) -> int:
    return sum(n.target is torch.ops.aten.constant_pad_nd.default for n in gm.graph.nodes)


def _check(fn, widened: bool) -> None:
    torch.manual_seed(0)
    args = [torch.randn(8, N + P, dtype=torch.bfloat16), torch.randn(8, 1), torch.randint(0, N, (8, 1))]
    gm = _graph(fn, *args)
    expected = fn(*args)
    before = _pads(gm)
    gm = compute_pads_wide(gm)
    assert (_pads(gm) == before - 1) == widened, gm.code
    assert ("columns wide" in " ".join(gm.meta.get("nvf_rewrite_notes", []))) == widened
    got = gm(*args)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert torch.count_nonzero(got[..., N:]) == 0


def test_an_elementwise_gradient_of_the_slice_is_computed_wide():
    """exp(x - stat) minus a one-hot (iota == label), cast: every op elementwise, stats broadcast."""

    def fn(wide, stat, label):
        x = wide[:, :N].float()
        onehot = torch.arange(N).unsqueeze(0) == label
        g = (torch.exp(x - stat) - onehot.float()).to(torch.bfloat16)
        return F.pad(g, (0, P))

    _check(fn, widened=True)


def test_views_of_the_other_dims_are_crossed():
    def fn(wide, stat, label):
        x = wide[:, :N].view(2, 4, N).float().view(8, N)
        return F.pad(torch.tanh(x * 3.0).to(torch.bfloat16), (0, P))

    _check(fn, widened=True)


def test_a_scan_along_the_padded_dim_keeps_the_pad():
    """A cumulative sum along the columns is no elementwise op: left as it is. (A reduction to one
    column is a broadcast operand, computed at the old width as before.)"""

    def fn(wide, stat, label):
        x = wide[:, :N].float()
        return F.pad((x - x.logsumexp(-1, keepdim=True)).cumsum(-1).to(torch.bfloat16), (0, P))

    _check(fn, widened=False)


def test_a_reduction_to_one_column_is_read_as_it_is():
    """A log-softmax: its logsumexp over the columns broadcasts along them, computed at the old width."""

    def fn(wide, stat, label):
        x = wide[:, :N].float()
        return F.pad(torch.exp(x - x.logsumexp(-1, keepdim=True)).to(torch.bfloat16), (0, P))

    _check(fn, widened=True)


def test_a_value_that_is_not_a_slice_of_the_padded_width_keeps_the_pad():
    def fn(wide, stat, label):
        return F.pad(torch.exp(wide[:, 1:N + 1].float()).to(torch.bfloat16), (0, P))

    _check(fn, widened=False)


def test_a_sum_over_the_rows_is_taken_from_the_wide_value():
    """A bias gradient (the gradient summed over rows) beside the pad: summed at the padded width,
    then its first columns taken; the narrow value is gone from the graph."""

    def fn(wide, stat, label):
        g = torch.exp(wide[:, :N].float() - stat).to(torch.bfloat16)
        return F.pad(g, (0, P)), g.sum(0)

    torch.manual_seed(0)
    args = [torch.randn(8, N + P, dtype=torch.bfloat16), torch.randn(8, 1), torch.randint(0, N, (8, 1))]
    gm = compute_pads_wide(_graph(fn, *args))
    assert _pads(gm) == 0, gm.code
    assert not [n for n in gm.graph.nodes if n.target is torch.ops.aten.sum.dim_IntList
                and n.args[0].meta["val"].shape[-1] == N], gm.code
    for got, want in zip(gm(*args), fn(*args)):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_gradient_read_elsewhere_too_keeps_the_pad():
    def fn(wide, stat, label):
        g = torch.exp(wide[:, :N].float())
        return F.pad(g, (0, P)).sum() + g.sum()

    torch.manual_seed(0)
    args = [torch.randn(8, N + P, dtype=torch.bfloat16), torch.randn(8, 1), torch.randint(0, N, (8, 1))]
    gm = compute_pads_wide(_graph(fn, *args))
    assert _pads(gm) == 1, gm.code
    torch.testing.assert_close(gm(*args), fn(*args))
