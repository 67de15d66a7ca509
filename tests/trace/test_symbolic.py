"""SymbolicValues: symbolic sizes become graph values computed from the inputs (issue 4)."""
import math

import pytest
import sympy
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.sym_node import SymNode
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils._sympy import functions as symfn

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


def test_a_symbolic_float_that_is_a_whole_number_stays_a_float():
    graph, values, (x,) = _graph_with_inputs((6, 4))
    a = torch.sym_float(x.shape[0])
    zero = values.node_for(a - a)  # sympy's expression is the Integer 0
    assert zero == 0 and type(zero) is float


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


def _run_graph(graph, values, exprs, shape):
    graph.output(tuple(values.node_for(e) for e in exprs))
    return fx.GraphModule({}, graph)(torch.randn(shape))


def test_math_functions_of_symbolic_floats_are_computed_at_run_time():
    """What Dynamo hands over for `math.sqrt(2.0 / n)`, `math.sqrt(head_dim)`, `math.cos(n)`:
    FloatTrueDiv, ToFloat and the opaque math functions, written as graph calls."""
    graph, values, (x,) = _graph_with_inputs((6, 4))
    s0, s1 = x.shape
    # Dynamo turns math.sqrt(v) on a SymFloat or SymInt into torch._sym_sqrt(v)
    exprs = [torch._sym_sqrt(2.0 / torch.sym_float(s0)), 1 / torch._sym_sqrt(s1), torch._sym_cos(s0 / 3),
             torch._sym_tanh(s1 * 0.1), torch._sym_log2(s0 * s1), torch._sym_atan(s0 ** 0.5), torch._sym_sinh(s1 / s0)]
    graph.output(tuple(values.node_for(e) for e in exprs))
    gm = fx.GraphModule({}, graph)
    assert "torch._sym_sqrt" in gm.code and "torch._sym_cos" in gm.code
    for a, b in ((6, 4), (3, 7), (10, 2)):
        expected = (math.sqrt(2.0 / a), 1 / math.sqrt(b), math.cos(a / 3), math.tanh(b * 0.1), math.log2(a * b),
                    math.atan(a ** 0.5), math.sinh(b / a))
        assert gm(torch.randn(a, b)) == pytest.approx(expected, rel=1e-12)


def test_rounding_conversions_and_bit_operations_of_sizes():
    graph, values, (x,) = _graph_with_inputs((6, 4))
    s0, s1 = x.shape
    ratio = s0 / s1
    exprs = [math.floor(ratio), math.ceil(ratio), math.trunc(-ratio), round(ratio), round(ratio, 2), torch.sym_int(ratio * 3),
             abs(s1 - s0), s0 ** -2, (s0 & s1) + (s0 | 1) + (s0 ^ s1) + (s1 << 2) + (s0 >> 1)]
    graph.output(tuple(values.node_for(e) for e in exprs))
    gm = fx.GraphModule({}, graph)
    for a, b in ((6, 4), (3, 7), (10, 2), (7, 2)):
        r = a / b
        expected = (math.floor(r), math.ceil(r), math.trunc(-r), round(r), round(r, 2), int(r * 3), abs(b - a),
                    a ** -2, (a & b) + (a | 1) + (a ^ b) + (b << 2) + (a >> 1))
        got = gm(torch.randn(a, b))
        assert got == pytest.approx(expected, rel=1e-12)
        assert [type(v) for v in got] == [type(v) for v in expected]


def test_logic_of_three_or_more_conditions_over_sizes():
    graph, values, (x,) = _graph_with_inputs((6, 4))
    s0, s1 = x.shape
    both = (s0 > 5) & (s1 < 5) & (s0 > s1)
    either = (s0 > 8) | (s1 > 6) | (s0 < s1)
    graph.output((values.node_for(both), values.node_for(either)))
    gm = fx.GraphModule({}, graph)
    for a, b in ((6, 4), (3, 7), (9, 2), (6, 5), (4, 4)):
        assert gm(torch.randn(a, b)) == ((a > 5 and b < 5 and a > b), (a > 8 or b > 6 or a < b))


def _symbolic_float(expr, like):
    return torch.SymFloat(SymNode(expr, like.node.shape_env, float, hint=None))


def test_an_expression_no_python_operation_builds_is_specialised_with_a_guard_on_its_symbols():
    """sympy's own cos (not Dynamo's `OpaqueUnaryFn_cos`) has no graph operation: its value at
    the example's sizes is used, and a guard keeps the graph to those sizes."""
    graph, values, (x,) = _graph_with_inputs((6, 4))
    s0 = x.shape[0]
    symbol = s0.node.expr
    value = values.node_for(_symbolic_float(sympy.cos(symfn.ToFloat(symbol)), s0))
    assert value == pytest.approx(math.cos(6.0), rel=1e-15) and type(value) is float
    shape_env = s0.node.shape_env
    assert [str(g.expr) for g in shape_env.guards] == [f"Eq({symbol}, 6)"]
    assert shape_env.evaluate_guards_for_args([x], [torch.randn(6, 4)], ignore_static=False)
    assert not shape_env.evaluate_guards_for_args([x], [torch.randn(7, 4)], ignore_static=False)


def test_an_expression_aotgrad_cannot_write_or_evaluate_is_a_clear_error():
    graph, values, (x,) = _graph_with_inputs((6, 4))
    unknown = sympy.Function("unknown_fn")(x.shape[0].node.expr)
    with pytest.raises(UnsupportedError, match="cannot express `unknown_fn`.*nor evaluate it.*mark the sizes involved static"):
        values._compute(unknown, "the size of a view")


def test_an_expression_of_a_data_dependent_value_aotgrad_cannot_write_is_a_clear_error():
    graph, values, (x,) = _graph_with_inputs((6, 4))
    shape_env = x.shape[0].node.shape_env
    item = shape_env.create_unbacked_symfloat()
    node = graph.call_function(torch.ops.aten._local_scalar_dense.default, (graph.placeholder("t"),))
    values.bind_input(node, item)
    with pytest.raises(UnsupportedError, match=r"cannot express `cos`.*known only when the graph runs.*\.item\(\)"):
        values.node_for(_symbolic_float(sympy.cos(item.node.expr), item), "a scale")
