"""The backward for a call where some outputs got no gradient.

Eager's engine runs only the backward nodes that a gradient reaches: after
`out[1].backward()`, nothing is computed for `out[0]`. A compiled backward computes
every output's contribution, with zeros for the missing gradients. Zeros are not
enough: `a.log()`'s backward is `grad / a`, and `0 / 0` is NaN, so a missing
gradient could turn another output's correct gradient into NaN; and an input that
no gradient reaches would get zeros where eager leaves `.grad` None.

A backward is linear in its tangents, so every node that depends only on absent
tangents is exactly zero: `without_tangents` removes those nodes, replaces an
absent term in a sum by nothing (`add(x, absent) -> x`), materialises zeros only
where an absent term meets a present one in another op (`cat`, `slice_scatter`...,
exact there), and returns None for grads nothing reaches.

    before: mul = tangents_1 * reciprocal(a); mul_1 = tangents_2 * 2; add = mul + mul_1
    after (tangents_1 absent):  mul_1 = tangents_2 * 2; return (mul_1,)
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from aotgrad.partition.graphs import is_tangent

aten = torch.ops.aten
_SUMS = (aten.add.Tensor, operator.add)


def without_tangents(bw_gm: fx.GraphModule, absent: set[int]) -> fx.GraphModule | None:
    """`bw_gm` with the tangent placeholders at positions `absent` (among the tangents)
    removed and their contributions dropped; None if that needs zeros of a symbolic shape
    (the caller then passes zeros for them, as before)."""
    graph = fx.Graph()
    env: dict[fx.Node, object] = {}
    gone: set[fx.Node] = set()          # nodes that are exactly zero (depend only on absent tangents)
    from_tangents: set[fx.Node] = set()
    tangents = [n for n in bw_gm.graph.nodes if n.op == "placeholder" and is_tangent(n)]
    for node in bw_gm.graph.nodes:
        if node.op == "placeholder":
            if node in tangents:
                from_tangents.add(node)
                if tangents.index(node) in absent:
                    gone.add(node)
                    continue
            env[node] = graph.node_copy(node, lambda n: env[n])
            continue
        if node.op == "output":
            outs = [None if isinstance(o, fx.Node) and o in gone else (env[o] if isinstance(o, fx.Node) else o)
                    for o in node.args[0]]
            graph.output(tuple(outs))
            continue
        inputs = node.all_input_nodes
        if any(n in from_tangents for n in inputs):
            from_tangents.add(node)
        dropped = [n for n in inputs if n in gone]
        if not dropped:
            env[node] = graph.node_copy(node, lambda n: env[n])
            continue
        present = [n for n in inputs if n in from_tangents and n not in gone]
        if not present:
            gone.add(node)  # linear in the tangents, and all of its tangent terms are absent
            continue
        kept = _sum_without(node, gone)
        if kept is not None:
            env[node] = env[kept]
            continue
        zeros = {}
        for n in dropped:
            zero = _zeros(graph, n)
            if zero is None:
                return None
            zeros[n] = zero
        env[node] = graph.node_copy(node, lambda n: zeros[n] if n in zeros else env[n])
    graph.eliminate_dead_code()
    gm = fx.GraphModule(bw_gm, graph)
    gm.meta.update(bw_gm.meta)
    return gm


def _sum_without(node: fx.Node, gone: set[fx.Node]) -> fx.Node | None:
    """For `a + b` with one term absent and the other of the same shape and dtype: that term."""
    if node.target not in _SUMS or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return None
    a, b = node.args
    kept = b if a in gone else a
    if not isinstance(kept, fx.Node) or kept in gone:
        return None
    val, kept_val = node.meta.get("val"), kept.meta.get("val")
    if not (isinstance(val, torch.Tensor) and isinstance(kept_val, torch.Tensor)):
        return None
    same = val.shape == kept_val.shape and val.dtype == kept_val.dtype
    return kept if same else None


def _zeros(graph: fx.Graph, absent: fx.Node) -> fx.Node | None:
    val = absent.meta.get("val")
    if not isinstance(val, torch.Tensor) or any(isinstance(s, torch.SymInt) for s in val.shape):
        return None
    zero = graph.call_function(aten.zeros.default, (list(val.shape),),
                               {"dtype": val.dtype, "device": val.device})
    zero.meta["val"] = val.new_zeros(val.shape)
    return zero
