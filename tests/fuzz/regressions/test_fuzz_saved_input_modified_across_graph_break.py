"""Fuzz regression (torch.compile only): `v0 = a.sin(); v1 = torch.cat([a.reshape(-1)] * 2);
a.squeeze_(); ...; return (v1,)` with `a = l0 * 1` (0-d, requires grad). Dynamo breaks the
graph at `squeeze_`; the first graph's compiled Function saved `a` (for `sin`'s backward),
and `squeeze_` (run eagerly between the graphs) bumps `a`'s version. `v1.sum().backward()`
needs nothing of `sin`'s backward, and eager's engine never runs it; aotgrad's one backward
node unpacks every saved tensor (`ctx.saved_tensors`) and autograd's version check raises
"one of the variables needed for gradient computation has been modified by an inplace
operation". PyTorch's aot_eager raises the same.

Stage: runtime. The backward variant for the missing tangent (partition/absent_tangents.py)
no longer reads `a`, but the saved tensors are unpacked all at once. A fix needs saved
tensors grouped by the tangents whose backward reads them, unpacked per group.
"""
import pytest
import torch

from tests.fuzz.known import KnownBug
from tests.fuzz.oracle import FuzzFailure, check_program


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


KNOWN = KnownBug(
    reason="runtime: a saved input modified in place between two graphs (a graph break) fails the "
           "version check of the whole backward, even when the given grads do not need it",
    categories=("backward_crash",),
    message=r"modified by an inplace operation",
    backends=("compile",))


@pytest.mark.xfail(strict=True, raises=FuzzFailure, reason=KNOWN.reason)
def test_saved_input_modified_between_graphs():
    check_program(f, make_inputs)
