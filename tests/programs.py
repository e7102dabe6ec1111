"""Programs used by both the CPU and the GPU tests: the seeds' programs and small model blocks."""

from __future__ import annotations

import torch
from torch import nn

from perf.seed_programs import seed001_bias_gelu_backward  # noqa: F401  (shared with perf/)


def seed000_gelu(x: torch.Tensor) -> torch.Tensor:
    """Seed 000: GELU of the transformer feed-forward with bookend views (8192x3072 in the seed)."""
    y = x.view(64, x.shape[0] // 64, x.shape[1])
    g = y * 0.5 * (1.0 + torch.erf(y * 0.7071067811865476))
    return g.view(x.shape[0], x.shape[1])


def seed000_gelu_with_view_output(x: torch.Tensor):
    """Seed 000's fusion12: the same GELU, also returning the input's first view."""
    y = x.view(64, x.shape[0] // 64, x.shape[1])
    g = y * 0.5 * (1.0 + torch.erf(y * 0.7071067811865476))
    return g.view(x.shape[0], x.shape[1]), y


def seed000_transpose(x: torch.Tensor) -> torch.Tensor:
    """Seed 000: the transpose between attention's matmul2 and output linear (768x128x64)."""
    b = x.shape[0] // 12
    y = x.view(b, 12, x.shape[1], x.shape[2]).permute(0, 2, 1, 3).contiguous()
    return y.view(b, x.shape[1], 12 * x.shape[2]).view(b * x.shape[1], 12 * x.shape[2])


def seed000_sequential(x: torch.Tensor, views: str = "ABC") -> torch.Tensor:
    """Seed 000's view-add-view-mul-view study; `views` names which of views A, B, C stay.

    Each kept view swaps between the (rows, cols) and (64, rows/64, cols) shapes, as in the seed.
    """
    rows, cols = x.shape
    other = {(rows, cols): (64, rows // 64, cols), (64, rows // 64, cols): (rows, cols)}

    def view(t: torch.Tensor, tag: str) -> torch.Tensor:
        return t.view(*other[tuple(t.shape)]) if tag in views else t

    t = view(x, "A")
    t = t + t
    t = view(t, "B")
    t = t * t
    return view(t, "C")


def metadata_only(x: torch.Tensor) -> torch.Tensor:
    """Views, permutes and unsqueezes only: nothing for nvFuser."""
    return x.view(x.shape[0], -1, 4).permute(2, 0, 1).unsqueeze(0).transpose(1, 2)


def bias_permute_layer_norm(x: torch.Tensor, bias: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """ConvNeXt's LayerNorm: a convolution's bias added, NCHW permuted to NHWC, normalised over C."""
    y = (x + bias.view(-1, 1, 1)).permute(0, 2, 3, 1)
    return torch.nn.functional.layer_norm(y, (y.shape[-1],), w, b, 1e-6)


class MLPGelu(nn.Module):
    def __init__(self, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class LayerNormBlock(nn.Module):
    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc(torch.nn.functional.gelu(self.norm(x)))


class ResidualBlock(LayerNormBlock):
    """x + gelu(linear(layer_norm(x))): stacked, its regions repeat (fusion-sharing tests)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(self.fc(self.norm(x)))


class SoftmaxAttention(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        att = torch.softmax((q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        return self.proj(y)


class RMSNormMLP(nn.Module):
    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return torch.nn.functional.silu(self.fc(h))


class TransformerBlock(nn.Module):
    """GPT-style block: LayerNorm, attention, LayerNorm, GELU MLP, residuals."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SoftmaxAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLPGelu(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class QkvAttention(nn.Module):
    """GPT-2's attention: one qkv projection split into heads, SDPA, the output projection (q, k and v
    are views of one tensor, which min-cut saves as three)."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.dim, self.heads = dim, heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split(self.dim, dim=-1)
        q, k, v = (t.view(b, s, self.heads, self.dim // self.heads).transpose(1, 2) for t in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, self.dim))
