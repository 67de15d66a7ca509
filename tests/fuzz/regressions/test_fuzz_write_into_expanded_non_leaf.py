"""Fuzz regression: an in-place write through a view of an expanded non-leaf input that
requires grad (`a = (l0 * 1).expand(2)`, `a.select(0, 0).mul_(0.5)`). Eager allows it (the
base is not a leaf); aotgrad traced such an input as its leaf stand-in, so the write raised
autograd's raw "a view of a leaf Variable that requires grad is being used in an in-place
operation".

Stage: joint (`_non_leaf_like`: an input whose elements share memory cannot be copied into
a same-layout non-leaf, so its leaf stands in).

Fixed (session 3): joint._run_forward turns that error into a clear UnsupportedError naming
the input and the workaround (pass `.clone()`); documented in docs/limitations.md.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.select(0, 0)
    v1 = a.mean(0, keepdim=True)
    v0.mul_(0.5)
    return (v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((), requires_grad=True)
    a = (l0 * 1).expand(2, *(l0 * 1).shape)
    return [a], [l0]


def test_write_into_an_expanded_non_leaf_is_a_clear_error():
    report = check_program(f, make_inputs)
    assert report.clear_errors, report
    assert all("elements share memory" in e for e in report.clear_errors.values()), report
