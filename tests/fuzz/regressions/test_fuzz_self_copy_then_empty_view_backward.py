"""Fuzz regression (finding 33, fixed): `a.copy_(a)` on a non-leaf input `a` (shape (1, 1, 1),
requires grad), then `v0 = b.mT @ b` with `b = a[1:]` (a view of `a` with zero elements);
`return (v0,)`. Eager ran forward and backward; aotgrad's backward raised autograd's "A view
was created in no_grad mode and its base or another view of its base has been modified
inplace with grad mode enabled".

Cause: neither `copy_(a, a)` nor the empty view. `a` and `b` share memory but no element, so
they were compiled as independent inputs (no synthetic base), and the backward saved views of
`b` made inside the compiled Function's forward (under no_grad). Writing `a`'s new value back
after the forward bumps the version counter `a` and `b` share: those saved views were stale
(`mul_(2)` into `a[0:1]` with `a[1:2]` saved fails the same way, with "modified by an inplace
operation"). `copy_saved_aliases` copied only saved values viewing the mutated input itself.
Fix: api.py passes it every input that shares memory with a mutated one (`_sharing_memory`).
Found in the 20,000-program campaign, chunks 12-23 (session 3).
"""
import pytest
import torch

from tests.fuzz.oracle import check_program


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


def test_backward_through_empty_view_after_self_copy():
    check_program(f, make_inputs)


def _inputs(shape, view):
    def make_inputs():
        torch.manual_seed(0)
        l0 = torch.randn(shape, requires_grad=True)
        a = l0 * 1
        return [a, view(a)], [l0]
    return make_inputs


_MUTATIONS = {
    "copy_self": lambda a: a.copy_(a),
    "mul_1": lambda a: a.mul_(1),
    "add_0": lambda a: a.add_(0),
    "copy_other": lambda a: a.copy_(a * 2),
}

_VIEWS = {
    "empty_slice": ((1, 1, 1), lambda a: a[1:]),
    "full_slice": ((1, 1, 1), lambda a: a[0:]),
    "select": ((2, 3, 3), lambda a: a.select(0, 1)),
    "transpose": ((2, 3, 3), lambda a: a.transpose(1, 2)),
    "empty_slice_of_larger": ((2, 3, 3), lambda a: a[2:]),
    "partial_slice": ((2, 3, 3), lambda a: a[1:]),
}


@pytest.mark.parametrize("mutation", list(_MUTATIONS))
@pytest.mark.parametrize("view", list(_VIEWS))
def test_mutated_input_then_backward_through_a_view_input_of_it(view, mutation):
    shape, make_view = _VIEWS[view]
    mutate = _MUTATIONS[mutation]

    def g(a, b):
        mutate(a)
        return (b.mT @ b if b.dim() >= 2 else b * b,)
    check_program(g, _inputs(shape, make_view))


def test_disjoint_view_input_saved_for_backward_after_its_neighbour_is_mutated():
    def g(x, y):
        x.mul_(2)
        return (y * y,)

    def make_inputs():
        torch.manual_seed(0)
        l0 = torch.randn(2, 3, requires_grad=True)
        a = l0 * 1
        return [a[0:1], a[1:2]], [l0]
    check_program(g, make_inputs)
