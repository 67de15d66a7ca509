"""Fuzz regression (fixed): `return (a.detach(),)` for a leaf that requires grad returns a tensor
that requires grad; eager's does not.

Stage: epilogue (`RebuildOutput`). An output that aliases an input is rebuilt as
`base.as_strided(...)`, under `torch.no_grad()` when it must not require grad; but a
view made under no_grad of a tensor that requires grad still requires grad (it only has
no grad_fn). Rebuild it from `base.detach()` instead.
Fixed by acbf6fd (the replayed view keeps eager's requires_grad/grad_fn).

Fixed: epilogue: views of inputs are rebuilt by replaying the recorded view ops (detach
included).
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.detach()
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2,), requires_grad=True)
    a = l0
    return [a], [l0]


def test_detached_input_comes_back_not_requiring_grad():
    check_program(f, make_inputs)
