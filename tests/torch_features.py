"""What the running torch can do, for tests that skip where it cannot.

aotgrad runs on several torch releases (docs/compatibility.md). Where a release lacks what a
test needs (a kernel that takes symbolic sizes, a correct decomposition), the test is skipped
with the reason these probes give, found by trying the feature rather than by version strings.
Differences aotgrad itself papers over live in aotgrad/compat.py instead.
"""
from __future__ import annotations

import functools

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext


@functools.cache
def trace_backward_takes_symbolic_sizes() -> bool:
    """Torch 2.11's C++ `trace_backward` calls numel() and raises on symbolic sizes (PyTorch's
    own AOTAutograd fails there too: torch.compile(dynamic=True, backend="aot_eager")); 2.13's
    takes them."""
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = mode.from_tensor(torch.empty(3, 4), symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC] * 2))
    with mode, enable_python_dispatcher():
        try:
            torch.ops.aten.trace_backward(x.sum(), x.shape)
        except RuntimeError:
            return False
    return True


TRACE_BACKWARD_REASON = "this torch's trace_backward kernel cannot take symbolic sizes (torch 2.11)"


@functools.cache
def lstm_decomposition_keeps_hidden_shapes() -> bool:
    """Torch 2.11 and 2.12: the Python kernel of `aten.lstm` (what torch.compile traces an LSTM
    with) squeezes the wrong dimension of h_n and c_n when the input requires grad: (layers, 1,
    batch, hidden) instead of (layers, batch, hidden). PyTorch's own AOTAutograd inherits it; 2.13 fixed it."""
    from torch._decomp import decomposition_table

    lstm = torch.nn.LSTM(2, 2)
    x, h = torch.zeros(3, 2, 2, requires_grad=True), torch.zeros(1, 2, 2)
    _, h_n, _ = decomposition_table[torch.ops.aten.lstm.input](
        x, (h, h), lstm._flat_weights, True, 1, 0.0, True, False, False)
    return h_n.shape == h.shape


LSTM_DECOMPOSITION_REASON = ("this torch's Python kernel of aten.lstm returns h_n and c_n with an extra "
                             "dimension (torch 2.11 and 2.12; PyTorch's AOTAutograd is wrong there too)")
