"""What a compiled entry assumed of its call's tensors, as a key, what changed when a call
misses (sizes, strides, storage offset, dtype, device, requires_grad; symbols' positions under
dynamic shapes; duplicated inputs and inputs sharing memory), and the same key checked by
straight-line code (`CheckInputs`, `CheckStorages`: the first steps of an entry's generated
call, front/functions.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import torch

from aotgrad.errors import reject_sparse_inputs
from aotgrad.runtime.lower import Code

MISS = object()  # a generated call's answer when the call's inputs are not its entry's


class TensorKey(NamedTuple):
    """What an entry assumed of one input tensor."""

    sizes: torch.Size
    strides: tuple[int, ...]
    storage_offset: int
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool
    leaf_requiring_grad: bool


class DynamicTensorKey(NamedTuple):
    """What an entry compiled for symbolic sizes assumed of one input tensor."""

    rank: int
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool
    leaf_requiring_grad: bool


class CallKey(NamedTuple):
    """What an entry assumed of a call: its `structure` (a flat call of positional tensors: how
    many; else the arguments' tree spec and their non-tensor values), for each tensor the first
    one that is the same tensor (`source`) and the first one sharing its memory
    (`storage_groups`), the grad mode, and one key per tensor (TensorKey or DynamicTensorKey)."""

    structure: Any
    source: tuple[int, ...]
    storage_groups: tuple[int, ...]
    grad_mode: bool
    tensors: tuple


# (a key is built on every call that misses the generated call: tuple.__new__ skips the
# keyword handling of a NamedTuple's own constructor)
_new = tuple.__new__


def tensor_key(t: torch.Tensor) -> TensorKey:
    return _new(TensorKey, (t.shape, t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad,
                            t.requires_grad and t.is_leaf))


def dynamic_tensor_key(t: torch.Tensor) -> DynamicTensorKey:
    return _new(DynamicTensorKey, (t.dim(), t.dtype, t.device, t.requires_grad, t.requires_grad and t.is_leaf))


def call_key(structure: Any, source: tuple[int, ...], groups: tuple[int, ...], tensors: tuple) -> CallKey:
    """The key of a call in the current grad mode."""
    return _new(CallKey, (structure, source, groups, torch.is_grad_enabled(), tensors))


_WORDS = {"storage_offset": "storage offset", "leaf_requiring_grad": "is a leaf requiring grad"}  # else the name


def key_changes(old: CallKey, new: CallKey, names: list[str] | None) -> list[str]:
    """What differs between two keys of one cache, for the recompiles log:

        input 1 (L_x_): storage offset 1, now 0
    """
    if old == new:
        return ["the inputs fail the size guards of the entry compiled for symbolic sizes"]
    changes = []
    if old.structure != new.structure or len(old.tensors) != len(new.tensors):
        changes.append("the arguments' structure or non-tensor values")
    if old.grad_mode != new.grad_mode:
        changes.append(f"grad mode: {'on' if old.grad_mode else 'off'}, now {'on' if new.grad_mode else 'off'}")
    if old.source != new.source:
        changes.append(f"which inputs are one tensor: {list(old.source)}, now {list(new.source)}")
    if old.storage_groups != new.storage_groups:
        changes.append(f"which inputs share memory: {list(old.storage_groups)}, now {list(new.storage_groups)}")
    for i, (was, now) in enumerate(zip(old.tensors, new.tensors)):
        name = f" ({names[i]})" if names is not None and i < len(names) else ""
        changes += [f"input {i}{name}: {_WORDS.get(field, field)} {_shown(a)}, now {_shown(b)}"
                    for field, a, b in zip(was._fields, was, now) if a != b]
    return changes


def _shown(value) -> Any:
    return list(value) if isinstance(value, torch.Size) else value


def dedupe(tensors: Sequence[torch.Tensor]) -> tuple[list[int], tuple[int, ...]]:
    """Indices of first occurrences, and for each position the index of its first occurrence."""
    first: dict[int, int] = {}
    source = []
    for i, t in enumerate(tensors):
        source.append(first.setdefault(id(t), i))
    keep = [i for i, s in enumerate(source) if s == i]
    return keep, tuple(source)


def storage_groups(tensors: Sequence[torch.Tensor], fn_name: str) -> tuple[int, ...]:
    seen: dict[int, int] = {}
    try:
        return tuple(seen.setdefault(t.untyped_storage()._cdata, i) for i, t in enumerate(tensors))
    except NotImplementedError:  # "Cannot access storage of SparseTensorImpl"
        reject_sparse_inputs(tensors, fn_name)
        raise


# -- the key checked by generated code --------------------------------------------------------

@dataclass(frozen=True)
class CheckInputs:
    """The call has `count` distinct inputs, and the grad mode and each tensor's key
    (`tensor_keys`: TensorKey, or DynamicTensorKey for symbolic sizes) of the entry, with these
    `types` (torch.Tensor, nn.Parameter); else the call answers MISS. `guarded`:
    Dynamo's guards checked the types, dtypes, devices, requires_grad, sizes and strides
    already (the leafness and offsets remain). Interpreted, there is nothing to do: the front
    found the entry by this key."""

    count: int
    grad_mode: bool
    tensor_keys: tuple
    types: tuple[type, ...]
    guarded: bool

    def run(self, env) -> None:
        pass

    def emit(self, code: Code) -> bool:
        args = [f"a{i}" for i in range(self.count)]
        code.const(MISS, "MISS")
        code.const(torch.is_grad_enabled, "grad_enabled")
        code(f"    if len(args) != {self.count}:")
        code("        return MISS")
        if args:
            code(f"    {', '.join(args)}, = args")
        checks = [f"grad_enabled() is {self.grad_mode}"]
        for name, key, kind in zip(args, self.tensor_keys, self.types):
            checks += self._tensor_checks(code, name, key, kind)
        if self.count > 1:  # distinct tensors (the key's dedupe; memory sharing is CheckStorages)
            checks.append(f"len({{{', '.join(f'id({a})' for a in args)}}}) == {self.count}")
        code("    if not (" + "\n            and ".join(checks) + "):")
        code("        return MISS")
        return True

    def _tensor_checks(self, code: Code, name: str, key: TensorKey | DynamicTensorKey, kind: type) -> list[str]:
        checks = []
        if isinstance(key, DynamicTensorKey):  # sizes are Dynamo's to guard
            if not self.guarded:
                checks.append(f"{name}.dim() == {key.rank}")
        else:
            if not self.guarded:
                checks += [f"{name}.shape == {code.const(key.sizes)}",
                           f"{name}.stride() == {code.const(tuple(key.strides))}"]
            checks.append(f"{name}.storage_offset() == {key.storage_offset}")
        if not self.guarded:
            checks = [f"type({name}) is {code.const(kind)}", *checks, f"{name}.dtype is {code.const(key.dtype)}",
                      f"{name}.device == {code.const(key.device)}", f"{name}.requires_grad is {key.requires_grad}"]
        if key.requires_grad:
            checks.append(f"{name}.is_leaf is {key.leaf_requiring_grad}")
        return checks


@dataclass(frozen=True)
class CheckStorages:
    """The `count` inputs share no memory (the key's storage groups), for an entry that writes
    into an input or returns one or a view of one; else the call answers MISS."""

    count: int

    def run(self, env) -> None:
        pass

    def emit(self, code: Code) -> bool:
        storages = ", ".join(f"a{i}.untyped_storage()._cdata" for i in range(self.count))
        code(f"    if len({{{storages}}}) != {self.count}:")
        code("        return MISS")
        return True
