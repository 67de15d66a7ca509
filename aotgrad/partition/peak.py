"""Peak memory of a partition's backward: the saved values plus the temporaries it makes.

In: the forward and backward graphs of a partition (`fw_gm`, `bw_gm`, from any partitioner),
or (for a partitioner weighing candidates without building graphs) the backward's nodes in
run order. Out: `backward_peak_bytes`, the most device bytes live at once while the backward
runs, and `live_bytes`, the live bytes after each of its nodes. The simulation walks the
backward in order: the saved values are live at its start, each node's result is allocated
when it runs, and every storage is freed right after its last use. Bytes follow cost.py:
    saved values that are (views of) the forward's inputs: free (the caller holds them);
    saved values sharing a storage (views of one base): counted once, as the whole base;
    views: free (they keep their base alive until their own last use);
    a multi-output op: each of its tensors, freed after its own last use;
    tangents: not counted (the caller's, and the same for every partition);
    the grads: live until the end (they are returned).
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from aotgrad.partition.cost import is_view, storage_root
from aotgrad.partition.graphs import tensor_bytes


def backward_peak_bytes(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule) -> int:
    """The most bytes live at once in the backward (saved values and temporaries).

    before: bw(sin, tangents_1): cos = cos(sin); mul = tangents_1 * cos; return (mul,)   (f32[5] each)
    after:  40: sin + cos at `cos` (sin is freed after it), then cos + mul at `mul`
    """
    return max(bytes_live for _, bytes_live in live_bytes(fw_gm, bw_gm))


def live_bytes(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule) -> list[tuple[str, int]]:
    """("<start>", bytes of the saved values), then (node name, bytes live once it has run),
    then ("output", bytes returned)."""
    saved = {p: storage_root(s) for p, s in _saved_outputs(fw_gm, bw_gm).items()}
    output = next(n for n in reversed(bw_gm.graph.nodes) if n.op == "output")
    nodes = [n for n in bw_gm.graph.nodes if n.op != "output"]
    return simulate(nodes, saved, list(output.args[0]))


def simulate(nodes: list[fx.Node], saved: dict[fx.Node, fx.Node], returned: list) -> list[tuple[str, int]]:
    """live_bytes for a backward given as its nodes in run order (placeholders first, the
    output node left out), its saved inputs each with the forward node owning its storage,
    and the values it returns. Users outside `nodes` do not keep a value alive."""
    storages = _Storages(nodes, saved)
    position = {node: step for step, node in enumerate(nodes)}
    dead_after: dict[int, list] = {}
    for key, step in storages.last_uses(position, returned).items():
        dead_after.setdefault(step, []).append(key)
    live = sum(storages.sizes[key] for key in storages.saved)
    timeline = [("<start>", live)]
    for step, node in enumerate(nodes):
        live += sum(storages.sizes[key] for key in storages.allocates.get(node, ()))
        timeline.append((node.name, live))
        live -= sum(storages.sizes[key] for key in dead_after.get(step, ()))
    return timeline + [("output", live)]


class _Storages:
    """Which storage (a key) each backward node's value lives in, each storage's bytes, and
    which node allocates it. A multi-output op allocates one storage per element."""

    def __init__(self, nodes: list[fx.Node], saved: dict[fx.Node, fx.Node]):
        self.of: dict = {}
        self.sizes: dict = {}
        self.allocates: dict[fx.Node, list] = {}
        self.saved: set = set()
        for node in nodes:
            if node in saved:
                self._saved(node, saved[node])
            elif node.op == "placeholder":
                self._new(node, ("tangent", node), 0)   # the caller's
            elif node.op == "call_function":
                self._call(node)

    def _new(self, node: fx.Node, key, size: int) -> None:
        self.of[node] = key
        self.sizes[key] = size

    def _saved(self, node: fx.Node, root: fx.Node) -> None:
        key = ("saved", root)
        free = root.op in ("placeholder", "get_attr")
        self._new(node, key, 0 if free else _bytes_of(root.meta.get("val")))
        self.saved.add(key)

    def _call(self, node: fx.Node) -> None:
        val, source = node.meta.get("val"), node.args[0] if node.args else None
        if node.target is operator.getitem and ("elements", source) == self.of.get(source):
            self.of[node] = ("element", source, node.args[1])
        elif is_view(node) or node.target is operator.getitem:
            self.of[node] = self.of[source]
        elif isinstance(val, (tuple, list)):
            self._new(node, ("elements", node), 0)
            keys = [("element", node, i) for i in range(len(val))]
            self.sizes.update({key: _bytes_of(v) for key, v in zip(keys, val)})
            self.allocates[node] = keys
        else:
            self._new(node, node, _bytes_of(val))
            self.allocates[node] = [node]

    def last_uses(self, position: dict[fx.Node, int], returned: list) -> dict:
        """The step after which each storage is dead: the last node reading any of its
        aliases; the returned values' storages never die (they outlive the backward)."""
        last: dict = {}
        for node, keys in self.allocates.items():
            for key in keys:
                last[key] = position[node]
        for node, key in self.of.items():
            uses = [position[node]] + [position[user] for user in node.users if user in position]
            last[key] = max(last.get(key, -1), *uses)
        for value in returned:
            if value in self.of:
                last[self.of[value]] = len(position)
        return last


def _saved_outputs(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule) -> dict[fx.Node, fx.Node]:
    """The backward's saved-value placeholders, each with the forward node it receives."""
    placeholders = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    num_saved = bw_gm.meta.get("num_saved", sum(not n.target.startswith("tangents") for n in placeholders))
    output = next(n for n in reversed(fw_gm.graph.nodes) if n.op == "output")
    outs = list(output.args[0])
    saved = outs[len(outs) - num_saved:] if num_saved else []
    return {p: s for p, s in zip(placeholders[:num_saved], saved) if isinstance(s, fx.Node)}


def _bytes_of(val) -> int:
    return sum(tensor_bytes(v) for v in pytree.tree_leaves(val) if isinstance(v, torch.Tensor))
