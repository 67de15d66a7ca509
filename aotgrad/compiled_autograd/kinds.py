"""How aotgrad runs each autograd node of a backward: its kind, from its type (and a custom
Function's class), and the tables that decide it.

In: an autograd node. Out: `ACCUMULATE`, `TRACED`, `CUSTOM`, `AOTGRAD`, `OPAQUE` or
`UNDEFINED` (`kind_of`; `step_kind` for a node that runs in this backward), what distinguishes
a custom Function beyond its type (`node_class`), and whether a node run as is keeps state.
"""
from __future__ import annotations

from aotgrad.compiled_autograd import hooks as hook_lookup
from aotgrad.compiled_autograd.saved import layout_of, packed_by_user
from aotgrad.runtime.function import CompiledFunction

ACCUMULATE = "accumulate"   # AccumulateGrad: into `.grad`, then post-accumulate hooks
TRACED = "traced"           # a built-in C++ node: its aten ops go into the graph
CUSTOM = "custom"           # a Python autograd.Function: its backward is called from the graph
AOTGRAD = "aotgrad"         # aotgrad's own compiled function: its backward graph goes into the graph
OPAQUE = "opaque"           # any other node (CopySlices, C++ custom Functions): called as is
UNDEFINED = "undefined"     # UndefinedGradBackward: every result is an undefined gradient (None)

_kinds: dict[type, str] = {}

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
    """How aotgrad runs a node, from its type (and a custom Function's class)."""
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


def step_kind(node, runs: bool) -> str:
    """kind_of, but a built-in node holding a tensor the user's saved_tensors_hooks packed runs
    as is: its own code unpacks it through the user's hook, as in eager."""
    kind = kind_of(node)
    if kind is TRACED and runs and packed_by_user(node, layout_of(type(node)).tensors):
        return OPAQUE
    return kind


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
    """What distinguishes a node beyond its type: a custom Function's class with its argument and
    output layout; aotgrad's own function by its compiled plan; None for the rest."""
    if kind is CUSTOM:
        return (node._forward_cls, hook_lookup.tensor_positions(node), hook_lookup.output_kinds(node))
    return _Same(node.plan) if kind is AOTGRAD else None


def kind_of_type(node_type: type) -> str | None:
    return _kinds.get(node_type)
