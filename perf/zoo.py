"""The model zoo: timm and transformers models from configs (random weights), bf16 inference and
training steps, checked against an fp64 eager reference.

``perf/zoo_models.txt`` is the one list (suite, name, model, batch, size, depth cut).  Registration
reads it and asks ``importlib.util.find_spec`` whether timm / transformers are installed; nothing of
either library is imported until a workload is built, so ``python -m perf --list --tag zoo`` works
anywhere.  Per model and suite three kinds of workload:

* ``zoo_<suite>_<name>_fwd_bf16``    inference (eval mode, no grad);
* ``zoo_<suite>_<name>_train_bf16``  a training step as PyTorch's dynamo benchmark runner times it
  (benchmarks/dynamo/common.py): forward, cross-entropy (f32) against random targets, backward, and
  ``torch.optim.SGD(lr=0.01, foreach=True)``'s step, which runs eagerly (the runner wraps it in
  ``torch._dynamo.disable``: compiling it costs compile time for ~1% of step time);
* ``zoo_hf_<name>_dyn_bf16``         (text models) inference at three sequence lengths in one
  process, as a server sees them: recompiles and step time at each length
  (:meth:`perf.measure.Runner.measure_lengths`).

The first call of every fwd/train pair is also the accuracy check (:func:`checked_first_call`): the
output (inference) or the loss and every parameter's gradient (training) against bf16 eager and an
fp64 eager copy of the same model and inputs, with ``torch._dynamo.utils.same`` and the tolerance
the runner gives inductor (timm_models.py / huggingface.py ``get_tolerance_and_cosine_flag``:
1e-3 inference, 1e-2 training). Training-time randomness (dropout, stochastic depth) is off in
every model, so the check compares the same computation.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn

from perf.gpu_turn import gpu_turn

LIST_FILE = Path(__file__).with_name("zoo_models.txt")
SUITES = {"timm": "timm", "hf": "transformers"}  # suite -> the library it needs
DTYPE = torch.bfloat16
#: Sequence lengths of the dynamic-shape run, as fractions of the model's listed length.
DYNAMIC_FRACTIONS = (0.25, 0.5, 1.0)
#: Accuracy tolerance per kind (PyTorch benchmarks/dynamo timm_models.py and huggingface.py).
TOLERANCE = {"fwd": 1e-3, "train": 1e-2}
TINY_BATCH, TINY_SEQ = 2, 16


@dataclass(frozen=True)
class ZooEntry:
    """One line of perf/zoo_models.txt."""

    suite: str  # "timm" or "hf"
    name: str  # workload stem
    model: str  # timm model name or transformers class name
    batch: int
    size: int  # image side, sequence length, audio samples or mel frames (see the list file)
    cut: str  # depth cut, "-" for none

    @property
    def library(self) -> str:
        return SUITES[self.suite]

    def workload(self, kind: str) -> str:
        return f"zoo_{self.suite}_{self.name}_{kind}_bf16"


def read_list(path: Path = LIST_FILE) -> list[ZooEntry]:
    """The entries of the list file; ValueError on a malformed line or a duplicate name."""
    entries: list[ZooEntry] = []
    for num, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 6 or parts[0] not in SUITES:
            raise ValueError(f"{path.name}:{num}: want 'suite name model batch size cut', got {line!r}")
        suite, name, model, batch, size, cut = parts
        entries.append(ZooEntry(suite, name, model, int(batch), int(size), cut))
    names = [(e.suite, e.name) for e in entries]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"{path.name}: duplicate entries {sorted(dup)}")
    return entries


def library_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def missing_libraries() -> list[str]:
    return [lib for lib in SUITES.values() if not library_available(lib)]


# --------------------------------------------------------------------------- depth cuts


def _value(text: str) -> Any:
    items = [int(v) if re.fullmatch(r"-?\d+", v) else v for v in text.split(",")]
    return tuple(items) if len(items) > 1 else items[0]


def parse_cut(cut: str) -> tuple[dict, list[tuple[str, int]]]:
    """('key=v' keywords, [(path, keep)] slices) of a cut field."""
    kwargs: dict = {}
    slices: list[tuple[str, int]] = []
    for part in (p.strip() for p in cut.split(";")):
        if not part or part == "-":
            continue
        m = re.fullmatch(r"([\w.*]+)\[:(\d+)\]", part)
        if m:
            slices.append((m.group(1), int(m.group(2))))
        elif "=" in part:
            key, val = part.split("=", 1)
            kwargs[key] = _value(val)
        else:
            raise ValueError(f"bad depth cut {part!r}")
    return kwargs, slices


def _keep_first(module: nn.Module, keep: int) -> None:
    names = list(module._modules)
    for name in names[keep:]:
        del module._modules[name]


def apply_slices(model: nn.Module, slices: list[tuple[str, int]]) -> nn.Module:
    """Keeps the first N children of each named submodule ("*" matches every child)."""
    for path, keep in slices:
        targets = [model]
        for part in path.split("."):
            targets = [c for t in targets for c in (t.children() if part == "*" else [getattr(t, part)])]
        for t in targets:
            _keep_first(t, keep)
    return model


# --------------------------------------------------------------------------- timm


def build_timm(entry: ZooEntry) -> nn.Module:
    import timm

    kwargs, slices = parse_cut(entry.cut)
    return without_randomness(apply_slices(timm.create_model(entry.model, pretrained=False, **kwargs), slices))


def without_randomness(model: nn.Module) -> nn.Module:
    """`model` with its training-time randomness off: stochastic depth (timm's DropPath, DropBlock:
    a `drop_prob`) and dropout at probability 0, as the transformers configs are built
    (`_NO_RANDOMNESS`). Why: a random step is compared against eager copies that draw other masks,
    so its accuracy check says nothing (timm's Swin-T defaults to `drop_path_rate=0.1`: its tiny CPU
    training step failed the check against eager itself); and the zoo measures the models' compute,
    the same on every backend."""
    for module in model.modules():
        if isinstance(getattr(module, "drop_prob", None), float):
            module.drop_prob = 0.0
        if isinstance(module, nn.modules.dropout._DropoutNd):
            module.p = 0.0
    return model


# --------------------------------------------------------------------------- transformers

#: Dropout and other training-time randomness off (unknown keys are plain attributes of a config).
_NO_RANDOMNESS = dict(
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0, dropout=0.0,
    attention_dropout=0.0, activation_dropout=0.0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    dropout_rate=0.0, hidden_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0,
    encoder_layerdrop=0.0, decoder_layerdrop=0.0, mask_time_prob=0.0, mask_feature_prob=0.0,
    qa_dropout=0.0, seq_classif_dropout=0.0, classifier_dropout=0.0,
)


@dataclass(frozen=True)
class HFModel:
    """How to build one transformers class: its config class and sizes, the config keys a
    ``layers=N`` cut sets, and what it takes (``text``, ``causal``, ``seq2seq``, ``whisper``,
    ``audio``, ``image``)."""

    config: str
    sizes: dict
    layer_keys: tuple[str, ...]
    inputs: str
    output: str = "logits"  # the output field the zoo returns (CLIPVisionModel: pooler_output)


_BERT = dict(vocab_size=30522, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
             max_position_embeddings=512)
_DECODER = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                max_position_embeddings=2048)

HF_MODELS: dict[str, HFModel] = {
    "BertForMaskedLM": HFModel("BertConfig", _BERT, ("num_hidden_layers",), "text"),
    "RobertaForMaskedLM": HFModel("RobertaConfig", dict(_BERT, vocab_size=50265, max_position_embeddings=514,
                                                        pad_token_id=1), ("num_hidden_layers",), "text"),
    "DistilBertForMaskedLM": HFModel("DistilBertConfig", dict(vocab_size=30522, dim=768, n_heads=12, hidden_dim=3072),
                                     ("n_layers",), "text"),
    "ElectraForMaskedLM": HFModel("ElectraConfig", dict(vocab_size=30522, embedding_size=128, hidden_size=256,
                                                        num_attention_heads=4, intermediate_size=1024),
                                  ("num_hidden_layers",), "text"),
    "AlbertForMaskedLM": HFModel("AlbertConfig", dict(vocab_size=30000, embedding_size=128, hidden_size=768,
                                                      num_attention_heads=12, intermediate_size=3072),
                                 ("num_hidden_layers",), "text"),
    "GPT2LMHeadModel": HFModel("GPT2Config", dict(vocab_size=50257, n_positions=1024, n_embd=768, n_head=12),
                               ("n_layer",), "causal"),
    "GPTNeoXForCausalLM": HFModel("GPTNeoXConfig", dict(vocab_size=50432, hidden_size=1024, num_attention_heads=16,
                                                        intermediate_size=4096, rotary_pct=0.25),
                                  ("num_hidden_layers",), "causal"),
    "OPTForCausalLM": HFModel("OPTConfig", dict(vocab_size=50272, hidden_size=768, num_attention_heads=12,
                                                ffn_dim=3072, word_embed_proj_dim=768),
                              ("num_hidden_layers",), "causal"),
    "LlamaForCausalLM": HFModel("LlamaConfig", dict(_DECODER, num_key_value_heads=4), ("num_hidden_layers",), "causal"),
    "MistralForCausalLM": HFModel("MistralConfig", dict(_DECODER, num_key_value_heads=4, sliding_window=256),
                                  ("num_hidden_layers",), "causal"),
    "Qwen2ForCausalLM": HFModel("Qwen2Config", dict(_DECODER, num_key_value_heads=4), ("num_hidden_layers",), "causal"),
    "T5ForConditionalGeneration": HFModel("T5Config", dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048,
                                                           num_heads=8),
                                          ("num_layers", "num_decoder_layers"), "seq2seq"),
    "BartForConditionalGeneration": HFModel("BartConfig", dict(vocab_size=50265, d_model=768, encoder_attention_heads=12,
                                                               decoder_attention_heads=12, encoder_ffn_dim=3072,
                                                               decoder_ffn_dim=3072),
                                            ("encoder_layers", "decoder_layers"), "seq2seq"),
    "WhisperForConditionalGeneration": HFModel("WhisperConfig", dict(vocab_size=51865, d_model=384,
                                                                     encoder_attention_heads=6, decoder_attention_heads=6,
                                                                     encoder_ffn_dim=1536, decoder_ffn_dim=1536,
                                                                     num_mel_bins=80),
                                               ("encoder_layers", "decoder_layers"), "whisper"),
    "Wav2Vec2ForCTC": HFModel("Wav2Vec2Config", dict(vocab_size=32, hidden_size=768, num_attention_heads=12,
                                                     intermediate_size=3072), ("num_hidden_layers",), "audio"),
    "ViTForImageClassification": HFModel("ViTConfig", dict(hidden_size=768, num_attention_heads=12,
                                                           intermediate_size=3072, image_size=224, patch_size=16,
                                                           num_labels=1000), ("num_hidden_layers",), "image"),
    "CLIPVisionModel": HFModel("CLIPVisionConfig", dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                                                        image_size=224, patch_size=16),
                               ("num_hidden_layers",), "image", output="pooler_output"),
}

#: Inputs whose length a server varies (the dynamic-shape run).
TEXT_INPUTS = ("text", "causal", "seq2seq")


def _set_attention(cfg: Any, impl: str) -> None:
    for attr in ("_attn_implementation", "attn_implementation"):
        try:
            setattr(cfg, attr, impl)
            return
        except Exception:  # noqa: BLE001  (a read-only property in some releases)
            continue


def build_hf_module(entry: ZooEntry) -> nn.Module:
    """The transformers model of ``entry`` with SDPA attention (eager where the class has none)."""
    import transformers

    spec = HF_MODELS[entry.model]
    kwargs, slices = parse_cut(entry.cut)
    sizes = dict(_NO_RANDOMNESS, **spec.sizes)
    layers = kwargs.pop("layers", None)
    if layers is not None:
        sizes.update({key: layers for key in spec.layer_keys})
    sizes.update(kwargs)
    cls = getattr(transformers, entry.model)
    last: Optional[Exception] = None
    for impl in ("sdpa", "eager"):
        cfg = getattr(transformers, spec.config)(**sizes)
        _set_attention(cfg, impl)
        try:
            return apply_slices(cls(cfg), slices)
        except (ValueError, ImportError) as exc:  # "does not support SDPA"
            last = exc
    raise RuntimeError(f"{entry.model}: no attention implementation works") from last


class HFOutput(nn.Module):
    """A transformers model as a plain callable: its inputs -> one tensor (logits, or the pooled
    output of a vision encoder); no KV cache."""

    def __init__(self, model: nn.Module, spec: HFModel):
        super().__init__()
        self.model = model
        self.kind = spec.inputs
        self.output = spec.output

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.kind == "text":
            out = self.model(input_ids=inputs[0], attention_mask=inputs[1])
        elif self.kind == "causal":
            out = self.model(input_ids=inputs[0], use_cache=False)
        elif self.kind == "seq2seq":
            out = self.model(input_ids=inputs[0], attention_mask=inputs[1], decoder_input_ids=inputs[2], use_cache=False)
        elif self.kind == "whisper":
            out = self.model(input_features=inputs[0], decoder_input_ids=inputs[1], use_cache=False)
        elif self.kind == "audio":
            out = self.model(input_values=inputs[0])
        else:
            out = self.model(pixel_values=inputs[0])
        return getattr(out, self.output)


def _conv_frames(samples: int) -> int:
    """Wav2Vec2's feature-encoder output length (default conv kernels and strides)."""
    for k, s in zip((10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2)):
        samples = (samples - k) // s + 1
    return samples


# --------------------------------------------------------------------------- inputs


def shape_of(entry: ZooEntry, tiny: bool, length: Optional[int] = None) -> tuple[int, int]:
    """(batch, size) of a run: the listed one, a tiny one (CPU tests) or another length."""
    if tiny:
        fixed = entry.suite == "timm" or HF_MODELS[entry.model].inputs in ("image", "whisper")
        size = entry.size if fixed else (16000 if HF_MODELS[entry.model].inputs == "audio" else TINY_SEQ)
        return TINY_BATCH, size
    return entry.batch, length or entry.size


def model_inputs(entry: ZooEntry, device, tiny: bool, length: Optional[int] = None, dtype: torch.dtype = DTYPE) -> tuple:
    """The model's inputs (no targets), seeded by the caller; floating inputs in ``dtype``."""
    batch, size = shape_of(entry, tiny, length)
    if entry.suite == "timm":
        return (torch.randn(batch, 3, size, size, device=device, dtype=dtype),)
    spec = HF_MODELS[entry.model]
    vocab = spec.sizes.get("vocab_size", 1000)
    if spec.inputs in ("text", "causal", "seq2seq"):
        ids = torch.randint(0, vocab, (batch, size), device=device)
        if spec.inputs == "causal":
            return (ids,)
        # padded batch: row i keeps size - i * size / (4 * batch) tokens
        lengths = torch.tensor([size - i * size // (4 * batch) for i in range(batch)], device=device)
        mask = (torch.arange(size, device=device)[None, :] < lengths[:, None]).to(torch.int64)
        if spec.inputs == "text":
            return ids, mask
        return ids, mask, torch.randint(0, vocab, (batch, max(1, size // 4)), device=device)
    if spec.inputs == "whisper":
        return (torch.randn(batch, 80, size, device=device, dtype=dtype),
                torch.randint(0, vocab, (batch, 64 if not tiny else 8), device=device))
    if spec.inputs == "audio":
        return (torch.randn(batch, size, device=device, dtype=dtype),)
    return (torch.randn(batch, 3, size, size, device=device, dtype=dtype),)


def target_shape(entry: ZooEntry, tiny: bool) -> tuple[tuple[int, ...], int]:
    """(shape, classes) of the random targets of a training step."""
    batch, size = shape_of(entry, tiny)
    if entry.suite == "timm":
        return (batch,), 1000
    spec = HF_MODELS[entry.model]
    vocab = spec.sizes.get("vocab_size", 1000)
    if spec.inputs in ("text", "causal"):
        return (batch, size), vocab
    if spec.inputs == "seq2seq":
        return (batch, max(1, size // 4)), vocab
    if spec.inputs == "whisper":
        return (batch, 64 if not tiny else 8), vocab
    if spec.inputs == "audio":
        return (batch, _conv_frames(size)), vocab
    if spec.output == "pooler_output":
        return (batch,), spec.sizes["hidden_size"]
    return (batch,), spec.sizes.get("num_labels", 1000)


# --------------------------------------------------------------------------- building


def build_model(entry: ZooEntry, device, train: bool, dtype: torch.dtype = DTYPE) -> nn.Module:
    """The entry's model in ``dtype`` (bf16: the zoo's) on ``device``, in train or eval mode."""
    with torch.device(device):
        if entry.suite == "timm":
            model = build_timm(entry)
        else:
            model = HFOutput(build_hf_module(entry), HF_MODELS[entry.model])
    model = model.to(device=device, dtype=dtype)
    return model.train() if train else model.eval()


def training_step(entry: ZooEntry, device, dtype: torch.dtype = DTYPE) -> Callable:
    """forward, cross-entropy, backward, SGD step (eager, as PyTorch's dynamo runner has it);
    ``.module`` is the loss module, ``.params`` its parameters (their grads are cleared before
    every step by :class:`perf.workloads.Instance`)."""
    from perf.models import WithLoss

    module = WithLoss(build_model(entry, device, train=True, dtype=dtype))
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=0.01, foreach=True)
    optimizer_step = torch._dynamo.disable(optimizer.step)

    def train_step(*inputs: torch.Tensor) -> torch.Tensor:
        loss = module(*inputs)
        loss.backward()
        optimizer_step()
        return loss.detach()

    train_step.module = module  # type: ignore[attr-defined]
    train_step.params = tuple(params)  # type: ignore[attr-defined]
    return train_step


def training_inputs(entry: ZooEntry, device, tiny: bool, dtype: torch.dtype = DTYPE) -> tuple:
    shape, classes = target_shape(entry, tiny)
    return model_inputs(entry, device, tiny, dtype=dtype) + (torch.randint(0, classes, shape, device=device),)


# --------------------------------------------------------------------------- accuracy


def _floating(t: Any, dtype: torch.dtype) -> Any:
    return t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def _results(module: nn.Module, out: Any, train: bool) -> list:
    """What is compared: the output; in training the loss and every parameter's gradient."""
    if not train:
        return [out]
    return [out] + [p.grad for p in module.parameters() if p.requires_grad]


def _eager_results(module: nn.Module, inputs: tuple, train: bool) -> list:
    if train:
        for p in module.parameters():
            p.grad = None
        loss = module(*inputs)
        loss.backward()
        return [r.detach().clone() if isinstance(r, torch.Tensor) else r for r in _results(module, loss.detach(), True)]
    with torch.no_grad():
        return [module(*inputs).detach().clone()]


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.sqrt(torch.mean(torch.square(a.double() - b.double()))).item()


def compare(ref: list, res: list, ref64: list, tol: float) -> dict:
    """``torch._dynamo.utils.same`` of res against ref with the fp64 reference, and the largest
    rmse(res, fp64) / rmse(ref, fp64) over the compared tensors (1.0: as accurate as eager). A tensor
    whose fp64 values are smaller than eager's own error (rms below rmse(ref, fp64)) carries no
    signal in this precision and is left out of the ratio: a gradient that is zero in exact math
    (PoolFormer's GroupNorm biases before `pool(y) - y`: 1e-21 in fp64) compares two roundings."""
    from torch._dynamo.utils import same

    messages: list[str] = []
    missing = [i for i, (a, b) in enumerate(zip(ref, res)) if (a is None) != (b is None)]
    keep = [i for i, a in enumerate(ref) if a is not None and i not in missing]
    ref, res, ref64 = [ref[i] for i in keep], [res[i] for i in keep], [ref64[i] for i in keep]
    ok = not missing and bool(same(ref, res, fp64_ref=ref64, tol=tol,
                                   log_error=lambda msg, *a: messages.append(msg % a if a else msg)))
    if missing:
        messages.insert(0, f"{len(missing)} result(s) missing on one side (a gradient not computed)")
    worst = 0.0
    for a, b, c in zip(ref, res, ref64):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.is_floating_point() and a.numel():
            ref_err, res_err = _rmse(c, a), _rmse(c, b)
            if _rmse(c, torch.zeros_like(c)) < ref_err:
                continue  # zero within eager's own error: no signal to compare
            worst = max(worst, res_err / ref_err if ref_err > 0 else (1.0 if res_err == 0 else math.inf))
    out = {"accuracy": "pass" if ok else "fail", "acc_rmse_ratio": worst, "acc_tol": tol}
    if not ok:
        out["acc_detail"] = "; ".join(messages)[:300] or "outputs differ"
    return out


#: The references of the last workload checked, on the host: (key, ref, ref64, why).  Every backend
#: of a workload builds the same model and inputs (same seed), so they are computed once.
_REFERENCES: list = []


def _cpu(results: list) -> list:
    return [r.cpu() if isinstance(r, torch.Tensor) else r for r in results]


def references(inst: Any, module: nn.Module, train: bool, key: Optional[str]) -> tuple:
    """(bf16 eager results, fp64 eager results, None) on the host, or (None, None, why)."""
    if key is not None and _REFERENCES and _REFERENCES[0][0] == key:
        return _REFERENCES[0][1:]
    try:
        with gpu_turn():  # the fp64 copy fills the GPU: one process at a time
            ref, ref64 = _eager_pair(module, inst, train)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # give the copies' memory back to the GPU's other processes
    except Exception as exc:  # noqa: BLE001  (no reference: the pair is still timed)
        found = (None, None, f"{type(exc).__name__}: {exc}".replace("\n", " ")[:200])
    else:
        found = (ref, ref64, None)
    _REFERENCES[:] = [(key, *found)] if key is not None else []
    return found


def _eager_pair(module: nn.Module, inst: Any, train: bool) -> tuple[list, list]:
    """(bf16 eager results, fp64 eager results) of copies of ``module`` on the host."""
    ref = _cpu(_eager_results(copy.deepcopy(module), inst.inputs, train))
    ref64 = _cpu(_eager_results(copy.deepcopy(module).to(torch.float64),
                                tuple(_floating(t, torch.float64) for t in inst.inputs), train))
    return ref, ref64


def checked_first_call(inst: Any, step: Callable[[], Any], kind: str, key: Optional[str] = None) -> tuple[float, dict]:
    """Runs the first (compiling) call of ``step`` synchronized and timed, and checks what it
    computed against bf16 eager and fp64 eager copies of the model taken before it (computed once
    per ``key``: the workload's name).  Returns (seconds, accuracy fields for the record)."""
    train = kind == "train"
    module = inst.fn.module if train else inst.fn
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    ref, ref64, why = references(inst, module, train, key)
    for p in module.parameters():
        p.grad = None
    sync()
    t0 = time.perf_counter()
    out = step()
    sync()
    seconds = time.perf_counter() - t0
    res = _cpu([r.detach().clone() if isinstance(r, torch.Tensor) else r for r in _results(module, out, train)])
    if ref is None:
        return seconds, {"accuracy": "no reference", "acc_detail": why, "acc_tol": TOLERANCE[kind]}
    return seconds, compare(ref, res, ref64, TOLERANCE[kind])


# --------------------------------------------------------------------------- dynamic shapes


def dynamic_lengths(entry: ZooEntry, tiny: bool = False) -> tuple[int, ...]:
    base = shape_of(entry, tiny)[1]
    return tuple(max(8, int(base * f)) for f in DYNAMIC_FRACTIONS)
