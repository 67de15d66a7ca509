"""Fuzz regression: under torch.compile, with inputs that share memory (`b = l0`,
`c = l0[0]`) and a mutation of one of them by a value that requires grad
(`b.copy_(a)`), an output computed before the mutation and independent of `a`
(`v0 = c * 2`) comes back requiring grad; eager's does not. aot_function with the same
inputs (in either argument order) is right; PyTorch's aot_eager backend is right.

Stage: the torch.compile path (`aot_module_simplified` + the synthetic base taken for
the overlapping inputs): the traced graph is correct (`mul` reads only the base), so
the output's differentiability (the runtime plan / `mark_non_differentiable`) is what
goes wrong when the base is rebuilt from torch.compile's example inputs.
"""
import pytest
import torch

from tests.fuzz.known import KnownBug, inputs_share_memory
from tests.fuzz.oracle import FuzzFailure, check_program


def f(a, b, c):
    v0 = c * 2
    b.copy_(a)
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2,))
    l1 = torch.randn((), requires_grad=True)
    a = l1
    b = l0
    c = l0[0]
    return [a, b, c], [l0, l1]


KNOWN = KnownBug(
    reason="torch.compile + synthetic base: an output that does not depend on the grad-requiring "
           "input comes back requiring grad when overlapping inputs are mutated",
    categories=("requires_grad", "grad_fn", "grads"),
    backends=("compile",),
    inputs=inputs_share_memory)


@pytest.mark.xfail(strict=True, raises=FuzzFailure, reason=KNOWN.reason)
def test_output_independent_of_grad_input_under_compile_with_synthetic_base():
    check_program(f, make_inputs)
