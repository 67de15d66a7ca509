"""Fuzz regression (fixed): `v0 = b.clone().requires_grad_()`; under no_grad `v1 =
v0.expand_as(a)`; then `b.copy_(v1); return (b,)` (`a` and `b` one 0-d tensor that does not
require grad): the returned `b` does not require grad; eager's does.

Stage: analysis / runtime. Eager's `copy_` records CopyBackwards on `b` with an edge to `v1`, a
view taken under no_grad of a leaf made inside, whose backward reaches nothing (as in fuzz
finding 43); the traced backward finds no gradient reaching a leaf, so the write-back into `b`
is not seen by autograd and `b` keeps requires_grad=False.
Fixed (session 14): a written input whose new value requires grad in eager but gets no
gradient is written from a value with a history that sends nothing (`runtime.function._DeadEnd`,
pipeline's `dead_ends`), as outputs are.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a, b):
    v0 = b.clone().requires_grad_()
    with torch.no_grad():
        v1 = v0.expand_as(a)
    b.copy_(v1)
    return (b,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn(())
    return [l0, l0], [l0]


def test_input_written_with_a_no_grad_view_of_an_inner_leaf_requires_grad():
    check_program(f, make_inputs)
