"""Fuzz regression (fixed): backward through a compiled function reaches the grad_fn of an input
that gets no gradient; eager never runs it. Here `b`'s SinBackward saved `a`, which was
modified afterwards, so aotgrad's backward fails ("one of the variables needed for
gradient computation has been modified by an inplace operation ... output 0 of T1 / Mul");
eager and PyTorch's AOTAutograd are fine. (Found under torch.compile, where a graph
break at `a.t_()` leaves such an input in front of the next graph:
`v0 = a.sin(); a.t_(); v1 = b - v0; b.zero_(); return (a.view(-1),)`.)

Stage: runtime (`CompiledFunction`). Every input that requires grad is passed to
`CompiledFunction.apply`, so it becomes an edge of CompiledFunctionBackward even when
the backward graph returns None for it (`return (zeros_like, None)` here). The autograd
engine still runs the node behind such an edge, and SinBackward unpacks its stale saved
tensor. Inputs that the joint proves get no gradient should be passed detached (no edge).
Fixed by ab5cf41.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a, b):
    v0 = a - b  # noqa: F841 - unused, but it makes b an input of the compiled graph
    a.zero_()
    return (a,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((), requires_grad=True)
    x = l0 * 1
    a = l0 * 1
    b = x.sin()
    x.mul_(2)  # b's grad_fn saved the old x: a backward that reaches it must fail
    return [a, b], [l0]


def test_backward_does_not_reach_inputs_without_gradient():
    check_program(f, make_inputs)
