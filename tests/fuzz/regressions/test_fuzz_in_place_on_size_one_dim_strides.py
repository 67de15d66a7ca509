"""Fuzz regression (fixed): `v0 = a + a; v0.sin_(); return (v0, v0)` with `a` of shape (1, 2) and
strides (1, 3) (a diagonal) returns strides (2, 1) where eager's are (1, 1).

Stage: functionalize. Eager's `a + a` picks strides (1, 1) for the (1, 2) result and `sin_`
keeps them; the functional `sin(add)` picks its own, (2, 1). They differ only on the size-1
dim, which `_keep_layout` did not restore. Same elements, same values and gradients.
Fixed (session 14): `_keep_layout` compares static strides of size-1 dims too.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a + a
    v0.sin_()
    return (v0, v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2, 2, 1))
    a = l0.diagonal()
    return [a], [l0]


def test_in_place_op_keeps_eagers_strides_on_a_size_one_dim():
    check_program(f, make_inputs)
