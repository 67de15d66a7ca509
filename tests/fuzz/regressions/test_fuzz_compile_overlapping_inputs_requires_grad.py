"""Fuzz regression: under torch.compile, with inputs that share memory (`b = l0`,
`c = l0[0]`) and a mutation of one of them by a value that requires grad
(`b.copy_(a)`), an output computed before the mutation and independent of `a`
(`v0 = c * 2`) comes back requiring grad; eager's does not. aot_function with the same
inputs (in either argument order) is right; PyTorch's aot_eager backend is right.

Stage: the torch.compile path (`aot_module_simplified` + the synthetic base taken for
the overlapping inputs): the traced graph is correct (`mul` reads only the base), so
the output's differentiability (the runtime plan / `mark_non_differentiable`) is what
goes wrong when the base is rebuilt from torch.compile's example inputs.

Fixed: joint._prepare_primals traced the caller's fake input itself, so `b.copy_(a)` in the
first trace (the one that finds the overlap) left torch.compile's memoised fake of `l0`
requiring grad, and the synthetic-base retry started from it; inputs that do not require
grad are now traced as an unrecorded `detach()` of the fake.
"""
import torch

from tests.fuzz.oracle import check_program


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


def test_output_independent_of_grad_input_under_compile_with_synthetic_base():
    check_program(f, make_inputs)
