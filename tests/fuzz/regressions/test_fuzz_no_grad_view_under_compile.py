"""Fuzz regression (fixed): under torch.compile, a view of an input taken under `torch.no_grad()`
and viewed again outside it gets a gradient to the input; eager's gradient is None.

Stage: epilogue under torch.compile (`aot_module_simplified`). The returned `v1` aliases
input `a`, so it is rebuilt at run time by replaying its view ops from `a`; the replay
runs `select` with grad enabled, though eager ran it under no_grad (which is what cuts
the graph: eager's `v1` has a grad_fn, but backward never reaches `l0`). aot_function
gets it right; PyTorch's own aot_eager backend has the same bug. Replay each view op in
the grad mode it was recorded in.
Fixed by 2a51ebf (grad mode recorded per node; views replayed in it).
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    with torch.no_grad():
        v0 = a.select(0, 0)
    v1 = v0.transpose(0, 0)
    return (v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1,), requires_grad=True)
    a = l0
    return [a], [l0]


def test_view_taken_under_no_grad_stays_cut_under_compile():
    check_program(f, make_inputs)
