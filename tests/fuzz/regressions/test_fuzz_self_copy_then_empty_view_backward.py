"""Fuzz regression: `a.copy_(a)` on a non-leaf input `a` (shape (1, 1, 1), requires grad),
then `v0 = b.mT @ b` with `b = a[1:]` (a view of `a` with zero elements); `return (v0,)`.
Eager runs forward and backward; aotgrad's backward raises autograd's "A view was created in
no_grad mode and its base or another view of its base has been modified inplace with grad
mode enabled".

Stage: joint/tracer (suspected). `copy_(a, a)` is a no-op shortcut in the recorder
(`__torch_dispatch__` returns at once), and `b`, a view made outside the trace, is read as a
view of the traced stand-in of `a`; the zero-element view seems to take the no-grad path.
Found in the 20,000-program campaign, chunks 12-23 (session 3).
"""
import pytest
import torch

from tests.fuzz.known import KnownBug
from tests.fuzz.oracle import FuzzFailure, check_program


def f(a, b):
    a.copy_(a)
    v0 = b.mT @ b
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1, 1, 1), requires_grad=True)
    a = l0 * 1
    b = a[1:]
    return [a, b], [l0]


KNOWN = KnownBug(
    reason="joint/tracer: after a.copy_(a), the backward through a zero-element view of the input "
           "raises autograd's 'view was created in no_grad mode' error",
    categories=("backward_crash",),
    message=r"A view was created in no_grad mode")


@pytest.mark.xfail(strict=True, raises=FuzzFailure, reason=KNOWN.reason)
def test_backward_through_empty_view_after_self_copy():
    check_program(f, make_inputs)
