"""SymbolicValues: symbolic sizes become graph values computed from the inputs (issue 4)."""
import pytest
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from aotgrad.errors import UnsupportedError
from aotgrad.trace.symbolic import SymbolicValues, has_symbolic_shape, is_symbolic


def _graph_with_inputs(*shapes):
    mode = FakeTensorMode(shape_env=ShapeEnv())
    graph = fx.Graph()
    values = SymbolicValues(graph)
    fakes = []
    for k, shape in enumerate(shapes):
        fake = mode.from_tensor(torch.randn(shape))
        node = graph.placeholder(f"x{k}")
        node.meta["val"] = fake
        values.bind_input(node, fake)
        fakes.append(fake)
    return graph, values, fakes


def test_expressions_over_input_sizes_are_computed_at_run_time():
    graph, values, (x, n) = _graph_with_inputs((6, 4), (3,))
    s0, s1 = x.shape
    exprs = [(s0 * 2 + 3) // 4 - n.shape[0], s0 * s1, torch.sym_max(s0, s1), s1 % 3]
    graph.output(tuple(values.node_for(e) for e in exprs))
    gm = fx.GraphModule({}, graph)
    for a, b, m in ((10, 5, 2), (6, 4, 3), (1, 7, 9)):
        assert gm(torch.randn(a, b), torch.randn(m)) == ((a * 2 + 3) // 4 - m, a * b, max(a, b), b % 3)


def test_one_node_per_distinct_expression():
    graph, values, (x,) = _graph_with_inputs((6, 4))
    s0, s1 = x.shape
    first, second = values.node_for(s0 * s1), values.node_for(s1 * s0)
    assert first is second
    assert len([n for n in graph.nodes if n.target is torch.ops.aten.sym_size.int]) == 2


def test_constants_stay_python_numbers():
    graph, values, (x,) = _graph_with_inputs((6, 4))
    assert values.node_for(x.shape[0] - x.shape[0] + 5) == 5
    assert not is_symbolic(torch.SymInt(x.shape[0].node.wrap_int(3)))
    assert has_symbolic_shape(x)


def test_a_symbol_no_input_carries_is_a_clear_error():
    graph, values, (x,) = _graph_with_inputs((6, 4))
    other = FakeTensorMode(shape_env=x.fake_mode.shape_env).from_tensor(torch.randn(9, 2))
    with pytest.raises(UnsupportedError, match="no input of the traced function carries"):
        values.node_for(other.shape[0] * 2, "the size of a view")


def test_float_expressions_of_sizes():
    graph, values, (x,) = _graph_with_inputs((6, 4))
    n = x.shape[0] * x.shape[1]
    graph.output((values.node_for(n / (n - 1)), values.node_for(torch.sym_float(n) * 0.5)))
    gm = fx.GraphModule({}, graph)
    for a, b in ((3, 5), (6, 4)):
        got = gm(torch.randn(a, b))
        assert got == pytest.approx((a * b / (a * b - 1), a * b * 0.5))


def test_choices_and_logic_over_sizes():
    graph, values, (x,) = _graph_with_inputs((6, 4))
    s0, s1 = x.shape
    choice = torch.sym_ite((s0 > 5) & (s1 < 5), s0, s1 * 2)
    graph.output((values.node_for(choice), values.node_for(torch.sym_not(s0 > s1) | (s1 > 3))))
    gm = fx.GraphModule({}, graph)
    for a, b in ((6, 4), (3, 4), (8, 9), (2, 2)):
        assert gm(torch.randn(a, b)) == ((a if (a > 5 and b < 5) else b * 2), (not a > b) or b > 3)


def test_an_expression_aotgrad_cannot_write_is_a_clear_error():
    import sympy

    graph, values, (x,) = _graph_with_inputs((6, 4))
    unknown = sympy.Function("unknown_fn")(x.shape[0].node.expr)
    with pytest.raises(UnsupportedError, match="cannot express `unknown_fn`.*mark the sizes involved static"):
        values._compute(unknown, "the size of a view")
