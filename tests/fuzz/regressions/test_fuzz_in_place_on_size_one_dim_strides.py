"""Fuzz regression (open): `v0 = a + a; v0.sin_(); return (v0, v0)` with `a` of shape (1, 2) and
strides (1, 3) (a diagonal) returns strides (2, 1) where eager's are (1, 1).

Stage: functionalize. Eager's `a + a` picks strides (1, 1) for the (1, 2) result and `sin_`
keeps them; the functional `sin(add)` picks its own, (2, 1). They differ only on the size-1
dim, which `_keep_layout` does not restore (the fakes often disagree with eager on such dims
themselves: documented in docs/limitations.md). Same elements, same values and gradients.
Fix idea: for an in-place op whose target has a size-1 dim and non-canonical strides, copy the
new value into the target's runtime layout (`aten.copy`) whatever the fakes say.
"""
import pytest
import torch

from tests.fuzz.known import KnownBug
from tests.fuzz.oracle import check_program

KNOWN = KnownBug(
    reason="an in-place op on an intermediate with a size-1 dim: the functional op's strides on that dim",
    categories=("strides",),
    message=r"has stride \(2, 1\) offset 0, eager's \(1, 1\) offset 0",
    source=r"\.sin_\(\)")


def f(a):
    v0 = a + a
    v0.sin_()
    return (v0, v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2, 2, 1))
    a = l0.diagonal()
    return [a], [l0]


@pytest.mark.xfail(strict=True, reason=KNOWN.reason)
def test_in_place_op_keeps_eagers_strides_on_a_size_one_dim():
    check_program(f, make_inputs)
