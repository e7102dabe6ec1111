"""pad_matmuls: a half-precision matmul with a dim that is not a multiple of 8 (a vocabulary of 50) is
padded with zeros and sliced back, where the cost model says it pays; the padded gradient is shared by
the input and weight gradients; outputs keep eager's strides; values and gradients match eager."""

from __future__ import annotations

import pytest
import torch

from dynamo_nvf.backend import recording
from dynamo_nvf.passes import pad_matmuls as pad_module
from helpers import assert_same_layout, check_inference, check_training, cuda_plans

PLAN = {"plan_cpu_as_cuda": True}
VOCAB, HIDDEN, TOKENS = 50, 32, 64


@pytest.fixture
def always_pays(monkeypatch):
    """Small shapes stand in for a language model's head: the cost model is told GEMMs are slow."""
    monkeypatch.setattr(pad_module, "ALIGNED_TFLOPS", 1e-9)


class Head(torch.nn.Module):
    def __init__(self, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(VOCAB, HIDDEN, dtype=dtype) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight)


def _ops(plans, kind: str) -> list[str]:
    return [n.op for p in plans if p.kind == kind for n in p.nodes]


def _notes(plans) -> list[str]:
    return [note for p in plans for note in p.rewrites if "pad_matmuls" in note]


def test_vocabulary_dim_is_padded_forward_and_backward(always_pays):
    """A language model's head and loss: the forward pads the weight (N) and saves the padded logits,
    no dense copy of their slice; the backward computes the logits gradient at the padded width
    (wide_pads) and both of its matmuls read it (K and M), with no pad of their own."""
    head = Head()

    def loss_fn(x, labels):
        return torch.nn.functional.cross_entropy(head(x).float(), labels)

    x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
    labels = torch.randint(0, VOCAB, (TOKENS,))
    plans = check_training(loss_fn, [x, labels], PLAN, params=[head.weight])
    forward, backward = _ops(plans, "forward"), _ops(plans, "backward")
    assert forward.count("aten.constant_pad_nd.default") == 1, forward  # the weight, once
    assert backward.count("aten.constant_pad_nd.default") == 0, backward
    assert backward.count("aten.mm.default") == 2
    notes = _notes(plans)
    assert any("N=50" in n for n in notes) and any("K=50" in n for n in notes) and any("M=50" in n for n in notes), notes
    assert any("computed 50 + 6 columns wide" in n for p in plans for n in p.rewrites), [p.rewrites for p in plans]
    (fwd,) = [p for p in plans if p.kind == "forward"]
    (bwd,) = [p for p in plans if p.kind == "backward"]
    assert not [t for r in fwd.regions for t in r.outputs if list(t.shape) == [TOKENS, VOCAB]], fwd.regions
    assert [list(t.shape) for r in bwd.regions for t in r.outputs if VOCAB + 6 in t.shape] == [[TOKENS, VOCAB + 6]]


def test_a_head_with_a_bias_computes_its_gradients_wide(always_pays):
    """BERT's MLM decoder has a bias: its gradient (the logits gradient summed over tokens) is summed at
    the padded width too, so the backward reads the padded logits alone, and pads nothing."""
    torch.manual_seed(0)
    decoder = torch.nn.Linear(HIDDEN, VOCAB, dtype=torch.bfloat16)

    def loss_fn(x, labels):
        return torch.nn.functional.cross_entropy(decoder(x).float(), labels)

    x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
    plans = check_training(loss_fn, [x, torch.randint(0, VOCAB, (TOKENS,))], PLAN, params=list(decoder.parameters()))
    (bwd,) = [p for p in plans if p.kind == "backward"]
    assert "aten.constant_pad_nd.default" not in _ops(plans, "backward")
    assert any("columns wide" in n for n in bwd.rewrites), bwd.rewrites
    assert not [t for r in bwd.regions for t in r.inputs if list(t.shape) == [TOKENS, VOCAB]], bwd.regions


def test_a_gradient_computed_wide_costs_the_cost_model_no_copy(monkeypatch):
    """GEMMs fast enough that copying the logits gradient to pad it would cost more than its
    misaligned input-gradient matmul loses (ELECTRA's head: 8192 tokens x 128 x 30522): since the
    gradient is computed at the padded width, its pad is no copy, and that matmul is padded too."""
    monkeypatch.setattr(pad_module, "ALIGNED_TFLOPS", 0.05)
    head = Head()

    def loss_fn(x, labels):
        return torch.nn.functional.cross_entropy(head(x).float(), labels)

    x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
    plans = check_training(loss_fn, [x, torch.randint(0, VOCAB, (TOKENS,))], PLAN, params=[head.weight])
    notes = _notes(plans)
    assert any("K=50" in n for n in notes) and any("M=50" in n for n in notes), notes
    assert "aten.constant_pad_nd.default" not in _ops(plans, "backward")
    # priced as a copy, the same gradient's pad does not pay
    assert not pad_module._worth_it(1, TOKENS, VOCAB, HIDDEN, (0, 6, 0), 2, 0)
    assert pad_module._worth_it(1, TOKENS, VOCAB, HIDDEN, (0, 6, 0), 2, 0, free=(True, False))


def test_an_inference_graph_computes_a_padded_operand_wide(monkeypatch):
    """relu(x @ w1.t()) @ w2.t() over a hidden size of 50: the second matmul's operand is computed at
    the first product's padded width in the inference graph too, so its pad costs no copy and no
    pad of a computed value is left; values as eager's."""
    monkeypatch.setattr(pad_module, "ALIGNED_TFLOPS", 0.05)
    torch.manual_seed(0)
    w1 = torch.randn(VOCAB, HIDDEN, dtype=torch.bfloat16) * 0.1
    w2 = torch.randn(HIDDEN, VOCAB, dtype=torch.bfloat16) * 0.1

    def fn(x):
        return torch.relu(x @ w1.t()) @ w2.t()

    plans = check_inference(fn, [torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)], PLAN)
    notes = [n for p in plans for n in p.rewrites]
    assert any("K=50" in n for n in notes) and any("relu computed 50 + 6 columns wide" in n for n in notes), notes
    pads = [n for p in plans for n in p.nodes if n.op == "aten.constant_pad_nd.default"]
    assert len(pads) == 2 and all(n.inputs[0].startswith("arg") for n in pads), [(n.name, n.inputs) for n in pads]  # the weights'
    (region,) = [r for p in plans for r in p.regions]
    assert "aten.relu.default" in region.ops and [TOKENS, VOCAB + 6] in [list(t.shape) for t in region.inputs]


def test_a_gradient_that_cannot_be_computed_wide_is_padded_from_memory(always_pays):
    """Where the logits gradient comes from the graph's incoming gradient, it cannot be computed at the
    padded width: the pad stays, and reads the gradient from memory (in eager, a lone copy), not in
    the region computing it."""
    head = Head()

    def fn(x):
        return head(x).float() * 2.0

    x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
    plans = check_training(fn, [x], PLAN, params=[head.weight])
    (bwd,) = [p for p in plans if p.kind == "backward"]
    assert not any("columns wide" in n for n in bwd.rewrites), bwd.rewrites
    pads_in_regions = [line for r in bwd.regions for line in r.fx_code.splitlines() if "aten.constant_pad_nd" in line]
    assert all("(primals_" in line for line in pads_in_regions), pads_in_regions  # the weight's pad only
    eager_pads = [n for n in bwd.eager_nodes if n.op == "aten.constant_pad_nd.default"]
    assert len(eager_pads) == 1 and not eager_pads[0].inputs[0].startswith(("tangents", "primals")), bwd.eager_nodes


def test_logits_returned_keep_eager_strides(always_pays):
    head = Head()
    x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
    with torch.no_grad():
        plans = check_inference(head, [x], PLAN)
        out = torch.compile(head, backend="nvf_bookend", options=PLAN)(x)
        assert_same_layout(out, head(x))
    assert _notes(plans)
    assert "aten.clone.default" in _ops(plans, "inference")


def test_padded_matmul_outputs_returns_the_logits_slice_without_a_copy(always_pays):
    """With the option, an inference graph returns the padded product's slice (inductor's layout): no
    copy, the row stride padded to a multiple of 8, eager's values; fresh inputs too."""
    head = Head()

    def fn(x):  # the second output is a region: a graph without one runs as traced
        return head(x), x.sin().cos()

    compiled = torch.compile(fn, backend="nvf_bookend", options={**PLAN, "padded_matmul_outputs": True})
    with torch.no_grad():
        for shape in ((TOKENS, HIDDEN), (2, TOKENS // 2, HIDDEN), (2, TOKENS // 2, HIDDEN)):
            x = torch.randn(*shape, dtype=torch.bfloat16)
            with recording() as rec:
                out, _ = compiled(x)
            expected = head(x)
            assert out.shape == expected.shape and out.stride()[-2:] == (VOCAB + 6, 1), out.stride()
            torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-2)
            assert all("aten.clone.default" not in _ops([p], "inference") for p in rec.plans)
            assert all(_notes([p]) for p in rec.plans)


def test_a_graph_whose_only_rewrite_is_the_padding_runs_padded(always_pays):
    """With the copy gone, a lone head has no region; its graph still runs padded, not as Dynamo
    traced it (a DDP split can hand the backend the head alone)."""
    head = Head()
    compiled = torch.compile(head, backend="nvf_bookend", options={**PLAN, "padded_matmul_outputs": True})
    with torch.no_grad(), recording() as rec:
        x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
        out = compiled(x)
    assert not any(p.regions for p in rec.plans) and _notes(rec.plans)
    assert out.stride() == (VOCAB + 6, 1), out.stride()
    torch.testing.assert_close(out, head(x), rtol=1.6e-2, atol=1e-2)


def test_padded_matmul_outputs_keeps_eager_strides_in_training_and_for_as_strided(always_pays):
    """The option is for inference graphs: a training step's logits (saved for the backward) and a
    product read through `as_strided` keep eager's strides."""
    head = Head()
    options = {**PLAN, "padded_matmul_outputs": True}

    def loss_fn(x, labels):
        logits = head(x)
        return logits, torch.nn.functional.cross_entropy(logits.float(), labels)

    x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
    check_training(loss_fn, [x, torch.randint(0, VOCAB, (TOKENS,))], options, params=[head.weight])

    def fn(x):
        logits = head(x)
        return logits.as_strided((TOKENS // 2, VOCAB), (2 * VOCAB, 1), VOCAB) * 2, x.sin().cos()

    with torch.no_grad():
        plans = check_inference(fn, [x], options)
    assert _notes(plans) and "aten.clone.default" in _ops(plans, "inference")


def test_fresh_inputs_of_a_batched_head_match_eager(always_pays):
    head = Head()
    compiled = torch.compile(head, backend="nvf_bookend", options=PLAN)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, TOKENS // 2, HIDDEN, dtype=torch.bfloat16)
            out, expected = compiled(x), head(x)
            assert_same_layout(out, expected)
            torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-2)


def _linear(x, w):
    return torch.nn.functional.linear(x, w)


def test_the_cost_model_pads_a_language_model_head_and_not_a_small_product():
    """GPT-2's head (4096 tokens x 768 x 50257) pays for its copies; a 64 x 32 x 50 product does not."""
    assert pad_module._worth_it(1, 4096, 768, 50257, (0, 0, 7), 2, copies=1)
    assert pad_module._worth_it(1, 4096, 50257, 768, (0, 7, 0), 2, copies=0)
    assert not pad_module._worth_it(1, TOKENS, HIDDEN, VOCAB, (0, 0, 6), 2, copies=1)


def test_language_model_head_is_padded_by_default():
    """From the plan alone, on fake CUDA tensors (a CPU build cannot run their backward)."""
    plans = cuda_plans(_linear, (4096, 768), (50257, 768), dtype=torch.bfloat16)
    assert any("N=50257" in n for n in _notes(plans)), _notes(plans)
    assert not _notes(cuda_plans(_linear, (TOKENS, HIDDEN), (VOCAB, HIDDEN), dtype=torch.bfloat16))


def test_float32_and_the_option_off_keep_the_matmul(always_pays):
    f32 = cuda_plans(_linear, (TOKENS, HIDDEN), (VOCAB, HIDDEN), train=True, fake=False)
    off = cuda_plans(_linear, (TOKENS, HIDDEN), (VOCAB, HIDDEN), dtype=torch.bfloat16, train=True, fake=False,
                     options={"pad_matmuls": False})
    on = cuda_plans(_linear, (TOKENS, HIDDEN), (VOCAB, HIDDEN), dtype=torch.bfloat16, train=True, fake=False)
    assert not _notes(f32) and not _notes(off) and _notes(on)


def test_a_product_read_through_as_strided_keeps_eager_strides(always_pays):
    """`as_strided` reads storage by eager's strides: the padded product is copied back dense first."""
    head = Head()

    def fn(x):  # the second output is a region: a graph without one runs as traced
        logits = head(x)
        return logits.as_strided((TOKENS // 2, VOCAB), (2 * VOCAB, 1), VOCAB) * 2, x.sin().cos()

    with torch.no_grad():
        plans = check_inference(fn, [torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)], PLAN)
    assert _notes(plans)
    assert "aten.clone.default" in _ops(plans, "inference")


def test_a_size_one_bias_and_an_identity_transpose_are_padded_correctly(always_pays):
    """addmm broadcasts a one-element bias (it is not padded to N); transpose(0, 0) is no transpose."""
    weight = torch.randn(HIDDEN, VOCAB, dtype=torch.bfloat16)
    bias = torch.randn(1, dtype=torch.bfloat16)

    def fn(x):
        return torch.addmm(bias, x.transpose(0, 0), weight).relu(), x.sin().cos()

    with torch.no_grad():
        plans = check_inference(fn, [torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)], PLAN)
    assert _notes(plans)


def test_a_head_with_symbolic_rows_pads_its_vocabulary_and_matches_eager(always_pays):
    """A dynamic-shape graph (dynamic=True: the tokens symbolic): N is padded, M never; each length
    matches eager with eager's strides."""
    head = Head()
    torch._dynamo.reset()
    compiled = torch.compile(head, backend="nvf_bookend", options=PLAN, dynamic=True)
    from dynamo_nvf.backend import recording

    with torch.no_grad(), recording() as rec:
        for tokens in (TOKENS, TOKENS + 3, 2 * TOKENS):
            x = torch.randn(tokens, HIDDEN, dtype=torch.bfloat16)
            out, expected = compiled(x), head(x)
            assert_same_layout(out, expected)
            torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-2)
    notes = _notes(rec.plans)
    assert any("N=50" in n for n in notes) and not any("M=" in n for n in notes), notes
    inference = _ops(rec.plans, "inference")
    assert "aten.constant_pad_nd.default" in inference and "aten.slice.Tensor" in inference, inference


def test_a_head_with_symbolic_tokens_pads_its_weight_gradient_and_matches_eager(always_pays):
    """Training with the tokens symbolic (dynamic=True): the weight gradient reduces over the tokens,
    so its K is symbolic and its M (the vocabulary) is padded, as the forward's N and the input
    gradient's K are; the tokens are never padded; each length's loss and gradients match eager's."""
    head = Head()
    torch._dynamo.reset()
    compiled = torch.compile(head, backend="nvf_bookend", options=PLAN, dynamic=True)
    from dynamo_nvf.backend import recording

    with recording() as rec:
        for tokens in (TOKENS, TOKENS + 3, 2 * TOKENS):
            x = torch.randn(tokens, HIDDEN, dtype=torch.bfloat16)
            x_eager = x.clone().requires_grad_(True)
            x.requires_grad_(True)
            grad = torch.randn(tokens, VOCAB, dtype=torch.bfloat16)
            out = compiled(x)
            (gx, gw) = torch.autograd.grad(out, [x, head.weight], grad)
            expected = head(x_eager)
            (ex, ew) = torch.autograd.grad(expected, [x_eager, head.weight], grad)
            assert_same_layout(out, expected)
            assert_same_layout(gw, ew)
            torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-2)
            torch.testing.assert_close(gx, ex, rtol=1.6e-2, atol=2e-2)
            torch.testing.assert_close(gw, ew, rtol=1.6e-2, atol=1e-1)
    backward = [p for p in rec.plans if p.kind == "backward"]
    assert backward and any(any("M=50" in n for n in p.rewrites) for p in backward), [p.rewrites for p in backward]
    assert any(any("K=50" in n for n in p.rewrites) for p in rec.plans), [p.rewrites for p in rec.plans]
    assert not any(f"={TOKENS}" in n for n in _notes(rec.plans))
