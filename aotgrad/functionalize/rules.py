"""Per-op tables for functionalization, keyed by aten overload.

- `mutation_rule(op)`: how a mutating op becomes a pure one (which functional
  op, which of its outputs is the new value of which mutated argument).
- `METADATA_MUTATIONS`: in-place ops that change only a tensor's view of its
  storage (`t_`), and the view op that replays them.
- `scatter_step(...)`: for one view step, the op that writes a new value of the
  view back into its parent (`slice` -> `slice_scatter`); None where no exact
  inverse exists (`expand`, `as_strided`, `unfold`), where the caller falls
  back to `as_strided_scatter` on the storage root.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import torch

from aotgrad.errors import UnsupportedError

aten = torch.ops.aten


@dataclass(frozen=True)
class MutationRule:
    """`functional(*args)` computes the op without mutation. `mutated[name] = k`:
    output k (None: the whole result) is the new value of argument `name`;
    `plain_outputs` outputs are the op's ordinary results."""

    functional: Any
    mutated: tuple[tuple[str, int | None], ...]
    plain_outputs: int
    drop_args: tuple[str, ...] = ()  # out= arguments, not passed to the functional op


# Mutating ops whose functional form has another name or extra outputs.
_SPECIAL: dict[Any, MutationRule] = {
    aten._native_batch_norm_legit.default: MutationRule(
        aten._native_batch_norm_legit_functional.default,
        (("running_mean", 3), ("running_var", 4)), 3),
    aten._batch_norm_with_update.default: MutationRule(
        aten._batch_norm_with_update_functional.default,
        (("running_mean", 4), ("running_var", 5)), 4),
    # native_batch_norm writes running stats in training without saying so in its schema.
    aten.native_batch_norm.default: MutationRule(
        aten._native_batch_norm_legit_functional.default,
        (("running_mean", 3), ("running_var", 4)), 3),
    aten.normal_.default: MutationRule(aten.normal_functional.default, (("self", None),), 0),
    aten.bernoulli_.float: MutationRule(aten.bernoulli.p, (("self", None),), 0),
    aten.bernoulli_.Tensor: MutationRule(aten.bernoulli.Tensor, (("self", None),), 0),
}

# In-place ops that change metadata only; the view op that replays them.
METADATA_MUTATIONS = {
    aten.t_.default: aten.t.default,
    aten.transpose_.default: aten.transpose.int,
    aten.squeeze_.default: aten.squeeze.default,
    aten.squeeze_.dim: aten.squeeze.dim,
    aten.squeeze_.dims: aten.squeeze.dims,
    aten.unsqueeze_.default: aten.unsqueeze.default,
    aten.as_strided_.default: aten.as_strided.default,
    aten.swapdims_.default: aten.transpose.int,
    aten.swapaxes_.default: aten.transpose.int,
}

_NEVER = {
    aten.set_.source_Tensor, aten.set_.source_Storage, aten.set_.source_Storage_storage_offset,
    aten.set_.default, aten.resize_.default, aten.resize_as_.default,
}


def written_arguments(op) -> list[str]:
    schema = getattr(op, "_schema", None)
    if schema is None:
        return []
    return [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def is_mutating(op, args: tuple = (), kwargs: dict | None = None) -> bool:
    if op is aten.native_batch_norm.default:
        return bool(_arg(op, args, kwargs or {}, "training")) and _arg(op, args, kwargs or {}, "running_mean") is not None
    return bool(written_arguments(op))


def _arg(op, args, kwargs, name):
    for i, a in enumerate(op._schema.arguments):
        if a.name == name:
            if i < len(args):
                return args[i]
            return kwargs.get(name, a.default_value)
    raise KeyError(name)


@lru_cache(maxsize=None)
def mutation_rule(op) -> MutationRule:
    """How to compute `op` without mutation; raises UnsupportedError if there is no way."""
    if op in _SPECIAL:
        return _SPECIAL[op]
    if op in _NEVER:
        raise UnsupportedError(
            f"aotgrad cannot compile `{op}`: it replaces a tensor's storage or size in place, "
            "which a functional graph cannot express. To continue: build a new tensor instead "
            "(e.g. `x = y.clone()` rather than `x.set_(y)` or `x.resize_(...)`).")
    written = written_arguments(op)
    packet_name = op._schema.name.split("::")[-1]
    overload = op._overloadname
    namespace = getattr(torch.ops, op.namespace)
    if packet_name.endswith("_") and written == ["self"]:
        packet = getattr(namespace, packet_name[:-1], None)
        if packet is not None and overload in packet.overloads():
            functional = getattr(packet, overload)
            if _same_arguments(functional, op, ()):
                return MutationRule(functional, (("self", None),), 0)
    if written and all(_is_out_argument(op, name) for name in written):
        packet = getattr(namespace, packet_name, None)
        for candidate in (packet.overloads() if packet else ()):
            functional = getattr(packet, candidate)
            if functional is op or written_arguments(functional):
                continue
            if _same_arguments(functional, op, tuple(written)):
                mutated = tuple((name, (k if len(written) > 1 else None)) for k, name in enumerate(written))
                return MutationRule(functional, mutated, 0, drop_args=tuple(written))
    raise UnsupportedError(
        f"aotgrad cannot compile `{op}`: it mutates {', '.join(written)} and aotgrad knows no functional "
        "form of it. To continue: use the out-of-place form of the op, or report the op so a rule "
        "can be added to aotgrad/functionalize/rules.py.")


def _is_out_argument(op, name: str) -> bool:
    return any(a.name == name and a.kwarg_only for a in op._schema.arguments)


def _same_arguments(functional, op, dropped: tuple[str, ...]) -> bool:
    want = [(a.name, str(a.type)) for a in op._schema.arguments if a.name not in dropped]
    have = [(a.name, str(a.type)) for a in functional._schema.arguments]
    return want == have


# -- views --------------------------------------------------------------------

def _slice_scatter(parent, src, args, index, parent_val, view_val):
    dim, start, end, step = (list(args) + [0, None, None, 1][len(args):])[:4]
    return aten.slice_scatter.default, (parent, src, dim, start, end, step)


def _select_scatter(parent, src, args, index, parent_val, view_val):
    return aten.select_scatter.default, (parent, src, *args)


def _diagonal_scatter(parent, src, args, index, parent_val, view_val):
    return aten.diagonal_scatter.default, (parent, src, *args)


def _transpose_back(parent, src, args, index, parent_val, view_val):
    return aten.transpose.int, (src, *args)


def _t_back(parent, src, args, index, parent_val, view_val):
    return aten.t.default, (src,)


def _permute_back(parent, src, args, index, parent_val, view_val):
    dims = [d % parent_val.dim() for d in args[0]] if parent_val.dim() else []
    inverse = [0] * len(dims)
    for i, d in enumerate(dims):
        inverse[d] = i
    return aten.permute.default, (src, inverse)


def _reshape_back(parent, src, args, index, parent_val, view_val):
    return aten.reshape.default, (src, list(parent_val.shape))


def _identity_back(parent, src, args, index, parent_val, view_val):
    return None, src


def _split_back(parent, src, args, index, parent_val, view_val):
    size, dim = (list(args) + [0])[:2]
    dim = dim % parent_val.dim()
    start = index * size
    return aten.slice_scatter.default, (parent, src, dim, start, start + view_val.shape[dim], 1)


def _split_with_sizes_back(parent, src, args, index, parent_val, view_val):
    sizes, dim = (list(args) + [0])[:2]
    dim = dim % parent_val.dim()
    start = sum(sizes[:index])
    return aten.slice_scatter.default, (parent, src, dim, start, start + sizes[index], 1)


def _unbind_back(parent, src, args, index, parent_val, view_val):
    dim = args[0] if args else 0
    return aten.select_scatter.default, (parent, src, dim, index)


def _view_dtype_back(parent, src, args, index, parent_val, view_val):
    return aten.view.dtype, (src, parent_val.dtype)


_SCATTER: dict[Any, Callable] = {
    aten.slice.Tensor: _slice_scatter,
    aten.select.int: _select_scatter,
    aten.diagonal.default: _diagonal_scatter,
    aten.transpose.int: _transpose_back,
    aten.t.default: _t_back,
    aten.permute.default: _permute_back,
    aten.view.default: _reshape_back,
    aten._unsafe_view.default: _reshape_back,
    aten.reshape.default: _reshape_back,
    aten._reshape_alias.default: _reshape_back,
    aten.unsqueeze.default: _reshape_back,
    aten.squeeze.default: _reshape_back,
    aten.squeeze.dim: _reshape_back,
    aten.squeeze.dims: _reshape_back,
    aten.alias.default: _identity_back,
    aten.detach.default: _identity_back,
    aten.split.Tensor: _split_back,
    aten.split_with_sizes.default: _split_with_sizes_back,
    aten.unbind.int: _unbind_back,
    aten.view.dtype: _view_dtype_back,
}


def scatter_step(view_op):
    """The inverse of one view step, or None if the view has no exact inverse."""
    return _SCATTER.get(view_op)
