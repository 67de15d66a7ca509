"""Ops whose kernel reads grad mode, recorded so the graph keeps the traced behaviour.

In: an aten op recorded while grad mode was on and an input required grad.
Out: the op to put in the graph instead, which behaves as the kernel did at trace time
even where the compiled forward runs: inside `autograd.Function.forward`, under no_grad.

Why: the CPU kernel of `aten.mkldnn_rnn_layer` (LSTM on oneDNN) ignores its `train`
argument and returns the workspace its backward needs only when
`GradMode::is_enabled()`. Replayed under no_grad it returns no workspace and
`mkldnn_rnn_layer_backward` fails ("argument #22 'workspace'"). The replacement
`aotgrad::mkldnn_rnn_layer_with_workspace` has the same schema and runs the aten op
with grad mode on, on detached inputs (so no autograd graph is built at run time).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

_lib = torch.library.Library("aotgrad", "FRAGMENT")
_lib.define(
    "mkldnn_rnn_layer_with_workspace(Tensor input, Tensor weight0, Tensor weight1, Tensor weight2, "
    "Tensor weight3, Tensor hx_, Tensor cx_, bool reverse, int[] batch_sizes, int mode, int hidden_size, "
    "int num_layers, bool has_biases, bool bidirectional, bool batch_first, bool train) "
    "-> (Tensor, Tensor, Tensor, Tensor)")


def _with_grad_mode_on(op):
    def kernel(*args):
        detached = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        with torch.enable_grad():
            return tuple(op(*detached))
    return kernel


def _same_as(op):
    def fake(*args):
        return tuple(op(*args))
    return fake


_lib.impl("mkldnn_rnn_layer_with_workspace", _with_grad_mode_on(aten.mkldnn_rnn_layer.default), "CPU")
torch.library.register_fake("aotgrad::mkldnn_rnn_layer_with_workspace", _same_as(aten.mkldnn_rnn_layer.default),
                            lib=_lib)

# aten op -> the op recorded in its place when it ran with grad mode on and an input requiring grad
RECORDED_WITH_GRAD_MODE_ON = {
    aten.mkldnn_rnn_layer.default: torch.ops.aotgrad.mkldnn_rnn_layer_with_workspace.default,
}


def recorded_op(func, args, kwargs):
    """The op to record for `func` called with these (fake) arguments."""
    replacement = RECORDED_WITH_GRAD_MODE_ON.get(func)
    if replacement is None or not torch.is_grad_enabled():
        return func
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    return replacement if any(t.requires_grad for t in tensors) else func
