"""Fuzz regression (fixed): a leaf that requires grad, reshaped in place and written under
no_grad, passed with a view of itself (`a = l0; b = l0[0]`; `with no_grad(): a.unsqueeze_(0);
torch.mul(a, -1.5, out=a)`; `return (b.sin(),)`), raised "a leaf Variable that requires grad
is being used in an in-place operation" where eager runs it. (Found by the min-cut campaign
of session 26, seed 27; both partitioners failed.)

Stage: runtime (front/synthetic_base.py, SyntheticBase.run). Aliased inputs with one written are compiled over a
synthetic base; the leaf's new geometry is given to the caller's tensor by `as_strided_`
after the call, outside the no_grad the function made it under.

Fixed: on a leaf that requires grad (which eager lets change its geometry in place only
under no_grad) the `as_strided_` runs under no_grad.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a, b):
    with torch.no_grad():
        a.unsqueeze_(0)
        torch.mul(a, -1.5, out=a)
    v0 = b.sin()
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1,), requires_grad=True)
    a = l0
    b = l0[0]
    return [a, b], [l0]


def test_a_leaf_reshaped_under_no_grad_beside_its_view_runs_as_in_eager():
    check_program(f, make_inputs)
