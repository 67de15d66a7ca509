"""The forward's node order: values the partition moves from the backward into the forward (a
mask saved in place of the float it reads) run right after their inputs, not after the whole
forward (partition/graphs._moved_nodes_early). Inductor lays out in channels-last only the
nodes up to the last convolution; a mask placed after it was written NCHW with a transpose per
BatchNorm (MobileNetV2 ran 1.6x slower than under backend="inductor")."""
from __future__ import annotations

import torch
import torch.fx as fx
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
