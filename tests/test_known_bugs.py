"""Regions nvFuser is known to compute wrongly stay in eager (passes/known_bugs.py), on the CPU plan."""

import pytest
import torch

import dynamo_nvf
from dynamo_nvf.passes.known_bugs import EXPAND_PERMUTE_REDUCTION
from perf.workloads import REGISTRY


def _plans(name: str, options: dict):
    torch._dynamo.reset()
    inst = REGISTRY[name].instantiate("cpu", tiny=True)
    with dynamo_nvf.recording() as recorder:
        inst.call(torch.compile(inst.fn, backend="nvf_bookend", options={"plan_cpu_as_cuda": True, **options}))
    return recorder.plans


def _kept_eager(plans) -> list[str]:
    return [n.name for p in plans for n in p.eager_nodes if n.reason == EXPAND_PERMUTE_REDUCTION]


@pytest.mark.parametrize("options", [{}, {"unflatten_reductions": False}, {"cuda_graphs": True},
                                     {"unpermute_reductions": 1, "split_norm_backward_rows": 1 << 40}])
def test_convnext_head_backward_stays_eager(options):
    """The head backward spreads the pooled gradient (expand), keeps it, and sums its permute."""
    plans = _plans("convnext_train_bf16_small", options)
    backward = next(p for p in plans if p.kind == "backward")
    assert not any("expand" in r.fx_code and "permute" in r.fx_code and "sum.dim" in r.fx_code
                   for r in backward.regions), [r.name for r in backward.regions]
    assert _kept_eager([backward]), "the head's nodes should be eager with the known-bug reason"


@pytest.mark.parametrize("name", ["llama_train_bf16_small", "gpt_train_bf16_small", "bert_train_bf16_small",
                                  "vit_train_bf16_small"])
def test_transformers_are_untouched(name):
    assert not _kept_eager(_plans(name, {}))


def test_pattern_needs_an_output_of_the_broadcast():
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.passes.known_bugs import expand_permute_reduction

    def writes_it(x, y):
        e = x[:, :, None].expand(2, 3, 4) / 4
        return e, (e.permute(0, 2, 1) * y).sum([0, 1])

    def only_sums(x, y):
        e = x[:, :, None].expand(2, 3, 4) / 4
        return (e.permute(0, 2, 1) * y).sum([0, 1])

    args = (torch.randn(2, 3), torch.randn(2, 4, 3))
    for fn, found in ((writes_it, True), (only_sums, False)):
        gm = make_fx(fn)(*args)
        members = [n for n in gm.graph.nodes if n.op == "call_function"]
        assert (expand_permute_reduction(members) is not None) is found


def _flagged(fn, options=None) -> bool:
    from helpers import cuda_plans

    return bool(_kept_eager(cuda_plans(fn, (2, 3), (2, 4, 3), options=options or {}, fake=False)))


def test_planned_programs_through_plan_graph():
    def writes_it(x, y):
        e = (x * 2)[:, :, None].expand(2, 3, 4) / 4
        return e, (e.permute(0, 2, 1) * y).sum([0, 1])

    def writes_only_the_view(x, y):
        e = (x * 2)[:, :, None].expand(2, 3, 4)
        return e, (e.permute(0, 2, 1) * y).sum([0, 1])

    def through_transpose(x, y):
        e = (x * 2)[:, :, None].expand(2, 3, 4) / 4
        return e, (e.transpose(1, 2) * y).sum([0, 1])

    assert _flagged(writes_it)
    assert not _flagged(writes_only_the_view)  # a trimmed alias: the sum alone runs, and that was right
    assert _flagged(through_transpose)
    # The check runs before unpermute_reductions could remove the permute it looks for.
    assert _flagged(writes_it, options={"unpermute_reductions": 1})
