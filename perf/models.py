"""Whole-model workloads written in plain PyTorch (no download, random weights): the model tier.

Real networks are where host cost shows: a step runs dozens of regions and the glue between them,
and at a small batch the GPU waits for the host.  Five small networks, each close to a public
architecture, with configs small enough that a compile takes seconds:

* ``llama``    LLaMA-style decoder: RMSNorm (computed in f32, as LLaMA does), RoPE (cos/sin cache,
               rotate_half), grouped-query attention (n_kv_heads < n_heads, K/V repeated by
               expand+reshape) through ``F.scaled_dot_product_attention(is_causal=True)``, SwiGLU
               MLP, final RMSNorm and an untied LM head.
* ``gpt``      GPT-2-style decoder: token + learned position embeddings, pre-LayerNorm blocks,
               causal attention through SDPA (``is_causal=True``), tanh-GELU MLP, LM head.
* ``bert``     BERT-style encoder: embeddings + LayerNorm, post-LayerNorm blocks, attention through
               SDPA with an *additive* padding mask (built from an integer mask in the model, as
               BERT does), erf-GELU MLP, masked-LM head (dense, GELU, LayerNorm, decoder).
* ``vit``      ViT block stack: patch-embedding conv, CLS token, position embedding, pre-norm
               blocks (SDPA, GELU MLP), final LayerNorm, classifier on the CLS token.
* ``convnext`` ConvNeXt-style stack: 4x4 stem conv + channels-first LayerNorm, blocks of depthwise
               7x7 conv, channels-last LayerNorm (permute to NHWC, LayerNorm, back), pointwise MLP
               through Linear, GELU, layer scale, residual; one downsampling layer between the two
               stages; pooled LayerNorm and classifier.

Every model returns logits; the training step is forward, cross-entropy against seeded random
targets (``WithLoss``), backward.  The optimizer step is NOT part of the timed step.

Each config has a ``tiny`` variant (CPU tests) and two batch sizes: ``small`` (host-bound: the GPU
finishes a step faster than the host can enqueue it) and ``large`` (GPU-bound).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

# ----------------------------------------------------------------------------------- layers


class RMSNorm(nn.Module):
    """LLaMA's RMSNorm: normalised in f32, scaled by the weight in the input dtype."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_cache(seq: int, head_dim: int, theta: float, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (seq, head_dim), as LLaMA's rotary embedding computes them."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    t = torch.arange(seq, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(b, n_kv, s, d) -> (b, n_kv * n_rep, s, d) by expand + reshape (grouped-query attention)."""
    if n_rep == 1:
        return x
    b, n_kv, s, d = x.shape
    return x[:, :, None].expand(b, n_kv, n_rep, s, d).reshape(b, n_kv * n_rep, s, d)


class LlamaAttention(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, device=None, dtype=None):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d // heads
        kw = dict(bias=False, device=device, dtype=dtype)
        self.q_proj = nn.Linear(d, heads * self.head_dim, **kw)
        self.k_proj = nn.Linear(d, kv_heads * self.head_dim, **kw)
        self.v_proj = nn.Linear(d, kv_heads * self.head_dim, **kw)
        self.o_proj = nn.Linear(heads * self.head_dim, d, **kw)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        n_rep = self.heads // self.kv_heads
        y = F.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, -1))


class SwiGLU(nn.Module):
    def __init__(self, d: int, hidden: int, device=None, dtype=None):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate_proj = nn.Linear(d, hidden, **kw)
        self.up_proj = nn.Linear(d, hidden, **kw)
        self.down_proj = nn.Linear(hidden, d, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(self, cfg: "ModelConfig", device=None, dtype=None):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d, device=device, dtype=dtype)
        self.self_attn = LlamaAttention(cfg.d, cfg.heads, cfg.kv_heads, device=device, dtype=dtype)
        self.post_attention_layernorm = RMSNorm(cfg.d, device=device, dtype=dtype)
        self.mlp = SwiGLU(cfg.d, cfg.hidden, device=device, dtype=dtype)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaLM(nn.Module):
    """Token ids (b, s) -> logits (b, s, vocab)."""

    def __init__(self, cfg: "ModelConfig", device=None, dtype=None):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.d, device=device, dtype=dtype)
        self.layers = nn.ModuleList(LlamaBlock(cfg, device, dtype) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.d, device=device, dtype=dtype)
        self.lm_head = nn.Linear(cfg.d, cfg.vocab, bias=False, device=device, dtype=dtype)
        cos, sin = rope_cache(cfg.seq, cfg.d // cfg.heads, 10000.0, device, dtype)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        cos, sin = self.cos[:s], self.sin[:s]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


class SelfAttention(nn.Module):
    """Fused qkv projection, SDPA, output projection (GPT-2, BERT and ViT share it)."""

    def __init__(self, d: int, heads: int, device=None, dtype=None):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, device=device, dtype=dtype)
        self.proj = nn.Linear(d, d, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, causal: bool = False) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class Mlp(nn.Module):
    def __init__(self, d: int, hidden: int, approximate: str = "none", device=None, dtype=None):
        super().__init__()
        self.fc = nn.Linear(d, hidden, device=device, dtype=dtype)
        self.act = nn.GELU(approximate=approximate)
        self.proj = nn.Linear(hidden, d, device=device, dtype=dtype)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class PreNormBlock(nn.Module):
    """GPT-2 / ViT block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d: int, heads: int, hidden: int, approximate: str, causal: bool, device=None, dtype=None):
        super().__init__()
        self.causal = causal
        self.ln_1 = nn.LayerNorm(d, device=device, dtype=dtype)
        self.attn = SelfAttention(d, heads, device, dtype)
        self.ln_2 = nn.LayerNorm(d, device=device, dtype=dtype)
        self.mlp = Mlp(d, hidden, approximate, device, dtype)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x), causal=self.causal)
        return x + self.mlp(self.ln_2(x))


class PostNormBlock(nn.Module):
    """BERT block: ln(x + attn(x, mask)), then ln(x + mlp(x))."""

    def __init__(self, d: int, heads: int, hidden: int, device=None, dtype=None):
        super().__init__()
        self.attn = SelfAttention(d, heads, device, dtype)
        self.ln_1 = nn.LayerNorm(d, eps=1e-12, device=device, dtype=dtype)
        self.mlp = Mlp(d, hidden, "none", device, dtype)
        self.ln_2 = nn.LayerNorm(d, eps=1e-12, device=device, dtype=dtype)

    def forward(self, x, mask):
        x = self.ln_1(x + self.attn(x, mask=mask))
        return self.ln_2(x + self.mlp(x))


class GptLM(nn.Module):
    """GPT-2-style decoder: token ids (b, s) -> logits (b, s, vocab)."""

    def __init__(self, cfg: "ModelConfig", device=None, dtype=None):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab, cfg.d, device=device, dtype=dtype)
        self.wpe = nn.Embedding(cfg.seq, cfg.d, device=device, dtype=dtype)
        self.h = nn.ModuleList(
            PreNormBlock(cfg.d, cfg.heads, cfg.hidden, "tanh", True, device, dtype) for _ in range(cfg.layers)
        )
        self.ln_f = nn.LayerNorm(cfg.d, device=device, dtype=dtype)
        self.lm_head = nn.Linear(cfg.d, cfg.vocab, bias=False, device=device, dtype=dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class BertMLM(nn.Module):
    """BERT-style encoder with a masked-LM head: (ids, attention_mask) -> logits (b, s, vocab).

    ``attention_mask`` is BERT's integer padding mask (1 = token, 0 = padding); the model turns it
    into the additive float mask SDPA adds to the scores, as BERT's extended attention mask does.
    """

    def __init__(self, cfg: "ModelConfig", device=None, dtype=None):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.d, device=device, dtype=dtype)
        self.position_embeddings = nn.Embedding(cfg.seq, cfg.d, device=device, dtype=dtype)
        self.emb_ln = nn.LayerNorm(cfg.d, eps=1e-12, device=device, dtype=dtype)
        self.layers = nn.ModuleList(PostNormBlock(cfg.d, cfg.heads, cfg.hidden, device, dtype) for _ in range(cfg.layers))
        self.transform = nn.Linear(cfg.d, cfg.d, device=device, dtype=dtype)
        self.transform_ln = nn.LayerNorm(cfg.d, eps=1e-12, device=device, dtype=dtype)
        self.decoder = nn.Linear(cfg.d, cfg.vocab, device=device, dtype=dtype)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.emb_ln(self.word_embeddings(ids) + self.position_embeddings(pos))
        additive = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, additive)
        return self.decoder(self.transform_ln(F.gelu(self.transform(x))))


class ViT(nn.Module):
    """ViT: images (b, 3, H, W) -> logits (b, classes), classifier on the CLS token."""

    def __init__(self, cfg: "ModelConfig", device=None, dtype=None):
        super().__init__()
        tokens = (cfg.image // cfg.patch) ** 2 + 1
        self.patch_embed = nn.Conv2d(3, cfg.d, cfg.patch, stride=cfg.patch, device=device, dtype=dtype)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.d, device=device, dtype=dtype))
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, cfg.d, device=device, dtype=dtype) * 0.02)
        self.blocks = nn.ModuleList(
            PreNormBlock(cfg.d, cfg.heads, cfg.hidden, "none", False, device, dtype) for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(cfg.d, eps=1e-6, device=device, dtype=dtype)
        self.head = nn.Linear(cfg.d, cfg.classes, device=device, dtype=dtype)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (b, patches, d)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor: permute to NHWC, normalise, permute back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int, device=None, dtype=None):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim, device=device, dtype=dtype)
        self.norm = nn.LayerNorm(dim, eps=1e-6, device=device, dtype=dtype)
        self.pwconv1 = nn.Linear(dim, 4 * dim, device=device, dtype=dtype)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim, device=device, dtype=dtype)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)  # NCHW -> NHWC
        y = self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    """Two ConvNeXt stages with a downsampling layer between: images -> logits (b, classes)."""

    def __init__(self, cfg: "ModelConfig", device=None, dtype=None):
        super().__init__()
        c1, c2 = cfg.d, 2 * cfg.d
        kw = dict(device=device, dtype=dtype)
        self.stem = nn.Sequential(nn.Conv2d(3, c1, 4, stride=4, **kw), LayerNorm2d(c1, eps=1e-6, **kw))
        self.stage1 = nn.Sequential(*(ConvNeXtBlock(c1, **kw) for _ in range(cfg.layers)))
        self.down = nn.Sequential(LayerNorm2d(c1, eps=1e-6, **kw), nn.Conv2d(c1, c2, 2, stride=2, **kw))
        self.stage2 = nn.Sequential(*(ConvNeXtBlock(c2, **kw) for _ in range(cfg.layers)))
        self.norm = nn.LayerNorm(c2, eps=1e-6, **kw)
        self.head = nn.Linear(c2, cfg.classes, **kw)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stage2(self.down(self.stage1(self.stem(images))))
        return self.head(self.norm(x.mean((2, 3))))


class ResNetBlock(nn.Module):
    """ResNet's basic block: conv-BN-ReLU-conv-BN plus the shortcut (a strided 1x1 conv and BN where
    the shape changes), then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False, **kw)
        self.bn1 = nn.BatchNorm2d(c_out, **kw)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False, **kw)
        self.bn2 = nn.BatchNorm2d(c_out, **kw)
        self.shortcut = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False, **kw), nn.BatchNorm2d(c_out, **kw))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    """Two ResNet stages of basic blocks (the second at half the resolution, twice the channels) after
    ResNet's stem: images -> logits (b, classes)."""

    def __init__(self, cfg: "ModelConfig", device=None, dtype=None):
        super().__init__()
        c1, c2 = cfg.d, 2 * cfg.d
        kw = dict(device=device, dtype=dtype)
        self.stem = nn.Sequential(nn.Conv2d(3, c1, 7, stride=2, padding=3, bias=False, **kw),
                                  nn.BatchNorm2d(c1, **kw), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1))
        self.stage1 = nn.Sequential(*(ResNetBlock(c1, c1, **kw) for _ in range(cfg.layers)))
        self.stage2 = nn.Sequential(ResNetBlock(c1, c2, stride=2, **kw),
                                    *(ResNetBlock(c2, c2, **kw) for _ in range(cfg.layers - 1)))
        self.head = nn.Linear(c2, cfg.classes, **kw)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stage2(self.stage1(self.stem(images)))
        return self.head(x.mean((2, 3)))


class WithLoss(nn.Module):
    """A training step's forward: the model, then cross-entropy (in f32) against ``targets``.

    The targets are the last input; logits of any rank are flattened to (rows, classes).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        *args, targets = inputs
        logits = self.model(*args)
        # At least f32 (bf16 logits are upcast, as in real training); f64 stays f64 (perf.grad_check's reference).
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return F.cross_entropy(logits.flatten(0, -2), targets.flatten())


# ----------------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of one model; ``batch`` is set per workload (small or large)."""

    d: int
    layers: int
    heads: int = 1
    kv_heads: int = 1
    hidden: int = 0
    vocab: int = 0
    seq: int = 0
    image: int = 0
    patch: int = 16
    classes: int = 1000
    batch: int = 1


@dataclass(frozen=True)
class ModelSpec:
    """One architecture: its module, its configs and its inputs."""

    name: str
    module: Callable[..., nn.Module]
    config: ModelConfig
    tiny: ModelConfig
    batches: dict  # "small" / "large" -> batch size
    inputs: Callable[[ModelConfig, torch.device, torch.dtype], tuple]  # model inputs (no targets)
    targets: Callable[[ModelConfig, torch.device], torch.Tensor]
    description: str

    def config_for(self, batch: str, tiny: bool) -> ModelConfig:
        if tiny:
            return self.tiny
        return replace(self.config, batch=self.batches[batch])


def _token_ids(cfg: ModelConfig, device, dtype) -> tuple:
    return (torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), device=device),)


def _ids_and_mask(cfg: ModelConfig, device, dtype) -> tuple:
    """Token ids and BERT's padding mask: row i keeps seq - i * seq // (4 * batch) tokens."""
    ids = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), device=device)
    lengths = torch.tensor([cfg.seq - i * cfg.seq // (4 * cfg.batch) for i in range(cfg.batch)], device=device)
    mask = (torch.arange(cfg.seq, device=device)[None, :] < lengths[:, None]).to(torch.int64)
    return ids, mask


def _images(cfg: ModelConfig, device, dtype) -> tuple:
    return (torch.randn(cfg.batch, 3, cfg.image, cfg.image, device=device, dtype=dtype),)


def _token_targets(cfg: ModelConfig, device) -> torch.Tensor:
    return torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), device=device)


def _class_targets(cfg: ModelConfig, device) -> torch.Tensor:
    return torch.randint(0, cfg.classes, (cfg.batch,), device=device)


MODELS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        ModelSpec(
            "llama", LlamaLM,
            ModelConfig(d=512, layers=2, heads=8, kv_heads=2, hidden=1376, vocab=8192, seq=256),
            ModelConfig(d=32, layers=1, heads=4, kv_heads=2, hidden=64, vocab=64, seq=8, batch=2),
            {"small": 1, "large": 16}, _token_ids, _token_targets,
            "LLaMA-style decoder (RMSNorm, RoPE, GQA 8/2 heads via SDPA, SwiGLU), 2 layers, d 512",
        ),
        ModelSpec(
            "gpt", GptLM,
            ModelConfig(d=768, layers=2, heads=12, hidden=3072, vocab=8192, seq=256),
            ModelConfig(d=32, layers=1, heads=4, hidden=64, vocab=64, seq=8, batch=2),
            {"small": 1, "large": 16}, _token_ids, _token_targets,
            "GPT-2-style decoder (pre-LayerNorm, causal SDPA, tanh-GELU MLP), 2 layers, d 768",
        ),
        ModelSpec(
            "bert", BertMLM,
            ModelConfig(d=768, layers=2, heads=12, hidden=3072, vocab=8192, seq=256),
            ModelConfig(d=32, layers=1, heads=4, hidden=64, vocab=64, seq=8, batch=2),
            {"small": 2, "large": 16}, _ids_and_mask, _token_targets,
            "BERT-style encoder (post-LayerNorm, SDPA with an additive padding mask, GELU, MLM head), 2 layers, d 768",
        ),
        ModelSpec(
            "vit", ViT,
            ModelConfig(d=384, layers=2, heads=6, hidden=1536, image=224, patch=16),
            ModelConfig(d=32, layers=1, heads=4, hidden=64, image=32, patch=16, classes=10, batch=2),
            {"small": 2, "large": 64}, _images, _class_targets,
            "ViT-S/16-style (patch conv, CLS token, pos embedding, pre-norm SDPA blocks), 2 layers, 224px",
        ),
        ModelSpec(
            "convnext", ConvNeXt,
            ModelConfig(d=96, layers=2, image=224),
            ModelConfig(d=8, layers=1, image=32, classes=10, batch=2),
            {"small": 2, "large": 64}, _images, _class_targets,
            "ConvNeXt-T-style 2 stages x 2 blocks (dw 7x7 conv, channels-last LayerNorm, Linear MLP, GELU, layer scale)",
        ),
        ModelSpec(
            "resnet", ResNet,
            ModelConfig(d=64, layers=2, image=224),
            ModelConfig(d=8, layers=1, image=32, classes=10, batch=2),
            {"small": 2, "large": 64}, _images, _class_targets,
            "ResNet-18-style stem and 2 stages x 2 basic blocks (conv, BatchNorm, ReLU, residual add)",
        ),
    )
}


def build_model(spec: ModelSpec, batch: str, train: bool, device, dtype, tiny: bool) -> nn.Module:
    """The module a backend compiles: the model (inference) or model + loss (training)."""
    cfg = spec.config_for(batch, tiny)
    model = spec.module(cfg, device=device, dtype=dtype)
    return WithLoss(model.train()) if train else model.eval()


def model_inputs(spec: ModelSpec, batch: str, train: bool, device, dtype, tiny: bool) -> tuple:
    """Seeded by the caller (Workload.instantiate); targets last for a training step."""
    cfg = spec.config_for(batch, tiny)
    inputs = spec.inputs(cfg, device, dtype)
    return inputs + (spec.targets(cfg, device),) if train else inputs


# (kind, dtype suffix, batch) of the model tier: every model covers inference and training, f32 and
# bf16, a small and a large batch, in three workloads (a full cross product is 8 per model and
# would not fit two 9-minute GPU calls with five backends; the other five are registered too,
# outside the tier, for --all or --only).
TIER: tuple[tuple[str, str, str], ...] = (
    ("fwd", "bf16", "small"),  # host-bound inference, as served
    ("fwd", "f32", "large"),  # GPU-bound inference
    ("train", "bf16", "small"),  # host-bound training step, in bf16 as models are trained
)
ALL_COMBINATIONS: tuple[tuple[str, str, str], ...] = tuple(
    (kind, dt, batch) for kind in ("fwd", "train") for dt in ("f32", "bf16") for batch in ("small", "large")
)

#: Relative run cost of one workload across the five model backends (compiles dominate): what
#: ``--shard`` balances.  A training step compiles a forward and a backward graph.
COST = {"fwd": 1.0, "train": 2.2}


def workload_name(model: str, kind: str, dtype: str, batch: str) -> str:
    return f"{model}_{kind}_{dtype}_{batch}"


__all__ = [
    "MODELS",
    "TIER",
    "ALL_COMBINATIONS",
    "COST",
    "ModelConfig",
    "ModelSpec",
    "WithLoss",
    "build_model",
    "model_inputs",
    "workload_name",
]
