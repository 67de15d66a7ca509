"""Fuzz regression: when no input requires grad but the function makes a leaf that does
(`torch.ones_like(a).requires_grad_()`), outputs computed from it do not require grad
under aot_function (eager's do, so `out.backward()` works in eager and raises "element
0 of tensors does not require grad" under aotgrad). torch.compile is right.

Stage: api (`compile_flat`). Whether to trace a backward is decided from the inputs
alone (`needs_grad = any(input.requires_grad)`), so the inference graph is used and its
outputs never require grad. The fix of `test_fuzz_leaf_made_inside_function` covers
returning the leaf itself, not values computed from it. Decide from the traced outputs'
requires_grad, or trace the joint when any output requires grad.
"""
import pytest
import torch

from tests.fuzz.known import KnownBug
from tests.fuzz.oracle import FuzzFailure, check_program


def f(a):
    v0 = torch.ones_like(a).requires_grad_()
    v1 = a - v0
    return (v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn(())
    a = l0
    return [a], [l0]


KNOWN = KnownBug(
    reason="api: with no input requiring grad the inference graph is used, so outputs computed from "
           "a leaf made inside the function (requires_grad_()) lose requires_grad",
    categories=("requires_grad", "grad_fn", "grads"),
    source=r"requires_grad_\(\)")


@pytest.mark.xfail(strict=True, raises=FuzzFailure, reason=KNOWN.reason)
def test_output_of_inner_leaf_requires_grad_without_grad_inputs():
    check_program(f, make_inputs)
