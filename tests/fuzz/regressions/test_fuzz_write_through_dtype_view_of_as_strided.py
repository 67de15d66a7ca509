"""Fuzz regression (finding 35): an in-place write through a dtype view (`.view(torch.int32)`)
of an `as_strided` view of an input: `v0 = a.as_strided((2,), (1,), 0); v1 = v0.view(torch.int32);
v1.add_(1); return (v1,)`. **Silent**: eager adds 1 to the int32 bit patterns of `a`'s floats;
aotgrad's output (and `a`) hold other values. With `v1.fill_(-1.5)` eager writes the int -1 bits,
aotgrad the float -1.5 bits; when the base is returned instead, eager's floats are NaN (int -1
bits), aotgrad's -1.0 (a value conversion). PyTorch's AOTAutograd is right.

Found (seed 9, 10 statements) as `v0 = a.view(torch.int32); v0.index_fill_(0, torch.tensor([0, 1]),
-1.5); return (v0,)` with inputs `a = l0`, `b = a[0]`: two inputs sharing memory, one mutated,
so `SyntheticBase` rebuilds them as `base.as_strided(...)` and the same chain appears. Without
`as_strided` in the chain (`a[0:2].view(torch.int32)`, `a.view(torch.int32)` alone) it is right.

Stage: functionalize (suspected): a write through a view chain that holds `as_strided` goes back
to the storage root by `as_strided_scatter`, and the chain's dtype view is not replayed there
(the new value is written in the root's dtype, or converted instead of reinterpreted).
"""
import pytest
import torch

from tests.fuzz.known import KnownBug
from tests.fuzz.oracle import FuzzFailure, check_program


def f(a):
    v0 = a.as_strided((2,), (1,), 0)
    v1 = v0.view(torch.int32)
    v1.add_(1)
    return (v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2,))
    a = l0
    return [a], [l0]


_DTYPE_VIEW = r"\.view\(torch\.(int|float)\d+\)"

KNOWN = KnownBug(
    reason="functionalize: a write through a dtype view of an as_strided view (or of an input rebuilt on "
           "a synthetic base) goes back to the storage root without the dtype view: wrong values",
    categories=("values", "input_state", "alias_mutation"),
    # as_strided in the chain, or a function of several inputs (a synthetic base), with a dtype view
    source=rf"as_strided[\s\S]*{_DTYPE_VIEW}|{_DTYPE_VIEW}[\s\S]*as_strided|def f\(a, b[\s\S]*{_DTYPE_VIEW}")


@pytest.mark.xfail(strict=True, raises=FuzzFailure, reason=KNOWN.reason)
def test_write_through_dtype_view_of_as_strided_view():
    check_program(f, make_inputs)
