"""Fuzz regression (fixed, finding 43): under no_grad `v2 = a.clone().requires_grad_(); v5 = v2.view(-1)`,
then `return (v5.sin(),)` (a does not require grad): the output did not require grad; eager's
does, with a grad_fn whose backward reaches nothing.

Stage: runtime. A view taken under no_grad of a leaf requires grad but autograd gives it
no edge (not even an AccumulateGrad), so no gradient can reach any leaf: aotgrad traced no
backward and ran the forward alone, whose outputs require no grad. Found as
`v5 = v2.unfold(-1, 3, 2); v7 = v5.logsumexp(-1); ...; a.masked_fill_(a > 0, -1.5)`
(campaign at 83b53e6, chunks 28-30; also at 41c28ef).
Fixed: such outputs get a grad_fn that sends nothing (`runtime.function._DeadEnd`).
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    with torch.no_grad():
        v2 = a.clone().requires_grad_()
        v5 = v2.view(-1)
    return (v5.sin(),)


def f_found(a):
    with torch.no_grad():
        v2 = a.flatten().clone().requires_grad_()
        v3 = v2 * a
        v5 = v2.unfold(-1, 1, 2)
        v6 = a + v2
    v7 = v5.logsumexp(-1)
    v9 = a.select(0, 0) + v3
    a.masked_fill_(a > 0, -1.5)
    return (v7, v7, v6, v9)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2,))
    return [l0], [l0]


def test_op_on_no_grad_view_of_inner_leaf_requires_grad():
    check_program(f, make_inputs)


def test_as_found_with_a_mutated_input():
    check_program(f_found, make_inputs)
