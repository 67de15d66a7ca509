"""Everything one backward call hands its captured graph, and the key of that graph.

In: a `Walk` and the root gradients. Out: `Collected`: for each step how aotgrad runs its
node (`StepPlan`: traced into aten ops, a custom Function's backward, AccumulateGrad, or
run as is), the graph's two input lists (`inputs`: root gradients, then saved tensors;
`objects`: leaves, ctxs, nodes and hook functions) and the cache key: node types, edges,
hooks (how many, where; not which), saved non-tensor values and tensor metadata.
"""
from __future__ import annotations

from dataclasses import dataclass

from aotgrad.compiled_autograd import hooks as hook_lookup
from aotgrad.compiled_autograd.hooks import tensor_positions
from aotgrad.compiled_autograd.saved import Slot, layout_of, saved_values, take, take_tensors
from aotgrad.compiled_autograd.walk import Walk

ACCUMULATE = "accumulate"   # AccumulateGrad: into `.grad`, then post-accumulate hooks
TRACED = "traced"           # a built-in C++ node: its aten ops go into the graph
CUSTOM = "custom"           # a Python autograd.Function: its backward is called from the graph
OPAQUE = "opaque"           # any other node (CopySlices, C++ custom Functions): called as is

_kinds: dict[type, str] = {}


def kind_of(node) -> str:
    node_type = type(node)
    kind = _kinds.get(node_type)
    if kind is None:
        name = node.name()
        if hasattr(node, "_forward_cls"):
            return CUSTOM  # classes made on the fly would fill a table
        elif name == "torch::autograd::AccumulateGrad":
            kind = ACCUMULATE
        elif "::" in name:
            kind = OPAQUE
        else:
            kind = TRACED
        _kinds[node_type] = kind
    return kind


class EagerFallback(Exception):
    """This backward cannot be captured; the eager engine runs it (the reason is logged)."""


@dataclass
class StepPlan:
    kind: str
    hooks: hook_lookup.NodeHooks
    saved: list            # slots lifted into the graph's inputs, in order
    first_input: int       # index of the first of them in `inputs`
    first_object: int      # index of this step's first object (leaf/ctx/node, then hooks)
    label: str             # "<name> (NodeCall k)"


@dataclass
class Collected:
    plans: list[StepPlan]
    inputs: list           # real tensors
    objects: list
    slots: list[Slot]      # every saved tensor taken over (released after the run)
    key: tuple


def tensor_meta(t) -> tuple | None:
    if t is None:
        return None
    return (t.dtype, t.device, tuple(t.shape), t.stride())


def _step_key(step, kind: str, node, hooks: hook_lookup.NodeHooks, saved: list, values: tuple) -> tuple:
    node_class = node._forward_cls if kind is CUSTOM else type(node)
    metadata = tuple((tuple(m.shape), m.dtype) for m in node._input_metadata)
    return (node_class, step.runs, tuple(step.edges), tuple(step.captures), hooks.shape(), values,
            tuple(None if s is None else tensor_meta(s.value) for s in saved), metadata)


def collect(walk: Walk, root_grads: list, accumulate_grad: bool) -> Collected:
    probe = hook_lookup.node_hooks_may_exist()
    retaining = hook_lookup.retaining_by_node()
    inputs = list(root_grads)
    objects: list = []
    slots: list = []
    plans: list = []
    key: list = [accumulate_grad, walk.num_results, tuple(walk.roots), tuple(tensor_meta(g) for g in root_grads)]
    for index, step in enumerate(walk.steps, start=1):
        node = step.node
        kind = kind_of(node)
        leaf = node.variable if kind is ACCUMULATE else None
        node_hooks = hook_lookup.hooks_of(node, leaf, probe, retaining)
        first_input, first_object = len(inputs), len(objects)
        saved: list = []
        values: tuple = ()
        if step.runs:
            if kind is TRACED:
                layout = layout_of(type(node))
                saved = take_tensors(node, layout.tensors)
                values = saved_values(node, layout.values)
            elif kind is CUSTOM:
                if len(node.next_functions) != len(node.needs_input_grad) and tensor_positions(node) is None:
                    raise EagerFallback(f"custom Function {node.name()} has non-tensor inputs and was applied "
                                        "before aotgrad was imported: which results go to which input is unknown")
                node.saved_tensors  # autograd's check that none was modified in place
                saved = [take(raw) for raw in node._raw_saved_tensors]
                objects.append(node)
            elif kind is ACCUMULATE:
                objects.append(leaf)
            else:
                objects.append(node)
        lifted = [s for s in saved if s is not None]
        slots.extend(lifted)
        inputs.extend(s.value for s in lifted)
        objects.extend(node_hooks.callables())
        plans.append(StepPlan(kind, node_hooks, lifted, first_input, first_object, f"{node.name()} (NodeCall {index})"))
        key.append(_step_key(step, kind, node, node_hooks, saved, values))
    return Collected(plans, inputs, objects, slots, tuple(key))


def release(collected: Collected) -> None:
    for slot in collected.slots:
        slot.release()
