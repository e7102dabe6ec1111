"""The extra model tier: ``transformers`` and ``timm`` models built from configs, random weights.

Registered only where the library is installed (``importlib.util.find_spec``; nothing is imported
until a workload is built, so ``--list`` stays fast) and only run with ``--tag hf`` / ``--tag timm``
(or ``--all`` / ``--only``): they are the libraries' own module code, a check that the plain models
of :mod:`perf.models` are representative, not part of the acceptance run.  Nothing is downloaded:
every model comes from a config (``LlamaConfig(...)``, ``timm.create_model(..., pretrained=False)``).
Depths are cut to 2 layers (ConvNeXt: one block per stage) so a compile takes seconds; dropout is
off, as in :mod:`perf.models`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from perf.models import WithLoss


def library_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


class HFLogits(nn.Module):
    """A transformers model as a plain callable: token ids (and a padding mask) -> logits."""

    def __init__(self, model: nn.Module, decoder: bool):
        super().__init__()
        self.model = model
        self.decoder = decoder

    def forward(self, ids: torch.Tensor, attention_mask: "torch.Tensor | None" = None) -> torch.Tensor:
        kwargs = {"input_ids": ids}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if self.decoder:
            kwargs["use_cache"] = False
        return self.model(**kwargs).logits


def _hf_config(cls_name: str, tiny: bool, real: dict, small: dict):
    import transformers

    cfg = getattr(transformers, cls_name)(**(small if tiny else real))
    # SDPA attention, as the plain models use; older releases name the field differently.
    for attr in ("_attn_implementation", "attn_implementation"):
        try:
            setattr(cfg, attr, "sdpa")
            break
        except Exception:  # noqa: BLE001  (a read-only property in some releases)
            continue
    return cfg


def _hf_llama(tiny: bool) -> nn.Module:
    import transformers

    cfg = _hf_config(
        "LlamaConfig", tiny,
        dict(vocab_size=8192, hidden_size=512, intermediate_size=1376, num_hidden_layers=2, num_attention_heads=8,
             num_key_value_heads=2, max_position_embeddings=256),
        dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=8),
    )
    return HFLogits(transformers.LlamaForCausalLM(cfg), decoder=True)


def _hf_gpt2(tiny: bool) -> nn.Module:
    import transformers

    off = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    cfg = _hf_config(
        "GPT2Config", tiny,
        dict(vocab_size=8192, n_positions=256, n_embd=768, n_layer=2, n_head=12, **off),
        dict(vocab_size=64, n_positions=8, n_embd=32, n_layer=1, n_head=4, **off),
    )
    return HFLogits(transformers.GPT2LMHeadModel(cfg), decoder=True)


def _hf_bert(tiny: bool) -> nn.Module:
    import transformers

    off = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    cfg = _hf_config(
        "BertConfig", tiny,
        dict(vocab_size=8192, hidden_size=768, num_hidden_layers=2, num_attention_heads=12, intermediate_size=3072,
             max_position_embeddings=256, **off),
        dict(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=8, **off),
    )
    return HFLogits(transformers.BertForMaskedLM(cfg), decoder=False)


def _timm_vit(tiny: bool) -> nn.Module:
    import timm

    if tiny:
        return timm.create_model("vit_small_patch16_224", pretrained=False, img_size=32, embed_dim=32, depth=1,
                                 num_heads=4, num_classes=10)
    return timm.create_model("vit_small_patch16_224", pretrained=False, depth=2)


def _timm_convnext(tiny: bool) -> nn.Module:
    import timm

    if tiny:
        return timm.create_model("convnext_tiny", pretrained=False, depths=(1, 1, 1, 1), dims=(8, 16, 32, 64),
                                 num_classes=10)
    return timm.create_model("convnext_tiny", pretrained=False, depths=(1, 1, 1, 1))


@dataclass(frozen=True)
class ExternalSpec:
    """One library model: how to build it (tiny or real), its inputs and its training targets."""

    name: str  # workload name prefix, e.g. "hf_llama"
    library: str  # "transformers" or "timm"
    tag: str  # "hf" or "timm": the opt-in tag
    family: str  # "llama", "gpt", "bert", "vit", "convnext"
    make: Callable[[bool], nn.Module]
    shape: dict  # tiny (bool) -> (batch, seq or image side)
    vocab: dict  # tiny -> vocab or classes
    description: str


def _tokens(spec: ExternalSpec, device, dtype, tiny: bool) -> tuple:
    batch, seq = spec.shape[tiny]
    ids = torch.randint(0, spec.vocab[tiny], (batch, seq), device=device)
    if spec.family != "bert":
        return (ids,)
    lengths = torch.tensor([seq - i * seq // (4 * batch) for i in range(batch)], device=device)
    return ids, (torch.arange(seq, device=device)[None, :] < lengths[:, None]).to(torch.int64)


def _images(spec: ExternalSpec, device, dtype, tiny: bool) -> tuple:
    batch, side = spec.shape[tiny]
    return (torch.randn(batch, 3, side, side, device=device, dtype=dtype),)


def _targets(spec: ExternalSpec, device, tiny: bool) -> torch.Tensor:
    batch, seq = spec.shape[tiny]
    shape = (batch,) if spec.library == "timm" else (batch, seq)
    return torch.randint(0, spec.vocab[tiny], shape, device=device)


SPECS: tuple[ExternalSpec, ...] = (
    ExternalSpec("hf_llama", "transformers", "hf", "llama", _hf_llama, {False: (1, 256), True: (2, 8)},
                 {False: 8192, True: 64}, "transformers LlamaForCausalLM from a config (2 layers, d 512, GQA 8/2)"),
    ExternalSpec("hf_gpt2", "transformers", "hf", "gpt", _hf_gpt2, {False: (1, 256), True: (2, 8)},
                 {False: 8192, True: 64}, "transformers GPT2LMHeadModel from a config (2 layers, d 768)"),
    ExternalSpec("hf_bert", "transformers", "hf", "bert", _hf_bert, {False: (2, 256), True: (2, 8)},
                 {False: 8192, True: 64}, "transformers BertForMaskedLM from a config (2 layers, d 768, padding mask)"),
    ExternalSpec("timm_vit", "timm", "timm", "vit", _timm_vit, {False: (2, 224), True: (2, 32)},
                 {False: 1000, True: 10}, "timm vit_small_patch16_224, depth 2, pretrained=False"),
    ExternalSpec("timm_convnext", "timm", "timm", "convnext", _timm_convnext, {False: (2, 224), True: (2, 32)},
                 {False: 1000, True: 10}, "timm convnext_tiny, one block per stage, pretrained=False"),
)

#: (kind, dtype suffix) of each library model, small batch only.
COMBINATIONS: tuple[tuple[str, str], ...] = (("fwd", "bf16"), ("train", "f32"))


def build(spec: ExternalSpec, train: bool, device, dtype, tiny: bool) -> nn.Module:
    """The library model on ``device`` in ``dtype`` (eval for inference, + loss for training)."""
    with torch.device(device):
        model = spec.make(tiny)
    model = model.to(device=device, dtype=dtype)
    return WithLoss(model.train()) if train else model.eval()


def inputs(spec: ExternalSpec, train: bool, device, dtype, tiny: bool) -> tuple:
    made = (_images if spec.library == "timm" else _tokens)(spec, device, dtype, tiny)
    return made + (_targets(spec, device, tiny),) if train else made


def available_specs() -> list[ExternalSpec]:
    return [s for s in SPECS if library_available(s.library)]
