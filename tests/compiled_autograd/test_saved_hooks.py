"""Saved tensors packed by the user's `saved_tensors_hooks` (save_on_cpu, offloading to disk):
every backward reads its own saved tensors through the user's unpack hook, as in eager, also
when the graph comes from the cache (aotgrad/compiled_autograd/saved.py `packed_by_user`)."""
import pytest
import torch

import aotgrad
from aotgrad import compiled_autograd
from tests.compiled_autograd.helpers import check, current_compiler, same


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


# After a backward without retain_graph eager has freed what each node saved, also a tensor
# the user's hooks packed: reading it raises (test_grad_fn_attr_bindings and
# test_custom_function_saved_tensors in PyTorch's suite). A built-in node holding one runs as
# is, inside PyTorch's engine (calls._run_in_engine); a custom Function's is freed by
# saved.free_python_nodes.

def _error(read) -> str | None:
    """The first sentence of the RuntimeError `read()` raises, None if it raises none."""
    try:
        read()
    except RuntimeError as e:
        return str(e).split(".")[0]
    return None


def _hooked_mul(a, b):
    out = a * b
    out.grad_fn._raw_saved_self.register_hooks(lambda t: t, lambda t: t)
    return out


@pytest.mark.all_compilers
def test_saved_tensor_hooked_on_builtin_node_is_freed_by_backward():
    def fn():
        a = torch.randn(3, requires_grad=True)
        b = torch.randn(3, requires_grad=True)
        out = _hooked_mul(a * 2, b)
        out.sum().backward()
        return [a.grad, b.grad, _error(lambda: out.grad_fn._saved_self),
                _error(lambda: out.grad_fn._raw_saved_self.register_hooks(lambda t: t, lambda t: t))]
    result = check(fn)
    assert "after they have already been freed" in result[2]


def test_saved_tensor_hooked_on_node_with_both_results_into_one_leaf_is_freed():
    def fn():
        a = torch.randn(2, 2, requires_grad=True)
        results = []
        for _ in range(2):  # the second from the cache
            out = _hooked_mul(a, a)
            out.sum().backward()
            results += [a.grad.clone(), _error(lambda: out.grad_fn._raw_saved_self.register_hooks(
                lambda t: t, lambda t: t))]
        return results
    result = check(fn, captures=1)
    assert "after it has been freed" in result[1]


def test_saved_tensor_hooked_on_builtin_node_stays_with_retain_graph():
    def fn():
        a = torch.randn(3, requires_grad=True)
        b = torch.randn(3, requires_grad=True)
        out = _hooked_mul(a * 2, b)
        out.sum().backward(retain_graph=True)
        readable = out.grad_fn._saved_self
        out.sum().backward()
        return [a.grad, b.grad, readable, _error(lambda: out.grad_fn._saved_self)]
    check(fn)


def test_node_with_hooked_saved_tensor_into_a_hooked_tensor_runs_its_hooks_once():
    def fn():
        calls = []
        a = torch.randn(3, requires_grad=True)
        b = torch.randn(3, requires_grad=True)
        h = a * 2
        h.register_hook(lambda g: calls.append("h") or g * 3)
        h.retain_grad()
        out = _hooked_mul(h, b)
        out.sum().backward()
        return [a.grad, b.grad, h.grad, calls]
    check(fn)


def test_hooked_node_whose_results_meet_again_runs_each_node_once():
    def fn():
        unpacked = []
        x = torch.randn(3, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: unpacked.append(t.shape) or t):
            out = x.exp() * x  # MulBackward0's results flow into ExpBackward0 and into x, which it leads to
        out.sum().backward()
        return [x.grad, len(unpacked), _error(lambda: out.grad_fn.next_functions[0][0]._saved_result)]
    check(fn)


def test_node_with_hooked_saved_tensor_and_node_hooks_runs_them_once():
    def fn():
        calls = []
        a = torch.randn(3, requires_grad=True)
        b = torch.randn(3, requires_grad=True)
        out = _hooked_mul(a * 2, b)
        out.grad_fn.register_hook(lambda grad_inputs, grad_outputs: calls.append("post"))
        out.grad_fn.register_prehook(lambda grad_outputs: calls.append("pre"))
        out.sum().backward()
        return [a.grad, b.grad, calls]
    check(fn)


def test_custom_function_saved_tensor_hooked_is_freed_by_backward():
    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, None)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            x, _ = ctx.saved_tensors
            return g * x

    def fn():
        a = torch.randn(4, requires_grad=True)
        results = []
        for retain in (True, False):
            y = Identity.apply(a)
            y.grad_fn._raw_saved_tensors[0].register_hooks(lambda t: t, lambda t: t)
            y.sum().backward(retain_graph=retain)
            results += [a.grad.clone(), _error(lambda: y.grad_fn._raw_saved_tensors),
                        _error(lambda: y.grad_fn.saved_tensors)]
        return results
    result = check(fn)
    assert result[2] is None and "after they have already been freed" in result[5]


def test_backward_inside_a_checkpoint_recomputation_that_stops_early():
    """A backward called while checkpoint recomputes (the outer backward runs on PyTorch's
    engine): its built-in nodes hold tensors the recomputation's hooks packed, run as is
    inside PyTorch's engine, where checkpoint finds the graph task it recomputes for, as in
    eager (test_nested_checkpoint_early_stop_True in PyTorch's suite)."""
    from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

    def inner(x):
        a = x.sin().exp().sin()
        (ga,) = torch.autograd.grad(a, x)
        return x.sin() * ga

    def run(x):
        return torch.autograd.grad(checkpoint(inner, x, use_reentrant=False), x)[0]

    x = torch.randn((), requires_grad=True)
    with set_checkpoint_early_stop(True):
        expected = run(x)
        compiled_autograd.reset()
        with compiled_autograd.enable(current_compiler()):
            actual = run(x)
            captures = aotgrad.counters["compiled_autograd"]["captures"]
    assert same(expected, actual), (expected, actual)
    assert captures == 1  # the backward inside the recomputation
