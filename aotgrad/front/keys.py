"""What a compiled entry assumed of its call's tensors, as a key, what changed when a call
misses (sizes, strides, storage offset, dtype, device, requires_grad; symbols' positions under
dynamic shapes; duplicated inputs and inputs sharing memory), and the same key checked by
straight-line code (`CheckInputs`, `CheckStorages`: the first steps of an entry's generated
call, front/functions.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from aotgrad.errors import reject_sparse_inputs
from aotgrad.runtime.lower import Code

MISS = object()  # a generated call's answer when the call's inputs are not its entry's


def tensor_key(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad,
            t.requires_grad and t.is_leaf)


def dynamic_tensor_key(t: torch.Tensor) -> tuple:
    return (t.dim(), t.dtype, t.device, t.requires_grad, t.requires_grad and t.is_leaf)


_KEY_FIELDS = {tensor_key: ("sizes", "strides", "storage offset", "dtype", "device", "requires_grad",
                             "is a leaf requiring grad"),
               dynamic_tensor_key: ("rank", "dtype", "device", "requires_grad", "is a leaf requiring grad")}


def key_changes(old: tuple, new: tuple, key_of: Callable, names: list[str] | None) -> list[str]:
    """What differs between two keys of AotFunction's caches, for the recompiles log. Both
    end in (duplicates, shared memory, grad mode, one `key_of` per tensor), `key_of` being
    tensor_key or dynamic_tensor_key.

        input 1 (L_x_): storage offset 1, now 0
    """
    if old == new:
        return ["the inputs fail the size guards of the entry compiled for symbolic sizes"]
    *old_rest, old_source, old_groups, old_grad, old_tensors = old
    *new_rest, new_source, new_groups, new_grad, new_tensors = new
    changes = []
    if old_rest != new_rest or len(old_tensors) != len(new_tensors):
        changes.append("the arguments' structure or non-tensor values")
    if old_grad != new_grad:
        changes.append(f"grad mode: {'on' if old_grad else 'off'}, now {'on' if new_grad else 'off'}")
    if old_source != new_source:
        changes.append(f"which inputs are one tensor: {list(old_source)}, now {list(new_source)}")
    if old_groups != new_groups:
        changes.append(f"which inputs share memory: {list(old_groups)}, now {list(new_groups)}")
    for i, (was, now) in enumerate(zip(old_tensors, new_tensors)):
        name = f" ({names[i]})" if names is not None and i < len(names) else ""
        changes += [f"input {i}{name}: {field} {_shown(a)}, now {_shown(b)}"
                    for field, a, b in zip(_KEY_FIELDS[key_of], was, now) if a != b]
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
    (`tensor_keys`, of `dynamic_tensor_key` when `dynamic`, else `tensor_key`) of the entry,
    with these `types` (torch.Tensor, nn.Parameter); else the call answers MISS. `guarded`:
    Dynamo's guards checked the types, dtypes, devices, requires_grad, sizes and strides
    already (the leafness and offsets remain). Interpreted, there is nothing to do: the front
    found the entry by this key."""

    count: int
    grad_mode: bool
    tensor_keys: tuple
    types: tuple[type, ...]
    dynamic: bool
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

    def _tensor_checks(self, code: Code, name: str, key: tuple, kind: type) -> list[str]:
        checks = []
        if self.dynamic:  # (dim, dtype, device, requires_grad, leaf requiring grad): sizes are dynamo's to guard
            dim, dtype, device, requires_grad, leaf = key
            if not self.guarded:
                checks.append(f"{name}.dim() == {dim}")
        else:
            shape, stride, offset, dtype, device, requires_grad, leaf = key
            if not self.guarded:
                checks += [f"{name}.shape == {code.const(shape)}", f"{name}.stride() == {code.const(tuple(stride))}"]
            checks.append(f"{name}.storage_offset() == {offset}")
        if not self.guarded:
            checks = [f"type({name}) is {code.const(kind)}", *checks, f"{name}.dtype is {code.const(dtype)}",
                      f"{name}.device == {code.const(device)}", f"{name}.requires_grad is {requires_grad}"]
        if requires_grad:
            checks.append(f"{name}.is_leaf is {leaf}")
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
