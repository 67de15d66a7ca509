"""Fuzz regression (fixed): `v0.copy_(v0)` on an expanded view crashes aot_function with "more
than one element of the written-to tensor refers to a single memory location"; eager
returns at once (copying a tensor to itself is a no-op, checked before overlap).

Stage: trace. The fake kernel of `copy_` checks internal overlap before the copy-to-
itself shortcut that eager takes. torch.compile fails in dynamo's own tracing the same
way (not counted against aotgrad). Either skip `x.copy_(x)` while recording, or turn
the error into an AotgradError that names the line.
Fixed by ab5cf41.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.expand(3, 3)
    v0.copy_(v0)
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1, 3))
    a = l0 * 1
    return [a], [l0]


def test_copy_of_expanded_view_to_itself():
    check_program(f, make_inputs)
