"""The functionalize pass: no mutating ops remain, values equal the mutating program's."""
import torch
import torch.fx as fx

from aotgrad.functionalize import functionalize
from aotgrad.functionalize.rules import written_arguments
from aotgrad.joint import trace_joint
from aotgrad.trace import fake_mode_for, to_fake


def _trace(fn, *args):
    mode = fake_mode_for(args)
    fakes = [to_fake(mode, a) for a in args]
    return trace_joint(lambda *v: [fn(*v)], fakes, fake_mode=mode, trace_backward=False)


def _mutating_nodes(gm: fx.GraphModule):
    return [n for n in gm.graph.nodes if n.op == "call_function" and written_arguments(n.target)]


def test_write_through_select_becomes_select_scatter_and_returns_the_new_input():
    def fn(x):
        x[0].add_(1)
        return x.t()
    traced = _trace(fn, torch.zeros(2, 3))
    assert _mutating_nodes(traced.gm)
    gm, plan = functionalize(traced.gm)
    assert _mutating_nodes(gm) == []
    assert plan.mutated_placeholders == [0] and plan.num_mutations == 1
    assert any(n.target is torch.ops.aten.select_scatter.default for n in gm.graph.nodes)
    x = torch.zeros(2, 3)
    out = gm(x)
    expected = torch.zeros(2, 3)
    expected[0] += 1
    torch.testing.assert_close(out[0], expected)          # the input's new value
    torch.testing.assert_close(x, torch.zeros(2, 3))      # the pass itself leaves inputs alone


def test_write_through_expand_uses_as_strided_scatter():
    def fn(x):
        y = x.expand(3, *x.shape)
        y[1, 1].mul_(5)
        return y * 1
    x = torch.arange(6.0)
    traced = _trace(fn, x)
    gm, _ = functionalize(traced.gm)
    assert _mutating_nodes(gm) == []
    ref = x.clone()
    expected = fn(ref)
    out, new_x = gm(x.clone())
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(new_x, ref)


def test_unused_random_op_is_kept():
    def fn(x):
        torch.rand(3)
        return x + 1
    gm, _ = functionalize(_trace(fn, torch.zeros(3)).gm)
    assert any(n.target is torch.ops.aten.rand.default for n in gm.graph.nodes)


def test_out_variant_becomes_functional():
    def fn(x):
        y = torch.empty(3)
        torch.add(x, 1, out=y)
        return y
    gm, _ = functionalize(_trace(fn, torch.ones(3)).gm)
    assert _mutating_nodes(gm) == []
    torch.testing.assert_close(gm(torch.ones(3))[0], torch.full((3,), 2.0))
