"""Fuzz regression: a write into an input whose elements share memory (`a = l0.expand(2, 1)`)
through a view that does not overlap itself (`a[0] = 1.5`, found as an empty slice
`v1[0:2:2, 0:0:2] = -1.5` of `v1 = a.detach()`) crashed at run time with eager's "more than
one element of the written-to tensor refers to a single memory location"; eager runs it.

Stage: functionalize + epilogue. The write-back copies the input's new value into the
expanded input, which `copy_` refuses; and the functional value keeps the rows apart where
eager's write shows in every row sharing the memory.

Fixed: functionalize/rewrite.py `write` raises a clear UnsupportedError for an in-place write
into an input that overlaps itself (accepted by the oracle), as for written tensors that do.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.sum(0)
    v1 = a.detach()
    v1[0:2:2, 0:0:2] = -1.5
    v2 = v0.sin()
    return (v2,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1,))
    a = l0.expand(2, *l0.shape)
    return [a], [l0]


def test_write_into_an_expanded_input_is_a_clear_error():
    report = check_program(f, make_inputs)
    assert all("overlap in memory" in e for e in report.clear_errors.values()), report
