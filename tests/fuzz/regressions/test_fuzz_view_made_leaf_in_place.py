"""Fuzz regression: a view of an input that does not require grad, made a leaf requiring
grad in place (`v0 = a.view((1,)); v0.requires_grad_(); return (v0,)`), came back not
requiring grad; eager's requires grad (a leaf view).

Stage: analysis + epilogue. The output is rebuilt at run time by replaying its view ops on
the caller's input, which does not require grad; the in-place `requires_grad_()` was not
replayed.

Fixed: analysis._with_replay appends a `requires_grad_` step (MAKE_LEAF) to the replayed view
ops of an output that requires grad although its base does not.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.view((1,))
    v0.requires_grad_()
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn(())
    a = l0
    return [a], [l0]


def test_view_made_a_leaf_in_place_requires_grad():
    check_program(f, make_inputs)
