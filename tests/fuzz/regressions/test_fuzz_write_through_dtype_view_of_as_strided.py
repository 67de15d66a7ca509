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

Stage: functionalize. A write through a view chain that holds an op with no inverse
(`as_strided`, `expand`; also `view_as_real`, so `.imag`) goes back to the storage root by
`as_strided_scatter`, which copied the view's int32 values into the float root as a value
conversion, and counted the view's geometry in the wrong element size where the sizes differ
(float32 -> int16 / float64: wrong elements or a crash). Fixed: `_scatter_as_strided`
(functionalize/rewrite.py) views the root and the new value in one element type first (the
view's, or bytes where the sizes differ) and the result back in the root's dtype. Reads moved
with it: as_strided offsets on a rewritten root are shifted in bytes, and a root whose new value
sits at another offset than eager's is put back at eager's where a larger dtype view needs the
alignment (`_as_strided_args`, `_align`). Tests: tests/functionalize/test_rewrite.py.
"""
import torch

from tests.fuzz.oracle import check_program


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


def test_write_through_dtype_view_of_as_strided_view():
    check_program(f, make_inputs)
