"""The printed graphs are for people: shapes, the user's line, the forward op of backward nodes."""
import torch
from expecttest import TestCase

import aotgrad
from aotgrad.observe.printing import format_graph


def scaled_sine(x, w):
    return (x * w).sin()


class PrintedGraphs(TestCase):
    def test_forward_and_backward_graphs_print_shapes_sources_and_forward_ops(self):
        g = aotgrad.aot_function(scaled_sine, aotgrad.nop)
        g(torch.randn(4, 3), torch.randn(3, requires_grad=True))
        fw, bw = g.last_graphs
        self.assertExpectedInline(format_graph(fw), """\
def forward(self, primals_1: "f32[4, 3]", primals_2: "f32[3]"):
    mul: "f32[4, 3]" = aten.mul.Tensor(primals_1, primals_2)  # test_printing.py:10  return (x * w).sin()
    sin: "f32[4, 3]" = aten.sin.default(mul)  # test_printing.py:10  return (x * w).sin()
    return (sin, primals_1, mul)""")
        self.assertExpectedInline(format_graph(bw, "backward", sources=False), """\
def backward(self, primals_1: "f32[4, 3]", mul: "f32[4, 3]", tangents_1: "f32[4, 3]"):
    cos: "f32[4, 3]" = aten.cos.default(mul)  # <- aten.sin.default
    mul_1: "f32[4, 3]" = aten.mul.Tensor(tangents_1, cos)  # <- aten.sin.default
    mul_2: "f32[4, 3]" = aten.mul.Tensor(mul_1, primals_1)  # <- aten.mul.Tensor
    sum_1: "f32[3]" = aten.sum.dim_IntList(mul_2, [0], False)  # <- aten.mul.Tensor
    return (sum_1,)""")

    def test_backward_nodes_share_seq_nr_with_the_forward_op_they_differentiate(self):
        g = aotgrad.aot_function(scaled_sine, aotgrad.nop)
        g(torch.randn(4, 3), torch.randn(3, requires_grad=True))
        fw, bw = g.last_graphs
        forward_seq = {n.meta["seq_nr"]: str(n.target) for n in fw.graph.nodes if "seq_nr" in n.meta}
        for node in bw.graph.nodes:
            if node.op == "call_function":
                self.assertEqual(forward_seq[node.meta["seq_nr"]], node.meta["forward_op"])
                self.assertIn("test_printing.py", node.meta["stack_trace"])
