"""When the graphs are compiled (pipeline.instantiate): the forward with the compile, a training
graph's backward at its first call (config.lazy_backward), knowing which outputs got a
gradient, so a step that backpropagates one output compiles only what that needs."""
import time

import torch

import aotgrad
from tests.threads import at_once


class Counting:
    """A graph compiler that runs graphs as traced and keeps each graph it was given."""

    def __init__(self, delay: float = 0.0):
        self.graphs, self.delay = [], delay

    def __call__(self, gm, example_inputs):
        time.sleep(self.delay)  # (widens the window in which threads could both compile)
        self.graphs.append(gm)
        return aotgrad.nop(gm, example_inputs)

    def tangents(self, i: int) -> list[str]:
        return [n.target for n in self.graphs[i].graph.find_nodes(op="placeholder") if n.target.startswith("tangents")]


def _two_outputs(a, b):
    y = a * b
    return y.sin(), (y * b).exp()


def _inputs():
    torch.manual_seed(0)
    return torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)


def _eager_grads(pick):
    a, b = _inputs()
    sum(_two_outputs(a, b)[i].sum() for i in pick).backward()
    return a.grad, b.grad


def _compiled_grads(f, pick):
    a, b = _inputs()
    outputs = f(a, b)
    sum(outputs[i].sum() for i in pick).backward()
    return a.grad, b.grad


def test_the_backward_is_compiled_at_its_first_call():
    compiler = Counting()
    f = aotgrad.aot_function(_two_outputs, compiler)
    a, b = _inputs()
    outputs = f(a, b)
    assert len(compiler.graphs) == 1  # the forward only
    sum(o.sum() for o in outputs).backward()
    assert len(compiler.graphs) == 2 and compiler.tangents(1) == ["tangents_1", "tangents_2"]
    torch.testing.assert_close((a.grad, b.grad), _eager_grads((0, 1)))
    _compiled_grads(f, (0, 1))
    assert len(compiler.graphs) == 2  # compiled once


def test_a_step_backpropagating_one_output_compiles_only_what_it_needs():
    compiler = Counting()
    f = aotgrad.aot_function(_two_outputs, compiler)
    for _ in range(2):
        torch.testing.assert_close(_compiled_grads(f, (0,)), _eager_grads((0,)))
    assert len(compiler.graphs) == 2 and compiler.tangents(1) == ["tangents_1"]  # forward, the variant
    # a later call that needs the whole backward compiles it then
    torch.testing.assert_close(_compiled_grads(f, (0, 1)), _eager_grads((0, 1)))
    assert len(compiler.graphs) == 3 and compiler.tangents(2) == ["tangents_1", "tangents_2"]


def test_with_lazy_backward_off_the_backward_is_compiled_with_the_forward():
    compiler = Counting()
    with aotgrad.config.patch(lazy_backward=False):
        f = aotgrad.aot_function(_two_outputs, compiler)
        f(*_inputs())
    assert len(compiler.graphs) == 2 and compiler.tangents(1) == ["tangents_1", "tangents_2"]


def test_a_backward_with_symbolic_shapes_is_compiled_with_the_forward():
    # its compile may add guards on the sizes, which must come while the forward is compiled
    compiler = Counting()
    f = aotgrad.aot_function(_two_outputs, compiler, dynamic=True)
    f(*_inputs())
    assert len(compiler.graphs) == 2


def test_a_torch_compile_step_compiles_its_backward_at_the_first_backward():
    from aotgrad.observe import phases

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    compiled = torch.compile(model, backend="aotgrad")
    x = torch.randn(3, 4)
    with phases.watch() as records:
        loss = compiled(x).sum()
        assert "backward compile" not in records[0].phases and records[0].backward_at_first_call
        loss.backward()
    assert "backward compile" in records[0].phases
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    torch.testing.assert_close(expected, [p.grad for p in model.parameters()])


def test_threads_running_their_first_backward_together_compile_it_once():
    compiler = Counting(delay=0.05)
    f = aotgrad.aot_function(_two_outputs, compiler)
    f(*_inputs())  # the forward compiled; the backward not yet
    inputs = [_inputs() for _ in range(6)]  # (drawn here: the seed is global)

    def first_backward(i):
        a, b = inputs[i]
        sum(o.sum() for o in f(a, b)).backward()
        return a.grad, b.grad
    grads = at_once(first_backward, 6)
    assert len(compiler.graphs) == 2
    for got in grads:
        torch.testing.assert_close(got, _eager_grads((0, 1)))
