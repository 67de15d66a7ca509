"""Fuzz regression (fixed, finding 41): under no_grad `v0 = a.split(3, 0)[0]; v0.unsqueeze_(0)`, then
`v0.t_()`: compiling raised "t() expects a tensor with <= 2 dimensions, but self is 3D".

Stage: functionalize. The tracer records live fakes, so `split`'s recorded list holds `v0`
after both in-place metadata changes; the getitem read its size from that list (only
tensors themselves were marked stale), and `unsqueeze` was applied twice.
Fixed: `traced_val` treats a list holding a stale fake as stale.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    with torch.no_grad():
        v0 = a.split(3, 0)[0]
        v0.unsqueeze_(0)
        v1 = v0.sum(1)
    v0.t_()
    return (v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((4,))
    a = l0 * 1
    return [a], [l0]


def test_split_view_changed_in_place_twice():
    check_program(f, make_inputs)
