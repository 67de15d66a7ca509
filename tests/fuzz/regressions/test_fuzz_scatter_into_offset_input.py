"""Fuzz regression (fixed): writing through an `expand` (or `as_strided`) view of an input with
a nonzero storage offset (`a = l0[1:]`) writes the wrong elements: the result is
shifted by the input's offset (one row here). Silent.

Stage: functionalize. The write is turned into
`as_strided_scatter(primals_1, mul, [3, 4], [4, 1], 0)`. as_strided_scatter keeps its
base's layout and reads `storage_offset` as absolute in that storage, so the view of
`a = l0[1:]` needs 4 there (its own storage offset); 0 is the offset relative to the
input, and the write lands one row early. The same for `a.as_strided((2,), (1,), 5)`
with `a` at offset 3 (scattered at 2 instead of 5). Pass the view's absolute storage
offset. PyTorch's AOTAutograd gets this right.
Fixed by ab5cf41.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.expand(3, 4)
    v0.mul_(2)
    return (a,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((4, 4))
    a = l0[1:]
    return [a], [l0]


def test_write_through_expand_of_offset_input():
    check_program(f, make_inputs)
