"""Fuzz regression (open): `v0 = b.clone().requires_grad_()`; under no_grad `v1 =
v0.expand_as(a)`; then `b.copy_(v1); return (b,)` (`a` and `b` one 0-d tensor that does not
require grad): the returned `b` does not require grad; eager's does.

Stage: analysis / runtime. Eager's `copy_` records CopyBackwards on `b` with an edge to `v1`, a
view taken under no_grad of a leaf made inside, whose backward reaches nothing (as in fuzz
finding 43); the traced backward finds no gradient reaching a leaf, so the write-back into `b`
is not seen by autograd and `b` keeps requires_grad=False.
Fix idea: a written input whose new value requires grad in eager but gets no gradient gets a
history that sends nothing (`runtime.function._DeadEnd`), as outputs do.
"""
import pytest
import torch

from tests.fuzz.known import KnownBug
from tests.fuzz.oracle import check_program

KNOWN = KnownBug(
    reason="an input written with a no_grad view of a leaf made inside: eager gives it a history reaching nothing",
    categories=("requires_grad",),
    message=r"requires_grad=False, eager's True",
    source=r"requires_grad_\(\)[\s\S]*no_grad[\s\S]*copy_")


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


@pytest.mark.xfail(strict=True, reason=KNOWN.reason)
def test_input_written_with_a_no_grad_view_of_an_inner_leaf_requires_grad():
    check_program(f, make_inputs)
