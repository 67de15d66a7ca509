"""One backward call, captured as an FX graph of the whole backward.

In: a `Walk` and what `collect` gathered for it. Out: a GraphModule
`forward(self, inputs, sizes) -> (results, state, grads)` that does what the engine would: for each
step in the engine's order, sum the gradients that arrived, run the tensor hooks, retain_grad
and pre-hooks, the node itself (a built-in node's aten ops, traced on fake tensors with its
saved tensors read from `inputs`; anything else as a call out of the graph), the engine's
shape/dtype check of its results, the post-hooks, and send each result down its edge.
`results` are the gradients `autograd.grad` asked for; `state` is callout.py's (what keeps the
calls out in order and alive under torch.compile); `grads` the leaves' gradients, where the
graph leaves accumulating them until after it (`gm.meta["accumulated_after"]`: which leaves,
and whether each gradient may become `.grad` as is). The calls out read the backward call's
objects (leaves, ctxs, nodes, hook dicts) through callout.py, not as graph inputs, so Dynamo
never sees them; their sites are in `gm.meta["call_out_sites"]`. Each FX node's
`autograd_node` meta (and its printed comment) names the step: `MulBackward0 (NodeCall 3)`.
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx
from torch.utils._python_dispatch import _disable_current_modes

from aotgrad.compiled_autograd import callout, calls
from aotgrad.compiled_autograd.hooks import NO_HOOKS, tensor_positions
from aotgrad.compiled_autograd.collect import (
    ACCUMULATE, AOTGRAD, CUSTOM, OPAQUE, TRACED, UNDEFINED, Collected, StepPlan)
from aotgrad.compiled_autograd.dynamic import FORMULAS, Symbols
from aotgrad.compiled_autograd.saved import EagerFallback, layout_of
from aotgrad.compiled_autograd.walk import Walk
from aotgrad.runtime.backward import BackwardEnv
from aotgrad.runtime.lower import interpret
from aotgrad.trace import GraphRecorder


class _Builder:
    """The recorder plus the graph's list inputs; calls out of the graph are added here."""

    def __init__(self, symbols: Symbols):
        self.symbols = symbols
        self.fake_mode = symbols.fake_mode
        self.recorder = GraphRecorder(self.fake_mode)
        self.recorder.in_backward = True
        self.graph = self.recorder.graph
        self.inputs = self.graph.placeholder("inputs")
        self.sizes = self.graph.placeholder("sizes")
        self.state = self.graph.call_function(callout.start, ())
        self.sites: list[callout.Site] = []

    def recording(self):
        return _Recording(self)

    def empty(self, shape, dtype, device) -> torch.Tensor:
        with _disable_current_modes(), self.fake_mode:
            return torch.empty(shape, dtype=dtype, device=device)

    def input(self, index: int, value: torch.Tensor, start: int) -> torch.Tensor:
        with _disable_current_modes():
            fake = self.symbols.fake(value, start, f"inputs_{index}")
        node = self.graph.call_function(operator.getitem, (self.inputs, index))
        node.meta["val"] = fake
        self.recorder.bind(fake, node)
        self.recorder.symbolic.bind_input(node, fake)
        return fake

    def bind_sizes(self) -> None:
        """Symbols no tensor input carries are read from the `sizes` input."""
        for i in sorted(self.symbols.dynamic):
            value = self.symbols.size(i)
            if value.node.expr not in self.recorder.symbolic.sources:
                node = self.graph.call_function(operator.getitem, (self.sizes, i))
                node.meta["val"] = value
                self.recorder.symbolic.bind_input(node, value)

    def meta_shape(self, plan: StepPlan, slot: int, meta) -> tuple:
        return self.symbols.shape(plan.meta_dims[slot], len(meta.shape))

    @staticmethod
    def object(index: int) -> callout.Object:
        return callout.Object(index)

    def arg(self, value: Any) -> Any:
        if isinstance(value, (torch.Tensor, torch.SymInt)):
            return self.recorder.node_of(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.arg(v) for v in value)
        return value

    def call(self, function, args: tuple, out: Any = None) -> fx.Node:
        """A call out of the graph (callout.py): `function(*args)`, whose `out` (a fake tensor, a
        list of fakes/None, or None) is bound to the node's results."""
        site, tensors, sizes, promise = callout.site(function, args, out)
        self.sites.append(site)
        tensor_nodes = [self.recorder.node_of(t) for t in tensors]
        keep = tuple(k for k, node in enumerate(tensor_nodes) if _computed(node))
        flat = [] if out is None else [out] if isinstance(out, torch.Tensor) else [v for v in out if v is not None]
        return self.recorder.record_call(callout.call, (len(self.sites) - 1, self.state, tensors, sizes, promise, keep),
                                         flat, name=function.__name__)


def _computed(node: fx.Node) -> bool:
    """A tensor the graph computed (not one of its inputs, nor a call's result): a compiler may
    reuse its memory after its last use unless the graph outputs it (callout.py's `keep`)."""
    if node.op == "get_attr":
        return False
    if node.op != "call_function" or node.target is not operator.getitem:
        return True
    base = node.args[0]
    return not (base.op == "placeholder" or (base.op == "call_function" and base.target is callout.call))


class _Recording:
    def __init__(self, builder: _Builder):
        self.builder = builder

    def __enter__(self):
        self.no_grad = torch.no_grad()
        self.no_grad.__enter__()
        self.builder.fake_mode.__enter__()
        self.builder.recorder.__enter__()

    def __exit__(self, *exc):
        try:
            self.builder.recorder.__exit__(*exc)
        finally:
            self.builder.fake_mode.__exit__(*exc)
            self.no_grad.__exit__(*exc)


def _like(builder: _Builder, grads: list) -> list:
    return [None if g is None else builder.empty(g.shape, g.dtype, g.device) for g in grads]


class _Objects:
    """Where a step's objects sit in the graph's `objects` input (see collect.collect): its
    node, leaf or ctx (kinds that are called with one), then one entry per hook dict."""

    def __init__(self, plan: StepPlan, runs: bool):
        hooks = plan.hooks
        position = plan.first_object
        self.node = None
        if runs and plan.kind is not TRACED and plan.kind is not AOTGRAD:
            self.node, position = position, position + 1
        self.tensor = list(range(position, position + len(hooks.tensor)))
        position += len(hooks.tensor)
        self.retain = list(range(position, position + len(hooks.retain)))
        position += len(hooks.retain)
        self.pre = self.post = self.post_accumulate = None
        for kind in ("pre", "post", "post_accumulate"):
            if getattr(hooks, kind) is not None:
                setattr(self, kind, position)
                position += 1


def _before_node(builder: _Builder, plan: StepPlan, step, where: _Objects, grads: list, results: list) -> list:
    """Tensor hooks, retain_grad and captures (autograd.grad), then node pre-hooks."""
    hooks = plan.hooks
    if step.runs:  # a node that also runs hands autograd.grad its gradient before the hooks
        for slot, k in step.captures:
            results[k] = grads[slot]
    for (slot, _), index in zip(hooks.tensor, where.tensor):  # run with no gradient too, as in eager
        out = _like(builder, [grads[slot]])[0]
        builder.call(calls.tensor_hooks, (builder.object(index), grads[slot]), out)
        grads[slot] = out
    for (slot, _), index in zip(hooks.retain, where.retain):
        builder.call(calls.retain_grad, (builder.object(index), grads[slot]))
    if not step.runs:
        for slot, k in step.captures:
            results[k] = grads[slot]
        return grads
    if where.pre is not None:
        out = _like(builder, grads)
        builder.call(calls.pre_hooks, (builder.object(where.pre), grads), out)
        grads = out
    return grads


def _output_fakes(builder: _Builder, walk: Walk, plans: list, step) -> list:
    """Fakes for a node's results, from the input metadata of the node each one flows to."""
    out = []
    for edge in step.edges:
        if edge is None:
            out.append(None)
        else:
            meta = walk.steps[edge[0]].node._input_metadata[edge[1]]
            out.append(builder.empty(builder.meta_shape(plans[edge[0]], edge[1], meta), meta.dtype, meta.device))
    return out


def _symbolic_values(builder: _Builder, plan: StepPlan) -> dict | None:
    """A built-in node's saved sizes as the graph's symbols, if any of them is one."""
    dynamic = builder.symbols.dynamic
    if not any(i in dynamic for start, n, _ in plan.value_dims.values() for i in range(start, start + n)):
        return None
    values = {}
    for attr, (start, n, is_list) in plan.value_dims.items():
        shape = builder.symbols.shape(start, n)
        values[attr] = list(shape) if is_list else shape[0]
    return values


# Nodes run as is that return undefined gradients when every gradient they get is undefined
# (as built-in nodes do), so the graph passes None on instead of calling them.
UNDEFINED_IN_UNDEFINED_OUT = {"torch::autograd::CopySlices", "torch::autograd::CopyBackwards"}


def _run_node(builder: _Builder, walk: Walk, plans: list, plan: StepPlan, step, where: _Objects, grads: list,
              fakes: list, incoming: dict) -> list:
    node = step.node
    if plan.kind is TRACED:
        for slot, fake in zip(plan.saved, fakes):
            if slot is not None:
                slot.fake = fake
        values = _symbolic_values(builder, plan)
        formula = FORMULAS.get(node.name()) if values is not None else None
        try:
            with builder.recording():
                if formula is not None:  # the node's own formula, fed the symbols
                    outputs = formula[1](node, grads, values)
                else:
                    outputs = calls.as_list(node(*grads))
        finally:
            for slot in plan.saved:
                if slot is not None:
                    slot.fake = None
        return outputs
    if plan.kind is ACCUMULATE:
        post = None if where.post_accumulate is None else builder.object(where.post_accumulate)
        # may it take the graph's tensor as `.grad`? decided when the graph is complete (_exclusive)
        builder.call(calls.accumulate_grad, (builder.object(where.node), grads[0], callout.WhenRunAsPython(False),
                                             post))
        return []
    if plan.kind is AOTGRAD:
        return _aotgrad_backward(builder, node, grads, fakes)
    if plan.kind is UNDEFINED or (plan.kind is OPAQUE and node.name() in UNDEFINED_IN_UNDEFINED_OUT
                                  and all(g is None for g in grads)):
        return [None] * len(node.next_functions)
    out = _output_fakes(builder, walk, plans, step)
    checks = _checks(builder, walk, plans, step, plan, incoming)
    if plan.kind is CUSTOM:
        positions = tensor_positions(node) or tuple(range(len(node.next_functions)))
        builder.call(calls.custom_backward, (builder.object(where.node), fakes, grads, positions, checks), out)
    else:
        frees = _frees_through_engine(walk, plans, step, plan)
        builder.call(calls.run_node, (builder.object(where.node), grads, checks, frees), out)
    return out


def _frees_through_engine(walk: Walk, plans: list, step, plan: StepPlan) -> bool:
    """May a node run as is run inside PyTorch's engine, to free what it saved as eager does
    (calls._run_in_engine)? Only a built-in node, whose saved tensors Python can read
    (`grad_fn._saved_self`: a prod, a node whose tensors the user's hooks hold; CopySlices and
    C++ custom Functions show none), with no hooks of its own (the engine would run them a
    second time), whose results flow into nodes without tensor hooks or retain_grad (the
    engine's capture there runs those), none of which leads to another (the engine would run
    it to reach that one: `x.exp() * x`)."""
    if not layout_of(type(step.node)).tensors or plan.hooks.shape() != NO_HOOKS.shape():
        return False
    targets = {edge[0] for edge in step.edges if edge is not None}
    if any(plans[target].hooks.tensor or plans[target].hooks.retain for target in targets):
        return False
    return not _leads_to_another(walk, targets)


def _leads_to_another(walk: Walk, targets: set) -> bool:
    """Does a path from one of the steps `targets` reach another of them? (The steps that run
    know all their edges on such paths: walk.py leaves out only children that lead nowhere the
    backward goes, and a step that does not run leads to none.)"""
    stack = [edge[0] for target in targets for edge in walk.steps[target].edges if edge is not None]
    seen: set = set()
    while stack:
        index = stack.pop()
        if index in targets:
            return True
        if index not in seen:
            seen.add(index)
            stack.extend(edge[0] for edge in walk.steps[index].edges if edge is not None)
    return False


def _checks(builder: _Builder, walk: Walk, plans: list, step, plan: StepPlan, incoming: dict) -> tuple:
    """For a node run out of the graph: per result, `expect_grad`'s arguments for the input it
    flows to (None where it flows nowhere)."""
    name = step.node.name()
    checks = []
    for i, edge in enumerate(step.edges):
        if edge is None:
            checks.append(None)
            continue
        target, slot = edge
        meta = walk.steps[target].node._input_metadata[slot]
        shape = builder.meta_shape(plans[target], slot, meta)
        # straight into `.grad` with nothing else summed there: None may come (nothing accumulates)
        may_be_none = walk.steps[target].node.name() == "torch::autograd::AccumulateGrad" and \
            incoming[edge] == 1 and not plan.hooks.post
        checks.append((name, i, tuple(shape), meta.dtype, meta.device, may_be_none))
    return tuple(checks)


class _Refused(Exception):
    """A gradient into an output of aotgrad's function that cannot take one (its message)."""


class _CapturedBackward(BackwardEnv):
    """aotgrad's backward steps run inside the capture: on the fakes of the saved values, with
    the backward graph's (or its variant's) aten ops recorded into the capture's graph."""

    def __init__(self, ctx, grads: list, saved: list):
        super().__init__(ctx, tuple(grads))
        self.saved, self.graph = saved, self.plan.backward_graph

    def refuse(self, message: str) -> None:
        raise _Refused(message)

    def choose(self, absent: tuple[int, ...]) -> None:
        with _disable_current_modes():  # graph surgery on the partition's fakes, not recorded
            variant = self.plan.variants.graph_without(absent)
        if variant is not None:
            self.graph, self.absent = variant, absent

    def read_saved(self) -> list:
        return self.saved

    def call(self, args: list) -> Any:
        return fx.Interpreter(self.graph).run(*args)


def _aotgrad_backward(builder: _Builder, ctx, grads: list, saved: list) -> list:
    """aotgrad's own compiled function: its backward's steps (runtime/backward.py) on the
    fakes, its graph's aten ops recorded. One result per tensor argument of the function (its
    first argument, the plan, is not one)."""
    env = _CapturedBackward(ctx, grads, saved)
    try:
        with builder.recording():
            interpret(ctx.plan.backward_steps, env)
    except _Refused as refused:  # CompiledFunction.backward raises here (a gradient into what cannot take one)
        builder.call(calls.raise_error, (str(refused),))
        return [None] * len(ctx.next_functions)
    positions = tensor_positions(ctx) or range(1, len(ctx.next_functions) + 1)  # after the plan
    return [env.input_grads[p - 1] for p in positions]


def _accumulate_after_graph(graph: fx.Graph, sites: list) -> tuple[list, tuple]:
    """Accumulation into `.grad` after the graph instead of by a call out each (a call out costs
    what an op of its own costs, ~50 us with torch.compile), where nothing could see the
    difference: every call out of the graph is an AccumulateGrad without post-accumulate hooks
    (or a retain_grad). A hook or a custom backward may read a `.grad` or raise before a later
    accumulation, so with one of them each accumulation stays a call out in its place. The
    gradients become results of the graph; calls.accumulate_after_graph accumulates them, taking
    one as a fresh `.grad` where nothing else in the graph reads it (_exclusive). Returns the
    leaves' object indices and whether each gradient may be taken.

        before: mm = aten.mm(...); call(accumulate_grad, objects[0], [mm]); call(..., objects[1], [t])
        after:  mm = aten.mm(...); output(..., (mm, t))   # objects[0] takes mm, objects[1] copies t
    """
    if not all((site.function is calls.accumulate_grad and site.args[3] is None) or site.function is calls.retain_grad
               for site in sites):
        return [], ()
    leaves, grads, exclusive = [], [], []
    for node in list(graph.nodes):
        if node.target is not callout.call or sites[node.args[0]].function is not calls.accumulate_grad:
            continue
        if node.args[2]:  # (no gradient: nothing accumulates)
            grad = node.args[2][0]
            leaves.append(sites[node.args[0]].args[0].index)
            grads.append(grad)
            exclusive.append(_exclusive(grad))  # (its users: this call, and the results if it is one)
        graph.erase_node(node)
    output = graph.output_node()
    results, state, _ = output.args[0]
    output.args = ((results, state, tuple(grads)),)
    return leaves, tuple(exclusive)


def _mark_exclusive_gradients(graph: fx.Graph, sites: list) -> None:
    """AccumulateGrad may take the graph's own tensor as a fresh `.grad` (eager does when nothing
    else holds it) only if nothing else in the graph reads it or any tensor it views: an
    aten op's result whose only user is this accumulation, through single-user views (and
    only when the graph runs as Python: callout.WhenRunAsPython)."""
    for node in graph.nodes:
        if node.target is callout.call:
            site = sites[node.args[0]]
            if site.function is calls.accumulate_grad and node.args[2]:
                variable, grad, _, hooks = site.args
                site.args = (variable, grad, callout.WhenRunAsPython(_exclusive(node.args[2][0])), hooks)


def _order_around_call_outs(graph: fx.Graph) -> None:
    """Each call out of the graph also takes the tensors computed before it that are used after
    it: a compiler then computes them before the call, as eager does, and not after a hook that
    changed what they read (an optimizer step in a post-accumulate hook updates a weight that
    the next layer's gradient was computed from). Run as Python, the call ignores them.

    before: mm = aten.mm(grad, weight); call(accumulate weight.grad, [mm_1]); add = mm + ...
    after:  ...                         call(accumulate weight.grad, [mm_1, mm]); ...
    """
    nodes = list(graph.nodes)
    position = {node: i for i, node in enumerate(nodes)}
    last_use = {node: max((position[user] for user in node.users), default=-1) for node in nodes}
    live: dict[fx.Node, None] = {}  # computed tensors defined so far, in order
    for i, node in enumerate(nodes):
        if node.op == "call_function" and node.target is callout.call:
            site, state, tensors, *rest = node.args
            after = [v for v in live if last_use[v] > i and v not in tensors]
            if after:
                node.args = (site, state, [*tensors, *after], *rest)
        if isinstance(node.meta.get("val"), torch.Tensor) and _computed(node) and \
                not (node.op == "call_function" and node.target is callout.call):
            live[node] = None
        for done in [v for v in live if last_use[v] <= i]:
            del live[done]


def _exclusive(node: fx.Node) -> bool:
    """Whether `node`'s tensor is read by one user only and is an op's fresh result, or a view
    of one through single-user views: AccumulateGrad may then take it as `.grad`. A result of a
    multi-output op (convolution_backward's weight gradient) counts where its getitem is the
    only one of that index and the schema says that result aliases nothing."""
    while True:
        if len(node.users) == 1 and _fresh_item(node):
            return True
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) or len(node.users) != 1:
            return False
        if not node.target.is_view:
            return True
        base = node.args[0]
        if not isinstance(base, fx.Node):
            return False
        node = base


def _fresh_item(node: fx.Node) -> bool:
    """`op(...)[i]` where op is an aten op that is not a view, its i-th result aliases nothing
    (no alias annotation in its schema) and no other getitem reads that result."""
    if node.op != "call_function" or node.target is not operator.getitem:
        return False
    tuple_node, index = node.args
    if not (isinstance(tuple_node, fx.Node) and tuple_node.op == "call_function" and isinstance(index, int)
            and isinstance(tuple_node.target, torch._ops.OpOverload) and not tuple_node.target.is_view):
        return False
    returns = tuple_node.target._schema.returns  # (a list result, Tensor[], is indexed by element: not here)
    if not 0 <= index < len(returns) or returns[index].alias_info is not None or \
            not isinstance(returns[index].type, torch._C.TensorType) or len(returns) < 2:
        return False
    users = tuple_node.users
    return all(user.target is operator.getitem for user in users) and sum(user.args[1] == index for user in users) == 1


def _validated(builder: _Builder, walk: Walk, plans: list, step, plan: StepPlan, outputs: list) -> list:
    """A traced node's results checked as the engine's validate_outputs checks them, before the
    node's post hooks (the check is traced too; nodes run out of the graph check their own)."""
    if plan.kind is not TRACED and plan.kind is not AOTGRAD:
        return outputs
    name = step.node.name()
    checked = list(outputs)
    for i, (edge, grad) in enumerate(zip(step.edges, outputs)):
        if edge is None or grad is None:
            continue
        target, slot = edge
        meta = walk.steps[target].node._input_metadata[slot]
        shape = builder.meta_shape(plans[target], slot, meta)
        with builder.recording():
            checked[i] = calls.check_grad(name, i, grad, shape, meta.dtype, meta.device)
    return checked


def _send(step, outputs: list, buffers: list, builder: _Builder) -> None:
    """Each result down its edge, summed where paths meet."""
    for edge, grad in zip(step.edges, outputs):
        if edge is None or grad is None:
            continue
        target, slot = edge
        buffer = buffers[target]
        if buffer[slot] is None:
            buffer[slot] = grad
        else:
            with builder.recording():
                buffer[slot] = buffer[slot] + grad


def _label(after: fx.Node, label: str) -> None:
    node = after.next
    while node.op != "root":
        node.meta["autograd_node"] = label
        node = node.next


def capture(walk: Walk, collected: Collected, dynamic: frozenset = frozenset()) -> tuple[fx.GraphModule, Any]:
    """The whole backward as one graph (see the module docstring), with symbols at the
    `dynamic` size positions; and the guards on them (None without symbols)."""
    symbols = Symbols(collected.sizes.values, dynamic)
    builder = _Builder(symbols)
    fakes = [None if v is None else builder.input(i, v, collected.input_dims[i])
             for i, v in enumerate(collected.inputs)]
    builder.graph.call_function(calls.clear, (builder.inputs,))
    builder.bind_sizes()
    buffers = [[None] * len(step.node._input_metadata) for step in walk.steps]
    for k, root in enumerate(walk.roots):  # GraphRoot's results, checked as the engine checks them
        if root is not None and fakes[k] is not None:
            target, slot = root
            meta = walk.steps[target].node._input_metadata[slot]
            shape = builder.meta_shape(collected.plans[target], slot, meta)
            with builder.recording():
                grad = calls.check_grad("GraphRoot", k, fakes[k], shape, meta.dtype, meta.device)
                if buffers[target][slot] is None:
                    buffers[target][slot] = grad
                else:
                    buffers[target][slot] = buffers[target][slot] + grad
    results: list = [None] * walk.num_results
    incoming: dict = {}
    for step in walk.steps:
        for edge in step.edges:
            if edge is not None:
                incoming[edge] = incoming.get(edge, 0) + 1
    for step, plan, buffer in zip(walk.steps, collected.plans, buffers):
        last = builder.graph._root.prev
        where = _Objects(plan, step.runs)
        grads = _before_node(builder, plan, step, where, list(buffer), results)
        if step.runs:
            lifted = iter(fakes[plan.first_input:])
            saved = [None if slot is None else next(lifted) for slot in plan.saved]
            outputs = _run_node(builder, walk, collected.plans, plan, step, where, grads, saved, incoming)
            outputs = _validated(builder, walk, collected.plans, step, plan, outputs)
            if where.post is not None:
                out = _like(builder, outputs)
                builder.call(calls.post_hooks, (builder.object(where.post), outputs, grads), out)
                outputs = out
            _send(step, outputs, buffers, builder)
        _label(last, plan.label)
    builder.graph.output((tuple(builder.arg(r) if r is not None else None for r in results), builder.state, ()))
    leaves, may_steal = _accumulate_after_graph(builder.graph, builder.sites)
    _mark_exclusive_gradients(builder.graph, builder.sites)
    _order_around_call_outs(builder.graph)
    for node in builder.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.layout is not torch.strided:
            raise EagerFallback(f"a {val.layout} gradient or saved tensor ({node.name}): aotgrad traces dense "
                                "tensors only")
    for node in list(builder.sizes.users):  # sizes the graph did not read after all
        if not node.users:
            builder.graph.erase_node(node)
    root = torch.nn.Module()
    for name, value in builder.recorder.constants.items():
        setattr(root, name, value)
    gm = fx.GraphModule(root, builder.graph, class_name="CompiledAutogradGraph")
    gm.meta["call_out_sites"] = builder.sites
    gm.meta["accumulated_after"] = (leaves, may_steal)
    return gm, (symbols.guards() if dynamic else None)
