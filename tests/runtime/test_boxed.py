"""Compiled graphs are called boxed: one list of arguments, cleared by the graph, so the
backward frees each saved activation after its last use (runtime/boxed.py)."""
import weakref

import torch
import torch.fx as fx

import aotgrad
from aotgrad.runtime.boxed import as_boxed, boxed_graph, is_boxed


def _graph_module() -> fx.GraphModule:
    def f(x, y):
        return (x * y).sin() + y
    return fx.symbolic_trace(f)


def test_boxed_graph_computes_the_same_and_clears_its_list():
    gm = _graph_module()
    x, y = torch.randn(3), torch.randn(3)
    boxed = boxed_graph(gm)
    args = [x, y]
    assert is_boxed(boxed)
    torch.testing.assert_close(boxed(args), gm(x, y))
    assert args == []


def test_as_boxed_adapts_a_plain_callable_and_keeps_a_boxed_one():
    plain = as_boxed(lambda a, b: a - b)
    args = [torch.tensor(5.0), torch.tensor(2.0)]
    assert is_boxed(plain) and plain(args).item() == 3.0
    boxed = boxed_graph(_graph_module())
    assert as_boxed(boxed) is boxed


def _watching_backward(seen: dict):
    """A bw_compiler that records which saved activations are still alive after the graph ran."""
    def compiler(gm, example_inputs):
        inner = aotgrad.nop(gm, example_inputs)
        names = [n.name for n in gm.graph.find_nodes(op="placeholder")]

        def run(args: list):
            refs = {name: weakref.ref(a) for name, a in zip(names, args) if isinstance(a, torch.Tensor)}
            out = inner(args)
            seen.update({name: ref() is not None for name, ref in refs.items()})
            return out
        run._boxed_call = True
        return run
    return compiler


def test_backward_frees_saved_activations_before_it_returns():
    seen: dict = {}
    f = aotgrad.aot_function(lambda x: x.exp().sin().sum(), aotgrad.nop, _watching_backward(seen))
    x = torch.randn(8, requires_grad=True)
    f(x).backward()
    torch.testing.assert_close(x.grad, x.exp().cos() * x.exp())
    activations = [name for name in seen if not name.startswith(("primals", "tangents"))]
    assert activations, seen  # exp's result is saved for sin's and exp's backward
    assert not any(seen[name] for name in activations), seen


def test_retain_graph_keeps_saved_activations_for_a_second_backward():
    f = aotgrad.aot_function(lambda x: x.exp().sin().sum(), aotgrad.nop)
    x = torch.randn(8, requires_grad=True)
    loss = f(x)
    loss.backward(retain_graph=True)
    first = x.grad.clone()
    loss.backward()
    torch.testing.assert_close(x.grad, 2 * first)


def test_user_compiler_returning_a_plain_callable_is_called_with_arguments():
    calls = []

    def compiler(gm, example_inputs):
        def run(*args):
            calls.append(len(args))
            return gm(*args)
        return run
    f = aotgrad.aot_function(lambda x, y: (x * y).sum(), compiler)
    x, y = torch.randn(4, requires_grad=True), torch.randn(4)
    f(x, y).backward()
    torch.testing.assert_close(x.grad, y)
    assert len(calls) == 2  # forward and backward, each unpacked
