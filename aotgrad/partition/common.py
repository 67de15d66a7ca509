"""Repeated computations of a joint graph merged: each computation made once.

In: a functional joint graph. Out: the same graph, every forward node that repeats an
earlier node's op on the same inputs with the same arguments replaced by that node, and the
number merged. Traced programs repeat work: transformers' mask helpers build the same
`arange` several times, a parallel-residual block (GPT-NeoX) takes two layer norms'
statistics of one input, each attention layer converts the same mask. Merged, the
partitioner sees one value: it saves it once or recomputes it once (GPT-NeoX saved its
attention mask once per layer, and each norm's statistics twice).

Only the forward's nodes (ancestors of the forward outputs) are merged. PyTorch's partitioner
merges the backward's too (a layer norm's backward subtracting the mean again); there that
made the cut save the normalized value instead of the embedding it is made from, and
Inductor then repeats the embedding lookup in each reader: phi got two more kernels (a
second each of a cold compile) for one mean's bytes.

    before: a = sin(x); b = sin(x); out = a * b      after: a = sin(x); out = a * a

Left alone, because two of them are not one value:
  * random ops, ops with effects and higher-order ops (each call draws or acts again);
  * `empty`-like constructors (their contents are whatever memory held);
  * values whose memory a graph output holds (two outputs eager returns as distinct tensors
    stay distinct, with their views; the runtime keeps repeated outputs apart only where the
    graph returns one node twice);
  * `.data` detaches (each has a version counter of its own in eager);
  * anything but tensor values (symbolic sizes have nodes of their own, read by name).
A graph with an in-place op is left whole (functionalization leaves none; a custom joint pass
might: which reads come before which write is then part of the value).
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef

aten = torch.ops.aten

# Constructors whose output is uninitialized memory: two calls are two different values.
_UNINITIALIZED = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided,
                  aten.empty_permuted}


def merge_repeated(gm: fx.GraphModule, num_fwd_outputs: int) -> tuple[fx.GraphModule, int]:
    """Merge the repeated computations of `gm`'s forward (the ancestors of its first
    `num_fwd_outputs` outputs) in place; returns `gm` and how many nodes went."""
    graph = gm.graph
    if any(_writes_in_place(n) for n in graph.nodes):
        return gm, 0
    output = graph.find_nodes(op="output")[0]
    returned = {StorageWeakRef(t.untyped_storage()) for n in output.all_input_nodes for t in _tensors(n) or ()}
    forward = _ancestors([a for a in output.args[0][:num_fwd_outputs] if isinstance(a, fx.Node)])
    first: dict = {}
    merged = 0
    for node in list(graph.nodes):
        key = _key(node, returned) if node in forward else None
        if key is None:
            continue
        kept = first.setdefault(key, node)
        if kept is not node:
            node.replace_all_uses_with(kept)
            graph.erase_node(node)
            merged += 1
    if merged:
        gm.recompile()
    return gm, merged


def _key(node: fx.Node, returned: set) -> tuple | None:
    """What makes `node` the same value as another (its op and its arguments, nodes by
    identity), or None where it must stay a node of its own."""
    target = node.target
    if node.op != "call_function" or not (isinstance(target, torch._ops.OpOverload) or target is operator.getitem):
        return None  # (higher-order ops too: one may save the random state it ran with)
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
        key = (target, _frozen(node.args), _frozen(node.kwargs))
        hash(key)
    except (TypeError, _Unkeyable):
        return None
    return key


class _Unkeyable(Exception):
    pass


def _frozen(value):
    """`value` as a hashable key that tells apart what compares equal across types and signs
    (True and 1, 1 and 1.0, 0.0 and -0.0): nodes themselves, containers by kind, the rest by
    type and repr."""
    if isinstance(value, fx.Node):
        return value
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _frozen(v)) for k, v in sorted(value.items())))
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


def _ancestors(roots: list[fx.Node]) -> set[fx.Node]:
    seen, stack = set(roots), list(roots)
    while stack:
        for arg in stack.pop().all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                stack.append(arg)
    return seen


def _writes_in_place(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return node.op == "call_function" and schema is not None and schema.is_mutable
