"""The autograd graph that eager code built, in the order the engine runs it.

In: the root gradient edges of a `.backward()` / `autograd.grad()` call, the
`inputs=` edges and whether gradients accumulate into `.grad`. Out: a `Walk`:
every node that runs, in the CPU engine's order (a max-heap on sequence number,
ties broken exactly as the engine's `std::priority_queue` breaks them), with, for
each of its outputs, the step and input slot that gradient flows to, and where
`autograd.grad` reads its results. Nothing here runs a node.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.autograd.graph import GradientEdge

_ROOT = "root"  # the engine's GraphRoot: sends each root gradient down its edge


class Step:
    """One node the engine runs (or visits to read a captured gradient)."""
    __slots__ = ("node", "edges", "runs", "captures")

    def __init__(self, node, runs: bool, captures: list):
        self.node = node              # the autograd Node (C++ or Python)
        self.edges: list = []         # per node output: (step index, input slot) or None
        self.runs = runs              # False: visited only to capture its input (autograd.grad)
        self.captures = captures      # (input slot, result index) read here


@dataclass
class Walk:
    """One backward call's schedule: the steps in the engine's order and where the roots'
    gradients enter."""
    steps: list[Step]
    roots: list                    # per root gradient: (step index, input slot)
    num_results: int               # autograd.grad: gradients returned (one per input)
    unreachable: list[int]         # result indices no path reaches


def gradient_edge(t) -> GradientEdge:
    if isinstance(t, GradientEdge):
        return t
    node = t.grad_fn
    if node is not None and not isinstance(node, torch._C._FunctionBase):  # a C++ node: nothing to keep alive
        return GradientEdge(node, t.output_nr)
    return torch.autograd.graph.get_gradient_edge(t)


def _reachable(root_nodes: list) -> tuple[list, dict, dict]:
    """Nodes reachable from the roots (iterative DFS), their dependency counts (incoming
    edges from reachable nodes and from the roots) and their next edges."""
    dependencies: dict = {}
    next_edges: dict = {}
    order: list = []
    stack = []
    for node in root_nodes:
        dependencies[node] = dependencies.get(node, 0) + 1
        if node not in next_edges:
            next_edges[node] = None
            stack.append(node)
    while stack:
        node = stack.pop()
        order.append(node)
        edges = node.next_functions
        next_edges[node] = edges
        for child, _ in edges:
            if child is None:
                continue
            dependencies[child] = dependencies.get(child, 0) + 1
            if child not in next_edges:
                next_edges[child] = None
                stack.append(child)
    return order, dependencies, next_edges


def _should_run(order: list, next_edges: dict, targets: set) -> set:
    """Nodes on a path to a target (the engine's `exec_info`): a node runs when some child runs
    or is a target. `order` is DFS preorder, so children come after parents: go backwards."""
    marked = set(targets)
    changed = True
    while changed:  # a DAG, but preorder does not finish children first for shared subgraphs
        changed = False
        for node in reversed(order):
            if node in marked:
                continue
            if any(child is not None and child in marked for child, _ in next_edges[node]):
                marked.add(node)
                changed = True
    return marked


class _EngineHeap:
    """`std::priority_queue<NodeTask, vector, CompareNodeTaskTime>` as libstdc++ implements it:
    a max-heap on sequence number whose ties come out in the order its sift steps leave them.
    AccumulateGrad nodes all have the largest sequence number, so their order is these ties."""

    def __init__(self):
        self.items: list = []

    def push(self, key: int, value) -> None:
        items = self.items
        items.append((key, value))
        self._sift_up(len(items) - 1, 0, (key, value))

    def _sift_up(self, hole: int, top: int, item) -> None:
        items = self.items
        parent = (hole - 1) // 2
        while hole > top and items[parent][0] < item[0]:
            items[hole] = items[parent]
            hole = parent
            parent = (hole - 1) // 2
        items[hole] = item

    def pop(self):
        items = self.items
        top = items[0]
        last = items.pop()
        if items:
            self._adjust(0, len(items), last)
        return top[1]

    def _adjust(self, hole: int, length: int, item) -> None:
        items = self.items
        top = hole
        child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if items[child][0] < items[child - 1][0]:
                child -= 1
            items[hole] = items[child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            items[hole] = items[child - 1]
            hole = child - 1
        self._sift_up(hole, top, item)

    def __bool__(self) -> bool:
        return bool(self.items)


def walk(root_edges: list[GradientEdge], input_edges: list[GradientEdge] | None, accumulate_grad: bool) -> Walk:
    """The engine's schedule for one backward call.

    before: loss = (x * w).sum(); loss.backward()
    after:  steps: SumBackward0 -> MulBackward0 -> AccumulateGrad(w) -> AccumulateGrad(x)
            (each step's `edges` say which later step and slot gets each gradient)
    """
    order, dependencies, next_edges = _reachable([edge.node for edge in root_edges])
    targets: dict = {}
    should_run = None  # every node runs (no inputs=)
    if input_edges:
        for i, edge in enumerate(input_edges):
            targets.setdefault(edge.node, []).append((edge.output_nr, i))
        should_run = _should_run(order, next_edges, set(targets))
    steps, index_of = _schedule(root_edges, dependencies, next_edges, should_run, targets, accumulate_grad)
    for step in steps:
        if step.runs:
            step.edges = [None if child is None or child not in index_of else (index_of[child], slot)
                          for child, slot in next_edges[step.node]]
    reached = {i for step in steps for _, i in step.captures}
    num_results = 0 if accumulate_grad or not input_edges else len(input_edges)
    return Walk(
        steps=steps,
        roots=[(index_of[edge.node], edge.output_nr) if edge.node in index_of else None for edge in root_edges],
        num_results=num_results,
        unreachable=[i for i in range(num_results) if i not in reached],
    )


def _schedule(root_edges, dependencies: dict, next_edges: dict, should_run: set | None, targets: dict,
              accumulate_grad: bool) -> tuple[list[Step], dict]:
    """The steps in the order the engine's ready queue gives them: a node is ready when every
    edge into it has delivered (GraphRoot's included)."""
    steps: list[Step] = []
    index_of: dict = {}
    heap = _EngineHeap()
    for edge in root_edges:  # GraphRoot runs first: each root edge is one dependency met
        node = edge.node
        dependencies[node] -= 1
        if dependencies[node] == 0 and (should_run is None or node in should_run):
            heap.push(node._sequence_nr(), node)
    while heap:
        node = heap.pop()
        # autograd.grad's targets are only read, unless a path to another target passes them
        runs = should_run is None or accumulate_grad or node not in targets or \
            _has_running_child(node, next_edges, should_run)
        index_of[node] = len(steps)
        steps.append(Step(node, runs, [] if accumulate_grad else list(targets.get(node, ()))))
        if not runs:
            continue
        for child, _ in next_edges[node]:
            if child is not None:
                dependencies[child] -= 1
                if dependencies[child] == 0 and (should_run is None or child in should_run):
                    heap.push(child._sequence_nr(), child)
    return steps, index_of


def _has_running_child(node, next_edges: dict, should_run: set) -> bool:
    return any(child is not None and child in should_run for child, _ in next_edges[node])
