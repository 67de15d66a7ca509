"""Peak memory of a partition's backward, and the backward's run order that keeps it low.

In: the forward and backward graphs of any partition, or (for a partitioner weighing saved
sets without building graphs) the joint graph as a `Backward` and a saved set. Out:
`backward_peak_bytes` and `live_bytes` (the most device bytes live at once while the
backward runs, the live bytes after each node), and `Backward.schedule(saved)`: the
backward's nodes in run order, with its peak. The simulation walks the backward in order:
the saved values are live at its start, each node's result is allocated when it runs, and
every storage is freed right after its last use. Bytes follow cost.py:
    saved values that are (views of) the forward's inputs: free (the caller holds them);
    saved values sharing a storage (views of one base): counted once, as the whole base;
    views: free (they keep their base alive until their own last use);
    a multi-output op: each of its tensors, freed after its own last use;
    tangents: not counted (the caller's, and the same for every partition);
    the grads: live until the end (they are returned).
"""
from __future__ import annotations

import bisect
import math
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from aotgrad.partition.cost import fuses_inputs, is_view, storage_root
from aotgrad.partition.graphs import is_tangent, tensor_bytes

# What a node's value is, for the simulation: a new storage, an alias of its first input's
# storage (views), element k of a multi-output op (getitem), a tuple of new storages.
TENSOR, ALIAS, ELEMENT, TUPLE = range(4)


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
    table = Table(nodes)
    storages = {table.index[p]: (root, _root_bytes(root)) for p, root in saved.items()}
    returned = [table.index[v] for v in output.args[0] if isinstance(v, fx.Node)]
    start, lives, end = simulate(table, list(range(len(nodes))), storages, returned)
    return [("<start>", start)] + [(n.name, live) for n, live in zip(nodes, lives)] + [("output", end)]


class Table:
    """Nodes (in topological order) as flat lists the simulation and scheduling read fast:
    inputs and users by position, what each value is (TENSOR, ALIAS, ELEMENT, TUPLE) and
    its bytes."""

    def __init__(self, nodes: list[fx.Node]):
        self.nodes = nodes
        self.index = {n: i for i, n in enumerate(nodes)}
        self.inputs = [[self.index[a] for a in n.all_input_nodes if a in self.index] for n in nodes]
        self.users = [[self.index[u] for u in n.users if u in self.index] for n in nodes]
        self.kind, self.sizes, self.element, self.bytes = [], [], [], []
        for node in nodes:
            kind, sizes = _storage_kind(node)
            self.kind.append(kind)
            self.sizes.append(sizes)
            self.element.append(node.args[1] if kind == ELEMENT else None)
            self.bytes.append(_bytes_of(node.meta.get("val")))


def _storage_kind(node: fx.Node) -> tuple[int, list[int]]:
    """(kind, bytes each new storage holds): ALIAS and ELEMENT allocate nothing."""
    val = node.meta.get("val")
    if node.op != "call_function":
        return TENSOR, [0]                    # placeholders and attributes: held by the caller
    source = node.args[0] if node.args else None
    if node.target is operator.getitem and isinstance(source, fx.Node) and not is_view(source) \
            and isinstance(source.meta.get("val"), (tuple, list)):
        return ELEMENT, []
    if is_view(node) or node.target is operator.getitem:
        return ALIAS, []
    if isinstance(val, (tuple, list)):
        return TUPLE, [_bytes_of(v) for v in val]
    return TENSOR, [_bytes_of(val)]


def simulate(table: Table, order: list[int], saved: dict[int, tuple[object, int]],
             returned: list[int]) -> tuple[int, list[int], int]:
    """(bytes live at the start, after each step of `order` allocates, at the end).

    `order` lists table positions in run order; a position may repeat (a value computed
    again: each run is a new storage, and later steps read the newest). `saved` maps the
    saved positions to (storage key, bytes): saved values with one key share a storage.
    Values not run and not saved (tangents) hold nothing."""
    start, lives, end, _ = _simulate(table, order, saved, returned)
    return start, lives, end


def _simulate(table: Table, order: list[int], saved: dict[int, tuple[object, int]],
              returned: list[int]) -> tuple[int, list[int], int, list[int]]:
    """simulate, and for each step the last step reading what it allocated (-1: nothing)."""
    inputs, kind = table.inputs, table.kind
    sizes: list[int] = []
    last_read: list[int] = []
    storage_of: dict[int, object] = {}       # position -> storage id, or list of them (TUPLE)
    saved_ids: dict[object, int] = {}
    for position, (key, size) in saved.items():
        if key not in saved_ids:
            saved_ids[key] = len(sizes)
            sizes.append(size)
            last_read.append(-1)
        storage_of[position] = saved_ids[key]
    owner = [-1] * len(sizes)          # the step allocating each storage
    start = sum(sizes)
    allocated = [0] * len(order)
    for step, position in enumerate(order):
        for arg in inputs[position]:
            storage = storage_of.get(arg)
            if isinstance(storage, int):
                last_read[storage] = step
        what = kind[position]
        if position in saved:
            last_read[storage_of[position]] = step       # a saved input: live until here at least
        elif what == ALIAS:
            storage_of[position] = storage_of.get(inputs[position][0]) if inputs[position] else None
        elif what == ELEMENT:
            elements = storage_of.get(inputs[position][0])
            storage_of[position] = elements[table.element[position]] if isinstance(elements, list) else elements
        else:
            ids = list(range(len(sizes), len(sizes) + len(table.sizes[position])))
            sizes.extend(table.sizes[position])
            last_read.extend([step] * len(ids))
            owner.extend([step] * len(ids))
            allocated[step] = sum(table.sizes[position])
            storage_of[position] = ids if what == TUPLE else ids[0]
    for value in returned:
        storage = storage_of.get(value)
        if isinstance(storage, int):
            last_read[storage] = len(order)
    freed = [0] * (len(order) + 1)
    live = start
    for storage, step in enumerate(last_read):
        if step < 0:
            live -= sizes[storage]            # saved but never read: dead from the start
        else:
            freed[step] += sizes[storage]
    lives = []
    for step in range(len(order)):
        live += allocated[step]
        lives.append(live)
        live -= freed[step]
    released = [-1] * len(order)
    for storage, step in enumerate(owner):
        if step >= 0:
            released[step] = max(released[step], last_read[storage])
    return start, lives, live, released


def _root_bytes(root: fx.Node) -> int:
    return 0 if root.op in ("placeholder", "get_attr") else _bytes_of(root.meta.get("val"))


def _saved_outputs(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule) -> dict[fx.Node, fx.Node]:
    """The backward's saved-value placeholders, each with the forward node it receives."""
    placeholders = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    num_saved = bw_gm.meta.get("num_saved", sum(not is_tangent(n) for n in placeholders))
    output = next(n for n in reversed(fw_gm.graph.nodes) if n.op == "output")
    outs = list(output.args[0])
    saved = outs[len(outs) - num_saved:] if num_saved else []
    return {p: s for p, s in zip(placeholders[:num_saved], saved) if isinstance(s, fx.Node)}


def _bytes_of(val) -> int:
    return sum(tensor_bytes(v) for v in pytree.tree_leaves(val) if isinstance(v, torch.Tensor))


# -- the backward's run order -------------------------------------------------------------

@dataclass(frozen=True)
class Policy:
    """When the backward runs a recomputed value again instead of keeping it: a value whose
    recompute chain (its cost plus that of the inputs it would recompute too) is below
    `keep_ratio` times its bytes is forgotten once no tangent-dependent node within the
    next `horizon` loops needs it, and recomputed at its next use.

    A loop is a library kernel (a matmul, a convolution: `cost.fuses_inputs` is false for
    it) or a run of the tangent-dependent nodes between two, which a fusing compiler makes
    one loop; values are forgotten only between loops. Inside one, a value the loop makes
    lives in registers and one it reads stays allocated until the loop ends: forgetting it
    there lowers no real peak, and its second computation is a node Inductor may give a
    buffer of its own (albert's GELU backward: one more kernel). Reductions do not end a loop
    (a fusing compiler recomputes a pointwise value inside each kernel that reads it), so a
    backward without library kernels is one loop and forgets nothing; where the graphs run
    unfused (the `aotgrad` backend under a memory budget) that keeps some values longer than
    the simulation would need."""
    keep_ratio: float
    horizon: float


# Recompute once and keep (each value live from its first to its last use); then recompute
# again values cheap for their size, anything not needed by the next loop, anything not
# needed by the current one (each repeat is taken back where it fits).
POLICIES = (Policy(0, math.inf), Policy(64, 1), Policy(16, 1), Policy(math.inf, 1), Policy(math.inf, 0))


# Rounds of taking repeated runs back (each one simulation).
_REFINEMENTS = 3


@dataclass
class Schedule:
    """The backward's nodes in run order (a node listed twice is recomputed twice), its
    peak bytes, and the recompute cost of the repeated runs."""
    nodes: list[fx.Node]
    peak: int
    extra: int


class Backward:
    """A joint graph's backward, to schedule and simulate for any saved set.

    `costs` gives each value's recompute cost (cost.py); values the tangents reach run in
    the backward in joint order; the grads are `grad_outputs`."""

    def __init__(self, joint: fx.GraphModule, tangents: list[fx.Node], grad_outputs: list, costs: dict):
        self.table = table = Table([n for n in joint.graph.nodes if n.op != "output"])
        reached = set()
        stack = [table.index[t] for t in tangents]
        while stack:
            position = stack.pop()
            if position not in reached:
                reached.add(position)
                stack.extend(table.users[position])
        self.tangent_dependent = [p in reached for p in range(len(table.nodes))]
        self.is_input = [n.op in ("placeholder", "get_attr") for n in table.nodes]
        self.grads = [table.index[g] for g in grad_outputs if isinstance(g, fx.Node)]
        self.cost = [costs.get(n, 0) if costs.get(n, 0) != math.inf else 0 for n in table.nodes]
        self.roots = [table.index[storage_root(n)] for n in table.nodes]

    def schedule(self, saved: list[fx.Node], policies: tuple[Policy, ...] = POLICIES) -> Schedule:
        """The run order of the lowest peak among `policies`, then with as many of its
        repeated runs taken back (the value kept instead) as fit under that peak.

            mlp stack, saved only inputs: layer 1's output is made at the start (layer 3
            needs it) and again for layer 1's own backward, so it does not live in between
        """
        saved_positions = {self.table.index[s] for s in saved}
        plan = _Plan(self, saved_positions)
        storages = {p: (self.roots[p], _root_bytes(self.table.nodes[self.roots[p]])) for p in saved_positions}
        runs = []
        for policy in policies:
            run = plan.run_order(policy)
            runs.append((self._measure(run, storages), run))
        (peak, extra, timeline), run = min(runs, key=lambda r: (r[0][0], r[0][1]))
        for _ in range(_REFINEMENTS):
            if not extra:
                break
            refined = plan.run_order_dropping(_keep_what_fits(self.table, self.cost, run, timeline, peak))
            measured = self._measure(refined, storages)
            if measured[0] > peak or measured[1] >= extra:
                break
            (peak, extra, timeline), run = measured, refined
        return Schedule([self.table.nodes[p] for p in run.order], peak, extra)

    def _measure(self, run: _Run, storages: dict) -> tuple[int, int, tuple]:
        """(peak, recompute cost of repeated runs, the simulation's timeline)."""
        timeline = _simulate(self.table, run.order, storages, self.grads)
        start, lives, end, _ = timeline
        extra = sum(self.cost[p] for p in run.order) - sum(self.cost[p] for p in set(run.order))
        return max(start, end, *lives), extra, timeline


@dataclass
class _Run:
    """A run order, the tangent-dependent step each position of it serves, and after which
    of those steps each forgotten value was forgotten (step -> values)."""
    order: list[int]
    serves: list[int]
    dropped: dict[int, set[int]]


def _keep_what_fits(table: Table, cost: list, run: _Run, timeline: tuple, peak: int) -> dict[int, set[int]]:
    """The drops of `run` less those whose value, kept instead from the last read of its
    run before the drop to its next run, fits under `peak` at every step between (the
    most recompute per byte first)."""
    _, lives, _, released = timeline
    lives = list(lives)
    runs_of: dict[int, list[int]] = {}
    for step, position in enumerate(run.order):
        runs_of.setdefault(position, []).append(step)
    drops = []
    for after, values in run.dropped.items():
        for value in values:
            steps = runs_of.get(value, [])
            k = bisect.bisect_right([run.serves[s] for s in steps], after)
            if 0 < k < len(steps):
                drops.append((after, value, released[steps[k - 1]] + 1, steps[k]))
    kept_back: set[tuple[int, int]] = set()
    for after, value, first, last in sorted(drops, key=lambda d: -cost[d[1]] / max(table.bytes[d[1]], 1)):
        if first <= 0 or max(lives[first:last], default=0) + table.bytes[value] > peak:
            continue
        for step in range(first, last):
            lives[step] += table.bytes[value]
        kept_back.add((after, value))
    return {after: {v for v in values if (after, v) not in kept_back} for after, values in run.dropped.items()}


class _Plan:
    """The values one saved set makes the backward compute: the tangent-dependent ones
    (in joint order) and the recomputed ones, with the tangent-dependent positions (in
    that order) that need each recomputed value, directly or through other ones, and the
    loop each tangent-dependent step is in (`loop_of`, see Policy)."""

    def __init__(self, backward: Backward, saved: set[int]):
        self.backward = backward
        table = backward.table
        needed, stack = set(), list(backward.grads)
        while stack:
            position = stack.pop()
            if position not in needed:
                needed.add(position)
                if position not in saved:
                    stack.extend(table.inputs[position])
        runs = sorted(p for p in needed if p not in saved and not backward.is_input[p])
        self.tangent_nodes = [p for p in runs if backward.tangent_dependent[p]]
        self.recomputed = {p for p in runs if not backward.tangent_dependent[p]}
        self.loop_of = _loops([table.nodes[p] for p in self.tangent_nodes])
        self._uses: dict[int, list[int]] | None = None

    def uses(self) -> dict[int, list[int]]:
        if self._uses is None:
            step_of = {p: k for k, p in enumerate(self.tangent_nodes)}
            users, uses = self.backward.table.users, {}
            for position in sorted(self.recomputed, reverse=True):
                steps = set()
                for user in users[position]:
                    if user in step_of:
                        steps.add(step_of[user])
                    elif user in self.recomputed:
                        steps.update(uses[user])
                uses[position] = sorted(steps)
            self._uses = uses
        return self._uses

    def kept(self, ratio: float) -> set[int]:
        """Recomputed values never recomputed again: chain cost >= ratio * bytes (views and
        getitems follow their base)."""
        backward, table = self.backward, self.backward.table
        chain, kept = {}, set()
        for position in sorted(self.recomputed):
            args = table.inputs[position]
            chain[position] = backward.cost[position] + sum(
                chain[a] for a in args if a in self.recomputed and a not in kept)
            if table.kind[position] in (ALIAS, ELEMENT):
                if not args or args[0] not in self.recomputed or args[0] in kept:
                    kept.add(position)
            elif chain[position] >= ratio * max(table.bytes[position], 1):
                kept.add(position)
        return kept

    def run_order(self, policy: Policy) -> _Run:
        """Each tangent-dependent node preceded by the recomputed values it needs that are
        not at hand; after it, values the policy forgets. A value recomputed at its first
        use only (the first policy) is live from there to its last use."""
        kept = self.kept(policy.keep_ratio)
        uses = self.uses() if len(kept) < len(self.recomputed) else {}
        loop_of = self.loop_of

        def forget(step: int, at_hand: set[int]) -> set[int]:
            if not uses or (step + 1 < len(loop_of) and loop_of[step + 1] == loop_of[step]):
                return set()
            return {v for v in at_hand if v not in kept and not _used_within(uses[v], step, policy.horizon, loop_of)}
        return self._run(forget)

    def run_order_dropping(self, dropped: dict[int, set[int]]) -> _Run:
        """The run order forgetting exactly `dropped` (step -> values) where they are at hand."""
        return self._run(lambda step, at_hand: dropped.get(step, set()) & at_hand)

    def _run(self, forget) -> _Run:
        inputs, recomputed = self.backward.table.inputs, self.recomputed
        at_hand: set[int] = set()
        order: list[int] = []
        serves: list[int] = []
        dropped: dict[int, set[int]] = {}

        def compute(position: int, step: int) -> None:
            stack = [(position, False)]
            while stack:
                node, inputs_done = stack.pop()
                if node in at_hand:
                    continue
                if inputs_done:
                    at_hand.add(node)
                    order.append(node)
                    serves.append(step)
                    continue
                stack.append((node, True))
                stack.extend((a, False) for a in reversed(inputs[node]) if a in recomputed and a not in at_hand)

        for step, node in enumerate(self.tangent_nodes):
            for arg in inputs[node]:
                if arg in recomputed and arg not in at_hand:
                    compute(arg, step)
            order.append(node)
            serves.append(step)
            gone = forget(step, at_hand)
            if gone:
                at_hand -= gone
                dropped[step] = gone
        for grad in self.backward.grads:
            if grad in recomputed:
                compute(grad, len(self.tangent_nodes))
        return _Run(order, serves, dropped)


def _loops(nodes: list[fx.Node]) -> list[int]:
    """For each of `nodes` (the tangent-dependent steps in run order), the loop it is in: a
    library kernel (reading its inputs from memory) is one of its own, and each run of the
    nodes between two of them is one that a fusing compiler makes.

        mm, view, mul, tanh, mul, mm, view, add  ->  0, 1, 1, 1, 1, 2, 3, 3
    """
    loops, loop, after_library = [], -1, True
    for node in nodes:
        library = not fuses_inputs(node)
        loop += library or after_library
        after_library = library
        loops.append(loop)
    return loops


def _used_within(steps: list[int], step: int, horizon: float, loop_of: list[int]) -> bool:
    """Is a step of `steps` after `step` at most `horizon` loops after it?"""
    k = bisect.bisect_right(steps, step)
    return k < len(steps) and loop_of[steps[k]] - loop_of[step] <= horizon
