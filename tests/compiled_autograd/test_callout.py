"""Calls out of the captured graph (aotgrad/compiled_autograd/callout.py) under every compiler:
custom Functions (Python and C++ are in test_interplay.py), hooks, callbacks and accumulation
run once per backward, in eager's order, with the real tensors, never while compiling; what
they keep is not overwritten by the compiled code; None into `.grad`, errors, and a graph
called outside its backward."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.autograd import Variable

import aotgrad
from aotgrad import compiled_autograd
from aotgrad.compiled_autograd import callout
from tests.compiled_autograd.helpers import check, compiler_name, current_compiler


class SquareQueuingCallback(torch.autograd.Function):
    """The issue's case: a custom backward that reads its ctx and queues a callback."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        log = ctx.log
        log.append(("backward", type(g) is torch.Tensor))
        Variable._execution_engine.queue_callback(lambda: log.append("callback"))
        return 2 * g * x


def _square(x, log):
    # (ctx.log set through a hook-free side door: the forward takes tensors only)
    out = SquareQueuingCallback.apply(x)
    out.grad_fn.log = log
    return out


@pytest.mark.all_compilers
def test_custom_backward_and_its_callback_run_once_per_backward_with_real_tensors():
    def fn():
        log = []
        out = []
        for n in (3, 5, 7):  # new sizes: symbols in the graph, dynamic for Dynamo
            x = torch.randn(n, requires_grad=True)
            (_square(x * 2, log).sin()).sum().backward()
            out.append(x.grad)
        return [out, log]

    result = check(fn)
    assert result[1] == [("backward", True), "callback"] * 3


@pytest.mark.all_compilers
def test_hooks_run_in_eagers_order_with_real_tensors_and_never_while_compiling():
    def fn():
        seen = []
        x = torch.randn(4, requires_grad=True)
        w = torch.randn(4, requires_grad=True)
        a, b = x.sin(), x.cos() * w
        a.register_hook(lambda g: seen.append(("a", isinstance(g, FakeTensor))) or g * 2)
        b.register_hook(lambda g: seen.append(("b", isinstance(g, FakeTensor))))
        b.grad_fn.register_prehook(lambda gs: seen.append("pre b"))
        b.grad_fn.register_hook(lambda gi, go: seen.append("post b"))
        w.register_post_accumulate_grad_hook(lambda p: seen.append(("acc w", p.grad.sum().item())))
        a.retain_grad()
        ((a * b).sum() + a.sum()).backward()
        return [x.grad, w.grad, a.grad, seen]

    check(fn)


class KeepsItsGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        ctx.kept.append(g)  # the graph's tensor, held past its last use in the graph
        return g


@pytest.mark.all_compilers
def test_a_gradient_user_code_keeps_is_not_overwritten_by_the_compiled_code():
    """A compiler reuses the memory of a tensor after its last use; one that a hook or custom
    backward holds on to is an output of the graph, so it stays as it was."""
    def fn():
        kept = []
        x = torch.randn(16, requires_grad=True)
        h = x.sin() * 3
        h.register_hook(lambda g: kept.append(g))  # g is computed in the graph (cos * 3 ...)
        k = KeepsItsGradient.apply(h.exp())
        k.grad_fn.kept = kept
        (k * k.tanh() * 5).sum().backward()  # more same-sized temporaries after the hooks
        return [x.grad, [t.clone() for t in kept], kept]

    result = check(fn)
    assert all(torch.equal(a, b) for a, b in zip(result[1], result[2]))


class NoneForX(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x * y

    @staticmethod
    def backward(ctx, g):
        return None, g * 2


@pytest.mark.all_compilers
def test_none_from_a_custom_backward_into_grad_accumulates_nothing():
    """A compiled graph cannot carry None where its fake was a tensor: a placeholder stands
    for it, and the accumulation and the hooks read it as None again."""
    def fn():
        seen = []
        x = torch.randn(3, requires_grad=True)
        y = torch.randn(3, requires_grad=True)
        x.register_hook(lambda g: seen.append(g))
        for _ in range(2):
            NoneForX.apply(x, y).sum().backward()
        grads = torch.autograd.grad(NoneForX.apply(x, y).sum(), [x, y], allow_unused=True)
        return [x.grad, y.grad, seen, list(grads)]

    assert check(fn)[0] is None


@pytest.mark.all_compilers
def test_an_error_in_a_hook_is_eagers_and_nothing_after_it_runs():
    def fn():
        seen = []
        x = torch.randn(3, requires_grad=True)
        a = x * 2
        b = a.sin()

        def fails(g):
            raise ValueError("the hook's own error")
        b.register_hook(lambda g: seen.append("before") or g)
        b.register_hook(fails)
        a.register_hook(lambda g: seen.append("after") or g)
        with pytest.raises(ValueError, match="the hook's own error"):
            b.sum().backward()
        return [x.grad, seen]

    check(fn)


@pytest.mark.one_compiler  # calls the captured graph itself
def test_the_graph_called_outside_its_backward_says_so():
    graphs = []

    def compiler(gm):
        graphs.append(gm)
        return current_compiler()(gm)

    x = torch.randn(3, requires_grad=True)
    x.register_hook(lambda g: g * 2)  # (a call out: the graph needs the backward call's objects)
    with compiled_autograd.enable(compiler):
        x.sum().backward()  # the graph: the root's gradient expanded, the hook, then into x.grad
    with pytest.raises(RuntimeError, match="outside the backward call that runs it"):
        graphs[0]([torch.ones(())], [])


@pytest.mark.all_compilers
def test_the_compilers_graph_has_one_op_per_call_out():
    """What torch.compile's backend gets: the call-outs as aotgrad::call_out ops (none of the
    user's code), in order (each takes the previous one's token)."""
    if compiler_name() == "identity":
        pytest.skip("no torch.compile here")
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    def fn():
        x = torch.randn(3, requires_grad=True)
        h = x.sin()
        h.register_hook(lambda g: g * 2)
        _square(h, []).sum().backward()
        return [x.grad]

    check(fn, compiler=lambda gm: torch.compile(gm, backend=backend, fullgraph=True, dynamic=True))
    ops = [n for n in graphs[0].graph.nodes if n.target in (torch.ops.aotgrad.call_out, torch.ops.aotgrad.call_out.default)]
    assert len(ops) == 3  # the custom backward, the tensor hook, the accumulation into x.grad
    assert ops[0].args[1] is None and all(b.args[1].args[0] is a for a, b in zip(ops, ops[1:]))
    assert aotgrad.counters["compiled_autograd"]["eager_fallbacks"] == 0


@pytest.mark.all_compilers
def test_a_hook_returning_a_non_contiguous_gradient():
    """The compiler was promised contiguous results (Inductor asserts the strides it was
    promised): a call's result is made contiguous, same values."""
    def fn():
        x = torch.randn(3, 4, requires_grad=True)
        h = x * 2
        h.register_hook(lambda g: (g * 3).t().contiguous().t())  # transposed strides
        (h.sin() * 5).sum().backward()
        return [x.grad]

    check(fn)


@pytest.mark.all_compilers
def test_grad_is_never_the_root_gradient():
    """In a compiled graph the tensor accumulation gets may be a graph input (Inductor drops
    the zero padding's backward, `constant_pad_nd(g, [0, 0])`, a no-op): it is copied, not
    taken, so `.grad` is the leaf's own and the root gradient stays as it was, as in eager."""
    def fn():
        x = torch.randn(3, requires_grad=True)
        g = torch.ones(3)
        for _ in range(2):
            torch.nn.functional.pad(x, (0, 0)).backward(g)
        return [x.grad, g, x.grad.data_ptr() != g.data_ptr()]

    check(fn)


@pytest.mark.all_compilers
def test_a_hook_that_changes_a_weight_does_not_change_gradients_computed_before_it():
    """Eager computes a layer's input gradient (from the weight) before the weight's
    accumulation runs its hooks; a compiled graph may not move that computation after a hook
    that updates the weight in place."""
    def fn():
        torch.manual_seed(0)
        first, second = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)

        def step(p):
            with torch.no_grad():
                p.mul_(-10)
        second.weight.register_post_accumulate_grad_hook(step)
        x = torch.randn(5, 3, requires_grad=True)
        second(first(x).tanh()).pow(2).sum().backward()
        return [x.grad, first.weight.grad, second.weight.grad, second.weight.detach().clone()]

    check(fn)


@pytest.mark.one_compiler  # its own: a torch.compile backend that fails
def test_a_compiler_that_fails_sends_the_backward_to_pytorchs_engine(caplog):
    """torch.compile compiles at the first call: a backend (or Dynamo) failing there fails
    before anything ran, so PyTorch's engine runs the backward (logged, counted), and later
    ones like it; each hook runs once."""
    def failing_backend(gm, example_inputs):
        raise RuntimeError("the backend's own failure")

    def run(compiled: bool) -> list:
        torch.manual_seed(0)
        seen = []
        x = torch.randn(3, requires_grad=True)
        for _ in range(2):
            h = x.exp() * 2
            h.register_hook(lambda g: seen.append("hook") or g * 3)
            _square(h, seen).sin().sum().backward()  # saves h, an intermediate
        return [x.grad, seen]

    expected = run(False)
    compiled_autograd.reset()
    with compiled_autograd.enable(lambda gm: torch.compile(gm, backend=failing_backend, fullgraph=True)):
        actual = run(True)
    assert torch.equal(actual[0], expected[0]) and actual[1] == expected[1]
    counts = aotgrad.counters["compiled_autograd"]
    assert (counts["captures"], counts["compiles"], counts["eager_fallbacks"]) == (1, 1, 2)
    assert "failed before running anything" in caplog.text and "the backend's own failure" in caplog.text


class ReturnsItsGradientTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x + y

    @staticmethod
    def backward(ctx, g):
        return g, g


@pytest.mark.all_compilers
def test_results_that_are_the_calls_arguments_or_each_other():
    """A hook returning None keeps its argument, a custom backward returns `g` twice: in a
    compiled graph each result is its own tensor (the fixture makes PyTorch's AOTAutograd
    raise on a custom op whose results alias), same values."""
    def fn():
        seen = []
        x = torch.randn(3, requires_grad=True)
        y = torch.randn(3, requires_grad=True)
        h = x.sin()
        h.register_hook(lambda g: seen.append(g.clone()))
        h.register_hook(lambda g: g)
        (ReturnsItsGradientTwice.apply(h, y * 2) * 3).sum().backward()
        return [x.grad, y.grad, seen]

    check(fn)


class BackwardCallsAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        with torch.enable_grad():
            xd = x.detach().requires_grad_()
            dx, = torch.autograd.grad(xd.sin(), xd, g)
        return dx


@pytest.mark.all_compilers
def test_a_custom_backward_that_differentiates_something_itself():
    """Inductor calls an op with autograd's dispatch keys excluded; the call out runs with
    those of the backward call, so autograd works inside it as in eager."""
    def fn():
        x = torch.randn(3, requires_grad=True)
        (BackwardCallsAutograd.apply(x * 2) * 3).sum().backward()
        return [x.grad]

    check(fn)


@pytest.mark.one_compiler  # its own: reads the graph's sites
def test_each_sites_generated_fill_makes_the_arguments_the_reference_makes():
    """A site's `fill` is Python generated from its arguments (callout.Site); `filled` is the
    plain reading of the same arguments."""
    graphs = []

    def compiler(gm):
        graphs.append(gm)
        return gm

    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    with compiled_autograd.enable(compiler):
        h = x.sin() * w
        h.register_hook(lambda g: g * 2)
        h.grad_fn.register_prehook(lambda gs: None)
        h.grad_fn.register_hook(lambda gi, go: None)
        w.register_post_accumulate_grad_hook(lambda p: None)
        k = KeepsItsGradient.apply(h)
        k.grad_fn.kept = []
        (_square(h, []) * k).sum().backward()
    sites = graphs[0].meta["call_out_sites"]
    assert {s.function.__name__ for s in sites} >= {"tensor_hooks", "pre_hooks", "post_hooks", "custom_backward",
                                                    "accumulate_grad"}
    holes = [object() for _ in range(64)]
    for site in sites:
        for compiled in (False, True):
            generated = site.fill(holes, holes[::-1], holes[1:], compiled)
            reference = callout.filled(site.args, holes, holes[::-1], holes[1:], compiled)
            assert len(generated) == len(reference)
            for a, b in zip(generated, reference):
                assert a is b or a == b, (site, a, b)
