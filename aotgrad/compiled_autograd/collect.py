"""Everything one backward call hands its captured graph, and the key of that graph.

In: a `Walk` and the root gradients. Out: `Collected`: for each step how aotgrad runs its
node (`StepPlan`: traced into aten ops, a custom Function's backward, AccumulateGrad, or
run as is), the graph's two input lists (`inputs`: root gradients, then saved tensors;
`objects`: leaves, ctxs, nodes and hook functions) and the cache key: node types, edges,
hooks (how many, where; not which), saved non-tensor values, tensor metadata and the autocast
state the backward runs under.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from aotgrad.compiled_autograd import hooks as hook_lookup
from aotgrad.compiled_autograd.hooks import output_kinds, tensor_positions
from aotgrad.compiled_autograd.dynamic import SizeList, SizeValues, symbolic_attributes
from aotgrad.compiled_autograd.saved import (
    EagerFallback, Slot, hashable, layout_of, packed_by_user, take, take_tensors)
from aotgrad.compiled_autograd.walk import Walk
from aotgrad.runtime.function import CompiledFunction

ACCUMULATE = "accumulate"   # AccumulateGrad: into `.grad`, then post-accumulate hooks
TRACED = "traced"           # a built-in C++ node: its aten ops go into the graph
CUSTOM = "custom"           # a Python autograd.Function: its backward is called from the graph
AOTGRAD = "aotgrad"         # aotgrad's own compiled function: its backward graph goes into the graph
OPAQUE = "opaque"           # any other node (CopySlices, C++ custom Functions): called as is
UNDEFINED = "undefined"     # UndefinedGradBackward: every result is an undefined gradient (None)

_kinds: dict[type, str] = {}

HEADER = 5  # structure entries before the first step's: accumulate_grad, results, roots, root metadata, autocast
AUTOCAST = 4  # the entry holding the autocast state (`autocast_state`)
STEP_HOOKS, STEP_VALUES = 4, 5  # in each step's entry: its hooks' shape, its saved non-tensor values

_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu", "xla", "mtia", "maia", "ipu", "privateuseone")


def autocast_state() -> tuple | None:
    """The autocast regions active while a backward runs (eager's backward ops are autocast
    too, and a capture records their casts): None when there is none, the common case."""
    if not torch._C._is_any_autocast_enabled():
        return None
    return tuple((device, torch.get_autocast_dtype(device)) for device in _AUTOCAST_DEVICES
                 if torch.is_autocast_enabled(device))

# Built-in nodes whose formula reads tensor values (prod's test for zeros): traced on fake
# tensors they take their data-free path, equal in value but not bitwise, so they run as is.
RUN_AS_IS = {"ProdBackward0", "ProdBackward1", "CumprodBackward0"}


# Nodes run as is that keep no state for the backward: a backward through them again is fine
# (a DelayedError shared by several graphs raises its error every time, as in eager).
STATELESS = {"torch::autograd::DelayedError", "torch::autograd::Error"}


def holds_state(node) -> bool:
    """Does a node run as is keep saved state a backward frees (so a second one must fail)?"""
    return node.name() not in STATELESS


def kind_of(node) -> str:
    node_type = type(node)
    kind = _kinds.get(node_type)
    if kind is None:
        name = node.name()
        if hasattr(node, "_forward_cls"):  # (not in the table: classes made on the fly would fill it)
            return AOTGRAD if node._forward_cls is CompiledFunction and node.plan.backward_inlinable else CUSTOM
        elif name == "torch::autograd::AccumulateGrad":
            kind = ACCUMULATE
        elif name == "torch::autograd::UndefinedGradBackward":  # (gradcheck's undefined-gradient checks)
            kind = UNDEFINED
        elif "::" in name or name in RUN_AS_IS:
            kind = OPAQUE
        else:
            kind = TRACED
        _kinds[node_type] = kind
    return kind


class StepPlan:
    """How one step runs, and where its values sit in the graph's inputs and in the sizes."""
    __slots__ = ("kind", "hooks", "saved", "first_input", "first_object", "node", "index", "meta_dims",
                 "value_dims")

    def __init__(self, kind: str, hooks: hook_lookup.NodeHooks, first_input: int, first_object: int, node,
                 index: int):
        self.kind = kind
        self.hooks = hooks
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
    structure: tuple       # the key, less its sizes
    sizes: SizeList        # the key's sizes (dims, saved size values), each may become a symbol
    input_dims: list[int]  # per input: where its dims start in `sizes`


class _Same:
    """Compares by identity (and keeps the object alive): the key of an unhashable object."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


def node_class(kind: str, node):
    """What the key says a node is: its type; a custom Function's class with its argument and
    output layout; aotgrad's own function by its compiled plan."""
    if kind is CUSTOM:
        return (node._forward_cls, tensor_positions(node), output_kinds(node))
    if kind is OPAQUE and kind_of(node) is TRACED:  # a built-in node run as is (saved_tensors_hooks)
        return (OPAQUE, type(node))
    return _Same(node.plan) if kind is AOTGRAD else type(node)


def saved_metas(saved: list, index: int, sizes: SizeValues, starts: list | None) -> tuple:
    """The key of a step's saved tensors (None: nothing saved there); their dims go into
    `sizes` (and where each starts into `starts`)."""
    metas = []
    for value in saved:
        if value is not None:
            meta, start = sizes.tensor(value, index)
            if starts is not None:
                starts.append(start)
            metas.append(meta)
        else:
            metas.append(None)
    return tuple(metas)


def input_metadata(node, index: int, sizes: SizeValues, starts: list | None) -> tuple:
    """The key of the gradients a node takes (rank, dtype, device per input); their shapes go
    into `sizes` (and where each starts into `starts`)."""
    metadata = []
    for m in node._input_metadata:
        if m.is_nested_tensor:
            raise EagerFallback(f"{node.name()} takes the gradient of a nested tensor: captured graphs take dense "
                                "strided tensors only")
        start = sizes.add(m.shape, index)
        if starts is not None:
            starts.append(start)
        metadata.append((len(m.shape), m.dtype, m.device))
    return tuple(metadata)


_value_readers: dict[type, tuple] = {}


def value_reader(node_type: type, layout) -> tuple:
    """(read all saved values of a node at once, per value: its name if it may be a symbol)."""
    reader = _value_readers.get(node_type)
    if reader is None:
        symbolic = symbolic_attributes(node_type)
        names = layout.values
        if not names:
            get = _no_values
        elif len(names) == 1:
            one = operator.attrgetter(names[0])
            get = lambda node: (one(node),)  # noqa: E731
        else:
            get = operator.attrgetter(*names)
        reader = _value_readers[node_type] = (get, tuple(n if n in symbolic else None for n in names))
    return reader


def _no_values(node) -> tuple:
    return ()


def traced_values(node, layout, index: int, sizes: SizeValues, value_dims: dict | None) -> tuple:
    """A built-in node's saved non-tensor values: those it may read as symbols into `sizes`
    (where they start into `value_dims`), the rest into the structure."""
    get, symbolic = value_reader(type(node), layout)
    values = []
    for value, attr in zip(get(node), symbolic):
        if attr is not None and value is not None:
            items = value if isinstance(value, (list, tuple)) else (value,)
            start = sizes.add(items, index)
            if value_dims is not None:
                value_dims[attr] = (start, len(items), isinstance(value, (list, tuple)))
            values.append((attr, len(items)))
        else:
            values.append(hashable(value))
    return tuple(values)


def step_hooks(node, leaf, probe: bool, retaining: dict):
    """The hooks of one step (`NO_HOOKS` when there is nothing to look for); raises
    EagerFallback for a hook only the eager engine can run."""
    if probe or leaf is not None or retaining:
        node_hooks = hook_lookup.hooks_of(node, leaf, probe, retaining)
        reason = node_hooks.needs_engine() if node_hooks is not hook_lookup.NO_HOOKS else None
        if reason:
            raise EagerFallback(reason)
        return node_hooks
    return hook_lookup.NO_HOOKS


def plain_strided(t: torch.Tensor) -> bool:
    """A dense strided tensor, the only kind a captured graph takes: sparse (COO, CSR, ...),
    MKLDNN and nested tensors have no strides for the graph to be traced with."""
    return t.layout is torch.strided and not t.is_nested


def not_plain_strided(what: str, t: torch.Tensor) -> EagerFallback:
    kind = "a nested" if t.is_nested else f"a {t.layout}"
    return EagerFallback(f"{what} is {kind} tensor: captured graphs take dense strided tensors only")


def custom_arguments_known(node) -> None:
    """Which results of a custom Function go to which input must be known."""
    if getattr(node, "_aotgrad_unrecorded", False):
        raise EagerFallback(f"custom Function {node.name()} was applied before compiled autograd was first "
                            "enabled: which of its arguments and outputs are tensors was not recorded")
    if len(node.next_functions) != len(node.needs_input_grad) and tensor_positions(node) is None:
        raise EagerFallback(f"custom Function {node.name()} has non-tensor inputs and was not applied through "
                            "torch.autograd.Function.apply: which results go to which input is unknown")


class _UnpackedOnce:
    """`ctx.saved_tensors`, read once (autograd's checks and the user's unpack hooks run then)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.values = None

    @property
    def saved_tensors(self):
        if self.values is None:
            self.values = self.ctx.saved_tensors
        return self.values


def _take_ctx_tensors(ctx) -> list:
    """A custom Function's saved tensors."""
    once = _UnpackedOnce(ctx)
    return [take(raw, once, "saved_tensors", i) for i, raw in enumerate(ctx._raw_saved_tensors)]


def collect(walk: Walk, root_grads: list, accumulate_grad: bool) -> Collected:
    """Everything one backward call hands its graph, and the graph's key (module docstring).
    Takes over the saved tensors of every node that runs (saved.py).

        before: loss = (x.sin() * w).sum()
        after:  plans [SumBackward0 traced, MulBackward0 traced (saved sin, w), SinBackward0
                traced (saved x), AccumulateGrad(w), AccumulateGrad(x)]; inputs [1.0, sin, w, x];
                objects [w, x]; structure + sizes (the dims of each saved tensor and gradient)
    """
    probe = hook_lookup.node_hooks_may_exist()
    retaining = hook_lookup.retaining_by_node()
    inputs = list(root_grads)
    objects: list = []
    slots: list = []
    plans: list = []
    sizes = SizeList()
    input_dims: list = []
    roots = []
    for g in root_grads:
        if not plain_strided(g):
            raise not_plain_strided("a root gradient", g)
        meta, start = sizes.tensor(g, 0)
        roots.append(meta)
        input_dims.append(start)
    key: list = [accumulate_grad, walk.num_results, tuple(walk.roots), tuple(roots), autocast_state()]
    keeps_state: list = []
    for index, step in enumerate(walk.steps, start=1):
        node = step.node
        kind = kind_of(node)
        if kind is TRACED and step.runs and packed_by_user(node, layout_of(type(node)).tensors):
            kind = OPAQUE  # run as is: it unpacks through the user's saved_tensors_hooks, as in eager
        leaf = node.variable if kind is ACCUMULATE else None
        if leaf is not None and not plain_strided(leaf):
            raise not_plain_strided(f"the leaf of {node.name()} (NodeCall {index})", leaf)
        node_hooks = step_hooks(node, leaf, probe, retaining)
        plan = StepPlan(kind, node_hooks, len(inputs), len(objects), node, index)
        values: tuple = ()
        if step.runs:
            if kind is TRACED:
                layout = layout_of(type(node))
                plan.saved = take_tensors(node, layout.tensors)
                values = traced_values(node, layout, index, sizes, plan.value_dims)
            elif kind is AOTGRAD:
                plan.saved = _take_ctx_tensors(node)
                values = tuple(node.saved_sizes)
            elif kind is CUSTOM:
                custom_arguments_known(node)
                plan.saved = _take_ctx_tensors(node)
                objects.append(node)
            elif kind is ACCUMULATE:
                objects.append(leaf)
            elif kind is not UNDEFINED:
                objects.append(node)
                if holds_state(node):
                    keeps_state.append(node)  # run as is: its saved state stays in it
        for slot in plan.saved:
            if slot is not None:
                if not plain_strided(slot.value):
                    raise not_plain_strided(f"a tensor {node.name()} (NodeCall {index}) saved", slot.value)
                slots.append(slot)
                inputs.append(slot.value)
                if not slot.owned and (not keeps_state or keeps_state[-1] is not node):
                    keeps_state.append(node)  # the user's saved_tensors_hooks hold this one
        objects.extend(node_hooks.callables())
        plans.append(plan)
        saved = saved_metas([slot.value if slot is not None else None for slot in plan.saved], index, sizes,
                            input_dims)
        key.append((node_class(kind, node), step.runs, tuple(step.edges), tuple(step.captures),
                    node_hooks.shape(), values, saved, input_metadata(node, index, sizes, plan.meta_dims)))
    if hook_lookup.unresolved():
        raise EagerFallback("hooks registered before compiled autograd was first enabled are held by autograd "
                            "nodes aotgrad cannot place (on a non-leaf tensor no longer alive in Python); "
                            "PyTorch's engine runs backwards until they are freed")
    return Collected(plans, inputs, objects, slots, keeps_state, tuple(key), sizes, input_dims)


def release(collected: Collected) -> None:
    for slot in collected.slots:
        slot.release()
