"""Fuzz regression (fixed): `torch.ones_like(a).requires_grad_()` returned from the function is a
leaf in eager (no grad_fn; backward fills its .grad) but a CompiledFunction output with
a grad_fn under aotgrad.

Stage: joint / runtime. A tensor that becomes a leaf requiring grad inside the function
is traced as a plain forward output, and every output of `CompiledFunction.apply` gets
its grad_fn. Only the case where no input requires grad is patched up (the epilogue's
`requires_grad_(True)` on a leaf output). PyTorch's AOTAutograd behaves like aotgrad
here; eager semantics need the output returned as a leaf (detached from the Function and
`requires_grad_()` again), or a clear error.
Fixed by ab5cf41.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = torch.ones_like(a).requires_grad_()
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1,), requires_grad=True)
    a = l0
    return [a], [l0]


def test_leaf_made_inside_the_function_stays_a_leaf():
    check_program(f, make_inputs)
