"""Fuzz regression: a view of a leaf that requires grad, written to under no_grad and
then used (`v0 = a.unsqueeze(-1); with no_grad: v0.mul_(2); v1 = v0.amax(0)`), fails
to compile with PyTorch's "new_fn INTERNAL ASSERT FAILED at
torch/csrc/autograd/variable.cpp:198". Eager runs it (and can read `v0.grad_fn`).
Another program of the same kind: `v0 = a.reshape((8,)); a.copy_(a);
v1 = a.squeeze(2); v2 = v1.sum(); return (v1.reshape(-1),)`.

Stage: trace. After the in-place op autograd regenerates the view's grad_fn by
replaying the view through the dispatcher; under aotgrad's recorder (and fake mode)
that replay yields no autograd node, which PyTorch asserts on. Let the replay through
unrecorded (the recorder already skips view ops for this reason) or avoid asking for
the grad_fn of such views.

Fixed: trace/tracer.py no longer reads grad_fn of views written under no_grad (whose
version moved with nothing refreshing the grad_fn), and resolves autograd nodes before
the `a.copy_(a)` shortcut too, so no read regenerates a grad_fn below the autograd key.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.unsqueeze(-1)
    with torch.no_grad():
        v0.mul_(2)
        v1 = v0.amax(0)
    return (v1,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((), requires_grad=True)
    a = l0
    return [a], [l0]


def test_view_written_under_no_grad_then_read():
    check_program(f, make_inputs)
