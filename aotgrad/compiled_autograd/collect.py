"""Everything one backward call hands its captured graph, and the key of that graph.

In: a `Walk`, the root gradients and the `inputs=` edges. Out: `Collected`: for each step how
aotgrad runs its node (`StepPlan`: traced into aten ops, a custom Function's backward,
AccumulateGrad, or run as is), the graph's two input lists (`inputs`: root gradients, then saved
tensors; `objects`: leaves, ctxs, nodes and hook functions) and the cache key. What the key holds,
and how a later backward is checked against it, is key.py's list of parts; this module reads
them in order.
"""
from __future__ import annotations

from dataclasses import dataclass

from aotgrad.compiled_autograd import hooks as hook_lookup
from aotgrad.compiled_autograd import key as parts
from aotgrad.compiled_autograd.dynamic import SizeList
from aotgrad.compiled_autograd.kinds import (  # noqa: F401 (the kinds, read by capture.py from here)
    ACCUMULATE, AOTGRAD, CUSTOM, OPAQUE, TRACED, UNDEFINED, step_kind)
from aotgrad.compiled_autograd.saved import EagerFallback, Slot
from aotgrad.compiled_autograd.walk import Walk


class StepPlan:
    """How one step runs, and where its values sit in the graph's inputs and in the sizes."""
    __slots__ = ("kind", "hooks", "saved", "first_input", "first_object", "node", "index", "meta_dims",
                 "value_dims")

    def __init__(self, kind: str, first_input: int, first_object: int, node, index: int):
        self.kind = kind
        self.hooks = hook_lookup.NO_HOOKS  # (key.Hooks reads them)
        self.saved: list = []          # the node's saved tensors in order (None: nothing saved there);
        #                                the others are lifted into the graph's inputs from `first_input` on
        self.first_input = first_input
        self.first_object = first_object  # its first object (leaf/ctx/node, then hook dicts)
        self.node = node
        self.index = index             # its NodeCall number (the roots are 0)
        self.meta_dims: list = []      # per input slot: where its dims start in the sizes
        self.value_dims: dict = {}     # saved size value -> (start, count, is a list)

    @property
    def label(self) -> str:
        return f"{self.node.name()} (NodeCall {self.index})"


@dataclass
class Collected:
    """One backward call's graph inputs, its objects, and its key (structure + sizes)."""
    plans: list[StepPlan]
    inputs: list           # real tensors
    objects: list
    slots: list[Slot]      # every saved tensor taken over (released after the run)
    keeps_state: list      # nodes that keep saved state aotgrad cannot release (marked freed after)
    structure: tuple       # the key, less its sizes: one entry per key.HEADER part, then one per step
    sizes: SizeList        # the key's sizes (dims, saved size values), each may become a symbol
    input_dims: list[int]  # per input: where its dims start in `sizes`


def collect(walk: Walk, root_grads: list, accumulate_grad: bool, input_edges: list = ()) -> Collected:
    """Everything one backward call hands its graph, and the graph's key (module docstring).
    Takes over the saved tensors of every node that runs (saved.py).

        before: loss = (x.sin() * w).sum()
        after:  plans [SumBackward0 traced, MulBackward0 traced (saved sin, w), SinBackward0
                traced (saved x), AccumulateGrad(w), AccumulateGrad(x)]; inputs [1.0, sin, w, x];
                objects [w, x]; structure + sizes (the dims of each saved tensor and gradient)
    """
    r = parts.Reading(walk, list(root_grads), accumulate_grad, list(input_edges), SizeList())
    key = [part.read(r) for part in parts.HEADER]
    plans: list = []
    for index, step in enumerate(walk.steps, start=1):
        r.step = step
        r.plan = StepPlan(step_kind(step.node, step.runs), len(r.inputs), len(r.objects), step.node, index)
        key.append(tuple(part.read(r) for part in parts.STEP))
        plans.append(r.plan)
    if hook_lookup.unresolved():
        raise EagerFallback("hooks registered before compiled autograd was first enabled are held by autograd "
                            "nodes aotgrad cannot place (on a non-leaf tensor no longer alive in Python); "
                            "PyTorch's engine runs backwards until they are freed")
    return Collected(plans, r.inputs, r.objects, r.slots, r.keeps_state, tuple(key), r.sizes, r.input_dims)


def release(collected: Collected) -> None:
    for slot in collected.slots:
        slot.release()
