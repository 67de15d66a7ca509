"""Ops whose kernel reads grad mode are recorded so the compiled forward, which runs under
no_grad inside an autograd.Function, behaves as the traced one did (LSTM on oneDNN)."""
from __future__ import annotations

import copy

import pytest
import torch

import aotgrad

aten = torch.ops.aten
WITH_WORKSPACE = torch.ops.aotgrad.mkldnn_rnn_layer_with_workspace.default

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="LSTM on oneDNN needs mkldnn")


def _targets(gm) -> set:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def _lstm_and_input(requires_grad: bool):
    torch.manual_seed(0)
    return torch.nn.LSTM(3, 5, num_layers=2), torch.randn(7, 2, 3, requires_grad=requires_grad)


@pytest.mark.parametrize("input_requires_grad", [True, False], ids=["input_and_weights", "weights_only"])
def test_lstm_outputs_and_grads_equal_eager(input_requires_grad):
    lstm, x = _lstm_and_input(input_requires_grad)
    reference = copy.deepcopy(lstm)
    compiled = aotgrad.aot_module(lstm, aotgrad.nop)
    x_ref = x.detach().clone().requires_grad_(input_requires_grad)
    out, (h, c) = compiled(x)
    out_ref, (h_ref, c_ref) = reference(x_ref)
    for actual, expected in ((out, out_ref), (h, h_ref), (c, c_ref)):
        torch.testing.assert_close(actual, expected)
    (out.sum() + h.sum() + c.sum()).backward()
    (out_ref.sum() + h_ref.sum() + c_ref.sum()).backward()
    for (name, p), p_ref in zip(lstm.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, p_ref.grad, msg=lambda m: f"grad of {name}: {m}")
    if input_requires_grad:
        torch.testing.assert_close(x.grad, x_ref.grad)


def test_training_forward_records_the_layer_that_keeps_its_workspace():
    lstm, x = _lstm_and_input(True)
    compiled = aotgrad.aot_module(lstm, aotgrad.nop)
    compiled(x)
    forward, backward = compiled.compiled.last_graphs
    assert WITH_WORKSPACE in _targets(forward) and aten.mkldnn_rnn_layer.default not in _targets(forward)
    assert aten.mkldnn_rnn_layer_backward.default in _targets(backward)


def test_inference_records_the_plain_layer():
    lstm, x = _lstm_and_input(False)
    for p in lstm.parameters():
        p.requires_grad_(False)
    compiled = aotgrad.aot_module(lstm, aotgrad.nop)
    out, _ = compiled(x)
    (graph,) = compiled.compiled.last_graphs[:1]
    assert aten.mkldnn_rnn_layer.default in _targets(graph) and WITH_WORKSPACE not in _targets(graph)
    torch.testing.assert_close(out, lstm(x)[0])
