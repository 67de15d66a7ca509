"""Model zoo: tiny transformers and timm models trained a few steps eager and compiled (issue 23).

Each model is built with random weights from a small config (2 layers, width 64-128, sequences
of 32 tokens, images of 32-96 pixels, batch 2-4; no download, no network) and dropout off
(every dropout probability in its config 0, and any dropout or drop-path module left set to 0),
so eager and compiled runs can be compared exactly. For each backend (eager, and torch.compile
with aot_eager, aotgrad, inductor, aotgrad_inductor) it measures:

  match        --steps training steps (forward, loss, backward, SGD step) from eager's initial
               weights and inputs; every step's loss, and after the last step every gradient,
               parameter and buffer, against eager's. Per tensor the error is max|a - e| over
               max|e| (relative to the tensor's largest value: fused reductions round
               differently, and a small element carries the rounding of the large ones), or
               over 1% of the largest max|e| among tensors of its kind where that is larger
               (a gradient that is zero in exact arithmetic holds only rounding noise).
               The first step's gradients are compared too ("step1 grad ..."): where only
               the later tensors differ, the runs drifted apart through the SGD steps
               (rounding amplified, as by BatchNorm over a few elements) rather than
               computing a different gradient. Pass when every tensor is within the
               backend's tolerance (TOLERANCES): 1e-5 for eager (itself, run again), aot_eager
               and aotgrad (the same ops as eager, at most summed in another order; 1e-4 on
               CUDA, whose kernels are not all deterministic), 1e-3 for the Inductor
               backends; with --variant bf16, 2e-2 and 5e-2 -- or within 10x eager's own
               drift on that tensor, where that is larger: eager run again with every weight
               one float32 rounding off (x (1 + 2**-23)), the model's sensitivity to rounding
               (the "drift" column; mobilenetv2's BatchNorms over a few near-constant values
               turn that one rounding into differences of order 1 after 3 steps).
               "bitwise" when every tensor is equal.
  graphs       graphs dynamo compiled, and graph breaks (torch._dynamo.utils.counters), over
               those steps.
  first step   wall-clock seconds of the first step (where the backend compiles), cold:
               dynamo reset at the start of each model, fresh Inductor caches for each backend
               (torch._inductor.utils.fresh_cache: an empty cache directory, in-memory caches
               cleared), aotgrad's disk cache off. Dynamo is not reset between one model's
               backends (a reset drops the others' compiled code, which the step timing
               reuses); its guards include the backend, so each backend compiles its own
               graphs. One-time costs (imports, Inductor's compile workers) are paid by a
               warm-up compile of a small MLP with every backend before the first model.
  step         the backends take turns in --rounds rounds of --iters steps, each round's order
               rotated by one; per backend, the median over rounds of the round's mean step.
               CPU: process CPU time (time.process_time) with --threads threads (1 by
               default), so another process on the machine costs little; CUDA: wall clock
               with torch.cuda.synchronize() before and after.

Ratios: aotgrad/aot_eager and aotgrad_inductor/inductor, first step and step.

    python benchmarks/zoo.py --list
    python benchmarks/zoo.py --models gpt2,bert --backends eager,aotgrad --steps 2 --rounds 2
    python benchmarks/zoo.py --markdown --json zoo.json             # every model, every backend
    python benchmarks/zoo.py --device cuda --variant bf16 --backends inductor,aotgrad_inductor \\
        --models gpt2,bert,resnet18,mobilenetv2

--variant: none; checkpoint (activation checkpointing: transformers'
gradient_checkpointing_enable(use_reentrant=False), timm's set_grad_checkpointing());
bf16 (torch.autocast with bfloat16 around forward and loss); channels_last (image models:
model and images in channels-last layout); padding_mask (text models: an attention mask that
pads the end of the second sequence, and no loss on the padding). A model the variant does not
apply to, or whose library (transformers, timm) or class is missing, is a "skipped" row with
the reason; a failing model or backend is a row with the error's first line, never a crash
(--traceback prints the whole traceback); the exit status is 1 when any row failed or mismatched.
Only public APIs of transformers (XConfig(...), XForCausalLM(config), ...) and timm
(timm.create_model(name, pretrained=False, ...)) are used, so recent releases of either work.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import importlib
import json
import os
import platform
import shlex
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

BACKENDS = ["eager", "aot_eager", "aotgrad", "inductor", "aotgrad_inductor"]
VARIANTS = ["none", "checkpoint", "bf16", "channels_last", "padding_mask"]
# worst per-tensor error (max|a - e| / max|e|) allowed against eager: (fp32, bf16 autocast). The
# exact backends run eager's kernels (at most summed in another order); on CUDA some of those are
# not deterministic (atomic adds in embedding and convolution backwards), hence their 1e-4 there.
TOLERANCES = {"eager": (1e-5, 2e-2), "aot_eager": (1e-5, 2e-2), "aotgrad": (1e-5, 2e-2),
              "inductor": (1e-3, 5e-2), "aotgrad_inductor": (1e-3, 5e-2)}
CUDA_EXACT_FP32 = 1e-4
DRIFT_FACTOR = 10  # a tensor may differ by 10x eager's own drift on it from weights one rounding off
LEARNING_RATE = 0.01
SHOW_TRACEBACKS = False  # --traceback: each failing backend's traceback on stderr
VOCAB = 100
TEXT_KINDS = ("decoder", "encoder", "seq2seq")
IMAGE_KINDS = ("vision", "timm")


def tolerance(backend: str, autocast: bool, device: str) -> float:
    fp32, bf16 = TOLERANCES[backend]
    if autocast:
        return bf16
    return CUDA_EXACT_FP32 if device == "cuda" and fp32 < CUDA_EXACT_FP32 else fp32


class Skip(Exception):
    """The model cannot run here: its library or class is missing, or the variant does not apply."""


# -- the zoo --------------------------------------------------------------------------------

@dataclass
class ZooModel:
    name: str
    kind: str  # decoder, encoder, seq2seq, speech (transformers), vision (transformers), timm
    description: str
    build: Callable[[], nn.Module]  # the model, random init (the caller seeds)
    inputs: Callable[[torch.Generator, bool], dict]  # (generator, padding) -> the model's batch

    @property
    def library(self) -> str:
        return "timm" if self.kind == "timm" else "transformers"


def _import(library: str):
    try:
        return importlib.import_module(library)
    except ImportError as e:
        raise Skip(f"{library} is not installed ({e})") from None


def _zero_dropout(config) -> None:
    """Every dropout-like probability of a transformers config set to 0 (hidden_dropout_prob,
    attn_pdrop, layerdrop, mask_time_prob, ...): training runs draw no random numbers."""
    for key, value in list(vars(config).items()):
        if isinstance(value, float) and any(word in key for word in ("dropout", "pdrop", "layerdrop", "mask_time_prob",
                                                                      "mask_feature_prob", "drop_path")):
            setattr(config, key, 0.0)


def _transformers(model_class: str, config_class: str, **config_args) -> Callable[[], nn.Module]:
    def build():
        transformers = _import("transformers")
        missing = [c for c in (config_class, model_class) if not hasattr(transformers, c)]
        if missing:
            raise Skip(f"transformers {transformers.__version__} has no {', '.join(missing)}")
        config = getattr(transformers, config_class)(**config_args)
        _zero_dropout(config)
        if hasattr(config, "use_cache"):
            config.use_cache = False  # training: no key/value cache
        return getattr(transformers, model_class)(config)
    return build


def _timm(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build():
        timm = _import("timm")
        if name not in timm.list_models(name):
            raise Skip(f"timm {timm.__version__} has no model {name}")
        return timm.create_model(name, pretrained=False, num_classes=10, drop_rate=0.0, **kwargs)
    return build


def _text_batch(batch: int, seq: int, target: str) -> Callable[[torch.Generator, bool], dict]:
    """Token ids and labels: the next tokens ("lm": labels = input_ids, the model shifts them),
    a class per sequence ("class"), or a target sequence of seq // 2 tokens ("seq2seq").
    With padding, the second sequence's last quarter is padding (attention mask 0, no loss)."""
    def make(g: torch.Generator, padding: bool) -> dict:
        ids = torch.randint(3, VOCAB, (batch, seq), generator=g)
        inputs = {"input_ids": ids}
        if target == "lm":
            inputs["labels"] = ids.clone()
        elif target == "class":
            inputs["labels"] = torch.randint(0, 3, (batch,), generator=g)
        else:
            inputs["labels"] = torch.randint(3, VOCAB, (batch, seq // 2), generator=g)
        if padding:
            mask = torch.ones(batch, seq, dtype=torch.long)
            mask[1, seq - seq // 4:] = 0
            inputs["attention_mask"] = mask
            if target == "lm":
                inputs["labels"][mask == 0] = -100
        return inputs
    return make


def _image_batch(batch: int, size: int, key: str) -> Callable[[torch.Generator, bool], dict]:
    def make(g: torch.Generator, padding: bool) -> dict:
        return {key: torch.randn(batch, 3, size, size, generator=g),
                "labels": torch.randint(0, 10, (batch,), generator=g)}
    return make


def _whisper_batch(g: torch.Generator, padding: bool) -> dict:
    # 16 mel bins; 32 frames = 2 * max_source_positions (the encoder's convolutions halve them)
    return {"input_features": torch.randn(2, 16, 32, generator=g),
            "labels": torch.randint(3, VOCAB, (2, 8), generator=g)}


def _audio_batch(g: torch.Generator, padding: bool) -> dict:
    return {"input_values": torch.randn(2, 640, generator=g), "labels": torch.randint(0, 3, (2,), generator=g)}


_DECODER = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64)
_ENCODER = dict(_DECODER, num_labels=3)
_LM, _CLASS, _SEQ2SEQ = _text_batch(2, 32, "lm"), _text_batch(2, 32, "class"), _text_batch(2, 32, "seq2seq")


def _zoo() -> list[ZooModel]:
    t = _transformers
    return [
        # decoders: causal language models, loss on the next token
        ZooModel("gpt2", "decoder", "GPT-2, 2 layers, d64", t("GPT2LMHeadModel", "GPT2Config", n_layer=2, n_embd=64,
                 n_head=4, vocab_size=VOCAB, n_positions=64, bos_token_id=1, eos_token_id=2), _LM),
        ZooModel("llama", "decoder", "Llama, 2 layers, d64, GQA 4/2", t("LlamaForCausalLM", "LlamaConfig",
                 num_key_value_heads=2, **_DECODER), _LM),
        ZooModel("mistral", "decoder", "Mistral, 2 layers, d64, GQA 4/2", t("MistralForCausalLM", "MistralConfig",
                 num_key_value_heads=2, **_DECODER), _LM),
        ZooModel("qwen2", "decoder", "Qwen2, 2 layers, d64, GQA 4/2", t("Qwen2ForCausalLM", "Qwen2Config",
                 num_key_value_heads=2, **_DECODER), _LM),
        ZooModel("gemma", "decoder", "Gemma, 2 layers, d64, head 16", t("GemmaForCausalLM", "GemmaConfig",
                 num_key_value_heads=2, head_dim=16, **_DECODER), _LM),
        ZooModel("phi", "decoder", "Phi, 2 layers, d64, partial rotary",
                 t("PhiForCausalLM", "PhiConfig", **_DECODER), _LM),
        ZooModel("opt", "decoder", "OPT, 2 layers, d64", t("OPTForCausalLM", "OPTConfig", vocab_size=VOCAB,
                 hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=64, word_embed_proj_dim=64), _LM),
        ZooModel("gpt_neox", "decoder", "GPT-NeoX, 2 layers, d64",
                 t("GPTNeoXForCausalLM", "GPTNeoXConfig", **_DECODER), _LM),
        ZooModel("bloom", "decoder", "BLOOM, 2 layers, d64, ALiBi", t("BloomForCausalLM", "BloomConfig",
                 vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4), _LM),
        # encoders: sequence classification, 3 classes
        ZooModel("bert", "encoder", "BERT, 2 layers, d64",
                 t("BertForSequenceClassification", "BertConfig", **_ENCODER), _CLASS),
        ZooModel("roberta", "encoder", "RoBERTa, 2 layers, d64", t("RobertaForSequenceClassification", "RobertaConfig",
                 **dict(_ENCODER, max_position_embeddings=66)), _CLASS),
        ZooModel("deberta_v2", "encoder", "DeBERTa-v2, 2 layers, d64, relative attention c2p+p2c",
                 t("DebertaV2ForSequenceClassification", "DebertaV2Config", relative_attention=True,
                   pos_att_type=["p2c", "c2p"], position_buckets=16, **_ENCODER), _CLASS),
        ZooModel("distilbert", "encoder", "DistilBERT, 2 layers, d64", t("DistilBertForSequenceClassification",
                 "DistilBertConfig", vocab_size=VOCAB, dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                 max_position_embeddings=64, num_labels=3), _CLASS),
        ZooModel("albert", "encoder", "ALBERT, 2 layers, d64, embeddings 32", t("AlbertForSequenceClassification",
                 "AlbertConfig", embedding_size=32, **_ENCODER), _CLASS),
        ZooModel("electra", "encoder", "ELECTRA, 2 layers, d64, embeddings 32", t("ElectraForSequenceClassification",
                 "ElectraConfig", embedding_size=32, **_ENCODER), _CLASS),
        # encoder-decoders: 32 tokens in, 16 out
        ZooModel("t5", "seq2seq", "T5, 2+2 layers, d64", t("T5ForConditionalGeneration", "T5Config", vocab_size=VOCAB,
                 d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                 decoder_start_token_id=0, pad_token_id=0), _SEQ2SEQ),
        ZooModel("bart", "seq2seq", "BART, 2+2 layers, d64", t("BartForConditionalGeneration", "BartConfig",
                 vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64),
                 _SEQ2SEQ),
        # speech
        ZooModel("whisper", "speech", "Whisper, 2+2 layers, d64, 16 mel bins x 32 frames",
                 t("WhisperForConditionalGeneration", "WhisperConfig", vocab_size=VOCAB, num_mel_bins=16, d_model=64,
                   encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                   encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=16, max_target_positions=32,
                   pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                   suppress_tokens=None, begin_suppress_tokens=None), _whisper_batch),
        ZooModel("wav2vec2", "speech", "Wav2Vec2, 3 convs + 2 layers, d64, 640 samples, classification",
                 t("Wav2Vec2ForSequenceClassification", "Wav2Vec2Config", vocab_size=32, hidden_size=64,
                   num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, conv_dim=(32, 32, 32),
                   conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2), num_conv_pos_embeddings=16,
                   num_conv_pos_embedding_groups=4, classifier_proj_size=32, num_labels=3), _audio_batch),
        # vision (transformers): 32x32 images, 10 classes
        ZooModel("vit", "vision", "ViT, 2 layers, d64, patch 8, 32x32", t("ViTForImageClassification", "ViTConfig",
                 image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, num_labels=10), _image_batch(4, 32, "pixel_values")),
        ZooModel("swin", "vision", "Swin, 2 stages of 1 block, d16, window 4, 32x32", t("SwinForImageClassification",
                 "SwinConfig", image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
                 window_size=4, num_labels=10), _image_batch(4, 32, "pixel_values")),
        ZooModel("convnext", "vision", "ConvNeXt, 2 stages of 1 block, 16/32 channels, 32x32",
                 t("ConvNextForImageClassification", "ConvNextConfig", num_stages=2, hidden_sizes=[16, 32],
                   depths=[1, 1], num_labels=10), _image_batch(4, 32, "pixel_values")),
        # timm: 64x64 images (96x96 for EfficientNet's 32x downsampling), 10 classes
        ZooModel("resnet18", "timm", "timm resnet18, 64x64", _timm("resnet18"), _image_batch(4, 64, "images")),
        ZooModel("mobilenetv2", "timm", "timm mobilenetv2_050, 64x64", _timm("mobilenetv2_050"),
                 _image_batch(4, 64, "images")),
        ZooModel("efficientnet_b0", "timm", "timm efficientnet_b0, 96x96", _timm("efficientnet_b0"),
                 _image_batch(2, 96, "images")),
        ZooModel("regnet", "timm", "timm regnetx_002, 64x64", _timm("regnetx_002"), _image_batch(4, 64, "images")),
        ZooModel("convnext_atto", "timm", "timm convnext_atto, 64x64", _timm("convnext_atto"),
                 _image_batch(4, 64, "images")),
        ZooModel("deit_tiny", "timm", "timm deit_tiny_patch16_224 at 64x64 (16 patches)",
                 _timm("deit_tiny_patch16_224", img_size=64), _image_batch(4, 64, "images")),
        ZooModel("vit_small", "timm", "timm vit_small_patch16_224, depth 2, 64x64",
                 _timm("vit_small_patch16_224", img_size=64, depth=2), _image_batch(4, 64, "images")),
    ]


ZOO = {model.name: model for model in _zoo()}


# -- one model: build, train, compare ---------------------------------------------------------

class TrainingLoss(nn.Module):
    """The model and its loss as one module, so torch.compile captures both: transformers models
    compute their own loss from `labels`; timm models get cross-entropy."""

    def __init__(self, model: nn.Module, library: str):
        super().__init__()
        self.model, self.library = model, library

    def forward(self, batch: dict) -> torch.Tensor:
        if self.library == "timm":
            return F.cross_entropy(self.model(batch["images"]), batch["labels"])
        return self.model(**batch).loss


def _turn_off_dropout(model: nn.Module) -> None:
    """Dropout and drop-path modules the config did not reach (timm's DropPath, hard-coded ones): p 0."""
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            module.p = 0.0
        if isinstance(getattr(module, "drop_prob", None), float):
            module.drop_prob = 0.0


def apply_variant(spec: ZooModel, model: nn.Module, batch: dict, variant: str) -> tuple[nn.Module, dict]:
    """The model and batch changed for the variant (Skip where it does not apply)."""
    if variant == "checkpoint":
        if spec.library == "timm":
            try:
                model.set_grad_checkpointing(True)
            except Exception as e:
                raise Skip(f"timm's set_grad_checkpointing: {_first_line(e)}") from None
        else:
            if not getattr(model, "supports_gradient_checkpointing", False):
                raise Skip(f"{type(model).__name__} does not support gradient checkpointing")
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif variant == "channels_last":
        if spec.kind not in IMAGE_KINDS:
            raise Skip("channels_last applies to image models")
        model = model.to(memory_format=torch.channels_last)
        batch = {k: v.contiguous(memory_format=torch.channels_last) if v.dim() == 4 else v for k, v in batch.items()}
    elif variant == "padding_mask" and spec.kind not in TEXT_KINDS:
        raise Skip("padding_mask applies to text models")
    return model, batch


def build(name: str, variant: str = "none", device: str = "cpu") -> tuple[nn.Module, dict]:
    """The zoo model `name` wrapped with its loss (seeded random init, dropout off, train mode)
    and its batch, on `device`."""
    spec = ZOO[name]
    torch.manual_seed(0)
    model = spec.build()
    _turn_off_dropout(model)
    batch = spec.inputs(torch.Generator().manual_seed(0), variant == "padding_mask")
    model, batch = apply_variant(spec, model, batch, variant)
    module = TrainingLoss(model, spec.library).to(device).train()
    return module, {k: v.to(device) for k, v in batch.items()}


@dataclass
class Run:
    """One backend's training run: its module, optimizer and batch, and what it produced."""
    module: nn.Module
    fn: Callable
    optimizer: torch.optim.Optimizer
    batch: dict
    losses: list[torch.Tensor] = field(default_factory=list)
    first_grads: dict[str, torch.Tensor] = field(default_factory=dict)  # after the first step


def make_run(module: nn.Module, batch: dict, backend: str) -> Run:
    twin = copy.deepcopy(module)
    fn = twin if backend == "eager" else torch.compile(twin, backend=backend)
    optimizer = torch.optim.SGD(twin.parameters(), lr=LEARNING_RATE)
    return Run(twin, fn, optimizer, {k: v.clone() for k, v in batch.items()})


def train_step(run: Run, autocast: bool) -> torch.Tensor:
    """Forward and loss (under bf16 autocast with --variant bf16), backward, SGD step."""
    run.optimizer.zero_grad(set_to_none=True)
    device = next(iter(run.batch.values())).device.type
    with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
        loss = run.fn(run.batch)
    loss.backward()
    run.optimizer.step()
    return loss.detach()


def recorded_step(run: Run, autocast: bool) -> None:
    """A training step whose loss is kept, and after the first one, its gradients."""
    run.losses.append(train_step(run, autocast))
    if len(run.losses) == 1:
        run.first_grads = {name: p.grad.clone() for name, p in run.module.named_parameters() if p.grad is not None}


def state(run: Run) -> dict[str, torch.Tensor]:
    """What the steps produced: each step's loss, then every gradient, parameter and buffer."""
    tensors = {"losses": torch.stack(run.losses).float()}
    tensors.update({f"step1 grad {name}": grad for name, grad in run.first_grads.items()})
    for name, p in run.module.named_parameters():
        if p.grad is not None:
            tensors[f"grad {name}"] = p.grad
        tensors[f"param {name}"] = p.detach()
    for name, b in run.module.named_buffers():
        tensors[f"buffer {name}"] = b
    return tensors


@dataclass
class Difference:
    """Per-tensor errors of a run's state against eager's (see compare)."""
    errors: dict[str, float]  # tensor name -> max|actual - expected| / scale; inf where they differ in kind
    max_abs: float  # the largest |actual - expected| over every tensor

    @property
    def bitwise(self) -> bool:
        return self.max_abs == 0.0 and not any(self.errors.values())

    @property
    def worst_rel(self) -> float:
        return max(self.errors.values(), default=0.0)

    @property
    def first_step_rel(self) -> float:
        """The largest error among the first step's gradients (no SGD step has acted yet)."""
        return max((e for name, e in self.errors.items() if name.startswith("step1 ")), default=0.0)

    def worst(self, allowed: Callable[[str], float]) -> tuple[str, float]:
        """The tensor whose error is the largest multiple of what it is allowed, and that multiple."""
        ratios = {name: error / allowed(name) if error else 0.0 for name, error in self.errors.items()}
        name = max(ratios, key=ratios.get, default="")
        return name, ratios.get(name, 0.0)


def _max_abs(t: torch.Tensor) -> float:
    return t.detach().double().abs().max().item() if t.is_floating_point() and t.numel() else 0.0


def _error(a: torch.Tensor, e: torch.Tensor, floor: float) -> tuple[float, float]:
    """(max|a - e|, that over max(max|e|, floor)) for one tensor; inf where they differ in kind."""
    if a.shape != e.shape or a.dtype != e.dtype:
        return float("inf"), float("inf")
    if not e.is_floating_point():
        return (0.0, 0.0) if torch.equal(a, e) else (float("inf"), float("inf"))
    e64, a64 = e.detach().double(), a.detach().double()
    if not torch.isfinite(e64).all() or not torch.isfinite(a64).all():
        same = torch.equal(torch.isnan(a64), torch.isnan(e64)) and torch.equal(a64.nan_to_num(), e64.nan_to_num())
        return (0.0, 0.0) if same else (float("inf"), float("inf"))
    error = (a64 - e64).abs().max().item() if e.numel() else 0.0
    scale = max(_max_abs(e), floor)
    return error, error / scale if scale > 0 else (0.0 if error == 0 else float("inf"))


def compare(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> Difference:
    """Per-tensor errors of `actual` against `expected` (eager's state): max|a - e| over the
    tensor's largest |e|, or over 1% of the largest |e| among tensors of its kind (losses,
    gradients, parameters, buffers) where that is larger: a gradient that is zero in exact
    arithmetic (a key projection's bias, under softmax) holds only rounding noise, which no
    two ways of summing share."""
    kind_scale: dict[str, float] = {}
    for name, e in expected.items():
        kind = name.split()[0]
        kind_scale[kind] = max(kind_scale.get(kind, 0.0), _max_abs(e))
    errors, max_abs = {}, 0.0
    for name in sorted(set(actual) ^ set(expected)):
        errors[f"{name} (in one run only)"] = float("inf")
    for name, e in expected.items():
        if name in actual:
            error, errors[name] = _error(actual[name], e, 0.01 * kind_scale[name.split()[0]])
            max_abs = max(max_abs, error)
    return Difference(errors, float("inf") if len(errors) > len(expected) else max_abs)


def drift(module: nn.Module, batch: dict, steps: int, autocast: bool, expected: dict) -> Difference | None:
    """How far eager itself ends from `expected` when every weight starts one float32 rounding off
    (multiplied by 1 + 2**-23): the model's own sensitivity to rounding, which a compiled run's
    other rounding meets too. Small for most models; large where BatchNorm normalises a few
    near-constant values (mobilenetv2 here: ~1 after 3 steps). None where eager fails."""
    run = make_run(module, batch, "eager")
    with torch.no_grad():
        for p in run.module.parameters():
            p.mul_(1 + 2 ** -23)
    try:
        for _ in range(steps):
            recorded_step(run, autocast)
    except Exception:
        return None
    return compare(state(run), expected)


@dataclass
class Row:
    """One model under one backend (or the model's whole row, where it was skipped or failed)."""
    model: str
    backend: str
    status: str = "ok"  # ok, mismatch, error, skipped
    detail: str = ""  # the error's first line, the skip's reason, the worst tensor
    graphs: int | None = None
    graph_breaks: int | None = None
    break_reasons: list[str] = field(default_factory=list)
    first_step_s: float | None = None
    step_s: float | None = None
    max_abs_diff: float | None = None
    worst_rel_diff: float | None = None
    first_step_grads_rel_diff: float | None = None
    drift_rel_diff: float | None = None  # eager's own, from weights one rounding off (see drift)
    bitwise: bool | None = None
    tolerance: float | None = None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:160] if lines else ''}"


def _cold_cache():
    """Inductor's caches empty for one backend's first compile; aotgrad's disk cache off."""
    from torch._inductor.utils import fresh_cache
    stack = contextlib.ExitStack()
    stack.enter_context(fresh_cache())
    try:
        import aotgrad
        stack.enter_context(aotgrad.config.patch(cache_dir=None))
    except ImportError:  # without aotgrad only PyTorch's backends run
        pass
    return stack


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _dynamo_limits(backends: list[str]):
    """Each backend's graphs are cache entries of the same code objects: room for all of them."""
    limits = {"recompile_limit": 8 * len(backends), "accumulated_recompile_limit": 256 * len(backends)}
    present = {k: v for k, v in limits.items() if hasattr(torch._dynamo.config, k)}
    return torch._dynamo.config.patch(**present)


@contextlib.contextmanager
def counting_graphs(row: Row):
    """The graphs dynamo compiles in the block, its graph breaks and their commonest reasons, into `row`."""
    from torch._dynamo.utils import counters
    graphs_before, breaks_before = counters["stats"]["unique_graphs"], dict(counters["graph_break"])
    try:
        yield
    finally:
        row.graphs = counters["stats"]["unique_graphs"] - graphs_before
        new_breaks = {reason: n - breaks_before.get(reason, 0) for reason, n in counters["graph_break"].items()
                      if n > breaks_before.get(reason, 0)}
        row.graph_breaks = sum(new_breaks.values())
        commonest = sorted(new_breaks, key=new_breaks.get, reverse=True)[:3]
        row.break_reasons = [reason.splitlines()[0][:120] for reason in commonest]


def judge(row: Row, difference: Difference, noise: Difference | None) -> None:
    """Into `row`: the differences, and "mismatch" where a tensor differs by more than both the
    row's tolerance and DRIFT_FACTOR times eager's own drift on it (`noise`)."""
    row.max_abs_diff, row.worst_rel_diff, row.bitwise = difference.max_abs, difference.worst_rel, difference.bitwise
    row.first_step_grads_rel_diff = difference.first_step_rel
    row.drift_rel_diff = None if noise is None else noise.worst_rel

    def allowed(name: str) -> float:
        return max(row.tolerance, DRIFT_FACTOR * (noise.errors.get(name, 0.0) if noise else 0.0))

    worst, ratio = difference.worst(allowed)
    if ratio > 1:
        row.status = "mismatch"
        row.detail = (f"worst: {worst} {difference.errors[worst]:.1e} (allowed {allowed(worst):.1e}); "
                      f"first step's grads {difference.first_step_rel:.1e}")


def train_and_compare(module: nn.Module, batch: dict, backend: str, steps: int, autocast: bool,
                      expected: dict | None, row: Row, noise: Difference | None = None) -> Run | None:
    """`steps` training steps under `backend` (the first one cold and timed), its graphs and graph
    breaks counted, its state judged against `expected` (eager's) into `row`. The run, for the
    step timing; None where it failed (the row says why)."""
    device = next(iter(batch.values())).device.type
    run = make_run(module, batch, backend)
    try:
        with _cold_cache(), (counting_graphs(row) if backend != "eager" else contextlib.nullcontext()):
            for step in range(steps):
                gc.collect()
                _synchronize(device)
                start = time.perf_counter()
                recorded_step(run, autocast)
                _synchronize(device)
                if step == 0:
                    row.first_step_s = time.perf_counter() - start
    except Exception as e:  # reported as the row, not fatal
        row.status, row.detail = "error", _first_line(e)
        if SHOW_TRACEBACKS:
            traceback.print_exc()
        return None
    if expected is not None:
        row.tolerance = tolerance(backend, autocast, device)
        judge(row, compare(state(run), expected), noise)
    return run


def time_steps(runs: dict[str, Run], rows: dict[str, Row], rounds: int, iters: int, autocast: bool) -> None:
    """Backends taking turns, each round's order rotated by one; per backend the median over
    rounds of the mean step (CPU: process time; CUDA: wall clock after a synchronize)."""
    names = list(runs)
    device = next(iter(next(iter(runs.values())).batch.values())).device.type
    clock = time.perf_counter if device == "cuda" else time.process_time
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for name in list(names):  # one untimed step each: whatever the last correctness step left behind
        try:
            train_step(runs[name], autocast)
        except Exception as e:
            rows[name].status, rows[name].detail = "error", f"timed step: {_first_line(e)}"
            names.remove(name)
    for r in range(rounds):
        shift = r % max(1, len(names))
        for name in names[shift:] + names[:shift]:
            if rows[name].status == "error":
                continue
            try:
                _synchronize(device)
                start = clock()
                for _ in range(iters):
                    train_step(runs[name], autocast)
                _synchronize(device)
                per_round[name].append((clock() - start) / iters)
            except Exception as e:
                rows[name].status, rows[name].detail = "error", f"timed step: {_first_line(e)}"
    for name, seconds in per_round.items():
        if seconds and rows[name].status != "error":
            rows[name].step_s = statistics.median(seconds)


def run_model(name: str, backends: list[str], variant: str = "none", device: str = "cpu", steps: int = 3,
              rounds: int = 5, iters: int = 2) -> list[Row]:
    """Every backend's row for one zoo model: the comparison with eager after `steps` steps, graphs
    and graph breaks, the cold first step and (rounds > 0) the steady step."""
    try:
        module, batch = build(name, variant, device)
    except Skip as e:
        return [Row(name, "-", "skipped", str(e))]
    except Exception as e:
        return [Row(name, "-", "error", f"building: {_first_line(e)}")]
    autocast = variant == "bf16"
    torch._dynamo.reset()
    reference = Row(name, "eager (reference)")
    reference_run = train_and_compare(module, batch, "eager", steps, autocast, None, reference)
    if reference_run is None:
        return [reference]
    expected = {k: v.clone() for k, v in state(reference_run).items()}
    del reference_run
    noise = drift(module, batch, steps, autocast, expected)
    rows, runs = {}, {}
    with _dynamo_limits(backends):
        for backend in backends:
            rows[backend] = Row(name, backend)
            run = train_and_compare(module, batch, backend, steps, autocast, expected, rows[backend], noise)
            if run is not None:
                runs[backend] = run
        if rounds > 0 and runs:
            time_steps(runs, rows, rounds, iters, autocast)
    return list(rows.values())


def warm_up(backends: list[str], device: str) -> None:
    """One compile of a small MLP's step with every backend: imports and Inductor's compile workers
    are then paid for, not charged to the first model's first backend."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)).to(device)
    x = torch.randn(4, 8, device=device)
    for backend in backends:
        if backend == "eager":
            continue
        torch._dynamo.reset()
        try:
            with _cold_cache():
                torch.compile(mlp, backend=backend)(x).sum().backward()
        except Exception as e:
            print(f"warm-up with {backend} failed: {_first_line(e)}", file=sys.stderr)
    torch._dynamo.reset()


# -- printing ---------------------------------------------------------------------------------

def _seconds(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f} s" if s >= 1 else f"{s * 1e3:.0f} ms" if s >= 0.01 else f"{s * 1e3:.2f} ms"


def _ratio(rows: dict[str, Row], numerator: str, denominator: str, attribute: str) -> str:
    a = getattr(rows[numerator], attribute) if numerator in rows else None
    b = getattr(rows[denominator], attribute) if denominator in rows else None
    return "-" if a is None or not b else f"{a / b:.2f}"


def match_text(row: Row) -> str:
    if row.status in ("error", "skipped"):
        return row.status
    if row.bitwise:
        return "bitwise"
    text = f"{row.worst_rel_diff:.1e}"
    return text if row.status == "ok" else f"**MISMATCH** {text}"


def _by_model(rows: list[Row]) -> dict[str, dict[str, Row]]:
    models: dict[str, dict[str, Row]] = {}
    for row in rows:
        models.setdefault(row.model, {})[row.backend] = row
    return models


def print_table(rows: list[Row], backends: list[str]) -> None:
    """One line per model and backend, as the run goes."""
    for row in rows:
        if row.backend == "-" or row.backend.startswith("eager ("):
            print(f"{row.model:16} {row.status}: {row.detail}")
            continue
        graphs = "-" if row.graphs is None else f"{row.graphs} graphs, {row.graph_breaks} breaks"
        print(f"{row.model:16} {row.backend:17} {match_text(row):22} first step {_seconds(row.first_step_s):>8}"
              f"  step {_seconds(row.step_s):>8}  {graphs}  {row.detail}")
    sys.stdout.flush()


def _e(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"


def _summary_line(model: str, by_backend: dict[str, Row], columns: list[str]) -> str:
    """The model's match against eager per backend, eager's drift, graphs and the two ratios."""
    if "-" in by_backend or "eager (reference)" in by_backend:  # skipped, or eager failed
        row = by_backend.get("-") or by_backend["eager (reference)"]
        return f"| {model} | {row.status}: {row.detail} |" + " |" * (len(columns) + 3)
    graphs = sorted({(r.graphs, r.graph_breaks) for r in by_backend.values() if r.graphs is not None})
    drifts = [r.drift_rel_diff for r in by_backend.values() if r.drift_rel_diff is not None]
    ratios = [f"{_ratio(by_backend, a, b, 'first_step_s')}, {_ratio(by_backend, a, b, 'step_s')}"
              for a, b in (("aotgrad", "aot_eager"), ("aotgrad_inductor", "inductor"))]
    cells = [match_text(by_backend[b]) for b in columns] + [
        _e(max(drifts)) if drifts else "-", ", ".join(f"{g} / {b}" for g, b in graphs) or "-", *ratios]
    return f"| {model} | " + " | ".join(cells) + " |"


def markdown(rows: list[Row], backends: list[str], header: str) -> str:
    """A summary table (a line per model), a detail table (a line per model and backend), then
    each failure and mismatch, and the graph breaks' reasons."""
    models = _by_model(rows)
    columns = [b for b in backends if b != "eager"]
    lines = [header, "", "| model | " + " | ".join(f"{b} vs eager" for b in columns)
             + " | eager drift | graphs / breaks | aotgrad/aot_eager first step, step "
               "| aotgrad_inductor/inductor first step, step |", "|---" * (len(columns) + 5) + "|"]
    lines += [_summary_line(model, by_backend, columns) for model, by_backend in models.items()]
    lines += ["", "| model | backend | first step | step | graphs | breaks | max abs diff | worst rel diff "
                  "| first step's grads rel diff |", "|---|---|---|---|---|---|---|---|---|"]
    measured = [row for row in rows if row.backend != "-" and not row.backend.startswith("eager (")]
    for row in measured:
        graphs = "- | -" if row.graphs is None else f"{row.graphs} | {row.graph_breaks}"
        lines.append(f"| {row.model} | {row.backend} | {_seconds(row.first_step_s)} | {_seconds(row.step_s)} | "
                     f"{graphs} | {_e(row.max_abs_diff)} | {_e(row.worst_rel_diff)} | "
                     f"{_e(row.first_step_grads_rel_diff)} |")
    notes = [f"- {row.model}, {row.backend}: {row.status}: {row.detail}" for row in measured
             if row.status in ("error", "mismatch")]
    breaks = sorted({(row.model, reason) for row in measured for reason in row.break_reasons})
    if notes:
        lines += ["", "Failures and mismatches:", *notes]
    if breaks:
        lines += ["", "Graph break reasons:", *(f"- {model}: {reason}" for model, reason in breaks)]
    return "\n".join(lines)


def machine_text(device: str, threads: int) -> str:
    if device == "cuda":
        where = torch.cuda.get_device_name(0)
    else:
        where = f"CPU, {os.cpu_count()} cores, {threads} thread(s) for torch"
    libraries = []
    for library in ("transformers", "timm"):
        try:
            libraries.append(f"{library} {importlib.import_module(library).__version__}")
        except ImportError:
            libraries.append(f"no {library}")
    return (f"{datetime.date.today()}, torch {torch.__version__}, {', '.join(libraries)}, Python "
            f"{platform.python_version()}, {where}")


# -- command line -----------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo names (--list shows them)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated, among {','.join(BACKENDS)}")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--variant", default="none", choices=VARIANTS)
    parser.add_argument("--steps", type=int, default=3, help="training steps compared with eager")
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (0: no step timing)")
    parser.add_argument("--iters", type=int, default=2, help="steps per backend per round")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads on CPU")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables at the end")
    parser.add_argument("--json", metavar="FILE", help="write every row as JSON")
    parser.add_argument("--list", action="store_true", help="list the zoo and exit")
    parser.add_argument("--traceback", action="store_true", help="print each failure's traceback")
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.backends = [b for b in args.backends.split(",") if b]
    unknown = [m for m in args.models if m not in ZOO] + [b for b in args.backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)} (models: {', '.join(ZOO)}; backends: {', '.join(BACKENDS)})")
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    global SHOW_TRACEBACKS
    SHOW_TRACEBACKS = args.traceback
    if args.list:
        for model in ZOO.values():
            print(f"{model.name:16} {model.kind:8} {model.description}")
        return 0
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    elif not torch.cuda.is_available():
        print("--device cuda: no CUDA device", file=sys.stderr)
        return 2
    command = "python benchmarks/zoo.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    print(f"{command}\n{machine_text(args.device, args.threads)}, variant {args.variant}")
    start = time.perf_counter()
    warm_up(args.backends, args.device)
    rows: list[Row] = []
    for name in args.models:
        model_start = time.perf_counter()
        model_rows = run_model(name, args.backends, args.variant, args.device, args.steps, args.rounds, args.iters)
        print_table(model_rows, args.backends)
        print(f"{name:16} ({time.perf_counter() - model_start:.0f} s)")
        rows += model_rows
    total = time.perf_counter() - start
    print(f"total {total:.0f} s")
    if args.markdown:
        header = f"```bash\n{command}\n```\n\n{machine_text(args.device, args.threads)}, variant {args.variant}, " \
                 f"{args.steps} steps compared, {args.rounds} rounds of {args.iters} steps timed, {total:.0f} s in all."
        print(markdown(rows, args.backends, header))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command, "machine": machine_text(args.device, args.threads), "variant": args.variant,
                       "total_s": total, "rows": [asdict(row) for row in rows]}, f, indent=1)
    failed = any(row.status in ("error", "mismatch") for row in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
