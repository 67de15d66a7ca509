"""Fuzz regression: two views of an intermediate that is then written through one of them
(`v0 = a.amax(2); v1 = v0.unfold(-1, 1, 2); v2 = v0.t(); v2.add_(ones(1, 3))`,
`return (v1, v2)`) come back with other strides on a size-1 dim than eager's: `v1` has
stride (1, 6, 3) where eager's has (1, 2, 1). Same elements, same memory; the oracle holds
aliases' strides contractual. (Found as `v2.mul_(v2.data)` with an `as_strided` of `v2`.)

Stage: functionalize + epilogue. The intermediate base `v0` is returned by the forward as
its functional value, `t(add(t(v0), ones))`, whose stride on the size-1 dim is 3 where
eager's `v0` keeps 1; `v1` is rebuilt by replaying `unfold` on it, and unfold multiplies
that stride. Restride such a base to its traced strides where only size-1 dims differ
(`as_strided(value, size, traced_stride)`, same memory) before replaying views on it:
in the epilogue, or as a graph output step in functionalize.
"""
import pytest
import torch

from tests.fuzz.known import KnownBug
from tests.fuzz.oracle import FuzzFailure, check_program


def f(a):
    v0 = a.amax(2)
    v1 = v0.unfold(-1, 1, 2)
    v2 = v0.t()
    v2.add_(torch.ones(1, 3))
    return (v1, v2)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((3, 1, 1))
    a = l0
    return [a], [l0]


KNOWN = KnownBug(
    reason="functionalize/epilogue: a mutated intermediate base comes out of the forward with other "
           "strides on size-1 dims than eager's, and views replayed on it (unfold) inherit them",
    categories=("strides",),
    message=r"\(an alias\) has stride")


@pytest.mark.xfail(strict=True, raises=FuzzFailure, reason=KNOWN.reason)
def test_views_of_a_mutated_intermediate_keep_eagers_strides():
    check_program(f, make_inputs)
