"""Fuzz regression (fixed): `a.detach_()` on an input that requires grad: after the call eager's
`a` no longer requires grad, aotgrad's still does (and `a.requires_grad_()` on an input
that does not: eager's now requires grad, aotgrad's does not). Silent.

Crashes of the same cause: `v0 = a.sin(); a.detach_(); return (v0,)` raises "One of the
differentiated Tensors does not require grad" while tracing the joint; under
torch.compile, "new_fn INTERNAL ASSERT FAILED" (variable.cpp).

Stage: analysis / epilogue. `detach_` and `requires_grad_` change an input's autograd
metadata in place; the analysis checks data and shape/stride mutations only, so the
change is neither replayed on the caller's tensor nor rejected. PyTorch's AOTAutograd
behaves the same. Either replay it in the epilogue or raise UnsupportedError as for
`t_()` on an input.
Fixed by ab5cf41: detach_() / requires_grad_() on an input raise a clear UnsupportedError.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    a.detach_()
    v0 = a.sin()
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1,), requires_grad=True)
    a = l0
    return [a], [l0]


def test_detach_in_place_of_input_shows_in_the_caller():
    check_program(f, make_inputs)
