"""Fuzz regression (finding 37, session 4): `v0 = b.data; v1 = b / (a.abs() + 1); return (v0, v1)`
with `a = b = l0` (requires grad). After the call the oracle writes into each output with grad
mode on, then backpropagates: eager's `v0` (from `.data`) has a version counter of its own, so
writing into it bumps nothing and the backward runs; aotgrad rebuilt `v0` as a view of the input,
sharing its counter, and the backward raised "modified by an inplace operation".

Stage: analysis + epilogue. Fixed: analysis marks an alias output whose fake does not share
its base's version counter (`_shares_version_counter`), and the epilogue returns the rebuilt
alias `.data` (same memory, a counter of its own). Which values the backward reads after such
a write depends on what each implementation saved, so the oracle does not compare those grads
(`_writes_untracked_by_autograd`); it compares everything else.
"""
import torch

import aotgrad
from tests.fuzz.oracle import check_program


def f(a, b):
    v0 = b.data
    v1 = b / (a.abs() + 1)
    return (v0, v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((), requires_grad=True)
    a = l0
    b = l0
    return [a, b], [l0]


def test_data_output_of_an_input_that_a_backward_reads():
    check_program(f, make_inputs)


def test_a_data_output_has_its_own_version_counter_as_in_eager():
    def g(x):
        y = x * 2
        return x.data, y.data, y

    for fn in (g, aotgrad.aot_function(g, aotgrad.nop)):
        x = torch.randn(3, requires_grad=True)
        x_data, y_data, y = fn(x)
        versions = (x._version, y._version)
        x_data.add_(1)
        y_data.add_(1)
        assert (x._version, y._version) == versions
        assert x_data.untyped_storage()._cdata == x.untyped_storage()._cdata
        assert y_data.untyped_storage()._cdata == y.untyped_storage()._cdata
        torch.testing.assert_close(y, y_data)
