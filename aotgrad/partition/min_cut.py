"""Min-cut rematerialization: save the fewest bytes, recompute cheap ops in the backward.

In: a functional joint graph. Out: forward and backward graphs, as default_partition.
The saved set is a minimum s-t cut of a flow graph: each value v is an edge
v_in -> v_out whose capacity is its size in bytes; values the forward must compute
hang off the source, values only the backward can compute hang off the sink. Ops
that must not run twice (random ops) or are costly to (matmul, convolution, any op
not known cheap) are tied to the source, so they are never recomputed.
"""
from __future__ import annotations

import operator

import networkx as nx
import torch
import torch.fx as fx

from aotgrad.partition.graphs import with_bare_symbols, build_backward, build_forward, split_joint, tensor_bytes

aten = torch.ops.aten
_INF = float("inf")


def is_recomputable(node: fx.Node) -> bool:
    """Cheap, deterministic ops may run again in the backward; nothing else may."""
    target = node.target
    if node.op != "call_function":
        return False
    tags = getattr(target, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    if getattr(target, "is_view", False) or torch.Tag.pointwise in tags:
        return True
    return target is operator.getitem


def min_cut_rematerialization_partition(joint_gm: fx.GraphModule, joint_inputs, *, num_fwd_outputs: int,
                                        memory_budget: float = 1.0) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Split a joint graph, saving a minimum-byte set of values.

    before: joint(x, t): a = x.sin(); b = a.sin(); c = b.cos(); g = t * c * a.cos() ...
    after:  fw saves x (cheapest: one input) and the backward recomputes a and b.
    saved: the cut; recomputed: every tangent-independent backward node not saved.
    """
    parts = split_joint(joint_gm, num_fwd_outputs)
    tangent_dependent = _descendants(parts.tangents)
    flow = nx.DiGraph()
    candidates = [n for n in joint_gm.graph.nodes
                  if n.op in ("placeholder", "call_function", "get_attr") and n not in tangent_dependent]
    for node in candidates:
        capacity = _capacity(node.meta.get("val"))
        flow.add_edge(f"{node.name}_in", f"{node.name}_out", capacity=capacity)
        if node.op != "call_function" or not is_recomputable(node):
            flow.add_edge("source", f"{node.name}_in", capacity=_INF)
        for user in node.users:
            if user in tangent_dependent or user.op == "output":
                if user.op != "output" or node not in parts.forward_nodes:
                    flow.add_edge(f"{node.name}_out", "sink", capacity=_INF)
            else:
                flow.add_edge(f"{node.name}_out", f"{user.name}_in", capacity=_INF)
    if "sink" not in flow:
        saved = []
    else:
        _, (reachable, _) = nx.minimum_cut(flow, "source", "sink")
        by_name = {n.name: n for n in candidates}
        saved = [by_name[name[:-3]] for name in reachable
                 if name.endswith("_in") and f"{name[:-3]}_out" not in reachable]
        saved = [n for n in joint_gm.graph.nodes if n in set(saved)]
    parts.backward_nodes = _backward_nodes(parts, saved)
    saved = with_bare_symbols(parts, saved)
    return build_forward(parts, saved), build_backward(parts, saved)


def _capacity(val) -> float:
    """What saving a value costs: a tensor its bytes, a size (dynamic shapes) one int."""
    if isinstance(val, torch.Tensor):
        return tensor_bytes(val)
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
        return 8
    return _INF


def _backward_nodes(parts, saved: list) -> list:
    """Nodes the grads need, walking back from the grads and stopping at saved values."""
    saved_set = set(saved)
    reach: set = set()
    stack = [g for g in parts.grad_outputs if isinstance(g, fx.Node)]
    while stack:
        node = stack.pop()
        if node in reach:
            continue
        reach.add(node)
        if node not in saved_set:
            stack.extend(node.all_input_nodes)
    return [n for n in parts.joint.graph.nodes if n in reach and n not in saved_set and n.op != "placeholder"]


def _descendants(roots) -> set:
    seen: set = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(node.users)
    return seen
