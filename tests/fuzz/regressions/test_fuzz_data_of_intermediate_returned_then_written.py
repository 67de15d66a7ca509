"""Fuzz regression (fixed): `v0 = a * a`; under no_grad `v1 = v0.data; a.data.mul_(3)`; then
`v3 = v0.cos(); return (v3, a, v1)`: after the caller writes into the returned `v1`, the
backward raises "modified by an inplace operation"; eager's runs.

Stage: runtime. Eager's `v1 = v0.data` has a version counter of its own, so writing into it does
not bump the counter of `v0`, which `cos` saved (eager then reads the written values,
unchecked). The compiled function returns `v0`'s memory as `v1` sharing the saved tensor's
counter, so the caller's write trips the backward's version check.
Fixed (session 15): the returned `.data` alias gets a version counter of its own (the
tracer's `own_version_counter` tag, runtime.forward.own_counters), and the min-cut
partitioner saves, never recomputes, a value eager's backward reads whose memory the caller
gets through `.data` (min_cut._read_through_data_outputs).
"""
import torch

from tests.fuzz.oracle import check_program

def f(a):
    v0 = a * a
    with torch.no_grad():
        v1 = v0.data
        a.data.mul_(3)
    v3 = v0.cos()
    return (v3, a, v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.tensor(1.0, requires_grad=True)
    return [l0], [l0]


def test_data_alias_of_an_intermediate_returned_then_written():
    check_program(f, make_inputs)
