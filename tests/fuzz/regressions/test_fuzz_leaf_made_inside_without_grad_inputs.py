"""Fuzz regression: when no input requires grad but the function makes a leaf that does
(`torch.ones_like(a).requires_grad_()`), outputs computed from it do not require grad
under aot_function (eager's do, so `out.backward()` works in eager and raises "element
0 of tensors does not require grad" under aotgrad). torch.compile is right.

Stage: api (`compile_flat`). Whether to trace a backward is decided from the inputs
alone (`needs_grad = any(input.requires_grad)`), so the inference graph is used and its
outputs never require grad. The fix of `test_fuzz_leaf_made_inside_function` covers
returning the leaf itself, not values computed from it. Decide from the traced outputs'
requires_grad, or trace the joint when any output requires grad.

Fixed: joint.trace_joint finds the leaves the function makes itself that a gradient
reaches (`InnerLeaf`) and traces the backward for them even when no input requires
grad; the runtime passes a fresh stand-in leaf per inner leaf as an extra input
(runtime.call.InnerLeaves), which gets the grads and is returned where the leaf is.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = torch.ones_like(a).requires_grad_()
    v1 = a - v0
    return (v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn(())
    a = l0
    return [a], [l0]


def test_output_of_inner_leaf_requires_grad_without_grad_inputs():
    check_program(f, make_inputs)
