"""The default partition: the forward computes its outputs, saves what the backward reads.

In: a functional joint graph `joint(*primals, *tangents) -> (*fw_outputs, *grads)`.
Out: `fw(*primals) -> (*fw_outputs, *saved)` and `bw(*saved, *tangents) -> (*grads)`.
No forward work is repeated in the backward, except ops that read only primals and
that the forward does not need: those run in the backward (where they are needed).
"""
from __future__ import annotations

import torch.fx as fx

from aotgrad.partition.graphs import with_bare_symbols, JointParts, build_backward, build_forward, split_joint


def default_partition(joint_gm: fx.GraphModule, joint_inputs, *, num_fwd_outputs: int
                      ) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Split a joint graph; save every forward value the backward uses.

    before: joint(primals_1, tangents_1): sin = sin(primals_1); cos = cos(primals_1)
                                          mul = tangents_1 * cos; return (sin, mul)
    after:  fw(primals_1): sin = sin(primals_1); return (sin, primals_1)
            bw(primals_1, tangents_1): cos = cos(primals_1); mul = tangents_1 * cos; return (mul,)
    saved: primals_1 (cos reads only primals and the forward does not need it, so it
    runs in the backward).
    """
    parts = split_joint(joint_gm, num_fwd_outputs)
    saved = saved_values(parts, parts.forward_nodes)
    saved = with_bare_symbols(parts, saved)
    return build_forward(parts, saved), build_backward(parts, saved)


def saved_values(parts: JointParts, in_forward: set[fx.Node]) -> list[fx.Node]:
    """Forward values (and primals) that backward nodes or grad outputs read, in graph order."""
    needed: set[fx.Node] = set()
    primals = set(parts.primals)  # (a list: membership in it per edge grew with the square of the graph)
    for node in parts.backward_nodes:
        for arg in node.all_input_nodes:
            if arg in in_forward or arg in primals:
                needed.add(arg)
    for out in parts.grad_outputs:
        if isinstance(out, fx.Node) and (out in in_forward or out in primals):
            needed.add(out)
    return [n for n in parts.joint.graph.nodes if n in needed]
