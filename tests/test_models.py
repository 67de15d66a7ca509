"""Whole models through aotgrad, compared with eager: a small transformer block, a small CNN,
and torch.utils.checkpoint inside the compiled code. Each runs two training steps (SGD
updates in between) through aot_module and torch.compile(backend="aotgrad"), and compares
losses, every parameter's grad, the parameters after the updates and every buffer."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import aotgrad


class TransformerBlock(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        h = checkpoint(lambda y: torch.tanh(self.a(y)) * 2, x, use_reentrant=False)
        return self.b(h).relu()


MODELS = {
    "transformer_block": (TransformerBlock, lambda: torch.randn(2, 8, 32)),
    "cnn": (SmallCNN, lambda: torch.randn(4, 3, 8, 8)),
    "checkpoint": (Checkpointed, lambda: torch.randn(4, 16, requires_grad=True)),
}


def _compile(kind: str, model: nn.Module):
    if kind == "aot_module":
        return aotgrad.aot_module(model, aotgrad.nop)
    torch._dynamo.reset()
    return torch.compile(model, backend="aotgrad")


@pytest.mark.parametrize("kind", ["aot_module", "torch_compile"])
@pytest.mark.parametrize("name", list(MODELS))
def test_training_steps_match_eager(name, kind):
    make_model, make_input = MODELS[name]
    torch.manual_seed(0)
    eager = make_model()
    model = copy.deepcopy(eager)
    compiled = _compile(kind, model)
    for step in range(2):
        torch.manual_seed(step)
        x = make_input()
        x2 = x.detach().clone().requires_grad_(x.requires_grad)
        expected, actual = eager(x).square().mean(), compiled(x2).square().mean()
        expected.backward()
        actual.backward()
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
        if x.requires_grad:
            torch.testing.assert_close(x2.grad, x.grad, atol=1e-5, rtol=1e-4)
        for (pname, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=lambda m: f"{pname}: {m}")
        with torch.no_grad():
            for p, q in zip(model.parameters(), eager.parameters()):
                p -= 0.1 * p.grad
                q -= 0.1 * q.grad
                p.grad = q.grad = None
    for (bname, b), c in zip(model.named_buffers(), eager.buffers()):
        torch.testing.assert_close(b, c, msg=lambda m: f"{bname}: {m}")


# Tiny transformers decoders under torch.compile(backend="aotgrad", dynamic=True): compiled at the
# first sequence length, no graph more for two others, losses and gradients equal to eager's. Needs transformers (skipped
# without it; `pip install transformers` beside torch).
def _decoder(name: str):
    transformers = pytest.importorskip("transformers")
    sizes = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    if name == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(  # (no dropout: eager and compiled draw apart)
            n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0))
    config, model = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
                     "mistral": ("MistralConfig", "MistralForCausalLM")}[name]
    return getattr(transformers, model)(getattr(transformers, config)(**sizes))


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2", "mistral"])
def test_decoders_under_dynamic_shapes_compile_once_and_match_eager(name):
    torch.manual_seed(0)
    eager = _decoder(name)
    eager.config.use_cache = False
    model = copy.deepcopy(eager)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.lookup_backend("aotgrad")(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    first = None
    for seq in (8, 12, 16):
        ids = torch.randint(0, 100, (2, seq))
        expected = eager(input_ids=ids, labels=ids).loss
        actual = compiled(input_ids=ids, labels=ids).loss
        expected.backward()
        actual.backward()
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
        for (pname, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=lambda m: f"{seq} {pname}: {m}")
            p.grad = q.grad = None
        first = len(graphs) if first is None else first
    # (GPT-2's loss logs a warning Dynamo breaks the graph at: two graphs, as with backend="eager")
    assert len(graphs) == first, f"{len(graphs) - first} more graphs after the first sequence length"
