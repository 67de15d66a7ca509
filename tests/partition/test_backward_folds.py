"""Backward-graph folds (partition/graphs.py): `t(t(x))` reads as `x`, and a keepdim sum
viewed without its summed dims as the sum without keepdim. The folded graphs give eager's
gradients bit for bit, with eager's strides; what must stay a view stays one."""
from __future__ import annotations

import pytest
import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

import aotgrad
from aotgrad.observe import phases
from aotgrad.partition.graphs import _fold_double_transposes, _fold_keepdim_sums

aten = torch.ops.aten


def backward_of(fn, *args) -> fx.Graph:
    with phases.watch() as records:
        aotgrad.aot_function(fn, aotgrad.nop)(*args)
    return records[0].backward.graph


def grads_bitwise_as_eager(fn, *args) -> None:
    """Same gradients and strides as eager, for a contiguous output gradient (an expanded one,
    as `.sum().backward()` gives, is made contiguous before the backward graph, which can
    change the last bit of an `mm`, folds or not)."""
    eager = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    compiled = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    expected = fn(*eager)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    aotgrad.aot_function(fn, aotgrad.nop)(*compiled).backward(grad)
    for e, c in zip(eager, compiled):
        if e.requires_grad:
            assert torch.equal(c.grad, e.grad) and c.grad.stride() == e.grad.stride()


def mlp(x, w1, b1, w2, b2):
    return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)


def test_an_mlp_backward_has_no_double_transpose_and_no_view_of_a_keepdim_sum():
    args = [torch.randn(8, 5, requires_grad=True), torch.randn(6, 5, requires_grad=True),
            torch.randn(6, requires_grad=True), torch.randn(4, 6, requires_grad=True),
            torch.randn(4, requires_grad=True)]
    graph = backward_of(mlp, *args)
    assert not graph.find_nodes(op="call_function", target=aten.view.default)
    chains = [n for n in graph.find_nodes(op="call_function", target=aten.t.default)
              if n.args[0].target is aten.t.default]
    assert chains == []
    # two undo the saved t(w)s (made in the forward), two transpose the weight gradients' mm operand
    assert len(graph.find_nodes(op="call_function", target=aten.t.default)) == 4
    grads_bitwise_as_eager(mlp, *args)


@pytest.mark.parametrize("bias_shape", [(3,), (1, 3), (2, 1, 3), (1,)])
def test_broadcast_bias_gradients_match_eager(bias_shape):
    grads_bitwise_as_eager(lambda x, b: (x * 1.5 + b).relu(), torch.randn(2, 4, 3, requires_grad=True),
                           torch.randn(bias_shape, requires_grad=True))


def test_linear_on_transposed_and_batched_inputs_matches_eager():
    layer = nn.Linear(5, 3)
    args = [torch.randn(5, 7).t().requires_grad_(), layer.weight.detach().clone().requires_grad_(),
            layer.bias.detach().clone().requires_grad_()]
    grads_bitwise_as_eager(F.linear, *args)
    grads_bitwise_as_eager(lambda x, w, b: F.linear(x, w, b), torch.randn(2, 7, 5, requires_grad=True),
                           *args[1:])


def graph_of(build) -> fx.Graph:
    graph = fx.Graph()
    build(graph)
    return graph


def test_a_returned_double_transpose_of_a_saved_value_stays_a_view():
    def build(graph):
        saved = graph.placeholder("saved")
        made = graph.call_function(aten.mul.Tensor, (saved, 2))
        view = graph.call_function(aten.view.default, (saved, [-1]))
        twice = [graph.call_function(aten.t.default, (graph.call_function(aten.t.default, (x,)),))
                 for x in (saved, made, view)]
        graph.output(tuple(twice))
    graph = graph_of(build)
    _fold_double_transposes(graph)
    returned = graph.find_nodes(op="output")[0].args[0]
    assert returned[0].target is aten.t.default  # the saved tensor itself is never a gradient
    assert returned[1].target is aten.mul.Tensor  # a value made in the graph is returned as is
    assert returned[2].target is aten.t.default  # nor a view of a saved tensor


def test_keepdim_sums_fold_only_into_their_one_dimensional_view():
    mode = torch._subclasses.fake_tensor.FakeTensorMode()

    def build(graph):
        x = graph.placeholder("x")
        x.meta["val"] = mode.from_tensor(torch.randn(2, 4, 3))
        outs = []
        for dims, shape in [([0, 1], [3]), ([-3, -2], [3]), ([0], [4, 3]), ([0, 1], [1, 3])]:
            total = graph.call_function(aten.sum.dim_IntList, (x, dims, True))
            view = graph.call_function(aten.view.default, (total, shape))
            with mode:
                total.meta["val"] = aten.sum.dim_IntList(x.meta["val"], dims, True)
                view.meta["val"] = aten.view.default(total.meta["val"], shape)
            outs.append(view)
        shared = graph.call_function(aten.sum.dim_IntList, (x, [0, 1], True))  # read twice: kept
        with mode:
            shared.meta["val"] = aten.sum.dim_IntList(x.meta["val"], [0, 1], True)
        view = graph.call_function(aten.view.default, (shared, [3]))
        with mode:
            view.meta["val"] = aten.view.default(shared.meta["val"], [3])
        graph.output((*outs, view, shared))
    graph = graph_of(build)
    _fold_keepdim_sums(graph)
    returned = graph.find_nodes(op="output")[0].args[0]
    assert [n.target for n in returned[:5]] == [aten.sum.dim_IntList] * 2 + [aten.view.default] * 3
    assert [n.args[2] for n in returned[:2]] == [False, False]
    assert returned[0].meta["val"].shape == (3,)
    x = torch.randn(2, 4, 3)
    gm = fx.GraphModule({}, graph)
    expected = [x.sum([0, 1], keepdim=True).view(3), x.sum([0, 1], keepdim=True).view(3)]
    assert all(torch.equal(a, e) for a, e in zip(gm(x)[:2], expected))
