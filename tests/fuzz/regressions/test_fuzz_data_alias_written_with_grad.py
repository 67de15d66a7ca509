"""Fuzz regression (fixed, finding 39): `v0 = a.data; v0.copy_(b); return (v0,)` (b requires grad)
returns `v0` not requiring grad; eager's has CopyBackwards into b.

Stage: analysis + runtime. `v0` shares `a`'s memory, so it is rebuilt as `a.detach().data`,
which has no history; and the forward returned one tensor both as the user output and as
`a`'s new value, so marking the latter non-differentiable marked both. Found as
`v2 = c.transpose(-1, 0).data; v2.copy_(b); ...; return (v2,)` with `a = l0.unfold(0, 2, 1)`.
Fixed: the alias takes the history of the forward output (`OutputInfo.history`); a tensor
returned in both roles is returned a second time as an alias (`runtime.forward.apart`).
"""
import torch

from tests.fuzz.oracle import check_program


def f(a, b):
    v0 = a.data
    v0.copy_(b)
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2,))
    l1 = torch.randn((2,), requires_grad=True)
    return [l0, l1], [l0, l1]


def f_view(a, b, c):
    v2 = c.transpose(-1, 0).data
    v2.copy_(b)
    return (v2,)


def make_inputs_view():
    torch.manual_seed(0)
    l0 = torch.randn((2,), requires_grad=True)
    l1 = torch.randn((2,), requires_grad=True)
    return [l0.unfold(0, 2, 1), l0, l1], [l0, l1]


def test_data_alias_written_from_grad_tensor_requires_grad():
    check_program(f, make_inputs)


def test_data_of_input_view_written_from_grad_tensor():
    check_program(f_view, make_inputs_view)
