"""Dynamic shapes (issue 4): one compiled graph for every size the guards admit.

aot_function(..., dynamic=True) traces with symbolic sizes; these tests sweep sizes and
compare outputs and gradients with eager, and count how often the graphs were compiled."""
import torch

import aotgrad


class Counting:
    """A graph compiler that counts the graphs it is handed (forward, backward, inference)."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return aotgrad.nop(gm, example_inputs)


def _check_sweep(fn, make_inputs, sizes, compiler=None):
    compiler = compiler or Counting()
    compiled = aotgrad.aot_function(fn, compiler, dynamic=True)
    for n in sizes:
        inputs = make_inputs(n)
        twins = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
        expected, actual = fn(*twins), compiled(*inputs)
        torch.testing.assert_close(actual, expected)
        actual.sum().backward()
        expected.sum().backward()
        for a, e in zip(inputs, twins):
            if e.requires_grad:
                torch.testing.assert_close(a.grad, e.grad)
    return compiler


def _mlp(x, w1, b1, w2):
    return torch.nn.functional.linear(torch.relu(x @ w1 + b1), w2).log_softmax(-1)


def _mlp_inputs(n):
    torch.manual_seed(n)
    return (torch.randn(n, 8), torch.randn(8, 16, requires_grad=True), torch.randn(16, requires_grad=True),
            torch.randn(3, 16, requires_grad=True))


def test_mlp_batch_sweep_compiles_once():
    compiler = _check_sweep(_mlp, _mlp_inputs, [4, 5, 9, 32, 7])
    assert len(compiler.graphs) == 2  # one forward and one backward for every batch size


def test_size_arithmetic_is_recorded_not_baked_in():
    def fn(x, w):
        y = (x @ w).relu()
        return y.reshape(-1, 2 * w.shape[1]).sum(0) * x.shape[0] + y.view(y.shape[0] * y.shape[1]).mean()
    compiler = _check_sweep(fn, lambda n: (torch.randn(2 * n, 4), torch.randn(4, 3, requires_grad=True)),
                            [3, 4, 10])
    assert len(compiler.graphs) == 2
    code = compiler.graphs[0].code
    assert "sym_size" in code and "mul" in code, code


def test_backward_reads_saved_sizes():
    def fn(x):
        return x.sum(0, keepdim=True).expand(x.shape[0], -1) * x
    compiler = _check_sweep(fn, lambda n: (torch.randn(n, 3, requires_grad=True),), [2, 6, 11])
    assert len(compiler.graphs) == 2


def test_symbol_splitting_cat_then_matmuls():
    w1, w2 = torch.randn(16, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)

    def fn(x, w1, w2):
        x = torch.cat([x, x])
        y = x @ w1
        return x + y @ w2
    def make_inputs(n):
        return torch.randn(n, 16), w1.detach().clone().requires_grad_(), w2.detach().clone().requires_grad_()
    compiler = _check_sweep(fn, make_inputs, [20, 7, 33])
    assert len(compiler.graphs) == 2


def test_a_size_guard_failing_recompiles_and_stays_right():
    def fn(x):
        if x.shape[0] > 4:  # control flow on a size: the trace guards it
            return x.sin() * 2
        return x.cos()
    compiler = _check_sweep(fn, lambda n: (torch.randn(n, 2, requires_grad=True),), [8, 9, 3, 2, 10])
    assert len(compiler.graphs) == 4  # one pair for each branch


def test_size_one_is_specialised_and_then_reused():
    compiler = _check_sweep(_mlp, _mlp_inputs, [6, 1, 1, 7])
    assert len(compiler.graphs) == 4  # sizes 0 and 1 are never symbols (as in torch.compile)
