"""Compiled autograd with torch.compile and aotgrad's own forward, training loops, C++ custom
autograd Functions, trace_wrapped hooks, and freeing activations as the backward goes."""
import gc
import os
import sys
from typing import Callable

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

import aotgrad
from aotgrad import compiled_autograd
from aotgrad.trace.hops import trace_wrapped
from tests.compiled_autograd.helpers import check, current_compiler


def _model():
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 3))


@pytest.mark.parametrize("backend", ["aotgrad", "aotgrad_inductor", "eager"])
def test_backward_through_a_compiled_forward_is_one_graph(backend):
    graphs = []

    def compiler(gm):
        graphs.append(gm)
        return current_compiler()(gm)

    def fn():
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = _model()
        step = torch.compile(model, backend=backend)
        out = []
        for _ in range(3):
            model.zero_grad()
            step(torch.randn(5, 6)).pow(2).sum().backward()
            out += [p.grad.clone() for p in model.parameters()]
        return out

    check(fn, compiler=compiler, captures=1, exact=backend == "eager")
    if backend.startswith("aotgrad"):  # aotgrad's backward graph is inlined: no call out of the graph
        targets = {getattr(n.target, "__name__", "") for n in graphs[0].graph.nodes}
        assert "custom_backward" not in targets


def _captured_graphs() -> tuple[list, Callable]:
    graphs: list = []

    def compiler(gm):
        graphs.append(gm)
        return current_compiler()(gm)
    return graphs, compiler


def test_an_aotgrad_function_given_some_gradients_runs_only_what_they_reach_in_the_capture():
    """Only `exp`'s output gets a gradient: the captured graph holds the backward variant
    without `sin`'s tangent (runtime/backward.py's steps, with the capture's env), not the
    whole backward with zeros (which would compute cos(x) * 0)."""
    f = aotgrad.aot_function(lambda x: (x.exp(), x.sin()), aotgrad.nop)

    def fn():
        x = torch.randn(5, requires_grad=True)
        e, _ = f(x)
        (e * 3).sum().backward()
        return [x.grad]

    graphs, compiler = _captured_graphs()
    check(fn, compiler=compiler, captures=1)
    targets = {str(n.target) for n in graphs[0].graph.nodes}
    assert "aten.exp.default" in targets or "aten.mul.Tensor" in targets
    assert "aten.cos.default" not in targets, graphs[0].code


def test_a_variant_that_needs_zeros_is_made_outside_the_capture():
    """The backward of `split` cats the two outputs' tangents: the variant without the second
    keeps zeros in its place, made on the partition's fake tensors (not recorded into the
    capture, whose fake mode would refuse them)."""
    def split_then_each(x):
        a, b = (x * 2).split(2)
        return a.sin(), b.cos()
    f = aotgrad.aot_function(split_then_each, aotgrad.nop)

    def fn():
        x = torch.randn(4, requires_grad=True)
        a, _ = f(x)
        (a * 3).sum().backward()
        return [x.grad]

    check(fn, captures=1)


def test_a_gradient_into_an_output_eager_cannot_differentiate_raises_in_the_capture():
    """`a.mul_(a)` on an input: a gradient reaching the written input raises eager's error
    when the captured graph runs (the steps' refusal, recorded as a call out); the output's own
    gradient is fine. (The first backward keeps the graph: without retain_graph, compiled
    autograd takes every saved tensor of the second backward's nodes before running any, so the
    freed tensors are reported first, where eager's backward refuses before reading them.)"""
    def fn(a):
        out = a * 2
        a.mul_(a)  # mul_'s backward needs the `a` it overwrote
        return out

    grads = []
    for f in (fn, aotgrad.aot_function(fn, aotgrad.nop)):
        leaf = torch.ones(3, requires_grad=True)
        a = leaf * 1
        with compiled_autograd.enable(current_compiler()):
            f(a).sum().backward(retain_graph=True)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                a.sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


def test_torch_compile_of_a_function_that_calls_backward():
    def fn():
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = _model()

        @torch.compile(backend="aotgrad")
        def train_step(x):
            loss = model(x).sum()
            loss.backward()
            return loss.detach()

        losses = [train_step(torch.randn(4, 6)) for _ in range(3)]
        return losses + [p.grad for p in model.parameters()]

    check(fn, captures=1, exact=False)


def test_twenty_optimizer_steps_match_eager_parameter_for_parameter():
    def fn():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                    torch.nn.Linear(4 * 6 * 6, 5))
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        x, y = torch.randn(8, 2, 8, 8), torch.randint(0, 5, (8,))
        for _ in range(20):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    check(fn, captures=1)


def _multiply(x):
    return x * x


def _multiply_invoke(grad):
    return trace_wrapped(grad, fn=_multiply)


@pytest.mark.one_compiler  # its own: the graph Dynamo hands a backend
@pytest.mark.parametrize("backend", ["eager", "aotgrad", "aotgrad_inductor"])
def test_trace_wrapped_hook_under_compiled_autograd_runs_from_the_graph(backend):
    """A hook (trace_wrapped or not) is a call out of the graph, opaque to Dynamo: the graph its
    backend gets holds aotgrad's call_out op, not the hook's body, and the hook runs once per
    backward with the real gradient. (PyTorch's compiled autograd inlines hooks into Dynamo's
    graph instead, so a hook Dynamo cannot trace fails there under fullgraph; here it runs.)"""
    graphs = []

    def compiler_fn(gm):
        def inner(gm_, example_inputs):
            graphs.append(gm_)
            return gm_
        return torch.compile(gm, backend=inner, fullgraph=True, dynamic=True)

    torch._dynamo.reset()
    compiled_autograd.reset()
    x = torch.tensor([0.5, 0.5], requires_grad=True)
    y = torch.tensor([0.5, 0.5], requires_grad=True)

    def fn(x, y):
        x.register_hook(_multiply_invoke)
        return x + y

    out = torch.compile(fn, backend=backend)(x, y)
    grad_out = torch.tensor([2.0, 2.0])
    with compiled_autograd.enable(compiler_fn):
        out.backward(grad_out)
    assert torch.equal(x.grad, grad_out * grad_out)
    assert len(graphs) == 1
    assert "torch.ops.aotgrad.call_out" in graphs[0].code and " * " not in graphs[0].code


def test_trace_wrapped_in_eager_and_in_aotgrads_tracer():
    calls = []

    def double(g):
        calls.append(1)
        return g * 2

    def f(x):
        h = x * 3
        h.register_hook(lambda g: trace_wrapped(g, fn=double))
        return h.sum()

    x = torch.tensor([0.5, 1.5], requires_grad=True)
    f(x).backward()
    assert torch.equal(x.grad, torch.full((2,), 6.0)) and len(calls) == 1
    graphs = []
    compiled = aotgrad.aot_function(f, lambda gm, _: (graphs.append(gm), gm)[1])
    calls.clear()
    for _ in range(2):
        x2 = torch.tensor([0.5, 1.5], requires_grad=True)
        compiled(x2).backward()
        assert torch.equal(x2.grad, torch.full((2,), 6.0))
    assert len(calls) == 3  # once on fake tensors while tracing (to learn its output), once per run
    assert any(n.name == "trace_wrapped" for g in graphs for n in g.graph.nodes)


def test_trace_wrapped_fn_that_cannot_be_traced_names_it():
    def item_of(g):
        return g * g.sum().item()

    def f(x):
        h = x * 3
        h.register_hook(lambda g: trace_wrapped(g, fn=item_of))
        return h.sum()

    with pytest.raises(aotgrad.errors.TraceError, match="item_of"):
        aotgrad.aot_function(f, aotgrad.nop)(torch.randn(3, requires_grad=True))


@pytest.mark.one_compiler  # the graph run as Python; under torch.compile the compiler decides (Dynamo keeps inputs)
def test_activations_are_freed_as_the_backward_goes():
    """At the middle of the backward, saved activations of the layers already done are gone,
    as in eager (the graph's input list is emptied and each value dropped after its last use)."""
    depth = 8

    def alive_in_the_middle(compiled: bool) -> list[int]:
        torch.manual_seed(0)
        weights = [torch.randn(64, 64, requires_grad=True) for _ in range(depth)]
        storages = []
        counts = []

        def forward():
            h = torch.randn(32, 64)
            for i, w in enumerate(weights):
                h = (h @ w).tanh()  # tanh saves its output
                storages.append(StorageWeakRef(h.untyped_storage()))
                if i == depth // 2:
                    h.register_hook(lambda g: counts.append(sum(not s.expired() for s in storages)) or g)
            return h.sum()

        loss = forward()
        gc.collect()
        if compiled:
            compiled_autograd.reset()
            with compiled_autograd.enable(current_compiler()):
                loss.backward()
        else:
            loss.backward()
        return counts

    eager = alive_in_the_middle(False)
    compiled = alive_in_the_middle(True)
    assert compiled[0] <= eager[0] < depth


CPP_SOURCE = r"""
#include <torch/extension.h>
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ScaledSquare : public torch::autograd::Function<ScaledSquare> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t scale) {
    ctx->save_for_backward({x});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["offset"] = x.sum();  // a tensor kept in saved_data
    return x * x * scale;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto x = ctx->get_saved_variables()[0];
    auto scale = ctx->saved_data["scale"].toInt();
    auto offset = ctx->saved_data["offset"].toTensor();
    return {grads[0] * 2 * x * scale + offset * 0, torch::Tensor()};
  }
};

torch::Tensor scaled_square(torch::Tensor x, int64_t scale) { return ScaledSquare::apply(x, scale); }
"""


@pytest.fixture(scope="module")
def cpp_extension():
    from torch.utils.cpp_extension import load_inline
    # one build per torch release: the suite runs on several from one checkout
    # (benchmarks/torch_versions.py), and an extension is built for one release's headers
    build = os.path.join(os.path.dirname(__file__), "..", "..", ".cpp_build", f"torch-{torch.__version__}")
    os.makedirs(build, exist_ok=True)
    return load_inline(name="aotgrad_test_cpp_fn", cpp_sources=CPP_SOURCE, functions=["scaled_square"],
                       build_directory=build, verbose=False)


@pytest.mark.all_compilers
@pytest.mark.skipif(sys.platform != "linux", reason="builds a C++ extension with gcc")
def test_cpp_custom_function_with_saved_data(cpp_extension):
    def fn():
        out = []
        for scale in [2, 3, 2]:
            x = torch.randn(4, requires_grad=True)
            h = x * 1.5
            cpp_extension.scaled_square(h, scale).sum().backward()
            out.append(x.grad)
        return out

    check(fn, captures=1)


def test_reset_between_backwards_is_safe():
    model = _model()
    x = torch.randn(4, 6)

    def fn():
        out = []
        for i in range(4):
            model.zero_grad()
            model(x).sum().backward()
            out += [p.grad.clone() for p in model.parameters()]
            if i % 2 == 0:
                compiled_autograd.reset()
        return out

    check(fn)


class PrintingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        print("backward of PrintingBackward")  # a graph break for Dynamo: the rest still compiles
        return g * x.cos()


@pytest.mark.one_compiler  # torch.compile's defaults: not fullgraph, PyTorch's aot_eager
def test_custom_backward_with_a_graph_break_under_a_dynamo_compiler(capsys):
    def fn():
        torch._dynamo.reset()
        out = []
        for _ in range(2):
            x = torch.randn(5, requires_grad=True)
            (PrintingBackward.apply(x * 2) * 3).sum().backward()
            out.append(x.grad)
        return out

    check(fn, compiler=lambda gm: torch.compile(gm, backend="aot_eager"), captures=1, exact=False)
    assert capsys.readouterr().out.count("backward of PrintingBackward") == 6  # 2 eager + 2 compiled, twice
