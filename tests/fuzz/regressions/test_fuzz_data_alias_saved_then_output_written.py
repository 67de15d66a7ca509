"""Fuzz regression (open): `v0 = a.data; b.index_fill_(0, [0], -1.5); v1 = v0 * a;
return (a, v1)` with `b` the same tensor as `a`: after the caller writes into the returned `a`,
the gradient of `v1` differs from eager's.

Stage: partition (`copy_saved_aliases`). Eager's `MulBackward` saves `v0`, an alias of `a`'s
memory with a version counter of its own (`.data`), so it reads whatever the caller wrote into
`a` after the call, and raises nothing. The compiled backward saves a copy of `a`'s value (it
saves copies of values that alias a written input: fuzz finding 33, to keep the write-back's
version bump from failing the backward), so it reads the value at the call. Only a write
between the call and the backward shows it.
Fix idea: save an alias with a fresh version counter instead of a copy where the value eager
saves is a `.data` alias.
"""
import pytest
import torch

from tests.fuzz.known import KnownBug
from tests.fuzz.oracle import check_program

KNOWN = KnownBug(
    reason="a `.data` alias saved for backward reads the caller's later writes in eager; aotgrad saves a copy",
    categories=("grads",),
    message=r"after writing into the outputs",
    source=r"\.data\b")


def f(a, b):
    v0 = a.data
    b.index_fill_(0, torch.tensor([0]), -1.5)
    v1 = v0 * a
    return (a, v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2,), requires_grad=True)
    a = l0 * 1
    b = a
    return [a, b], [l0]


@pytest.mark.xfail(strict=True, reason=KNOWN.reason)
def test_data_alias_saved_for_backward_sees_writes_after_the_call():
    check_program(f, make_inputs)
