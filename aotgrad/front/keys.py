"""What a compiled entry assumed of its call's tensors, as a key, and what changed when a call
misses: sizes, strides, storage offset, dtype, device, requires_grad (symbols' positions under
dynamic shapes), duplicated inputs and inputs sharing memory."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from aotgrad.errors import reject_sparse_inputs


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
