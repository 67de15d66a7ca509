"""Fuzz regression (fixed): `v0 = torch.inference_mode()(lambda: a.view(a.shape))();
v0.requires_grad_(); return (v0,)` (a leaf requiring grad): the backward from `v0` raised
"element 0 of tensors does not require grad"; eager's accumulates into `v0.grad`.

Stage: analysis + epilogue. A view taken under inference_mode of a tensor that requires grad
reports requires_grad with or without `requires_grad_()`; only the call gives it a leaf's
gradient accumulator. The view was rebuilt (under no_grad) without replaying the call.
Fixed (session 14): views made under inference_mode are replayed under it
(`ViewStep.inference_mode`), and `requires_grad_()` is replayed where the view has a gradient
accumulator of its own (`analysis._has_own_grad_accumulator`).
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = torch.inference_mode()(lambda: a.view(a.shape))()
    v0.requires_grad_()
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((), requires_grad=True)
    return [l0], [l0]


def f_written(a, b, c):
    v0 = torch.inference_mode()(lambda: c.view(c.shape))()
    v0.requires_grad_()
    a.data.mul_(3)
    v1 = c.abs()
    torch.inference_mode()(lambda: v1.mul_(3))()
    return (v0, v0,)


def make_written_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((), requires_grad=True)
    l1 = torch.tensor([[1.0], [0.0], [-1.0]], dtype=torch.float64, requires_grad=True)
    return [l1, l0, l1 * 1], [l0, l1]


def test_inference_mode_view_made_a_leaf():
    check_program(f, make_inputs)


def test_inference_mode_view_made_a_leaf_beside_writes():
    check_program(f_written, make_written_inputs)
