"""Fuzz regression: a view of an input taken before `a.squeeze_()` crashes compilation
with IndexError ("Dimension out of range") instead of aotgrad's clear error.

Stage: analysis (`analyse_outputs`). Reading `out.grad_fn` of the returned view (to
detect custom Functions) makes autograd regenerate the view's grad_fn against its base,
whose shape `squeeze_` changed, so `unsqueeze(-3)` is replayed on a 0-d tensor. Without
requires_grad the same program gets the clear "changes the shape or strides of input 0
in place" UnsupportedError; check input metadata mutations before analysing outputs.

Fixed: joint: input metadata mutations are rejected before the outputs are analysed.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.unsqueeze(-3)
    a.squeeze_()
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1, 1), requires_grad=True)
    a = l0 * 1
    return [a], [l0]


def test_view_of_input_then_squeeze_raises_clearly():
    check_program(f, make_inputs)
