"""The forward's node order: values the partition moves from the backward into the forward (a
mask saved in place of the float it reads) run right after their inputs, not after the whole
forward (partition/graphs._moved_nodes_early). Inductor lays out in channels-last only the
nodes up to the last convolution; a mask placed after it was written NCHW with a transpose per
BatchNorm (MobileNetV2 ran 1.6x slower than under backend="inductor")."""
from __future__ import annotations

import copy

import torch
import torch.fx as fx
import torch.nn as nn
from torch._inductor.decomposition import select_decomp_table

import aotgrad
from aotgrad.partition.graphs import _moved_nodes_early

aten = torch.ops.aten


def _graph():
    g = fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.sin.default, (x,))
    b = g.call_function(aten.cos.default, (a,))
    m1 = g.call_function(aten.le.Scalar, (a, 0.0))      # moved: reads a only
    m2 = g.call_function(aten.bitwise_or.Tensor, (m1, g.call_function(aten.ge.Scalar, (b, 1.0))))
    g.output((b,))
    return g, x, a, b, m1, m2


def test_moved_nodes_run_right_after_their_inputs():
    g, x, a, b, m1, m2 = _graph()
    ge = m2.args[1]
    body = [a, b, m1, ge, m2]
    order = _moved_nodes_early(body, forward_nodes={a, b})
    assert order == [a, m1, b, ge, m2], [n.name for n in order]


def test_random_moved_nodes_keep_the_joint_order():
    g, x, a, b, m1, m2 = _graph()
    r = g.call_function(aten.rand_like.default, (a,))
    body = [a, b, r, m1]
    assert _moved_nodes_early(body, forward_nodes={a, b}) == body


def test_bn_relu6_masks_precede_the_next_convolution():
    """conv -> bn -> relu6 (in place) -> conv under min-cut: the saved hardtanh mask is computed
    in the forward, before the second convolution; outputs and grads as eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU6(inplace=True), nn.Conv2d(4, 4, 1))
    twin = copy.deepcopy(model)
    graphs = []

    def fw(gm, example_inputs):
        graphs.append(gm)
        return gm

    compiled = aotgrad.aot_module(twin, fw_compiler=fw, bw_compiler=aotgrad.nop, decompositions=select_decomp_table(),
                                  partition_fn=aotgrad.min_cut_rematerialization_partition)
    x = torch.randn(2, 3, 8, 8)
    expected, actual = model(x), compiled(x)
    expected.square().sum().backward()
    actual.square().sum().backward()
    torch.testing.assert_close(actual, expected)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    nodes = [n for n in graphs[0].graph.nodes if n.op == "call_function"]
    convolutions = [i for i, n in enumerate(nodes) if n.target is aten.convolution.default]
    masks = [i for i, n in enumerate(nodes) if n.target is aten.bitwise_or.Tensor]
    assert masks and len(convolutions) == 2, [n.name for n in nodes]
    assert all(i < convolutions[1] for i in masks), ([n.name for n in nodes], masks, convolutions)
