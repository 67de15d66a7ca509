"""Fuzz regression (fixed): writing to an input through an alias whose shape was changed in
place (`v0 = a.detach(); v0.mul_(1); v0.unsqueeze_(0); v0.sin_()`) crashes after the
compiled forward with "output with shape [] doesn't match the broadcast shape [1]".

Stage: functionalize (+ epilogue write-back). After the alias's metadata mutation
(`unsqueeze_`), the next write through it produces the input's new value in the
alias's shape ([1]) instead of the input's ([]); the epilogue's `a.copy_(new)` then
fails. The first write (`mul_`) is needed: without it the program passes. The
functional value of a mutated input must be rebuilt in the input's own shape (replay
the alias's inverse view, including its metadata changes).
Fixed by ab5cf41.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.detach()
    v0.mul_(1)
    v0.unsqueeze_(0)
    v0.sin_()
    return (a.sum(),)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn(())
    a = l0
    return [a], [l0]


def test_write_through_reshaped_alias_of_input():
    check_program(f, make_inputs)
