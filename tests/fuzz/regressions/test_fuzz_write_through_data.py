"""Fuzz regression (fixed): a write through `.data` is lost: `a.data.mul_(2); return (a,)` leaves
the caller's `a` unchanged and returns the old value (eager: doubled). Silent.

Stage: trace. `x.data` is not an aten op: it makes a new tensor sharing x's storage
without going through the dispatcher, so the recorder never learns that the result
aliases `x`. In-place ops on it are recorded against an unknown tensor, functionalize
has no base to write back to, and the input (or an intermediate read later) keeps its
old value. Variants: `v1 = v0.clone().requires_grad_(); v1.data.mul_(0.5); return (v1,)`
(torch.compile), `a.data.mul_(0.5); return (a.as_strided((1,), (0,), 0),)`. PyTorch's
AOTAutograd gets these right. Record `.data` as an alias of x (like `detach`), or raise
a clear error.
Fixed by ab5cf41.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    a.data.mul_(2)
    return (a,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn(())
    a = l0
    return [a], [l0]


def test_write_through_data_reaches_the_input():
    check_program(f, make_inputs)
