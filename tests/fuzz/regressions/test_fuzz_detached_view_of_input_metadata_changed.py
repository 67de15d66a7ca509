"""Fuzz regression (fixed, finding 40): `v0 = a.detach(); v0.unsqueeze_(0); return (v0,)` (a requires
grad) returns `v0` requiring grad; eager's does not.

Stage: epilogue. The view ops could not be replayed (`unsqueeze_` changed `v0` in place), so
`v0` was rebuilt with `as_strided` under `no_grad`; but a view taken under no_grad of a
tensor that requires grad still requires grad. Found as `torch.add(a, 0.5, out=a.contiguous())`
under no_grad, then `v2 = v0.detach(); v2.unsqueeze_(0); return (a, v2, v1)`.
Fixed: an alias that must not require grad is rebuilt from `base.detach()`.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.detach()
    v0.unsqueeze_(0)
    return (v0,)


def f_mutated(a):
    with torch.no_grad():
        a.add_(0.5)
    v0 = a.detach()
    v0.unsqueeze_(0)
    return (a, v0)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((3,), requires_grad=True)
    return [l0], [l0]


def test_detached_view_changed_in_place_does_not_require_grad():
    check_program(f, make_inputs)


def test_with_a_mutated_input():
    check_program(f_mutated, make_inputs)
