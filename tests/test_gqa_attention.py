"""The grouped-query attention pass: SDPA over repeated K/V heads reads them as they are (enable_gqa).

Structure of Dynamo's graph after the pass, the aten plan (no K/V copy, no sum of their gradients),
the cases it must leave alone, explain()'s note, and numerics against eager, forward and backward.
On the CPU (ATen's CPU flash kernel takes grouped heads) and, marked `gpu`, on CUDA (cuDNN/flash).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dynamo_nvf
from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.passes import NOTES_KEY
from dynamo_nvf.passes.gqa_attention import read_grouped_heads, repeated_heads
from perf.models import LlamaAttention, rope_cache

from helpers import assert_same_layout, check_training, compile_fn
from test_attention import dynamo_graph

PLAN = {"plan_cpu_as_cuda": True}
B, S, D, HEADS, KV_HEADS = 2, 16, 64, 8, 2


def repeat_expand(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


def repeat_unsqueeze_flatten(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, s, d = x.shape
    return x.unsqueeze(2).expand(b, h, n_rep, s, d).flatten(1, 2)


def repeat_interleave(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    return torch.repeat_interleave(x, n_rep, dim=1)


def repeat_tiled(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Head h reads x's head h % h_kv: not SDPA's grouped order, so never rewritten."""
    b, h, s, d = x.shape
    return x[:, None].expand(b, n_rep, h, s, d).reshape(b, h * n_rep, s, d)


class Attention(nn.Module):
    def __init__(self, repeat, causal: bool = True) -> None:
        super().__init__()
        self.repeat, self.causal = repeat, causal

    def forward(self, q, k, v):
        n_rep = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, self.repeat(k, n_rep), self.repeat(v, n_rep), is_causal=self.causal)


class KeyChangedAfterTheRepeat(nn.Module):
    """A KV-cache-like write into K's source after the repeat copied it: SDPA must see the copy."""

    def forward(self, q, k, v):
        k = k * 1
        k4, v4 = repeat_expand(k, 4), repeat_expand(v, 4)
        k.mul_(-3)
        return F.scaled_dot_product_attention(q, k4, v4)


class KeyUsedTwice(nn.Module):
    def forward(self, q, k, v):
        k4 = repeat_expand(k, 4)
        return F.scaled_dot_product_attention(q, k4, repeat_expand(v, 4)) + k4.sum()


def _qkv(dtype=torch.bfloat16, kv_heads: int = KV_HEADS, device: str = "cpu") -> list[torch.Tensor]:
    return [torch.randn(B, HEADS, S, 16, dtype=dtype, device=device),
            torch.randn(B, kv_heads, S, 16, dtype=dtype, device=device),
            torch.randn(B, kv_heads, S, 16, dtype=dtype, device=device)]


def _sdpa(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is F.scaled_dot_product_attention]


def _notes(gm) -> list[str]:
    return [n for n in gm.meta.get(NOTES_KEY, []) if "key/value heads" in n]


@pytest.mark.parametrize("repeat", [repeat_expand, repeat_unsqueeze_flatten, repeat_interleave])
def test_repeated_heads_become_enable_gqa(repeat):
    gm = read_grouped_heads(dynamo_graph(Attention(repeat), _qkv()), strict=True)
    (call,) = _sdpa(gm)
    assert call.kwargs.get("enable_gqa") is True, gm.code
    key, value = call.args[1], call.args[2]
    assert key.op == "placeholder" and value.op == "placeholder", gm.code
    assert not any(n.target in ("expand", "reshape", "flatten", "repeat_interleave", torch.repeat_interleave)
                   for n in gm.graph.nodes), gm.code
    (note,) = _notes(gm)
    assert "repeated 4x" in note and "enable_gqa=True" in note


def test_matcher_reads_the_head_order():
    gm = dynamo_graph(Attention(repeat_expand), _qkv())
    (call,) = _sdpa(gm)
    source, n_rep = repeated_heads(call.args[1])
    assert n_rep == 4 and source.op == "placeholder"
    tiled = dynamo_graph(Attention(repeat_tiled), _qkv())
    (call,) = _sdpa(tiled)
    assert repeated_heads(call.args[1]) is None


@pytest.mark.parametrize("module, inputs, note", [
    (Attention(repeat_tiled), _qkv(), None),
    (Attention(repeat_expand), _qkv(torch.float32), "torch.float32 has no fused grouped-query kernel"),
    (KeyUsedTwice(), _qkv(), "the repeated tensors have other users"),
    (KeyChangedAfterTheRepeat(), _qkv(), "mul_ may change a tensor in place between the repeat and SDPA"),
])
def test_left_alone(module, inputs, note):
    gm = dynamo_graph(module, inputs)
    before = gm.code
    gm = read_grouped_heads(gm, strict=True)
    assert gm.code == before
    assert not any(c.kwargs.get("enable_gqa") for c in _sdpa(gm))
    notes = _notes(gm)
    assert (notes == []) if note is None else (len(notes) == 1 and note in notes[0]), notes


def test_a_change_in_place_after_the_repeat_keeps_eager_results():
    module, inputs = KeyChangedAfterTheRepeat(), _qkv()
    compiled = compile_fn(module, PLAN)
    torch.testing.assert_close(compiled(*inputs), module(*inputs), rtol=0, atol=0)


def _llama(dtype):
    torch.manual_seed(0)
    model = LlamaAttention(D, HEADS, KV_HEADS, dtype=dtype)
    cos, sin = rope_cache(S, D // HEADS, 10000.0, "cpu", dtype)
    return model, [torch.randn(B, S, D, dtype=dtype), cos, sin]


def _sums(plans, kind: str) -> int:
    return sum(op == "aten.sum.dim_IntList" for p in plans if p.kind == kind for r in p.regions for op in r.ops)


def test_llama_attention_trains_like_eager_without_kv_copies():
    model, inputs = _llama(torch.bfloat16)
    reference = LlamaAttention(D, HEADS, KV_HEADS)
    reference.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    plans = check_training(model, inputs, PLAN, params=list(model.parameters()), reference=reference)
    repeated = check_training(model, inputs, {**PLAN, "grouped_query_attention": False},
                              params=list(model.parameters()), reference=reference)
    assert {p.kind for p in plans} == {"forward", "backward"}
    for plan in plans:
        notes = [r for r in plan.rewrites if "enable_gqa=True" in r]
        assert len(notes) == 1, plan.rewrites
        ops = [n.op for n in plan.nodes]
        # No repeat: neither the forward's expand of K/V nor the backward's sum over the repeats.
        assert "aten.expand.default" not in ops, ops
        assert any("scaled_dot_product" in n.op for n in plan.eager_nodes)
    # The repeat's gradient, a sum over the repeats of K's and of V's, is gone from the backward.
    assert _sums(plans, "backward") == _sums(repeated, "backward") - 2


def test_fresh_inputs_and_strides_match_eager():
    model, inputs = _llama(torch.bfloat16)
    compiled = compile_fn(model, PLAN)
    with torch.no_grad():
        for seed in (1, 2):
            torch.manual_seed(seed)
            x = torch.randn_like(inputs[0])
            actual, expected = compiled(x, *inputs[1:]), model(x, *inputs[1:])
            assert_same_layout(actual, expected)
            torch.testing.assert_close(actual, expected, rtol=1.6e-2, atol=1e-2)


def test_option_off_and_float32_keep_the_repeat():
    for dtype, options in ((torch.bfloat16, {**PLAN, "grouped_query_attention": False}), (torch.float32, PLAN)):
        model, inputs = _llama(dtype)
        compiled = compile_fn(model, options)
        from dynamo_nvf.backend import recording
        with torch.no_grad(), recording() as rec:
            compiled(*inputs)
        ops = [n.op for p in rec.plans for n in p.nodes]
        assert "aten.expand.default" in ops
        assert not any("enable_gqa=True" in r for p in rec.plans for r in p.rewrites)


def test_explain_shows_the_rewrite():
    model, inputs = _llama(torch.bfloat16)
    report = dynamo_nvf.explain(model, *inputs)
    text = str(report)
    assert "rewrites:" in text and "read as they are, enable_gqa=True" in text


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_gpu_llama_attention_trains_like_eager_with_a_fused_kernel():
    torch.manual_seed(0)
    model = LlamaAttention(D, HEADS, KV_HEADS, device="cuda", dtype=torch.bfloat16)
    cos, sin = rope_cache(S, D // HEADS, 10000.0, "cuda", torch.bfloat16)
    reference = LlamaAttention(D, HEADS, KV_HEADS, device="cuda")
    reference.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    inputs = [torch.randn(B, S, D, device="cuda", dtype=torch.bfloat16), cos, sin]
    plans = check_training(model, inputs, {}, params=list(model.parameters()), reference=reference)
    for plan in plans:
        assert any("enable_gqa=True" in r for r in plan.rewrites), plan.rewrites
        fused = [n.op for n in plan.eager_nodes if "scaled_dot_product" in n.op]
        assert fused and all(("cudnn" in op or "flash" in op) for op in fused), fused
