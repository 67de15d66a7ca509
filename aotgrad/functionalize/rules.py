"""Per-op tables for functionalization, keyed by aten overload.

- `mutation_rule(op)`: how a mutating op becomes a pure one (which functional
  op, which of its outputs is the new value of which mutated argument), derived
  from the schemas (`pow_.Scalar` -> `pow.Tensor_Scalar`, `add.out` -> `add.Tensor`,
  `rrelu_with_noise` -> `rrelu_with_noise_functional`); `_SPECIAL` for the rest.
- `METADATA_MUTATIONS`: in-place ops that change only a tensor's view of its
  storage (`t_`), and the view op that replays them; `RESIZES` (`resize_`).
- `scatter_step(...)`: for one view step, the op that writes a new value of the
  view back into its parent (`slice` -> `slice_scatter`); None where no exact
  inverse exists (`expand`, `as_strided`, `unfold`), where the caller falls
  back to `as_strided_scatter` on the storage root.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

from aotgrad import compat
from aotgrad.errors import UnsupportedError
from aotgrad.trace.tracer import written_argument_specs

aten = torch.ops.aten


@dataclass(frozen=True)
class MutationRule:
    """`functional(**args)` computes the op without mutation (arguments passed by name).

    `mutated[name] = k`: output k of `functional` is the new value of argument `name`
    (output 0 of a single-output op is its whole result). `returns[i]` says where the
    op's own return i comes from: an argument name (in-place and out= ops return the
    argument they wrote) or an output index of `functional`. Factory out= ops
    (`zeros.out`) take `options_from`'s dtype, layout and device."""

    functional: Any
    mutated: tuple[tuple[str, int], ...]
    returns: tuple[str | int, ...]
    drop_args: tuple[str, ...] = ()  # out= arguments, not passed to the functional op
    options_from: str | None = None


# Mutating ops that do not say so in their schema, so the derivation cannot see them:
# native_batch_norm writes its running stats in training.
_SPECIAL: dict[Any, MutationRule] = {
    aten.native_batch_norm.default: MutationRule(
        aten._native_batch_norm_legit_functional.default,
        (("running_mean", 3), ("running_var", 4)), (0, 1, 2)),
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
    aten.detach_.default: aten.detach.default,
}

# In-place ops that change a tensor's size and may reallocate its storage; rewrite.py
# supports the cases a functional graph can express (see `_Functionalizer.on_resize`).
RESIZES = {aten.resize_.default, aten.resize_as_.default}

_NEVER = {
    aten.set_.source_Tensor, aten.set_.source_Storage, aten.set_.source_Storage_storage_offset,
    aten.set_.source_Tensor_storage_offset, aten.set_.default,
    *compat.STORAGE_REPLACING_OPS,  # `x.data = y` under Dynamo on 2.14
}


def written_arguments(op) -> list[str]:
    return [name for _, name, _, _ in written_argument_specs(op)]


def is_mutating(op, args: tuple = (), kwargs: dict | None = None) -> bool:
    if op is aten.native_batch_norm.default:
        kwargs = kwargs or {}
        return bool(_arg(op, args, kwargs, "training")) and _arg(op, args, kwargs, "running_mean") is not None
    return bool(written_arguments(op))


def _arg(op, args, kwargs, name):
    for i, a in enumerate(op._schema.arguments):
        if a.name == name:
            if i < len(args):
                return args[i]
            return kwargs.get(name, a.default_value)
    raise KeyError(name)


@cache
def mutation_rule(op) -> MutationRule:
    """How to compute `op` without mutation; raises UnsupportedError if there is no way.

    Derived from the schemas, with torchgen's pairing of mutable and functional ops: the
    functional op takes the same arguments by name and type (out= arguments dropped,
    order free; factory out= ops gain dtype/layout/device) and returns the op's own
    results (fresh ones and those written to out=, then out= arguments it does not
    return), then the new value of each other written argument, in argument order.

        pow_.Scalar(Tensor(a!) self, Scalar exponent) -> pow.Tensor_Scalar:  self := 0
        add.out(self, other, *, alpha, Tensor(a!) out) -> add.Tensor:          out := 0
        rrelu_with_noise(self, Tensor(b!) noise, ...) -> Tensor
            -> rrelu_with_noise_functional -> (Tensor, noise_out):  returns 0; noise := 1
    """
    if op in _SPECIAL:
        return _SPECIAL[op]
    if op in _NEVER or op in RESIZES:
        raise UnsupportedError(
            f"aotgrad cannot compile `{op}`: it replaces a tensor's storage or size in place, "
            "which a functional graph cannot express. To continue: build a new tensor instead "
            "(e.g. `x = y.clone()` rather than `x.set_(y)`, `x.data = y` or `x.resize_(...)`).")
    for functional in _functional_candidates(op):
        rule = _rule_from_schemas(op, functional)
        if rule is not None:
            return rule
    raise UnsupportedError(
        f"aotgrad cannot compile `{op}`: it mutates {', '.join(written_arguments(op))} and aotgrad "
        "knows no functional form of it. To continue: use the out-of-place form of the op, or "
        "report the op so a rule can be added to aotgrad/functionalize/rules.py.")


def _functional_names(name: str) -> tuple[str, ...]:
    """Op names that may hold `name`'s functional form, likeliest first."""
    if name.startswith("__i") and name.endswith("__"):  # __iand__ -> __and__
        return ("__" + name[3:],)
    base = name.removesuffix("_")
    return tuple(dict.fromkeys((base, name, base + "_functional", name + "_functional")))


def _functional_candidates(op):
    """Overloads that may be op's functional form: `name_.x` -> `name.x` first, then the
    other overloads of `name` and `name_`, then `name_functional`."""
    namespace = getattr(torch.ops, op.namespace)
    packets = []
    for packet_name in _functional_names(op._schema.name.split("::")[-1]):
        try:
            packets.append(getattr(namespace, packet_name))
        except (AttributeError, RuntimeError):  # no such op
            continue
    for same_overload in (True, False):
        for packet in packets:
            for overload in packet.overloads():
                if (overload == op._overloadname) == same_overload:
                    candidate = getattr(packet, overload)
                    if candidate is not op and _is_functional(candidate):
                        yield candidate


def _is_functional(op) -> bool:
    """Writes nothing and returns fresh tensors (views like `transpose.int` do not qualify)."""
    return not written_arguments(op) and all(r.alias_info is None for r in op._schema.returns)


_TENSOR_OPTIONS = {"dtype": "Optional[int]", "layout": "Optional[int]", "device": "Optional[Device]",
                   "pin_memory": "Optional[bool]"}


def _rule_from_schemas(op, functional) -> MutationRule | None:
    written = written_arguments(op)
    dropped = tuple(name for name in written if _is_out_argument(op, name))
    options_from = _options_source(op, functional, dropped)
    if options_from is False:
        return None
    own = 0           # outputs of `functional` that are op's own results
    mutated: list[tuple[str, int]] = []
    returns: list[str | int] = []
    for r in op._schema.returns:
        aliased = _aliased_argument(op, r)
        if aliased is None or aliased in dropped:
            if aliased is not None:
                mutated.append((aliased, own))
            returns.append(own if aliased is None else aliased)
            own += 1
        else:
            returns.append(aliased)
    for name in dropped:  # out= arguments the op does not return (`_foreach_add.Scalar_out`)
        if name not in returns:
            mutated.append((name, own))
            own += 1
    in_place = [name for name in written if name not in dropped]
    mutated += [(name, own + k) for k, name in enumerate(in_place)]
    if len(functional._schema.returns) != own + len(in_place):
        return None
    return MutationRule(functional, tuple(mutated), tuple(returns), dropped, options_from)


def _options_source(op, functional, dropped: tuple[str, ...]):
    """None if `functional` takes exactly op's arguments; the out= argument whose dtype,
    layout and device fill a factory's extra TensorOptions; False if they do not match."""
    have = _argument_types(functional, ())
    want = _argument_types(op, dropped)
    if have == want:
        return None
    extra = {name: type_ for name, type_ in have.items() if name not in want}
    if (len(dropped) == 1 and extra and all(_TENSOR_OPTIONS.get(n) == t for n, t in extra.items())
            and all(have.get(name) == type_ for name, type_ in want.items())):
        return dropped[0]
    return False


def _aliased_argument(op, ret) -> str | None:
    if ret.alias_info is None or not ret.alias_info.is_write:
        return None
    for a in op._schema.arguments:
        if a.alias_info is not None and a.alias_info.before_set == ret.alias_info.before_set:
            return a.name
    return None


def _is_out_argument(op, name: str) -> bool:
    return any(a.name == name and a.kwarg_only for a in op._schema.arguments)


def _argument_types(op, dropped: tuple[str, ...]) -> dict[str, str]:
    return {a.name: str(a.type) for a in op._schema.arguments if a.name not in dropped}


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
