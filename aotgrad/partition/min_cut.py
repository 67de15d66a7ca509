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
                       backward. Infinite for inputs, sizes, random and side-effecting ops;
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
Capacities are exact integers (lambda = p / q enters as `q * bytes + p * cost`; flow.py).
As lambda grows the smallest minimum cut's source side grows (the source edges are the
only ones that depend on it); at a hull edge's price every cut on the edge is a minimum
cut, and `_walk_edge` goes through them one residual component at a time. So the minimum
cuts over all prices line up in one chain, from "save the fewest bytes" to "recompute
nothing", each optimal at its own bytes: no partition saves as few bytes with less
recompute (in this model).

Which cut (`choose_cut`):
  * budget 1.0 (the default): the minimum cut at DEFAULT_LAMBDA among the cuts that run no
    op twice that a fusing compiler cannot recompute nearly for free (compute-bound ops,
    shrinking reductions, scans...: cost.kept_from_rerun; those priced infinite), with a
    value only the backward reads counted twice if the forward saves it (MOVED_BYTES: the
    forward writes it only to save it). It may lie above the hull (it recomputes more of
    the cheap ops for the bytes it saves).
  * a budget below 1.0 bounds the saved bytes by memory_budget x the bytes saved when
    nothing is recomputed (`B_all`); config.activation_memory_budget_bytes bounds them too.
    The cut comes from a fixed family: the default cut, then for k = 19 .. 1 the
    least-recompute cut of the chain saving at most k/20 x B_all, then the fewest-bytes
    cut. A member is a *record* if its backward peak (peak.py, with its schedule) is no
    higher than that of every member saving more bytes. The answer is the first record
    (most bytes first) that fits the bound.
  * The guarantee: the records' peaks never rise as their bytes fall, and the family does
    not depend on the bound, so for any budgets b1 > b2 (and byte bounds), the peak at b2
    is at most the peak at b1 - as long as a record fits b2's bound. Where none does (every
    cut that fits peaks higher than one saving more: a value whose recomputation needs
    large temporaries, say), the bound wins: the lowest-peak member that fits, logged at
    debug level (info is one line per compile). A budget of k/20 gets the least-recompute cut for exactly its bound when
    that cut is a record; a bound between grid points gets a member at or below the grid
    point under it (a cut that fills the bound exactly would make the family depend on
    the bound, and the guarantee with it).
The backward runs the chosen cut's recomputed values near their uses (peak.Backward.schedule),
again before later uses when that lowers the peak.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef

from aotgrad import config
from aotgrad.errors import AotgradError
from aotgrad.observe.printing import source_line
from aotgrad.partition import cost, peak
from aotgrad.partition.default import saved_values
from aotgrad.partition.flow import FlowNetwork, Residual
from aotgrad.partition.graphs import JointParts, build_backward, build_forward, split_joint, with_bare_symbols
from aotgrad.partition.repeated import merge_repeated

log = logging.getLogger(__name__)

_INF = float("inf")
SOURCE, SINK = 0, 1

# The default policy's price (memory_budget 1.0): a saved byte is worth 64 bytes of
# recomputed memory traffic, so a chain of up to ~30 pointwise ops is recomputed to avoid
# saving one tensor of its size (compute-bound ops are kept out: see choose_cut).
DEFAULT_LAMBDA = (1, 64)
# The default cut counts a value only the backward reads this many times its bytes if the
# forward saves it (default_cut): once held, once written by a forward that has no other use for it.
MOVED_BYTES = 2
# The budget family's grid: k / BUDGET_STEPS of the bytes saved when nothing is recomputed.
BUDGET_STEPS = 20


class MemoryBudgetError(AotgradError):
    """The memory budget asks for fewer saved bytes than any partition of the graph can save."""


@dataclass
class Cut:
    """A partition's choice: the values saved, their bytes, and the recompute cost it pays."""
    saved: list[fx.Node]
    bytes: int
    recompute: int
    side: frozenset = field(default=frozenset(), repr=False, compare=False)   # flow vertices


@dataclass
class CutProblem:
    """A joint graph's parts, and for each value the backward might read, its costs."""
    parts: JointParts
    nodes: list[fx.Node]          # values the tangents do not reach, in graph order
    needed: set[fx.Node]          # of those, the ones the backward reads
    forward_required: set[fx.Node]
    save_bytes: dict[fx.Node, float]   # inf: cannot be saved (views, tuples)
    costs: dict[fx.Node, float]        # inf: never recomputed
    solved: dict = field(default_factory=dict)      # (p, q) -> Cut
    residuals: dict = field(default_factory=dict)   # (p, q) -> flow.Residual
    schedules: dict = field(default_factory=dict)   # saved names -> peak.Schedule
    _network: _Network | None = None
    _backward: peak.Backward | None = None

    @property
    def network(self) -> _Network:
        if self._network is None:
            self._network = _Network(self)
        return self._network

    @property
    def backward(self) -> peak.Backward:
        if self._backward is None:
            self._backward = peak.Backward(self.parts.joint, self.parts.tangents, self.parts.grad_outputs, self.costs)
        return self._backward

    def schedule(self, saved: list[fx.Node]) -> peak.Schedule:
        """The backward's run order and peak for this saved set (cached)."""
        key = tuple(sorted(n.name for n in saved))
        if key not in self.schedules:
            self.schedules[key] = self.backward.schedule(saved)
        return self.schedules[key]


def min_cut_rematerialization_partition(joint_gm: fx.GraphModule, joint_inputs, *, num_fwd_outputs: int,
                                        memory_budget: float | None = None
                                        ) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Split a joint graph, saving few bytes and recomputing cheap ops in the backward.
    The forward's repeated computations are merged first (repeated.merge_repeated).

    before: joint(x, t): a = x.sin(); b = a.sin(); c = b.sin(); g = t * c.cos() * b.cos() * a.cos() ...
    after:  fw saves x (free: the backward reads x anyway) and the backward recomputes a and b.

    memory_budget (None: aotgrad.config.activation_memory_budget) and
    aotgrad.config.activation_memory_budget_bytes (None: no bound), both read per call:
    1.0 and no byte bound gives the default cut (DEFAULT_LAMBDA; no matmul, convolution or
    attention recomputed). Below 1.0 the saved bytes are bounded by memory_budget times
    the bytes saved when nothing is recomputed; a byte bound bounds them too. The backward
    peak never rises as the budget falls (the module docstring says when it can). Raises
    MemoryBudgetError if no partition fits.
    """
    joint_gm, merged = merge_repeated(joint_gm, num_fwd_outputs)
    if merged:
        log.debug("min-cut: %d repeated computations merged", merged)
    parts = split_joint(joint_gm, num_fwd_outputs)
    problem = cut_problem(parts)
    budget = config.activation_memory_budget if memory_budget is None else memory_budget
    saved = choose_cut(problem, budget, config.activation_memory_budget_bytes).saved
    parts.backward_nodes = problem.schedule(saved).nodes
    saved = saved_as_read(parts, saved)
    saved = with_bare_symbols(parts, saved)
    return build_forward(parts, saved), build_backward(parts, saved)


def saved_as_read(parts: JointParts, saved: list[fx.Node]) -> list[fx.Node]:
    """`saved` with each value that the backward reads only through one view replaced by
    that view, where the forward computes the view too and passes it to a library kernel
    (a convolution, a matmul) while a fused loop makes the value (run no more in the
    backward: `parts.backward_nodes` is updated). The same storage is saved; no op moves.

    The cut saves a view's base (views have no bytes of their own), but a graph compiler
    lays out each saved output on its own. Inductor gives a 4-d saved value channels-last
    strides; for the NHWC base of a `permute` into a convolution those are the wrong
    dimensions, so the convolution's input became a second buffer, written by a kernel of
    its own (convnext: one more forward kernel). Saved as the view, it is one buffer in the
    layout the library kernel reads, as PyTorch's partitioner saves it. A value a library
    kernel makes (a convolution's output) keeps the layout that kernel gave it: saved as is.

        forward:  ln = layer_norm(x); p = ln.permute(0, 3, 1, 2); y = conv(p, w)
        backward: convolution_backward(g, ln.permute(0, 3, 1, 2), w)   saves ln  ->  saves p
    """
    outputs = {o for o in parts.fw_outputs + parts.grad_outputs if isinstance(o, fx.Node)}
    readers: dict[fx.Node, set] = {}
    for node in parts.backward_nodes:
        for arg in node.all_input_nodes:
            readers.setdefault(arg, set()).add(node)
    saved = list(saved)
    for i, base in enumerate(saved):
        while (base.op != "placeholder" and base not in outputs and isinstance(base.meta.get("val"), torch.Tensor)
               and len(readers.get(base, ())) == 1):
            (view,) = readers[base]
            if not (cost.is_view(view) and view.args[0] is base and view in parts.forward_nodes
                    and isinstance(view.meta.get("val"), torch.Tensor) and cost.fuses_inputs(base)
                    and any(u in parts.forward_nodes and not cost.fuses_inputs(u) for u in view.users)):
                break
            parts.backward_nodes = [n for n in parts.backward_nodes if n is not view]
            for arg in view.all_input_nodes:
                readers[arg].discard(view)
            base = saved[i] = view
    return list(dict.fromkeys(saved))


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
    unsafe = _unsafe_to_save(parts)
    save_bytes = {n: _INF if n in unsafe else _save_bytes(n, parts.forward_nodes) for n in nodes}
    pinned = _read_through_data_outputs(parts)
    costs = {n: _INF if cost.never_recompute(n) or n in pinned else cost.recompute_cost(n) for n in nodes}
    return CutProblem(parts, nodes, needed, set(parts.forward_nodes), save_bytes, costs)


def _unsafe_to_save(parts: JointParts) -> set[fx.Node]:
    """Values that share memory with an output (the caller may write into it before the
    backward; an input returned as an output, `joint_gm.meta["returned_inputs"]`, too) and
    that eager's backward does not read (default_partition's saved set, with
    the bases of saved views): saved, they would make the backward see such a write, which
    eager's never does (it raises for the ones it saved, computes right for the others). The
    cut saves something else. (Inputs stay free to keep: a write into an input the cut saved
    and eager did not raises autograd's in-place error, docs/limitations.md.)

        where(b > 0, b, b) returning b too: the mask is saved, not b (recomputing the mask
        from b would read b after the caller's `b.add_(1)`)
    """
    visible = set()
    returned = [parts.primals[i] for i in parts.joint.meta.get("returned_inputs", ()) if i < len(parts.primals)]
    for node in [*parts.fw_outputs, *returned]:
        val = node.meta.get("val") if isinstance(node, fx.Node) else None
        if isinstance(val, torch.Tensor):
            visible.add(StorageWeakRef(val.untyped_storage()))
    eager = set(saved_values(parts, parts.forward_nodes))
    for node in list(eager):  # a saved view is its base saved (views cannot be saved themselves)
        while cost.is_view(node) and node.args and isinstance(node.args[0], fx.Node):
            node = node.args[0]
            eager.add(node)
    unsafe = set()
    for node in parts.joint.graph.nodes:
        val = node.meta.get("val")
        if node not in eager and isinstance(val, torch.Tensor) and StorageWeakRef(val.untyped_storage()) in visible:
            unsafe.add(node)
    return unsafe


def _read_through_data_outputs(parts: JointParts) -> set[fx.Node]:
    """Values eager's backward reads (default_partition's saved set) whose memory the caller
    gets as a `.data` alias (an output the tracer tagged `own_version_counter`): eager's
    backward reads whatever the caller writes into it, unchecked; recomputed, they would not.
    Never recomputed, so saved: the memory is alive as that output anyway.

        v0 = a * w; return v0.cos(), v0.data    (mul is saved, not recomputed from a and w)
    """
    visible = {StorageWeakRef(n.meta["val"].untyped_storage()) for n in parts.fw_outputs
               if isinstance(n, fx.Node) and n.meta.get("own_version_counter")
               and isinstance(n.meta.get("val"), torch.Tensor)}
    if not visible:
        return set()
    pinned = set()
    for node in map(cost.storage_root, saved_values(parts, parts.forward_nodes)):  # a view is saved as its base
        val = node.meta.get("val")
        if node.op != "placeholder" and isinstance(val, torch.Tensor) and StorageWeakRef(val.untyped_storage()) in visible:
            pinned.add(node)
    return pinned


def _save_bytes(node: fx.Node, forward_nodes: set) -> float:
    """cost.value_bytes (0 for an input free to keep), or infinite for values that cannot be
    saved (views, tuples)."""
    if cost.is_view(node) or (not cost.is_size(node) and not isinstance(node.meta.get("val"), torch.Tensor)):
        return _INF
    if node.op == "placeholder" and cost.free_to_keep(node, forward_nodes):
        return 0
    return cost.value_bytes(node)


# -- choosing a cut ---------------------------------------------------------------------

def choose_cut(problem: CutProblem, memory_budget: float, budget_bytes: int | None) -> Cut:
    """The default cut if no bound asks for less, else the budget family's first record
    that fits (module docstring)."""
    if not 0 <= memory_budget <= 1:
        raise ValueError(f"memory_budget must lie in [0, 1], got {memory_budget}")
    top = default_cut(problem)
    if memory_budget >= 1 and budget_bytes is None:
        return top
    bound, asked = top.bytes, []
    if memory_budget < 1:
        nothing_recomputed = solve(problem, *_recompute_first(problem))
        bound = min(bound, int(memory_budget * nothing_recomputed.bytes))
        asked.append(f"memory_budget={memory_budget} of the {nothing_recomputed.bytes} bytes saved "
                     "when nothing is recomputed")
    if budget_bytes is not None:
        bound = min(bound, int(budget_bytes))
        asked.append(f"aotgrad.config.activation_memory_budget_bytes={budget_bytes}")
    if top.bytes <= bound:
        return top
    least = solve(problem, *_bytes_first(problem))
    if least.bytes > bound:
        most = solve(problem, *_recompute_first(problem)).bytes
        raise MemoryBudgetError(_unreachable_message(problem, least, bound, " and ".join(asked), most))
    return _BudgetFamily(problem, top, least).first_record_under(bound)


def default_cut(problem: CutProblem) -> Cut:
    """The minimum cut at DEFAULT_LAMBDA among the cuts that run no op twice that
    kept_by_default names (compute-bound ops, shrinking reductions, ops a fusing compiler does
    not fold into a loop, values a matmul of the backward reads): those are priced infinite
    for it, as PyTorch's partitioner bans their recomputation, so a cheap elementwise chain is
    recomputed from a value saved anyway rather than a new value saved. (Raising the price of
    every op until none of them runs twice made the elementwise chains dear too: MobileNetV2
    saved a mask per BatchNorm + ReLU6 beside the convolution output it reads.) Where no
    finite cut keeps them all (a value the backward needs that cannot be saved must run
    again), only compute-bound ops are kept, then none.
    A value only the backward reads (a layer norm's `x - mean`, say) costs MOVED_BYTES times
    its bytes to save: the forward would write it only to save it, where the backward computes
    it inside the loop that reads it. PyTorch's partitioner never moves such values into the
    forward; this cut still does where they are much smaller (a bool mask for a float input).

        (x.sin().cos() @ w).sin() -> saves cos (w's grad reads it) and mm, recomputes x.sin()
        conv -> bn -> relu6 -> conv -> saves the convolutions' outputs, recomputes bn, the mask
        layer_norm(x) @ w -> saves the norm's output and its mean and rstd: no var_mean again
        conv -> layer_norm -> conv -> saves the convolution's output and mean, not `x - mean`
    """
    p, q = DEFAULT_LAMBDA
    if not problem.needed:
        return solve(problem, p, q)
    moved = {n: b if n in problem.forward_required else MOVED_BYTES * b for n, b in problem.save_bytes.items()}
    for kept in (kept_by_default(problem), {n for n in problem.nodes if cost.is_compute_bound(n)}):
        # only ops the forward may save (a tuple through its getitems): banning one that
        # cannot be saved leaves no finite cut. Only ops the forward runs anyway: a value only
        # the backward reads is made once wherever it is, and banning it would move it into
        # the forward (PyTorch's partitioner bans forward ops only, too)
        banned = CutProblem(problem.parts, problem.nodes, problem.needed, problem.forward_required, moved,
                            {n: _INF if n in kept and n in problem.forward_required
                             and (problem.save_bytes[n] != _INF or _is_tuple(n)) else c
                             for n, c in problem.costs.items()})
        residual = banned.network.solve(p, q)
        if residual.value <= q * banned.network.total_bytes + p * banned.network.total_cost:
            return _cut_of(problem, frozenset(residual.source_side()))  # (bytes and costs: the problem's)
    return solve(problem, p, q)


def kept_by_default(problem: CutProblem) -> set[fx.Node]:
    """The values the default cut does not run twice: cost.kept_from_rerun's, and those a
    backward op reads without fusing them (_materialized_in_backward)."""
    materialized = _materialized_in_backward(problem)
    return {n for n in problem.nodes if n in materialized or cost.kept_from_rerun(n)}


def _materialized_in_backward(problem: CutProblem) -> set[fx.Node]:
    """Values a backward op that does not fuse its inputs (a matmul, say) would read: run
    again there, they are a kernel and a buffer of their own, not a few instructions inside
    their reader's loop, so the default cut saves them (as PyTorch's partitioner does).

        ln = layer_norm(x); y = ln @ w -> the weight's grad reads ln: saved, not rerun
        zeros = x.new_zeros(n)            -> never: it reads nothing, so running it again
                                             writes only what saving it would keep
    """
    materialized = set()
    for node in problem.nodes:
        if node.op != "call_function" or cost.is_view(node) or cost.writes_only(node):
            continue  # (a constructor, run again, writes what saving it would have kept)
        readers, seen = list(node.users), set()
        while readers:
            user = readers.pop()
            if user in seen:
                continue
            seen.add(user)
            if cost.is_view(user):
                readers.extend(user.users)
            elif user.op == "call_function" and user not in problem.forward_required and not cost.fuses_inputs(user):
                materialized.add(node)
                break
    return materialized


def _is_tuple(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), (tuple, list))


class _BudgetFamily:
    """The cuts a budget may get (module docstring), most bytes first, made on demand:
    [0] the default cut, [1 ..] the least-recompute cuts under k/20 of B_all, [-1] the
    fewest-bytes cut."""

    def __init__(self, problem: CutProblem, top: Cut, least: Cut):
        self.problem, self.top, self.least = problem, top, least
        most = solve(problem, *_recompute_first(problem)).bytes
        grid = [int((k / BUDGET_STEPS) * most) for k in range(BUDGET_STEPS - 1, 0, -1)]
        self.bounds = [b for b in grid if least.bytes <= b < top.bytes]
        self.size = len(self.bounds) + 2
        self.members: dict[int, Cut] = {}
        # a saved input not free to keep counts in bytes but not in the peak's start
        self.slack = sum(b for n, b in problem.save_bytes.items() if n.op == "placeholder" and b != _INF)

    def member(self, j: int) -> Cut:
        if j not in self.members:
            if j == 0:
                self.members[j] = self.top
            elif j == self.size - 1:
                self.members[j] = self.least
            else:
                self.members[j] = least_recompute_under(self.problem, self.bounds[j - 1], "")
        return self.members[j]

    def peak(self, j: int) -> int:
        return self.problem.schedule(self.member(j).saved).peak

    def first_record_under(self, bound: int) -> Cut:
        """The first member that fits `bound` whose peak is at most every peak above it.
        Members above are scanned only down to where their bytes alone (less the inputs'
        slack) reach the candidate's peak: none above that can peak lower."""
        first = next(j for j in range(1, self.size) if j == self.size - 1 or self.bounds[j - 1] <= bound)
        while first > 1 and self.member(first - 1).bytes <= bound:
            first -= 1
        first_peak, lowest_above = self.peak(first), _INF
        for j in range(first - 1, -1, -1):
            if self.member(j).bytes - self.slack >= first_peak:
                break
            lowest_above = min(lowest_above, self.peak(j))
        if first_peak <= lowest_above:
            return self.member(first)
        ceiling = lowest_above
        for j in range(first + 1, self.size):
            if self.member(j).bytes - self.slack <= ceiling and self.peak(j) <= ceiling:
                return self.member(j)
        best = min(range(first, self.size), key=lambda j: (self.peak(j), -self.member(j).bytes))
        log.debug("min-cut: every cut under %d bytes peaks higher in the backward than one saving more "
                 "(%d bytes at best, against %d); taking the lowest", bound, self.peak(best), ceiling)
        return self.member(best)


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
    if p <= 0 or q <= 0:
        return None
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

class _Network:
    """The flow graph of the module docstring, built once; each edge's capacity is
    `q * bytes + p * cost` (or infinite) at lambda = p / q."""

    def __init__(self, problem: CutProblem):
        self.vertex = {n: (2 + 2 * k, 3 + 2 * k) for k, n in enumerate(problem.nodes)}
        self.node_of = {v: n for n, pair in self.vertex.items() for v in pair}
        edges, self.byte_terms, self.cost_terms = [], [], []

        def add(u: int, v: int, size: float = _INF, price: float = 0) -> None:
            edges.append((u, v))
            self.byte_terms.append(size)
            self.cost_terms.append(price)

        placed = self.vertex
        for node in problem.nodes:
            node_in, node_out = placed[node]
            add(node_in, node_out, size=problem.save_bytes[node])
            once = node not in problem.forward_required
            price = problem.costs[node]
            if node.op != "call_function" or price == _INF:
                add(SOURCE, node_in)
            elif price > 0 and not once:
                add(SOURCE, node_in, size=0, price=price)
            for user in node.users:
                if user in placed:
                    add(node_out, placed[user][0])
            if once:
                for arg in node.all_input_nodes:
                    if arg in placed and arg not in problem.forward_required:
                        add(node_in, placed[arg][0])
            if node in problem.needed:
                add(node_out, SINK)
        self.flow = FlowNetwork(2 + 2 * len(problem.nodes), edges)
        self.total_bytes = _finite_sum(self.byte_terms)
        self.total_cost = _finite_sum(self.cost_terms)
        self.rank = {v: v for v in range(self.flow.num_vertices)}

    def solve(self, p: int, q: int) -> Residual:
        infinite = q * self.total_bytes + p * self.total_cost + 1     # more than any finite cut
        capacities = [infinite if b == _INF else q * b + p * c for b, c in zip(self.byte_terms, self.cost_terms)]
        return self.flow.solve(capacities, SOURCE, SINK)


def solve(problem: CutProblem, p: int, q: int) -> Cut:
    """The minimum cut at lambda = p / q with the smallest source side (the most recompute)."""
    key = (p, q)
    if key not in problem.solved:
        problem.solved[key] = _min_cut(problem, p, q)
    return problem.solved[key]


def _min_cut(problem: CutProblem, p: int, q: int) -> Cut:
    if not problem.needed:
        return Cut([], 0, 0)
    residual = problem.network.solve(p, q)
    problem.residuals[(p, q)] = residual
    cut = _cut_of(problem, frozenset(residual.source_side()))
    assert q * cut.bytes + p * cut.recompute == residual.value, (
        "a cut's value is not its bytes + lambda * recompute", cut, p, q, residual.value)
    return cut


def _cut_of(problem: CutProblem, side: frozenset) -> Cut:
    """The partition a cut describes: saved values, their bytes and the recompute it pays."""
    vertex = problem.network.vertex
    saved = [n for n in problem.nodes if vertex[n][0] in side and vertex[n][1] not in side]
    read = _read_by_backward(problem.parts, saved)
    saved = [n for n in saved if n in read]
    bytes_saved, recompute = _cut_costs(problem, side, problem.nodes)
    return Cut(saved, bytes_saved, recompute, side)


def _cut_costs(problem: CutProblem, side: frozenset | set, nodes) -> tuple[int, int]:
    """Saved bytes and recompute cost that the cut edges of `nodes` contribute."""
    vertex = problem.network.vertex
    bytes_saved = recompute = 0
    for node in nodes:
        node_in, node_out = vertex[node]
        if node_in not in side:
            recompute += problem.costs[node] if node in problem.forward_required else 0
        elif node_out not in side:
            bytes_saved += problem.save_bytes[node]
    return bytes_saved, recompute


def _walk_edge(problem: CutProblem, p: int, q: int):
    """Every minimum cut at lambda = p / q along one chain, as (source side, bytes,
    recompute), from the smallest source side (most recompute, fewest bytes) to the largest,
    one strongly connected group of the residual graph at a time. Of the groups free to go
    next, the earliest in the graph: keeping early forward values and recomputing late ones
    lets the backward, which starts with the late ones, free them soon."""
    solve(problem, p, q)
    if (p, q) not in problem.residuals:
        return
    residual, network = problem.residuals[(p, q)], problem.network
    side = set(residual.source_side())
    bytes_saved, recompute = _cut_costs(problem, side, problem.nodes)
    yield frozenset(side), bytes_saved, recompute
    for step in residual.closed_steps(network.rank):
        touched = {network.node_of[v] for v in step if v in network.node_of}
        before = _cut_costs(problem, side, touched)
        side.update(step)
        after = _cut_costs(problem, side, touched)
        bytes_saved, recompute = bytes_saved + after[0] - before[0], recompute + after[1] - before[1]
        yield frozenset(side), bytes_saved, recompute


def cut_along_edge(problem: CutProblem, p: int, q: int, bound: int) -> Cut | None:
    """Among the minimum cuts at lambda = p / q (a hull edge: all on one line), the one with
    the least recompute that saves at most `bound` bytes (along the chain bytes only grow,
    so: the last that fits)."""
    best = None
    for side, bytes_saved, _ in _walk_edge(problem, p, q):
        if bytes_saved > bound:
            break
        best = side
    return None if best is None else _cut_of(problem, best)


def backward_peak(problem: CutProblem, saved: list[fx.Node]) -> int:
    """The backward's peak memory (peak.py) if the forward saves `saved`, without building it."""
    return problem.schedule(saved).peak


def score_saved(problem: CutProblem, saved: list[fx.Node]) -> Cut:
    """Bytes and recompute of any partition given by its saved set (from any partitioner,
    its forward's saved outputs mapped to joint nodes): the bytes of the storages it keeps
    (a saved view counts as its storage's base, once; 0 for an input free to keep), and
    the recompute cost of every value that both the forward (its outputs' and the saved
    values' ancestors) and the backward (the grads' ancestors, down to saved values) compute.

        chain x.sin().sin(), saved [primals_1]: Cut([primals_1], bytes=0, recompute=cost(sin))
        exp then views, saved [exp, view of exp]: bytes(exp), once
    """
    read = _read_by_backward(problem.parts, saved)
    saved = [n for n in saved if n in read]
    in_forward = problem.forward_required | _ancestors(saved)
    backward = read - set(saved)
    recompute = sum(problem.costs[n] for n in backward
                    if n in in_forward and n in problem.costs and problem.costs[n] != _INF and n.op == "call_function")
    return Cut(saved, _bytes_of_storages(problem, saved), recompute)




def _bytes_of_storages(problem: CutProblem, saved: list[fx.Node]) -> int:
    """Saved bytes, a view (saved by another partitioner) counting as its base, once."""
    total = 0
    for root in {cost.storage_root(n) for n in saved}:
        size = problem.save_bytes.get(root, _INF)
        total += size if size != _INF else cost.value_bytes(root)
    return total


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
    return _closure(roots, lambda node: node.all_input_nodes)


def _descendants(roots) -> set:
    return _closure(roots, lambda node: node.users)


def _closure(roots, neighbours: Callable) -> set:
    """`roots` and every node reached from them through `neighbours`."""
    seen: set = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(neighbours(node))
    return seen

