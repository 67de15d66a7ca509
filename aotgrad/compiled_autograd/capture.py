"""One backward call, captured as an FX graph of the whole backward.

In: a `Walk` and what `collect` gathered for it. Out: a GraphModule
`forward(self, inputs, objects)` that does what the engine would: for each step in the
engine's order, sum the gradients that arrived, run the tensor hooks, retain_grad and
pre-hooks, the node itself (a built-in node's aten ops, traced on fake tensors with its
saved tensors read from `inputs`; anything else as a call out of the graph), the
post-hooks, and send each result down its edge after the engine's shape/dtype check.
Returns the gradients `autograd.grad` asked for. Each FX node's `autograd_node` meta (and
its printed comment) names the step: `MulBackward0 (NodeCall 3)`.
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import _disable_current_modes

from aotgrad.compiled_autograd import calls
from aotgrad.compiled_autograd.hooks import tensor_positions
from aotgrad.compiled_autograd.collect import ACCUMULATE, CUSTOM, TRACED, Collected, StepPlan
from aotgrad.compiled_autograd.walk import Walk
from aotgrad.trace import GraphRecorder


class _Builder:
    """The recorder plus the graph's two list inputs; calls out of the graph are added here."""

    def __init__(self, fake_mode: FakeTensorMode):
        self.fake_mode = fake_mode
        self.recorder = GraphRecorder(fake_mode)
        self.recorder.in_backward = True
        self.graph = self.recorder.graph
        self.inputs = self.graph.placeholder("inputs")
        self.objects = self.graph.placeholder("objects")
        self._object_nodes: dict[int, fx.Node] = {}

    def recording(self):
        return _Recording(self)

    def fake(self, value: torch.Tensor) -> torch.Tensor:
        with _disable_current_modes():
            return self.fake_mode.from_tensor(value)

    def empty(self, shape, dtype, device) -> torch.Tensor:
        with _disable_current_modes(), self.fake_mode:
            return torch.empty(shape, dtype=dtype, device=device)

    def input(self, index: int, value: torch.Tensor) -> torch.Tensor:
        fake = self.fake(value)
        node = self.graph.call_function(operator.getitem, (self.inputs, index))
        node.meta["val"] = fake
        self.recorder.bind(fake, node)
        self.recorder.symbolic.bind_input(node, fake)
        return fake

    def object(self, index: int) -> fx.Node:
        node = self._object_nodes.get(index)
        if node is None:
            node = self._object_nodes[index] = self.graph.call_function(operator.getitem, (self.objects, index))
        return node

    def arg(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self.recorder.node_of(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.arg(v) for v in value)
        return value

    def call(self, target, args: tuple, out: Any = None) -> fx.Node:
        """A call out of the graph; `out` (a fake tensor, a list of fakes/None, or None) is what
        it returns, bound to the node (list items through getitem nodes)."""
        node = self.graph.call_function(target, self.arg(args))
        if isinstance(out, torch.Tensor):
            node.meta["val"] = out
            self.recorder.bind(out, node)
        elif isinstance(out, list):
            for i, item in enumerate(out):
                if item is not None:
                    getitem = self.graph.call_function(operator.getitem, (node, i))
                    getitem.meta["val"] = item
                    self.recorder.bind(item, getitem)
        return node


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


def _before_node(builder: _Builder, plan: StepPlan, step, grads: list, objects: list, results: list) -> list:
    """Tensor hooks, retain_grad and captures (autograd.grad), then node pre-hooks."""
    hooks = plan.hooks
    if step.runs:  # a node that also runs hands autograd.grad its gradient before the hooks
        for slot, k in step.captures:
            results[k] = grads[slot]
    position = plan.first_object + (0 if plan.kind is TRACED or not step.runs else 1)
    for slot, tensor_hooks in hooks.tensor:
        hook_nodes = [builder.object(position + i) for i in range(len(tensor_hooks))]
        position += len(tensor_hooks)
        if grads[slot] is not None:
            out = _like(builder, [grads[slot]])[0]
            builder.call(calls.tensor_hooks, (hook_nodes, grads[slot]), out)
            grads[slot] = out
    for slot, _ in hooks.retain:
        builder.call(calls.retain_grad, (builder.object(position), grads[slot]))
        position += 1
    if not step.runs:
        for slot, k in step.captures:
            results[k] = grads[slot]
        return grads
    if hooks.pre:
        hook_nodes = [builder.object(position + i) for i in range(len(hooks.pre))]
        out = _like(builder, grads)
        builder.call(calls.pre_hooks, (hook_nodes, grads), out)
        grads = out
    return grads


def _hook_position(plan: StepPlan, kind_count: int) -> int:
    hooks = plan.hooks
    start = plan.first_object + (0 if plan.kind is TRACED else 1)
    return start + sum(len(h) for _, h in hooks.tensor) + len(hooks.retain) + kind_count


def _output_fakes(builder: _Builder, walk: Walk, step) -> list:
    """Fakes for a node's results, from the input metadata of the node each one flows to."""
    out = []
    for edge in step.edges:
        if edge is None:
            out.append(None)
        else:
            meta = walk.steps[edge[0]].node._input_metadata[edge[1]]
            out.append(builder.empty(meta.shape, meta.dtype, meta.device))
    return out


def _run_node(builder: _Builder, walk: Walk, plan: StepPlan, step, grads: list, fakes: list) -> list:
    node = step.node
    if plan.kind is TRACED:
        for slot, fake in zip(plan.saved, fakes):
            slot.fake = fake
        try:
            with builder.recording():
                outputs = calls.as_list(node(*grads))
        finally:
            for slot in plan.saved:
                slot.fake = None
        return outputs
    if plan.kind is ACCUMULATE:
        hooks = plan.hooks
        leaf = builder.object(plan.first_object)
        post = [builder.object(_hook_position(plan, len(hooks.pre) + len(hooks.post)) + i)
                for i in range(len(hooks.post_accumulate))]
        may_steal = grads[0] is not None and _is_graph_temporary(builder, grads[0])
        builder.call(calls.accumulate_grad, (leaf, grads[0], may_steal, post))
        return []
    out = _output_fakes(builder, walk, step)
    if plan.kind is CUSTOM:
        positions = tensor_positions(node) or tuple(range(len(node.next_functions)))
        builder.call(calls.custom_backward, (builder.object(plan.first_object), fakes, grads, positions), out)
    else:
        builder.call(calls.run_node, (builder.object(plan.first_object), grads), out)
    return out


def _is_graph_temporary(builder: _Builder, grad: torch.Tensor) -> bool:
    """Made by an aten op inside the graph (not an input, not a hook's or a call's result)."""
    node = builder.recorder.node_of(grad)
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)


def _send(builder: _Builder, walk: Walk, step, plan: StepPlan, outputs: list, buffers: list) -> None:
    """Each result down its edge, checked as the engine checks it, summed where paths meet."""
    name = step.node.name()
    for i, (edge, grad) in enumerate(zip(step.edges, outputs)):
        if edge is None or grad is None:
            continue
        target, slot = edge
        meta = walk.steps[target].node._input_metadata[slot]
        if plan.kind is TRACED:
            with builder.recording():
                grad = calls.check_grad(name, i, grad, meta.shape, meta.dtype)
        else:
            out = builder.empty(meta.shape, meta.dtype, meta.device)
            builder.call(calls.expect_grad, (name, i, grad, tuple(meta.shape), meta.dtype), out)
            grad = out
        buffer = buffers[target]
        if buffer[slot] is None:
            buffer[slot] = grad
        else:
            with builder.recording():
                buffer[slot] = buffer[slot] + grad


def _label(graph: fx.Graph, after: fx.Node, label: str) -> None:
    node = after.next
    while node.op != "root":
        node.meta["autograd_node"] = label
        node = node.next


def capture(walk: Walk, collected: Collected) -> fx.GraphModule:
    """The whole backward as one graph (see the module docstring)."""
    builder = _Builder(FakeTensorMode(allow_non_fake_inputs=False))
    fakes = [None if v is None else builder.input(i, v) for i, v in enumerate(collected.inputs)]
    builder.graph.call_function(calls.clear, (builder.inputs,))
    buffers = [[None] * step.num_inputs for step in walk.steps]
    for k, root in enumerate(walk.roots):
        if root is not None and fakes[k] is not None:
            target, slot = root
            if buffers[target][slot] is None:
                buffers[target][slot] = fakes[k]
            else:
                with builder.recording():
                    buffers[target][slot] = buffers[target][slot] + fakes[k]
    results: list = [None] * walk.num_results
    for step, plan, buffer in zip(walk.steps, collected.plans, buffers):
        last = builder.graph._root.prev
        grads = _before_node(builder, plan, step, list(buffer), collected.objects, results)
        if step.runs:
            saved = fakes[plan.first_input:plan.first_input + len(plan.saved)]
            outputs = _run_node(builder, walk, plan, step, grads, saved)
            if plan.hooks.post:
                hook_nodes = [builder.object(_hook_position(plan, len(plan.hooks.pre)) + i)
                              for i in range(len(plan.hooks.post))]
                out = _like(builder, outputs)
                builder.call(calls.post_hooks, (hook_nodes, outputs, grads), out)
                outputs = out
            _send(builder, walk, step, plan, outputs, buffers)
        _label(builder.graph, last, plan.label)
    builder.graph.output(tuple(builder.arg(r) if r is not None else None for r in results))
    root = torch.nn.Module()
    for name, value in builder.recorder.constants.items():
        setattr(root, name, value)
    return fx.GraphModule(root, builder.graph, class_name="CompiledAutogradGraph")
