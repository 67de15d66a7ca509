"""Fuzz regression (torch.compile only): `v0 = a.sin(); v1 = torch.cat([a.reshape(-1)] * 2);
a.squeeze_(); ...; return (v1,)` with `a = l0 * 1` (0-d, requires grad). Dynamo breaks the
graph at `squeeze_`; the first graph's compiled Function saved `a` (for `sin`'s backward),
and `squeeze_` (run eagerly between the graphs) bumps `a`'s version. `v1.sum().backward()`
needs nothing of `sin`'s backward, and eager's engine never runs it; aotgrad's one backward
node unpacks every saved tensor (`ctx.saved_tensors`) and autograd's version check raises
"one of the variables needed for gradient computation has been modified by an inplace
operation". PyTorch's aot_eager raises the same.

Stage: runtime. The backward variant for the missing tangent (partition/absent_tangents.py)
no longer read `a`, but the saved tensors were unpacked all at once. Fixed (session 4): when
unpacking them all fails autograd's version check, `saved_tensors_read` (runtime/backward.py)
unpacks one by one and checks only those the variant reads.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.sin()
    v1 = torch.cat([a.reshape(-1), a.reshape(-1)])
    a.squeeze_()
    v2 = torch.where(a > 0, a, v0)  # noqa: F841
    return (v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((), requires_grad=True)
    a = l0 * 1
    return [a], [l0]


def test_saved_input_modified_between_graphs():
    check_program(f, make_inputs)
