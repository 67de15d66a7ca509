"""trace_wrapped (aotgrad/trace/hops.py), seed 004's behaviours: eager, torch.compile backends,
aotgrad's tracer (one node), compiled autograd, and a function that cannot be captured."""
import pytest
import torch

import aotgrad
from aotgrad import compiled_autograd
from aotgrad.trace.hops import trace_wrapped


def _multiply(x):
    return x * x


def _multiply_invoke(grad):
    return trace_wrapped(grad, fn=_multiply)


def test_in_eager_a_hook_calling_it_runs_fn():
    x = torch.tensor([0.5, 0.5], requires_grad=True)
    y = torch.tensor([0.5, 0.5], requires_grad=True)
    x.register_hook(_multiply_invoke)
    (x * y).backward(torch.tensor([2.0, 2.0]))
    assert torch.equal(x.grad, (y * torch.tensor([2.0, 2.0])) ** 2)  # the hook squares x's gradient


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "aotgrad", "aotgrad_inductor"])
def test_under_torch_compile(backend):
    torch._dynamo.reset()
    x = torch.tensor([0.5, 0.5], requires_grad=True)
    y = torch.tensor([0.5, 0.5], requires_grad=True)

    def fn(x, y):
        x.register_hook(_multiply_invoke)
        return x * y

    grad_out = torch.tensor([2.0, 2.0])
    torch.compile(fn, backend=backend)(x, y).backward(grad_out)
    assert torch.equal(x.grad, (grad_out * y) ** 2)


def test_in_aotgrads_tracer_it_is_one_node():
    graphs = []
    traced = aotgrad.aot_function(_multiply_invoke, lambda gm, _: (graphs.append(gm), gm)[1])
    x = torch.tensor([0.5, 0.5])
    assert torch.equal(traced(x), torch.tensor([0.25, 0.25]))
    calls = [n for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert [n.name for n in calls] == ["trace_wrapped"]
    assert "fn=_multiply" in repr(calls[0].target)


def test_in_aotgrads_tracer_on_a_gradient():
    x = torch.tensor([0.5, 0.5], requires_grad=True)
    (x * x + x * x).backward(torch.tensor([1.0, 1.0]))
    traced = aotgrad.aot_function(_multiply_invoke, aotgrad.nop)
    assert torch.equal(traced(x.grad), torch.tensor([4.0, 4.0]))


def test_a_hook_dynamo_cannot_trace_runs_under_fullgraph_compiled_autograd(capsys):
    """The hook is a call out of the backward graph, opaque to Dynamo: under fullgraph it runs
    as in eager (PyTorch's compiled autograd inlines hooks and raises Unsupported on the print)."""
    def _graph_breaking_fn(x):
        print("Boo!")
        return _multiply(x)

    def _graph_break_invoke(grad):
        return trace_wrapped(grad, fn=_graph_breaking_fn)

    torch._dynamo.reset()
    compiled_autograd.reset()
    x = torch.tensor([0.5, 0.5], requires_grad=True)
    y = torch.tensor([0.5, 0.5], requires_grad=True)

    def fn(x, y):
        x.register_hook(_graph_break_invoke)
        return x + y

    out = torch.compile(fn, backend="aotgrad", fullgraph=True)(x, y)
    with compiled_autograd.enable(lambda gm: torch.compile(gm, backend="eager", fullgraph=True)):
        out.backward(torch.tensor([2.0, 2.0]))
    assert torch.equal(x.grad, torch.tensor([4.0, 4.0]))
    assert capsys.readouterr().out == "Boo!\n"
    assert aotgrad.counters["compiled_autograd"]["captures"] == 1
    assert aotgrad.counters["compiled_autograd"]["eager_fallbacks"] == 0
