"""Min-cut rematerialization: choose what the forward saves and what the backward recomputes.

In: a functional joint graph. Out: forward and backward graphs, as default_partition.
The saved set is a minimum s-t cut of a flow graph whose value is
`saved bytes + lambda * recompute cost` (cost.py's model), for a trade-off price lambda.

The flow graph. Only values the tangents do not reach are placed (the rest runs in the
backward anyway). Each such value v becomes two vertices, v_in and v_out, and after the cut
    v_in  on the sink side   <=> v is computed in the backward,
    v_out on the sink side   <=> v is available to the backward,
so v is saved exactly when v_in is on the source side and v_out on the sink side.
    v_in -> v_out      capacity bytes(v): cut exactly when v is saved (views and tuples:
                       infinite, so their base or getitems are saved instead)
    source -> v_in     capacity lambda * recompute_cost(v), for v the forward computes anyway
                       (an ancestor of a forward output): cut exactly when v also runs in the
                       backward. Infinite for inputs, sizes, random and side-effecting ops
                       (and, at the default policy, ops that are not cost.is_cheap);
                       none for the other values (computed once, wherever they are placed)
    u_out -> v_in      infinite, for each input u of v: v runs in the backward only if u is
                       available there (saved or recomputed)
    v_out -> sink      infinite, for v read by a tangent-dependent node or returned as a grad
    v_in -> u_in       infinite, for v, u both not needed by the forward outputs: if the
                       forward computes v (v_in on the source side) it computes u, so u
                       runs in one graph only and its cost 0 is exact
Every finite cut is a partition whose backward can run, and its value is exactly
`bytes(saved) + lambda * sum(cost of values computed in both graphs)` (each term is one
cut edge), so the minimum over cuts is the best partition at that price, and sweeping
lambda traces the lower convex hull of the (saved bytes, recompute cost) trade-off. (The
model's one restriction, the last edge kind, is what optimal.py's exact optimum lifts.)
Capacities are integers: lambda = p / q enters as `q * bytes + p * cost`. The backward
then runs each recomputed value just before its first use (`backward_nodes`).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import networkx as nx
import torch
import torch.fx as fx
from networkx.algorithms.flow import preflow_push

from aotgrad import config
from aotgrad.errors import AotgradError
from aotgrad.partition import cost, peak
from aotgrad.partition.graphs import (JointParts, build_backward, build_forward, split_joint,
                                      with_bare_symbols)
from aotgrad.printing import source_line

_INF = float("inf")
SOURCE, SINK = "source", "sink"
IN, OUT = 0, 1

# The default policy's price (memory_budget 1.0): a saved byte is worth 64 bytes of
# recomputed memory traffic, so a chain of up to ~30 pointwise ops is recomputed to avoid
# saving one tensor of its size, and ops other than pointwise and views are not recomputed.
DEFAULT_LAMBDA = (1, 64)
# Of equally good cuts along a hull edge, at most this many are compared by backward peak.
_MAX_PEAKS_COMPARED = 16


class MemoryBudgetError(AotgradError):
    """The memory budget asks for fewer saved bytes than any partition of the graph can save."""


@dataclass
class Cut:
    """A partition's choice: the values saved, their bytes, and the recompute cost it pays."""
    saved: list[fx.Node]
    bytes: int
    recompute: int


@dataclass
class CutProblem:
    """A joint graph's parts, and for each value the backward might read, its costs."""
    parts: JointParts
    nodes: list[fx.Node]          # values the tangents do not reach, in graph order
    needed: set[fx.Node]          # of those, the ones the backward reads
    forward_required: set[fx.Node]
    save_bytes: dict[fx.Node, float]   # inf: cannot be saved (views, tuples)
    costs: dict[fx.Node, float]        # inf: never recomputed
    solved: dict = field(default_factory=dict)   # (p, q, policy) -> Cut


def min_cut_rematerialization_partition(joint_gm: fx.GraphModule, joint_inputs, *, num_fwd_outputs: int,
                                        memory_budget: float | None = None
                                        ) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Split a joint graph, saving few bytes and recomputing cheap ops in the backward.

    before: joint(x, t): a = x.sin(); b = a.sin(); c = b.sin(); g = t * c.cos() * b.cos() * a.cos() ...
    after:  fw saves x (free: the backward reads x anyway) and the backward recomputes a and b.

    memory_budget (None: aotgrad.config.activation_memory_budget) and
    aotgrad.config.activation_memory_budget_bytes (None: no bound), both read per call:
    1.0 and no byte bound gives the default policy (DEFAULT_LAMBDA, pointwise ops and views
    recomputed, nothing else). Below 1.0 the saved bytes are bounded by memory_budget times
    the bytes saved when nothing is recomputed; a byte bound bounds them too. When the
    default policy's cut fits every bound it is the answer; otherwise the cut that
    recomputes least among those that fit (any deterministic op may then be recomputed).
    Raises MemoryBudgetError if no partition fits.
    """
    parts = split_joint(joint_gm, num_fwd_outputs)
    problem = cut_problem(parts)
    budget = config.activation_memory_budget if memory_budget is None else memory_budget
    saved = choose_cut(problem, budget, config.activation_memory_budget_bytes).saved
    parts.backward_nodes = backward_nodes(parts, saved)
    saved = with_bare_symbols(parts, saved)
    return build_forward(parts, saved), build_backward(parts, saved)


def tradeoff_hull(joint_gm: fx.GraphModule, num_fwd_outputs: int) -> list[tuple[int, int]]:
    """The vertices (saved bytes, recompute cost) of the lower convex hull of the trade-off,
    from "recompute nothing" to "save the fewest bytes", any deterministic op recomputable.

        chain x.sin().sin().sin() of f32[5]: [(40, 0), (0, 80)]   (saved sin and sin_1, or x)
    """
    problem = cut_problem(split_joint(joint_gm, num_fwd_outputs))
    return [(c.bytes, c.recompute) for c in hull_cuts(problem)]


def cut_problem(parts: JointParts) -> CutProblem:
    """The values a cut places (those the tangents do not reach) and their costs (cost.py)."""
    tangent_dependent = _descendants(parts.tangents)
    nodes = [n for n in parts.joint.graph.nodes
             if n.op in ("placeholder", "call_function", "get_attr") and n not in tangent_dependent]
    grads = {g for g in parts.grad_outputs if isinstance(g, fx.Node)}
    needed = {n for n in nodes if n in grads or any(u in tangent_dependent and u.op != "output" for u in n.users)}
    save_bytes = {n: _save_bytes(n, parts.forward_nodes) for n in nodes}
    costs = {n: _INF if cost.never_recompute(n) else cost.recompute_cost(n) for n in nodes}
    return CutProblem(parts, nodes, needed, set(parts.forward_nodes), save_bytes, costs)


def _save_bytes(node: fx.Node, forward_nodes: set) -> float:
    """cost.value_bytes (0 for an input free to keep), or infinite for values that cannot be
    saved (views, tuples)."""
    if cost.is_view(node) or (not cost.is_size(node) and not _is_tensor(node.meta.get("val"))):
        return _INF
    if node.op == "placeholder" and cost.free_to_keep(node, forward_nodes):
        return 0
    return cost.value_bytes(node)


def _is_tensor(val) -> bool:
    return isinstance(val, torch.Tensor)


# -- choosing a cut ---------------------------------------------------------------------

def choose_cut(problem: CutProblem, memory_budget: float, budget_bytes: int | None) -> Cut:
    """The default policy's cut if it fits the bounds, else the least-recompute cut that does."""
    if not 0 <= memory_budget <= 1:
        raise ValueError(f"memory_budget must lie in [0, 1], got {memory_budget}")
    default = solve(problem, *DEFAULT_LAMBDA, recomputable=cost.is_cheap)
    if memory_budget >= 1 and budget_bytes is None:
        return default
    bound, asked = default.bytes, []
    if memory_budget < 1:
        nothing_recomputed = solve(problem, *_recompute_first(problem))
        bound = min(bound, int(memory_budget * nothing_recomputed.bytes))
        asked.append(f"memory_budget={memory_budget} of the {nothing_recomputed.bytes} bytes saved "
                     "when nothing is recomputed")
    if budget_bytes is not None:
        bound = min(bound, int(budget_bytes))
        asked.append(f"aotgrad.config.activation_memory_budget_bytes={budget_bytes}")
    if default.bytes <= bound:
        return default
    return least_recompute_under(problem, bound, " and ".join(asked))


def _any_deterministic(node: fx.Node) -> bool:
    return not cost.never_recompute(node)


def _recompute_first(problem: CutProblem) -> tuple[int, int]:
    """lambda so large that recompute is minimised first, then bytes."""
    return _finite_sum(problem.save_bytes.values()) + 1, 1


def _bytes_first(problem: CutProblem) -> tuple[int, int]:
    """lambda so small that bytes are minimised first, then recompute."""
    return 1, _finite_sum(problem.costs.values()) + 1


def _finite_sum(values) -> int:
    return int(sum(v for v in values if v != _INF))


def hull_cuts(problem: CutProblem) -> list[Cut]:
    """Vertices of the lower hull, most bytes first: each new price is where two known
    vertices tie, and a cut strictly below their line there is a new vertex between them."""
    most, least = solve(problem, *_recompute_first(problem)), solve(problem, *_bytes_first(problem))
    if (most.bytes, most.recompute) == (least.bytes, least.recompute):
        return [most]
    vertices, edges = [most, least], [(most, least)]
    while edges:
        left, right = edges.pop()
        middle = _below_edge(problem, left, right)
        if middle is not None:
            vertices.append(middle)
            edges += [(left, middle), (middle, right)]
    return sorted(vertices, key=lambda c: -c.bytes)


def _edge_price(left: Cut, right: Cut) -> tuple[int, int]:
    """lambda = p / q at which `left` (more bytes) and `right` (more recompute) cost the same."""
    return left.bytes - right.bytes, right.recompute - left.recompute


def _below_edge(problem: CutProblem, left: Cut, right: Cut) -> Cut | None:
    p, q = _edge_price(left, right)
    middle = solve(problem, p, q)
    if q * middle.bytes + p * middle.recompute < q * left.bytes + p * left.recompute:
        return middle
    return None


def least_recompute_under(problem: CutProblem, bound: int, asked: str) -> Cut:
    """The hull edge whose ends straddle `bound`, found by bisection on the hull; then the
    least-recompute cut along that edge (every minimum cut at the edge's price) that fits."""
    high = solve(problem, *_recompute_first(problem))
    if high.bytes <= bound:
        return high
    low = solve(problem, *_bytes_first(problem))
    if low.bytes > bound:
        raise MemoryBudgetError(_unreachable_message(problem, low, bound, asked, high.bytes))
    while (middle := _below_edge(problem, high, low)) is not None:
        if middle.bytes <= bound:
            low = middle
        else:
            high = middle
    return cut_along_edge(problem, *_edge_price(high, low), bound) or low


def _unreachable_message(problem: CutProblem, least: Cut, bound: int, asked: str, most: int) -> str:
    """What was asked, the least it can save and which values force it, what to set instead."""
    size = problem.save_bytes
    biggest = sorted([n for n in least.saved if size[n]], key=lambda n: -size[n])[:3]
    lines = []
    for node in biggest:
        where = f"   at {source_line(node)}" if source_line(node) else ""
        lines.append(f"  {node.name} = {node.target}: {size[node]} bytes ({_why_kept(node)}){where}")
    return (f"aotgrad cannot keep the values saved for the backward under {bound} bytes ({asked}): "
            f"even recomputing every op that may run twice, it must save {least.bytes} bytes. "
            "The largest values it must save:\n" + "\n".join(lines) +
            f"\nTo continue: set memory_budget to at least {least.bytes / max(most, 1):.3f} or "
            f"aotgrad.config.activation_memory_budget_bytes to at least {least.bytes}.")


def _why_kept(node: fx.Node) -> str:
    if node.op == "placeholder":
        return "an input the backward recomputes from"
    if cost.never_recompute(node):
        return "random or with side effects: it never runs twice"
    return "computed from values that cannot run again: random ops, ops with side effects, inputs"


# -- one cut ----------------------------------------------------------------------------

def solve(problem: CutProblem, p: int, q: int, *,
          recomputable: Callable[[fx.Node], bool] = _any_deterministic) -> Cut:
    """The minimum cut at lambda = p / q, values that `recomputable` rejects never recomputed."""
    key = (p, q, recomputable)
    if key not in problem.solved:
        problem.solved[key] = _min_cut(problem, p, q, recomputable)
    return problem.solved[key]


def _min_cut(problem: CutProblem, p: int, q: int, recomputable: Callable[[fx.Node], bool]) -> Cut:
    if not problem.needed:
        return Cut([], 0, 0)
    residual = preflow_push(flow_graph(problem, p, q, recomputable), SOURCE, SINK)
    cut = _cut_of(problem, _reachable(residual, [SOURCE]))
    assert q * cut.bytes + p * cut.recompute == residual.graph["flow_value"], (
        "a cut's value is not its bytes + lambda * recompute", cut, p, q, residual.graph["flow_value"])
    return cut


def flow_graph(problem: CutProblem, p: int, q: int, recomputable: Callable[[fx.Node], bool]) -> nx.DiGraph:
    """The flow graph of the module docstring at lambda = p / q."""
    flow = nx.DiGraph()
    placed = set(problem.nodes)
    for node in problem.nodes:
        flow.add_edge((node, IN), (node, OUT), capacity=q * problem.save_bytes[node])
        once = node not in problem.forward_required
        price = problem.costs[node]
        if node.op != "call_function" or price == _INF or not (once or recomputable(node)):
            flow.add_edge(SOURCE, (node, IN), capacity=_INF)
        elif price > 0 and not once:
            flow.add_edge(SOURCE, (node, IN), capacity=p * price)
        for user in node.users:
            if user in placed:
                flow.add_edge((node, OUT), (user, IN), capacity=_INF)
        if once:
            for arg in node.all_input_nodes:
                if arg in placed and arg not in problem.forward_required:
                    flow.add_edge((node, IN), (arg, IN), capacity=_INF)
        if node in problem.needed:
            flow.add_edge((node, OUT), SINK, capacity=_INF)
    return flow


def _reachable(residual: nx.DiGraph, starts, reverse: bool = False) -> set:
    """Vertices reachable from `starts` along edges with residual capacity (or reaching them)."""
    seen, queue = set(starts), deque(starts)
    edges = residual.pred if reverse else residual.succ
    while queue:
        vertex = queue.popleft()
        for other, attrs in edges[vertex].items():
            edge = residual.succ[other][vertex] if reverse else attrs
            if other not in seen and edge["capacity"] - edge["flow"] > 0:
                seen.add(other)
                queue.append(other)
    return seen


def _cut_of(problem: CutProblem, source_side: set) -> Cut:
    """The partition a cut describes: saved values, their bytes and the recompute it pays."""
    saved = [n for n in problem.nodes if (n, IN) in source_side and (n, OUT) not in source_side]
    read = _read_by_backward(problem.parts, saved)
    saved = [n for n in saved if n in read]
    bytes_saved, recompute = _cut_costs(problem, source_side, problem.nodes)
    return Cut(saved, bytes_saved, recompute)


def _cut_costs(problem: CutProblem, source_side: set, nodes) -> tuple[int, int]:
    """Saved bytes and recompute cost that the cut edges of `nodes` contribute."""
    bytes_saved = recompute = 0
    for node in nodes:
        if (node, IN) not in source_side:
            recompute += problem.costs[node] if node in problem.forward_required else 0
        elif (node, OUT) not in source_side:
            bytes_saved += problem.save_bytes[node]
    return bytes_saved, recompute


def cut_along_edge(problem: CutProblem, p: int, q: int, bound: int) -> Cut | None:
    """Among the minimum cuts at lambda = p / q (a hull edge: all on one line), the one found
    with the least recompute and at most `bound` bytes (of equals, the lowest backward peak).

    The minimum cuts are the source sides closed under residual edges; from the smallest
    (most recompute, fewest bytes) they grow to the largest one strongly connected
    component of the residual graph at a time, successors first, each step a minimum cut.
    """
    residual = preflow_push(flow_graph(problem, p, q, _any_deterministic), SOURCE, SINK)
    source_side = _reachable(residual, [SOURCE])
    bytes_saved, recompute = _cut_costs(problem, source_side, problem.nodes)
    best, ties = None, []
    for step in [set()] + _closed_steps(problem, residual, source_side):
        touched = {vertex[0] for vertex in step}
        before = _cut_costs(problem, source_side, touched)
        source_side |= step
        after = _cut_costs(problem, source_side, touched)
        bytes_saved, recompute = bytes_saved + after[0] - before[0], recompute + after[1] - before[1]
        if bytes_saved > bound or (best is not None and recompute > best):
            continue
        if best is None or recompute < best:
            best, ties = recompute, []
        ties.append(set(source_side))
    cuts = [_cut_of(problem, side) for side in _spread(ties, _MAX_PEAKS_COMPARED)]
    return min(cuts, key=lambda cut: (backward_peak(problem, cut.saved), cut.bytes), default=None)


def _closed_steps(problem: CutProblem, residual: nx.DiGraph, source_side: set) -> list[set]:
    """The vertices neither side must hold, in groups whose union with `source_side`, one
    group after another, stays closed under residual edges. Of the groups free to go next,
    the earliest in the graph: keeping early forward values and recomputing late ones
    lets the backward, which starts with the late ones, free them soon."""
    position = {node: k for k, node in enumerate(problem.nodes)}
    undecided = sorted(set(residual) - source_side - _reachable(residual, [SINK], reverse=True),
                       key=lambda vertex: (position[vertex[0]], vertex[1]))
    open_graph = nx.DiGraph()
    open_graph.add_nodes_from(undecided)
    inside = set(undecided)
    open_graph.add_edges_from((u, v) for u in undecided for v, e in residual.succ[u].items()
                              if v in inside and e["capacity"] - e["flow"] > 0)
    components = nx.condensation(open_graph)
    rank = {vertex: k for k, vertex in enumerate(undecided)}
    order = nx.lexicographical_topological_sort(
        components.reverse(copy=False), key=lambda c: min(rank[v] for v in components.nodes[c]["members"]))
    return [set(components.nodes[c]["members"]) for c in order]


def _spread(items: list, most: int) -> list:
    """At most `most` of `items`, evenly spaced, first and last included."""
    if len(items) <= most:
        return items
    return [items[round(k * (len(items) - 1) / (most - 1))] for k in range(most)]


def backward_peak(problem: CutProblem, saved: list[fx.Node]) -> int:
    """The backward's peak memory (peak.py) if the forward saves `saved`, without building it."""
    parts = problem.parts
    nodes = [*saved, *parts.tangents, *backward_nodes(parts, saved)]
    timeline = peak.simulate(nodes, {s: cost.storage_root(s) for s in saved}, parts.grad_outputs)
    return max(live for _, live in timeline)


def partition_cost(problem: CutProblem, saved: list[fx.Node]) -> Cut:
    """Bytes and recompute of any partition given by its saved set (from any partitioner):
    the bytes of the storages it keeps, and the recompute cost of every value that both the
    forward (its outputs' and the saved values' ancestors) and the backward (the grads'
    ancestors, down to saved values) compute.

        chain x.sin().sin(), saved [primals_1]: Cut([primals_1], bytes=0, recompute=cost(sin))
    """
    read = _read_by_backward(problem.parts, saved)
    saved = [n for n in saved if n in read]
    in_forward = problem.forward_required | _ancestors(saved)
    twice = [n for n in backward_nodes(problem.parts, saved) if n in in_forward and n in problem.costs]
    recompute = sum(problem.costs[n] for n in twice if problem.costs[n] != _INF)
    return Cut(saved, _bytes_of_storages(problem, saved), recompute)


def _bytes_of_storages(problem: CutProblem, saved: list[fx.Node]) -> int:
    """Saved bytes, a view (saved by another partitioner) counting as its base, once."""
    total = 0
    for root in {cost.storage_root(n) for n in saved}:
        size = problem.save_bytes.get(root, _INF)
        total += size if size != _INF else cost.value_bytes(root)
    return total


# -- the backward's nodes ---------------------------------------------------------------

def backward_nodes(parts: JointParts, saved: list) -> list:
    """Nodes the grads need, walking back from the grads and stopping at saved values, in
    the order the backward runs them: recomputed values just before their first use.

        joint order (a, b recomputed from x): a = f(x); b = g(x); ga = h(t_a, a); gb = k(t_b, b)
        run order:                            a, ga, b, gb   (a is dead before b is made)
    """
    reach = _read_by_backward(parts, saved)
    saved_set = set(saved)
    nodes = [n for n in parts.joint.graph.nodes if n in reach and n not in saved_set and n.op != "placeholder"]
    return _recompute_late(nodes, _descendants(parts.tangents))


def _recompute_late(nodes: list, tangent_dependent: set) -> list:
    """The tangent-dependent nodes in their order (the autograd engine's), each preceded by
    the not yet computed values it needs. Recomputing all values at the start would hold
    them all at once, as saving them would: no memory saved."""
    pending, order = set(nodes), []
    for root in [n for n in nodes if n in tangent_dependent] + nodes:
        stack = [(root, False)]
        while stack:
            node, inputs_done = stack.pop()
            if node not in pending:
                continue
            if inputs_done:
                pending.discard(node)
                order.append(node)
                continue
            stack.append((node, True))
            stack.extend((arg, False) for arg in reversed(node.all_input_nodes) if arg in pending)
    return order


def _read_by_backward(parts: JointParts, saved: list) -> set:
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
    return reach


def _ancestors(roots) -> set:
    seen: set = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    return seen


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
