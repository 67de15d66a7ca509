"""Repeated computations merged before the min-cut partition: one value, saved or recomputed once."""
import operator

import torch
import torch.fx as fx

from aotgrad.partition.repeated import merge_repeated
from tests.partition.test_min_cut_budget import _compiled_with_inductors_decompositions, _saved_matching_eager
from tests.partition.test_cost import Graph

aten = torch.ops.aten


def _module(g: Graph, *outputs) -> tuple[fx.GraphModule, int]:
    """The graph returning `outputs`, all of them forward outputs."""
    g.graph.output(tuple(outputs))
    return fx.GraphModule(torch.nn.Module(), g.graph), len(outputs)


def _targets(gm: fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_a_repeated_op_and_what_reads_it_are_merged():
    g = Graph()
    x = g.input("x", 4, 8)
    a, b = g.op(aten.sin.default, x), g.op(aten.sin.default, x)
    ca, cb = g.op(aten.mul.Tensor, a, 2.0), g.op(aten.mul.Tensor, b, 2.0)   # the same once a, b are one
    joint = _module(g, g.op(aten.add.Tensor, ca, cb))
    gm, merged = merge_repeated(*joint)
    assert merged == 2
    assert len(joint[0].graph.nodes) == 7   # its input untouched
    assert _targets(gm) == [aten.sin.default, aten.mul.Tensor, aten.add.Tensor]
    x_ = torch.randn(4, 8)
    torch.testing.assert_close(gm(x_)[0], 4 * x_.sin())


def test_a_backward_computation_repeating_a_forward_one_stays_in_the_backward():
    """The backward's own `x - mean` (a layer norm's) is left to the partitioner's cost model."""
    g = Graph()
    x, tangent = g.input("x", 4, 8), g.input("tangents_1", 4, 8)
    mean = g.op(aten.mean.dim, x, [1], True)
    out = g.op(aten.mul.Tensor, g.op(aten.sub.Tensor, x, mean), 2.0)
    again = g.op(aten.sub.Tensor, x, mean)                  # read only by the backward
    grad = g.op(aten.mul.Tensor, tangent, again)
    g.graph.output((out, grad))
    gm, merged = merge_repeated(fx.GraphModule(torch.nn.Module(), g.graph), 1)
    assert merged == 0
    gm, merged = merge_repeated(gm, 2)                      # (were both forward outputs: merged)
    assert merged == 1


def test_arguments_that_compare_equal_across_types_or_signs_stay_apart():
    g = Graph()
    x = g.input("x", 4)
    ops = [g.op(aten.add.Tensor, x, 0.0), g.op(aten.add.Tensor, x, -0.0), g.op(aten.mul.Tensor, x, 1),
           g.op(aten.mul.Tensor, x, 1.0), g.op(aten.mul.Tensor, x, True)]
    total = ops[0]
    for op in ops[1:]:
        total = g.op(aten.add.Tensor, total, op)
    gm, merged = merge_repeated(*_module(g, total))
    assert merged == 0


def test_random_uninitialized_returned_and_symbolic_values_stay_apart():
    g = Graph()
    x = g.input("x", 4)
    r1, r2 = g.op(aten.rand_like.default, x), g.op(aten.rand_like.default, x)
    e1, e2 = g.op(aten.empty_like.default, x), g.op(aten.empty_like.default, x)
    o1, o2 = g.op(aten.cos.default, x), g.op(aten.cos.default, x)    # two outputs: two tensors
    v1, v2 = g.op(aten.view.default, o1, [2, 2]), g.op(aten.view.default, o1, [2, 2])  # views of an output
    s1 = g.graph.call_function(aten.sym_size.int, (x, 0))
    s2 = g.graph.call_function(aten.sym_size.int, (x, 0))
    s1.meta["val"] = s2.meta["val"] = 4
    used = g.op(aten.add.Tensor, g.op(aten.add.Tensor, r1, r2), g.op(aten.add.Tensor, e1, e2))
    gm, merged = merge_repeated(*_module(g, used, o1, o2, v1, v2, s1, s2))
    assert merged == 0


def test_random_ops_stay_apart_where_fx_does_not_count_them_impure(monkeypatch):
    """(torch.fx counts random ops impure by default; the pass does not rely on it.)"""
    monkeypatch.setattr(fx.Node, "is_impure", lambda self, *args, **kwargs: False)
    g = Graph()
    x = g.input("x", 4)
    r1, r2 = g.op(aten.rand_like.default, x), g.op(aten.rand_like.default, x)
    gm, merged = merge_repeated(*_module(g, g.op(aten.add.Tensor, r1, r2)))
    assert merged == 0


def test_higher_order_ops_stay_apart():
    """`run_and_save_rng_state` twice (activation checkpointing's random ops): each call saves
    the random state as it is then, so two calls are two values."""
    g = Graph()
    x = g.input("x", 4)
    hop = torch.ops.higher_order.run_and_save_rng_state
    values = []
    for _ in range(2):
        call = g.graph.call_function(hop, (aten.rand_like.default, x))
        with g.mode:
            call.meta["val"] = (torch.empty(2), torch.empty(4))
        values.append(g.graph.call_function(operator.getitem, (call, 1)))
        values[-1].meta["val"] = call.meta["val"][1]
    gm, merged = merge_repeated(*_module(g, g.op(aten.add.Tensor, *values)))
    assert merged == 0


def test_a_graph_with_an_in_place_op_is_left_whole():
    g = Graph()
    x = g.input("x", 4)
    a = g.op(aten.sin.default, x)
    g.op(aten.add_.Tensor, x, 1.0)
    b = g.op(aten.sin.default, x)   # reads x after the write: not a's value
    gm, merged = merge_repeated(*_module(g, g.op(aten.add.Tensor, a, b)))
    assert merged == 0


def test_a_data_detach_keeps_its_own_node():
    g = Graph()
    x = g.input("x", 4)
    d1, d2 = g.op(aten.detach.default, x), g.op(aten.detach.default, x)
    d2.meta["own_version_counter"] = True
    gm, merged = merge_repeated(*_module(g, g.op(aten.add.Tensor, d1, d2)))
    assert merged == 0


def test_min_cut_saves_two_norms_statistics_of_one_input_once():
    """Two layer norms of one input (GPT-NeoX's parallel residual): their statistics are one
    computation, saved once. Outputs and grads as eager's."""
    class TwoNorms(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = torch.nn.LayerNorm(16), torch.nn.LayerNorm(16)

        def forward(self, x):
            return self.first(x) * self.second(x)

    torch.manual_seed(0)
    x = torch.randn(4, 16, requires_grad=True)
    saved, graphs = _saved_matching_eager(TwoNorms(), x)
    assert _targets(graphs["forward"]).count(aten.var_mean.correction) == 1
    statistics = [n for n in saved if tuple(n.meta["val"].shape) == (4, 1)]
    assert len(statistics) <= 2, saved      # a mean and an rstd at most, not one pair per norm


def test_outputs_eager_returns_as_two_tensors_stay_two():
    class TwoSines(torch.nn.Module):
        def forward(self, x):
            return x.sin(), x.sin()

    compiled, _ = _compiled_with_inductors_decompositions(TwoSines())
    x = torch.randn(4, requires_grad=True)
    a, b = compiled(x)
    assert a.data_ptr() != b.data_ptr()
    torch.testing.assert_close((a, b), (x.sin(), x.sin()))
