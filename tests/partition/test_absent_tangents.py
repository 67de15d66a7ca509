"""Outputs that get no gradient: only what the given grads reach runs, as in eager
(partition/absent_tangents.py). Zeros for the missing grads gave NaN (0 / 0, 0 * inf) in
other outputs' gradients, and zeros where eager leaves `.grad` None."""
import torch

import aotgrad


def _grads(fn, compiled, inputs, pick):
    eager_inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    fn(*eager_inputs)[pick].sum().backward()
    compiled(*inputs)[pick].sum().backward()
    return [(t.grad, e.grad) for t, e in zip(inputs, eager_inputs)]


def test_a_missing_grad_does_not_turn_another_outputs_gradient_into_nan():
    def fn(a):
        return a.log(), a * 2
    f = aotgrad.aot_function(fn, aotgrad.nop)
    a = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    ((got, expected),) = _grads(fn, f, [a], 1)
    torch.testing.assert_close(got, expected)
    assert not got.isnan().any()


def test_an_input_no_gradient_reaches_keeps_grad_none():
    def fn(a, b):
        return a.sin(), b.exp() * a.sum()
    f = aotgrad.aot_function(fn, aotgrad.nop)
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    (ga, ea), (gb, eb) = _grads(fn, f, [a, b], 0)
    torch.testing.assert_close(ga, ea)
    assert gb is None and eb is None


def test_each_pattern_of_missing_grads_matches_eager():
    def fn(a, b):
        y = a * b
        return y.reciprocal(), torch.cat([y, b]).sqrt(), (a - b).abs().log()
    f = aotgrad.aot_function(fn, aotgrad.nop)
    for pick in (0, 1, 2, 1, 0):
        a = torch.tensor([0.0, 2.0, 3.0], requires_grad=True)
        b = torch.tensor([1.0, 0.0, 3.0], requires_grad=True)
        for got, expected in _grads(fn, f, [a, b], pick):
            if expected is None:
                assert got is None
            else:
                torch.testing.assert_close(got, expected, equal_nan=True)


def test_variant_is_compiled_once_per_pattern():
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return aotgrad.nop(gm, example_inputs)
    f = aotgrad.aot_function(lambda a: (a.sin(), a.cos()), counting)
    for _ in range(3):
        a = torch.randn(4, requires_grad=True)
        f(a)[0].sum().backward()
        torch.testing.assert_close(a.grad, a.detach().cos())
    # the forward and the variant without the second tangent (the whole backward is compiled at
    # its first call, and no call needs it)
    assert len(graphs) == 2
    placeholders = [n.target for n in graphs[1].graph.find_nodes(op="placeholder")]
    assert "tangents_2" not in placeholders and "tangents_1" in placeholders
