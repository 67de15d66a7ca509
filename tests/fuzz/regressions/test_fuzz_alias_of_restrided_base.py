"""Fuzz regression (fixed): two views of an intermediate that is then written through one of
them (`v0 = a.amax(2); v1 = v0.unfold(-1, 1, 2); v2 = v0.t(); v2.add_(ones(1, 3))`,
`return (v1, v2)`) came back with other strides on a size-1 dim than eager's: `v1` had
stride (1, 6, 3) where eager's has (1, 2, 1). Same elements, same memory; the oracle holds
aliases' strides contractual. (Found as `v2.mul_(v2.data)` with an `as_strided` of `v2`.)

Stage: functionalize + epilogue. The intermediate base `v0` is returned by the forward as
its functional value, `t(add(t(v0), ones))`, whose stride on the size-1 dim is 3 where
eager's `v0` keeps 1; `v1` was rebuilt by replaying `unfold` on it, and unfold multiplies
that stride.

Fixed: the epilogue's `RestrideBase` step gives a forward output that other outputs view its
traced (eager's) strides, by `as_strided` of the same memory, when the compiled forward laid
it out otherwise on size-1 dims only, before the views are replayed (symbolic strides are made
concrete per call). Where a written intermediate's strides differ on a larger dim (out= ops,
`addmm_`), functionalize copies its new value into the old layout (`_keep_layout`), and an
`as_strided` read or write after a size-1-only difference is no longer refused.
"""
import torch

from tests.fuzz.oracle import check_program


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


def test_views_of_a_mutated_intermediate_keep_eagers_strides():
    check_program(f, make_inputs)
