"""Fuzz regression (clear error, finding 42): under torch.compile, `v0 = a.t()`, then under no_grad
`v0.requires_grad_(); v0.copy_(a - v0)`, then `v2 = v0 - v0`: `v2` did not require grad.

Stage: api (synthetic base). Dynamo breaks the graph at `requires_grad_`; the second graph
gets `v0` (a view of `a` made a leaf requiring grad) and `a`, mutates `v0`, so both are
rebuilt as views of their common base `a`, which does not require grad: `v0`'s own
gradient cannot flow through it. PyTorch's AOTAutograd crashes here ("outs_to_grad
length (2) != tangents length (1)"). Now a clear UnsupportedError naming the input.
"""
import pytest
import torch

import aotgrad
from aotgrad.errors import UnsupportedError
from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.t()
    with torch.no_grad():
        v1 = a - v0
        v0.requires_grad_()
        v0.copy_(v1)
    v2 = v0 - v0
    return (a, v2)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn(())
    return [l0], [l0]


def test_oracle_accepts_the_clear_error():
    check_program(f, make_inputs)


def test_synthetic_base_of_leaf_view_is_a_clear_error():
    def g(v0, a):
        with torch.no_grad():
            v0.mul_(2)
        return (v0 * a,)

    a = torch.randn(3)
    v0 = a.view(3)
    v0.requires_grad_()
    with pytest.raises(UnsupportedError, match=r"input 0 is a view that requires grad without a grad_fn"):
        aotgrad.aot_function(g, aotgrad.nop)(v0, a)
