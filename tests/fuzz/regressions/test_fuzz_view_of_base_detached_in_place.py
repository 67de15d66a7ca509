"""Fuzz regression (fixed, finding 38): `v0 = c * 2; v1 = v0.expand(3); v0.detach_(); return (v1,)`
returns `v1` not requiring grad; eager's requires grad (ExpandBackward into c's history).

Stage: analysis + epilogue. `v1` views an intermediate, so it is rebuilt from its base `v0`
returned by the forward; `detach_` made that base not require grad after the view was
taken, and a view replayed on it has no history. Found as `v0 = c * b; v1 = v0.expand_as(a);
v0.detach_(); return (c.select(0, 0), c, v1)` with `a`, `b`, `c` views of one leaf.
Fixed: an alias whose rebuilt autograd state differs from eager's takes the history of a
forward output that carries it (`OutputInfo.history`, `epilogue._with_history`); where the
caller also gets the base (`return (v0, v1)`) that cannot be faithful, a clear error.
"""
import pytest
import torch

import aotgrad
from aotgrad.errors import UnsupportedError
from tests.fuzz.oracle import check_program


def f(c):
    v0 = c * 2
    v1 = v0.expand(3)
    v0.detach_()
    return (v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1,), requires_grad=True)
    c = l0
    return [c], [l0]


def test_view_of_base_detached_in_place_keeps_its_history():
    check_program(f, make_inputs)


def test_base_and_view_both_returned_is_a_clear_error():
    def g(c):
        v0 = c * 2
        v1 = v0.view(1)
        v0.detach_()
        return (v0, v1)

    with pytest.raises(UnsupportedError, match=r"output 1: .*detach_\(\).*\.clone\(\)"):
        aotgrad.aot_function(g, aotgrad.nop)(torch.randn(1, requires_grad=True))
