"""Fuzz regression (fixed): a non-leaf input that requires grad and is not compact (a slice with
an offset, a strided slice, an expand) gives wrong values when an output views it.

Stage: joint (`_prepare_primals`). Such an input is traced as a hidden `.clone()` of a
fresh leaf, and a clone of a non-dense tensor is contiguous from offset 0. The analysis
then records the output view's strides and offset relative to that clone, and the
epilogue applies them to the real input's storage: here `a.view(-1)` reads l0[0]
instead of l0[1]. Other symptoms of the same cause: out-of-bounds `setStorage` for views
of expanded inputs, "Output 0 of Split is a view and is being modified inplace" where
eager's `.contiguous()` copied but the clone's did not.
Fixed by acbf6fd (outputs that alias inputs are rebuilt by replaying the recorded view ops).

Fixed: joint: non-leaf inputs are traced with their own layout (strides, storage offset).
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.view(-1)
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2,), requires_grad=True)
    a = l0[1:]
    return [a], [l0]


def test_view_of_offset_non_leaf_input_reads_the_right_elements():
    check_program(f, make_inputs)
