"""Fuzz regression: a view taken under `torch.no_grad()` whose base is then modified
(still under no_grad) makes compilation fail with eager's "A view was created in
no_grad mode and its base or another view of its base has been modified inplace with
grad mode enabled"; eager runs the program.

Stage: trace (`GraphRecorder._resolve_autograd_nodes`). After the function returns, the
recorder reads `t.grad_fn` of every recorded tensor; for `v0` that makes autograd
regenerate the view's grad_fn, which is forbidden now that its base changed. Eager
never asks for it. Skip (or catch) tensors whose grad_fn cannot be regenerated, e.g.
views created under no_grad. (Failing here also leaves the recorder pushed:
`test_fuzz_recorder_left_pushed.py`.)

Fixed: trace/tracer.py no longer reads grad_fn of views that ops under no_grad made or
wrote (no_grad makes no autograd node; reading would regenerate the view's grad_fn).
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    with torch.no_grad():
        v0 = a.chunk(1, -1)[0]
        v1 = v0.detach()
        v0.masked_fill_(v0 > 0, 2)
    return (a, v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((3,), dtype=torch.float64, requires_grad=True)
    a = l0
    return [a], [l0]


def test_view_made_under_no_grad_then_base_modified():
    check_program(f, make_inputs)
