"""What each autograd node saved for its backward, taken over by aotgrad.

In: a node. Out: its saved tensors as `Slot`s and its saved non-tensor values (C++ nodes:
`_saved_*` attributes without a `_raw_saved_*` twin; they go into the cache key).
Taking a saved tensor over registers a pack/unpack pair on it (`SavedTensor.register_hooks`):
the node then holds a `Slot` instead of the tensor. The slot gives the tensor back to the
node's own code when it unpacks, a fake tensor while aotgrad traces the node, and nothing
once the backward released it (retain_graph=False), when unpacking raises eager's error.
"""
from __future__ import annotations

import threading
from typing import Any

import torch

FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward."
)


class EagerFallback(Exception):
    """This backward cannot be captured; the eager engine runs it (the reason is logged)."""


class Slot:
    """A saved tensor aotgrad holds for a node: `value` (None once freed), `fake` while tracing,
    `version`: the value's version when taken (registered hooks skip autograd's own check that a
    saved tensor was not modified in place, so the slot makes it). `owned` is False for a
    tensor packed by the user's saved_tensors_hooks: read through them, never freed early."""
    __slots__ = ("value", "fake", "owned", "freed", "version")

    def __init__(self, value, owned: bool = True):
        self.value = value
        self.fake = None
        self.owned = owned
        self.freed = False
        self.version = value._version if value is not None else 0

    def check_version(self) -> None:
        if self.owned and self.value is not None and self.value._version != self.version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: [{self.value.type()} {list(self.value.shape)}] is at version {self.value._version}; "
                f"expected version {self.version} instead.")

    def release(self) -> None:
        if self.owned:
            self.value = None
            self.freed = True


_packed = threading.local()  # .slot: the slot `_pack` made last on this thread (read back directly)


def _pack(t: torch.Tensor) -> Slot:
    slot = _packed.slot = Slot(t)
    return slot


def _unpack(slot: Slot) -> torch.Tensor:
    if slot.fake is not None:
        return slot.fake
    if slot.freed:
        raise RuntimeError(FREED_MESSAGE)
    slot.check_version()
    return slot.value


def _packed_by_user(raw, packed) -> None:
    """The user's saved_tensors_hooks packed this saved tensor: fine, unless it is checkpoint's."""
    if type(packed).__module__ == "torch.utils.checkpoint":
        raise EagerFallback("torch.utils.checkpoint recomputes saved tensors inside the eager engine's "
                            "graph task")


def packed_by_user(node, attrs: tuple) -> bool:
    """Did the user's saved_tensors_hooks pack some tensor a built-in node saved under `attrs`?
    Its own code must then unpack it, through the user's hook, each time it runs: traced on
    fake tensors it would read the real tensor of the capturing call as a constant."""
    for attr, _ in attrs:
        raw = getattr(node, attr)
        for r in (raw if type(raw) is list or type(raw) is tuple else (raw,)):
            if r is not None and r.unpack_hook is not None and not isinstance(r.data, Slot):
                _packed_by_user(r, r.data)
                return True
    return False


def take(raw, node, name: str, index: int | None = None) -> Slot | None:
    """The slot of one SavedTensor (registering aotgrad's pack/unpack pair the first time).
    It is first read through its node (`node.<name>`, item `index` of a list), which runs
    autograd's version check (and the user's unpack hook, whose result is then kept as is:
    aotgrad cannot free it early)."""
    if raw is None:
        return None
    if raw.unpack_hook is not None:  # hooked: by aotgrad (an earlier backward, retain_graph) or the user
        packed = raw.data
        if isinstance(packed, Slot):
            if packed.freed:
                raise RuntimeError(FREED_MESSAGE)
            packed.check_version()
            return packed
        _packed_by_user(raw, packed)
        value = _read(node, name, index)
        return Slot(value, owned=False) if value is not None else None
    if _read(node, name, index) is None:
        return None
    raw.register_hooks(_pack, _unpack)
    return _packed.slot


def _read(node, name: str, index: int | None):
    value = getattr(node, name)
    return value if index is None else value[index]


class SavedLayout:
    """Which attributes of a C++ node class hold tensors and which hold other values."""
    __slots__ = ("tensors", "values")

    def __init__(self, node_type: type):
        names = dir(node_type)
        raw = [n for n in names if n.startswith("_raw_saved_")]
        self.tensors = tuple((n, "_saved_" + n[len("_raw_saved_"):]) for n in raw)  # (raw, unpacked)
        twins = {unpacked for _, unpacked in self.tensors}
        self.values = tuple(n for n in names if n.startswith("_saved_") and n not in twins)


_layouts: dict[type, SavedLayout] = {}


def layout_of(node_type: type) -> SavedLayout:
    """The SavedLayout of a C++ node class (worked out once per class)."""
    layout = _layouts.get(node_type)
    if layout is None:
        layout = _layouts[node_type] = SavedLayout(node_type)
    return layout


def take_tensors(node, attrs: tuple) -> list[Slot | None]:
    """Slots of the tensors saved under `attrs` (`_raw_saved_*`; lists flattened in order),
    each first read through the node (`_saved_*`: autograd's in-place modification check)."""
    slots: list = []
    for attr, name in attrs:
        raw = getattr(node, attr)
        if type(raw) is list or type(raw) is tuple:
            slots.extend(take(r, node, name, i) for i, r in enumerate(raw))
        else:
            slots.append(take(raw, node, name))
    return slots


def hashable(value: Any) -> Any:
    """A saved non-tensor value as a key entry (lists as tuples, NaN comparable)."""
    kind = type(value)
    if kind is int or kind is bool or value is None:
        return value
    if kind is tuple and all(type(v) is int for v in value):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(hashable(v) for v in value)
    if isinstance(value, torch.Tensor):  # a saved optional tensor read as a value: key on metadata
        return ("tensor", value.dtype, tuple(value.shape))
    if isinstance(value, float) and value != value:
        return ("nan",)
    return value


class _FreeSaved(torch.autograd.Function):
    """A one-node graph whose backward frees the saved tensors of the Python nodes in
    `ctx.nodes` (`maybe_clear_saved_tensors` frees only inside an engine run without
    retain_graph: it asks the engine's current graph task)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        for node in ctx.nodes:
            node.maybe_clear_saved_tensors()
        return None


_free_saved = threading.local()  # .root, .one: this thread's _FreeSaved graph, backwarded again and again
# PyTorch's engine itself: aotgrad's stand-in (engine.py) would take a call made through
# Variable._execution_engine; a node run through this one frees what it saved, as in eager
TORCH_ENGINE = torch._C._ImperativeEngine()


def free_python_nodes(nodes: list) -> None:
    """Free what Python nodes (custom Functions) saved, as eager does when such a node runs
    without retain_graph: `ctx.saved_tensors` and `_raw_saved_tensors` then raise "after they
    have already been freed" (test_custom_function_saved_tensors), and tensors the user's
    saved_tensors_hooks packed are let go. One small engine run (~20 us), for the nodes
    aotgrad cannot free itself (collect's `keeps_state`); it saves nothing, so it runs again."""
    root = getattr(_free_saved, "root", None)
    if root is None:
        with torch.inference_mode(False), torch.enable_grad():
            root = _free_saved.root = _FreeSaved.apply(torch.zeros((), requires_grad=True))
        _free_saved.one = torch.ones(())
    root.grad_fn.nodes = nodes
    try:
        TORCH_ENGINE.run_backward((root,), (_free_saved.one,), False, False, (), True, True)
    finally:
        root.grad_fn.nodes = ()


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


def take_ctx_tensors(ctx) -> list:
    """A custom Function's saved tensors."""
    once = _UnpackedOnce(ctx)
    return [take(raw, once, "saved_tensors", i) for i, raw in enumerate(ctx._raw_saved_tensors)]
