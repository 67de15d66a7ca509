"""Fuzz regression (fixed): `v0 = a.data; b.index_fill_(0, [0], -1.5); v1 = v0 * a;
return (a, v1)` with `b` the same tensor as `a`: after the caller writes into the returned `a`,
the gradient of `v1` differs from eager's.

Stage: partition (`copy_saved_aliases`). Eager's `MulBackward` saves `v0`, an alias of `a`'s
memory with a version counter of its own (`.data`), so it reads whatever the caller wrote into
`a` after the call, and raises nothing. The compiled backward saves a copy of `a`'s value (it
saves copies of values that alias a written input: fuzz finding 33, to keep the write-back's
version bump from failing the backward), so it reads the value at the call. Only a write
between the call and the backward shows it.
Fixed (session 15): the tracer tags each `detach` that was a `.data` (its output has a version
counter of its own, `meta["own_version_counter"]`); functionalization and the partitioner keep
the tag; a saved value eager holds through `.data` is saved with a counter of its own, and as
the input's own memory where it is a written input's new value (pipeline._own_counter_results,
runtime.forward.own_counters). tests/runtime/test_data_aliases.py has the family.
"""
import torch

from tests.fuzz.oracle import check_program

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


def test_data_alias_saved_for_backward_sees_writes_after_the_call():
    check_program(f, make_inputs)
