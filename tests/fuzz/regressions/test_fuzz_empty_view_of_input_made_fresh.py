"""Fuzz regression (finding 34): `v0 = a.view(0); a.add_(0.5); v1 = a.view(-1); return (v1,)`
with `a = l0[1:]` (zero elements). Eager returns `v1` as a view of `a` (storage offset 1);
aotgrad returned a fresh empty tensor (its own storage, offset 0). No value can differ: the
tensor has no elements.

Stage: trace, with PyTorch's FakeTensor dispatch cache (shared by all FakeTensorModes in a
process). The fake `aten.view` of an empty tensor is computed by `_reshape_view_helper`,
which calls `prims.as_strided`; that prim's schema marks its output `Tensor(a!)`, not a view,
so the cache keeps it as a fresh output, and a cache hit (here: `a.view(0)` cached it; in the
campaign, another program had) gives the view a storage of its own. The alias analysis then
reads `v1` as a fresh output. Hence order-dependent: the program passed on every rerun in a
fresh process. Fixed: the GraphRecorder computes fake views of empty tensors
without the cache (trace/tracer.py).

The oracle no longer reports this kind of difference: a tensor with no elements shares memory
with nothing (`oracle.shares_memory`), since its storage is not observable through values.
This test pins the storage identity directly.
"""
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import aotgrad


def f(a):
    v0 = a.view(0)  # noqa: F841 - caches prims.as_strided for the view below
    a.add_(0.5)
    v1 = a.view(-1)
    return (v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1,))
    a = l0[1:]
    return [a], [l0]


def test_empty_view_of_mutated_input_stays_a_view():
    FakeTensorMode.cache_clear()
    (a,), _ = make_inputs()
    (out,) = aotgrad.aot_function(f, aotgrad.nop)(a)
    (expected,) = f(make_inputs()[0][0])
    assert out.untyped_storage()._cdata == a.untyped_storage()._cdata, "a fresh tensor, eager's is a view of a"
    assert (out.stride(), out.storage_offset()) == (expected.stride(), expected.storage_offset())
