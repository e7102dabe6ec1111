"""compute_pads_wide: a column pad of an elementwise function of a wider value's slice becomes that
function computed at the padded width and masked; the graph's values stay eager's; anything else under
the pad (a scan along the padded dim, a value that is not such a slice, a second reader) keeps it."""

from __future__ import annotations

import pytest
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


def _float_arange(wide, stat, label):
    return F.pad(wide[:, :N] * torch.arange(0.0, N), (0, P))


def _integer_remainder(wide, stat, label):
    x = wide[:, :N].to(torch.int64)
    return F.pad(torch.remainder(x * 7 + 1, x + (x == 0).to(torch.int64)).float(), (0, P))


def _minus_zero(wide, stat, label):
    return F.pad(torch.exp(wide[:, :N].float()), (0, P), value=-0.0)


@pytest.mark.parametrize("fn", [_float_arange, _integer_remainder, _minus_zero])
def test_what_the_mask_cannot_reproduce_keeps_the_pad(fn):
    """A float arange (ATen's own rounding and dtype), integer arithmetic (it would run on the pad's
    zero columns: a remainder by zero), a pad value of -0.0 (the mask writes +0)."""
    _check(fn, widened=False)
    args = [torch.randn(8, N + P, dtype=torch.bfloat16), torch.randn(8, 1), torch.randint(0, N, (8, 1))]
    got = compute_pads_wide(_graph(fn, *args))(*args)
    assert torch.equal(torch.signbit(got), torch.signbit(fn(*args)))


def test_a_reshape_that_makes_the_padded_dim_keeps_the_pad():
    """[8, 1] viewed [2, 4]: the padded dim is made by the reshape, not carried through it."""

    def fn(wide, column):
        return F.pad(wide[:, :4] + column.view(-1, 4), (0, 4))

    args = [torch.randn(2, 8), torch.randn(8, 1)]
    gm = compute_pads_wide(_graph(fn, *args))
    assert _pads(gm) == 1, gm.code
    torch.testing.assert_close(gm(*args), fn(*args), rtol=0, atol=0)


def test_a_row_sum_before_the_pad_and_a_sum_of_many_rows():
    """A bias gradient's sum placed before the pad is rewritten in order; a sum that leaves several
    rows (its first columns would be strided) keeps the narrow value and the pad."""

    def before(wide, stat, label):
        g = torch.exp(wide[:, :N].float())
        total = g.sum(0)
        return F.pad(g, (0, P)), total

    def many_rows(wide, stat, label):
        g = torch.exp(wide[:, :N].float()).view(2, 4, N)
        return F.pad(g, (0, P)), g.sum(0).view(-1)

    args = [torch.randn(8, N + P, dtype=torch.bfloat16), torch.randn(8, 1), torch.randint(0, N, (8, 1))]
    for fn, pads in ((before, 0), (many_rows, 1)):
        gm = compute_pads_wide(_graph(fn, *args))
        assert _pads(gm) == pads, gm.code
        for got, want in zip(gm(*args), fn(*args)):
            assert got.stride() == want.stride()
            torch.testing.assert_close(got, want, rtol=0, atol=0)
