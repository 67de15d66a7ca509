"""Fuzz regression: `a.mul_(a)` on a non-leaf input that requires grad fails to compile
with eager autograd's "modified by an inplace operation" error, though eager runs it.

Stage: joint. The mutated input's new value is a forward output that gets a tangent, so
the one-pass trace runs real autograd backward through `mul_(a, a)`, whose saved `other`
is the overwritten `a`. Eager never backpropagates through it here (only `v0` is used),
so eager is fine. PyTorch's AOTAutograd fails the same way; aotgrad should either not
ask for that tangent when autograd cannot give it, or raise a clear UnsupportedError.

Fixed: joint: mutated inputs whose backward autograd cannot run get no tangent; the runtime
raises eager's error only if a gradient reaches them.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a * 2
    a.mul_(a)
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((3,), requires_grad=True)
    a = l0 * 1
    return [a], [l0]


def test_self_multiplying_input_compiles_or_raises_clearly():
    check_program(f, make_inputs)
