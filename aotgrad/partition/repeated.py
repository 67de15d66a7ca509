"""Repeated computations of a joint graph's forward merged: each made once.

In: a functional joint graph. Out: a copy in which every forward node repeating an earlier
node's op on the same inputs and arguments is that node; the number merged. Traced programs
repeat work (transformers' mask helpers build the same `arange` several times, GPT-NeoX takes
two layer norms' statistics of one input); merged, the partitioner saves or recomputes one
value (GPT-NeoX saved its attention mask once per layer). PyTorch's partitioner merges the
backward's repeats too; aotgrad does not: a layer norm's backward `x - mean` merged into the
forward's made the cut save the normalized value instead of the embedding, and Inductor then
repeats the lookup in each reader (phi: two more kernels, a second each of a cold compile).

    before: a = sin(x); b = sin(x); out = a * b      after: a = sin(x); out = a * a

Never merged: random ops, ops with effects, higher-order ops (one may save the random state);
`empty`-like constructors; values whose memory a graph output holds (eager's distinct outputs
stay distinct); `.data` detaches (a version counter each); non-tensor values. A graph with an
in-place op is left whole (which reads precede which write is then part of the value).
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef

from aotgrad.functionalize.rules import is_mutating
from aotgrad.partition.graphs import ancestors

aten = torch.ops.aten

# Constructors whose output is uninitialized memory: two calls are two different values.
_UNINITIALIZED = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided,
                  aten.empty_permuted}


def merge_repeated(gm: fx.GraphModule, num_fwd_outputs: int) -> tuple[fx.GraphModule, int]:
    """A copy of `gm` with the repeated computations of its forward (the ancestors of its
    first `num_fwd_outputs` outputs) merged, and how many nodes went; `gm` itself where none
    did."""
    graph = gm.graph
    if any(_writes_in_place(n) for n in graph.nodes):  # (functionalization leaves none)
        return gm, 0
    output = graph.find_nodes(op="output")[0]
    returned = {StorageWeakRef(t.untyped_storage()) for n in output.all_input_nodes for t in _tensors(n) or ()}
    forward = ancestors(output.args[0][:num_fwd_outputs])
    merged_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}  # gm's node -> its copy, or the copy of the node it repeats
    first: dict = {}
    for node in graph.nodes:
        key = _key(node, returned, env) if node in forward else None
        if key is not None and key in first:
            env[node] = first[key]
            continue
        env[node] = merged_graph.node_copy(node, env.__getitem__)
        if key is not None:
            first[key] = env[node]
    merged = len(graph.nodes) - len(merged_graph.nodes)
    if not merged:
        return gm, 0
    merged_gm = fx.GraphModule(gm, merged_graph)
    merged_gm.meta.update(gm.meta)
    return merged_gm, merged


def _key(node: fx.Node, returned: set, env: dict) -> tuple | None:
    """What makes `node` the same value as another (its op and its arguments, nodes by
    their copies), or None where it must stay a node of its own."""
    target = node.target
    if node.op != "call_function" or not (isinstance(target, torch._ops.OpOverload) or target is operator.getitem):
        return None
    if node.is_impure() or node.meta.get("own_version_counter"):
        return None
    if torch.Tag.nondeterministic_seeded in getattr(target, "tags", ()):
        return None
    if getattr(target, "overloadpacket", None) in _UNINITIALIZED:
        return None
    tensors = _tensors(node)
    if not tensors or any(StorageWeakRef(t.untyped_storage()) in returned for t in tensors):
        return None
    try:
        key = (target, _frozen(node.args, env), _frozen(node.kwargs, env))
        hash(key)
    except (TypeError, _Unkeyable):
        return None
    return key


class _Unkeyable(Exception):
    pass


def _frozen(value, env: dict):
    """`value` as a hashable key that tells apart what compares equal across types and signs
    (True and 1, 1 and 1.0, 0.0 and -0.0): nodes by their copies, containers by kind, the
    rest by type and repr."""
    if isinstance(value, fx.Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(v, env) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _frozen(v, env)) for k, v in sorted(value.items())))
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool, torch.Tensor)):
        raise _Unkeyable  # (a symbol or a constant tensor in the arguments: kept as it is)
    if isinstance(value, float):
        return (float, repr(value))
    return (type(value), value)


def _tensors(node: fx.Node) -> list[torch.Tensor] | None:
    """The node's tensor values (one, or a tuple's), or None if any part is not a tensor."""
    val = node.meta.get("val")
    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    if not vals or not all(isinstance(v, torch.Tensor) for v in vals):
        return None
    try:
        for v in vals:
            v.untyped_storage()
    except NotImplementedError:  # (a tensor subclass without storage)
        return None
    return vals


def _writes_in_place(node: fx.Node) -> bool:
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
        and is_mutating(node.target, node.args, node.kwargs)
