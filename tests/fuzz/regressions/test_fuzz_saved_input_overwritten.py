"""Fuzz regression: mutating a non-leaf input that requires grad (`a.sin_()`) makes
backward fail with "modified by an inplace operation ... CopyBackwards, is at version 1".

Stage: partition (default) + epilogue. The default partitioner saves `primals_1` (the
input itself) for backward; the epilogue then writes the mutated value back into that
same tensor (`a.copy_(new)`), bumping the version of a saved tensor (and the saved value
would be the new one, not the one the forward read). Variants: a saved view of the
input (`as_strided` of it) gives "A view was created in no_grad mode and its base ...
has been modified inplace", a saved forward output that views the input gives "output 1
of CompiledFunction is at version 1". The min-cut partitioner passes here only because
it saves `cos` instead. Never save a mutated input (or a view of it); save a clone.

Fixed: partition/graphs.py copy_saved_aliases: saved values that share memory with a mutated
input are saved as copies.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    a.sin_()
    v0 = a + 1
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((3,), requires_grad=True)
    a = l0 * 1
    return [a], [l0]


def test_backward_after_in_place_on_non_leaf_input():
    check_program(f, make_inputs)
