"""Saved tensors packed by the user's `saved_tensors_hooks` (save_on_cpu, offloading to disk):
every backward reads its own saved tensors through the user's unpack hook, as in eager, also
when the graph comes from the cache (aotgrad/compiled_autograd/saved.py `packed_by_user`)."""
import pytest
import torch

from aotgrad import compiled_autograd
from tests.compiled_autograd.helpers import check, current_compiler


@pytest.mark.all_compilers
def test_each_backward_reads_its_own_hooked_saved_tensors():
    def fn():
        a = torch.randn(5, requires_grad=True)
        b = torch.randn(5, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x):
            y = a * a
            z = b * b
        y.sum().backward()
        z.sum().backward()  # the same structure: a cache hit must not read y's saved tensors
        return [a.grad, b.grad]
    check(fn, captures=1)


def test_save_on_cpu_trains_as_eager():
    def fn():
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        grads = []
        for _ in range(3):
            x = torch.randn(4, 6)
            with torch.autograd.graph.save_on_cpu():
                loss = (model(x) ** 2).sum()
            loss.backward()
            grads += [p.grad.clone() for p in model.parameters()]
            model.zero_grad()
        return grads
    check(fn, captures=1)


def test_unpack_hook_runs_once_per_saved_tensor_per_backward():
    def fn():
        unpacked = []

        def unpack(t):
            unpacked.append(tuple(t.shape))
            return t / 2

        x = torch.randn(3, 4, requires_grad=True)
        grads = []
        for scale in (1.0, 3.0):
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 2, unpack):
                y = (x * scale).sin().exp()
            y.sum().backward()
            grads.append(x.grad.clone())
        return grads + [len(unpacked), sorted(unpacked)]
    check(fn)


def test_graph_captured_without_hooks_then_hooked_backward():
    x = torch.randn(4, requires_grad=True)
    compiled_autograd.reset()
    with compiled_autograd.enable(current_compiler()):
        (x * x).sum().backward()
        first = x.grad.clone()
        x.grad = None
        w = torch.randn(4, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t + 1, lambda t: t - 1):
            y = w * w
        y.sum().backward()
    assert torch.equal(first, 2 * x)
    assert torch.allclose(w.grad, 2 * w)
