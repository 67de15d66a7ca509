"""Fuzz regression (open): `v0 = a * a`; under no_grad `v1 = v0.data; a.data.mul_(3)`; then
`v3 = v0.cos(); return (v3, a, v1)`: after the caller writes into the returned `v1`, the
backward raises "modified by an inplace operation"; eager's runs.

Stage: runtime. Eager's `v1 = v0.data` has a version counter of its own, so writing into it does
not bump the counter of `v0`, which `cos` saved (eager then reads the written values,
unchecked). The compiled function returns `v0`'s memory as `v1` sharing the saved tensor's
counter, so the caller's write trips the backward's version check.
Fix idea: the same as test_fuzz_data_alias_saved_then_output_written.py: know which saved
values are `.data` aliases in eager (a counter of their own) and keep their memory and counter
apart from the returned alias.
"""
import pytest
import torch

from tests.fuzz.known import KnownBug
from tests.fuzz.oracle import check_program

KNOWN = KnownBug(
    reason="a `.data` alias of an intermediate returned: a write into it trips the saved value's version check",
    categories=("backward_crash",),
    message=r"after writing into the outputs raised RuntimeError: one of the variables needed",
    source=r"\.data\b")


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


@pytest.mark.xfail(strict=True, reason=KNOWN.reason)
def test_data_alias_of_an_intermediate_returned_then_written():
    check_program(f, make_inputs)
