"""Fuzz regression: bug `test_fuzz_mutated_input_backward_traced` (`a.mul_(a)` on a
non-leaf input) comes back when no output requires grad: `return (v0.detach(),)`
instead of `return (v0,)` fails to compile with eager autograd's "one of the variables
needed for gradient computation has been modified by an inplace operation". Eager runs
it. (Found as `v0 = a / (b.abs() + 1); with no_grad: v1 = b.sin(); a.copy_(v0);
return (v1,)`.)

Stage: joint. The fix in d6618a6 drops the tangent of a mutated input whose backward
autograd cannot run, but when that input is the only value that would get a tangent the
failing `autograd.grad` is still traced.

Fixed: joint._trace_backward probes the mutated inputs' values among the differentiable
outputs by output index; it sliced the list by position, which skipped them when a
user output before them was not differentiable.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a * 2
    a.mul_(a)
    return (v0.detach(),)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((3,), requires_grad=True)
    a = l0 * 1
    return [a], [l0]


def test_self_multiplying_input_with_detached_outputs():
    check_program(f, make_inputs)
