"""Fuzz regression (fixed, finding 44): torch.compile of `with no_grad: v3 = b.view(1); b.detach_()`,
`return (v3,)` (b a leaf requiring grad): after the call `v3` still required grad; eager's
does not (a view taken under no_grad follows its base's requires_grad).

Stage: analysis (output replay). Dynamo breaks the graph at `detach_`, so the compiled graph
returns `v3`, a no_grad view of its input, and dynamo then runs `b.detach_()`. The replay
of `v3` ended with `requires_grad_()` (for views made leaves in place), which gave the
rebuilt view a requires_grad of its own that `detach_` on the base no longer changes.
Found as `v2 = b.flatten(); v3 = v2.unfold(0, 1, 2); b.detach_()` with aliased inputs
(campaign at 83b53e6, chunk 44). Fixed: `requires_grad_()` is replayed only when the
replayed view would not require grad without it.
"""
import torch

from tests.fuzz.oracle import check_program


def f(b):
    with torch.no_grad():
        v3 = b.view(1)
        b.detach_()
    return (v3,)


def f_found(a, b, c):
    v0 = torch.where(a > 0, a, c)
    with torch.no_grad():
        v1 = b.sum()
        v2 = b.flatten()
    v1.sin_()
    with torch.no_grad():
        v3 = v2.unfold(0, 1, 2)
        b.detach_()
    v0.masked_fill_(v0 > 0, -1.5)
    return (v3,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((), requires_grad=True)
    return [l0], [l0]


def make_inputs_found():
    torch.manual_seed(0)
    l0 = torch.randn((), dtype=torch.float64, requires_grad=True)
    l1 = torch.randn((), dtype=torch.float64, requires_grad=True)
    return [l1, l1, l1], [l0, l1]


def test_no_grad_view_follows_its_base_detached_after_the_graph():
    check_program(f, make_inputs)


def test_as_found():
    check_program(f_found, make_inputs_found)
