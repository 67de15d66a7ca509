"""Which graph nodes go into which DDP bucket.

In: a torch.compile FX graph, the parameters among its inputs (those DDP all-reduces) and
the byte caps. Out: `Bucket`s in forward order, each with its parameters, its nodes and why
it ends where it ends; every call node belongs to exactly one.

DDP fills buckets in the order gradients become ready: the reverse of the forward. A
parameter's gradient is ready once the backward has passed its first use in the forward,
so the walk goes from the output backwards and counts each parameter at its earliest user.
A bucket closes (before the next node joins it) once its parameters reach the cap (the
first bucket, the one nearest the output, has its own cap), if it can: some value it
computes is used outside it (a piece must have an output), and no value crossing the
boundary is anything but a tensor or a size (a tuple and its `getitem` stay together).
A parameter-free bucket at the start of the forward joins its neighbour.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.fx as fx


@dataclass
class Bucket:
    """One DDP bucket: its parameters (bytes, names, ids) and the graph nodes computed in it."""
    size: int = 0
    params: list[str] = field(default_factory=list)
    param_ids: list[int] = field(default_factory=list)
    nodes: list[fx.Node] = field(default_factory=list)
    reason: str = ""   # why it ends where it ends (aotgrad.distributed.explain prints it)


def _crosses_cleanly(node: fx.Node) -> bool:
    """May `node`'s value be handed from one piece to the next?"""
    value = node.meta.get("example_value", node.meta.get("val"))
    return value is None or isinstance(value, (torch.Tensor, torch.SymInt, int, float, bool))


def _earliest_users(gm: fx.GraphModule, params: dict) -> dict:
    """Per parameter placeholder, the first node of the forward that reads it."""
    first: dict = {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        for arg in node.all_input_nodes:
            if arg in params and arg not in first:
                first[arg] = node
    return first


def assign(gm: fx.GraphModule, params: dict, bucket_cap: int, first_bucket_cap: int) -> list[Bucket]:
    """The buckets of `gm` (see the module docstring). `params` maps each parameter
    placeholder DDP manages to (name, tensor)."""
    first_use: dict = {}
    for param, user in _earliest_users(gm, params).items():
        first_use.setdefault(user, []).append(param)
    buckets = [Bucket()]
    members: set = set()          # nodes of the bucket being filled
    waiting: set = set()          # producers of non-tensor values the bucket reads: must join it
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        bucket = buckets[-1]
        cap = first_bucket_cap if len(buckets) == 1 else bucket_cap
        if bucket.size >= cap and not waiting and _has_outside_user(bucket, members):
            bucket.reason = (f"its parameters reached {bucket.size} bytes, at least the "
                             f"{'first bucket' if len(buckets) == 1 else 'bucket'} cap of {cap} bytes")
            buckets.append(Bucket())
            bucket = buckets[-1]
            members = set()
        bucket.nodes.append(node)
        members.add(node)
        waiting.discard(node)
        waiting.update(arg for arg in node.all_input_nodes
                       if arg.op not in ("placeholder", "get_attr") and not _crosses_cleanly(arg))
        for param in reversed(first_use.get(node, ())):  # (the lists are reversed at the end)
            name, tensor = params[param]
            bucket.size += tensor.numel() * tensor.element_size()
            bucket.params.append(name)
            bucket.param_ids.append(id(tensor))
    if len(buckets) > 1 and buckets[-1].size == 0:  # a parameter-free start of the forward
        extra = buckets.pop()
        buckets[-1].nodes.extend(extra.nodes)
    buckets[-1].reason = "the start of the forward"
    buckets.reverse()
    for bucket in buckets:
        bucket.nodes.reverse()
        bucket.params.reverse()
        bucket.param_ids.reverse()
    return buckets


def _has_outside_user(bucket: Bucket, members: set) -> bool:
    return any(user not in members for node in bucket.nodes for user in node.users)
