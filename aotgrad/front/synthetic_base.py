"""Inputs that share memory with one of them written: compiled over one synthetic base (the
memory they share), each input a view of it, and the caller's tensors given back their
geometry after the call (`SyntheticBase`); `size_carrier` passes a size as a tensor."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode

from aotgrad.errors import UnsupportedError

@dataclass
class SyntheticBase:
    """Inputs that share memory and are mutated are passed as their common base instead;
    the traced function rebuilds them as views of it, so a write through one is seen
    through the others, and the base's new value is written back once.

    before: fn(a, b) with a = base[0:2], b = base[1:3], a mutated
    after:  fn'(base) = fn(base.as_strided([2], [1], 0), base.as_strided([2], [1], 1))

    An output that is one of the rebuilt inputs itself (`return (a,)`) is the caller's
    tensor in eager, not a new view: `returned_inputs`, learnt while tracing, says which,
    and `run` hands back the caller's tensors there. An input whose geometry the function
    changes in place (`b.t_()`) gets it with `as_strided_` after the call.

    With aot_function(dynamic=True) the views are traced at their example's sizes, strides
    and offsets (only the base's sizes are symbols): `matches` says whether a call's inputs
    have that geometry, and other geometries compile again. When the examples' geometry is
    itself symbolic (torch.compile's fakes), each view's sizes, strides and offset are passed
    as size carriers after the base instead, and the trace reads them from those.
    """

    group: list[int]                       # positions among the unique inputs
    views: list[tuple]                     # (size, stride, storage_offset) of each, absolute
    base: tuple                            # the base's (size, stride, storage_offset)
    returned_inputs: dict[int, int] = field(default_factory=dict)  # flat output -> unique input it is
    # unique input -> its (size, stride, storage_offset) after the function changed it in place
    # (`t_()`), learnt while tracing; `run` gives the caller's tensor that geometry
    changed_geometry: dict[int, tuple] = field(default_factory=dict)
    symbolic: bool = False                 # the geometry is passed per call (size carriers)

    @staticmethod
    def of(unique: Sequence[torch.Tensor], group: list[int], error: Exception) -> "SyntheticBase":
        bases = {id(_base_of(unique[i])) for i in group}
        if len(bases) != 1:
            raise error
        base = _base_of(unique[group[0]])
        for i in group:
            if unique[i].requires_grad and unique[i].grad_fn is None and unique[i] is not base:
                raise UnsupportedError(
                    f"{error}\n(aotgrad rebuilds such inputs as views of their common base, but input {i} is a "
                    "view that requires grad without a grad_fn, a leaf of its own (made with `requires_grad_()` "
                    "or under `torch.no_grad()`): its gradient cannot flow through the base.)")
        views = [_geometry(unique[i]) for i in group]
        symbolic = any(isinstance(v, torch.SymInt) for v in pytree.tree_leaves(views))
        return SyntheticBase(group, views, _geometry(base), symbolic=symbolic)

    def matches(self, tensors: Sequence[torch.Tensor], keep: Sequence[int], base_too: bool) -> bool:
        """Do these inputs have the traced views' geometry (and the base's, if `base_too`)?"""
        unique = [tensors[i] for i in keep]
        return ([_geometry(unique[i]) for i in self.group] == self.views
                and (not base_too or _geometry(_base_of(unique[self.group[0]])) == self.base))

    def inputs(self, tensors: Sequence[torch.Tensor], keep: Sequence[int]) -> list[torch.Tensor]:
        unique = [tensors[i] for i in keep]
        base = _base_of(unique[self.group[0]])
        others = [t for i, t in enumerate(unique) if i not in self.group]
        if not self.symbolic:
            return others + [base]
        geometry = pytree.tree_leaves([_geometry(unique[i]) for i in self.group])
        fake_mode = detect_fake_mode([base])
        return others + [base] + [size_carrier(n, fake_mode) for n in geometry]

    def run(self, runtime: Callable, tensors: Sequence[torch.Tensor], keep: Sequence[int]) -> list:
        outs = runtime(self.inputs(tensors, keep))
        for i, geometry in self.changed_geometry.items():
            tensor = tensors[keep[i]]
            # (after the base's write-back) A leaf that requires grad can only have changed its
            # geometry in place under no_grad (eager refuses it otherwise): so here too
            with torch.no_grad() if tensor.is_leaf and tensor.requires_grad else contextlib.nullcontext():
                tensor.as_strided_(*geometry)
        for k, i in self.returned_inputs.items():
            outs[k] = tensors[keep[i]]
        return outs

    def wrap(self, flat_fn: Callable) -> Callable:
        group, views = self.group, self.views
        num_carriers = len(pytree.tree_leaves(views)) if self.symbolic else 0

        def with_views(*args):
            if num_carriers:  # the views' geometry, read from the carriers' sizes
                args, carriers = args[:-num_carriers], args[-num_carriers:]
                _, spec = pytree.tree_flatten(views)
                geometry = pytree.tree_unflatten([c.shape[0] for c in carriers], spec)
            else:
                geometry = views
            base, rest = args[-1], iter(args[:-1])
            n = len(args) - 1 + len(group)
            rebuilt = {i: base.as_strided(*view) for i, view in zip(group, geometry)}
            before = {i: (_geometry(v), v.requires_grad) for i, v in rebuilt.items()}
            outs = flat_fn(*[rebuilt[i] if i in rebuilt else next(rest) for i in range(n)])
            self.changed_geometry = {}
            for i, v in rebuilt.items():
                if (_geometry(v), v.requires_grad) == before[i]:
                    continue
                if v.requires_grad != before[i][1] or self.symbolic or any(
                        isinstance(n, torch.SymInt) for n in pytree.tree_leaves(_geometry(v))):
                    raise UnsupportedError(
                        f"aotgrad cannot compile this function: input {i} shares memory with input(s) "
                        f"{[j for j in group if j != i]}, one of them is written in place, and input {i}'s "
                        "requires_grad, or its shape and strides under dynamic shapes, are changed in place "
                        "(`requires_grad_()`, `t_()`...). To continue: pass `.clone()` of one of them, or use "
                        "the out-of-place op (`x = x.t()`).")
                self.changed_geometry[i] = _geometry(v)
            self.returned_inputs = {k: i for k, out in enumerate(outs) for i, view in rebuilt.items()
                                    if out is view}
            return outs
        return with_views


_CARRIER_BASE = torch.empty(())


def size_carrier(n, fake_mode=None) -> torch.Tensor:
    """A tensor whose one size is n and that holds no memory (a 0-d tensor expanded): a
    graph reads n as its size, so a number becomes a symbol the trace can read. A fake
    one in `fake_mode` (tracing; n may be a SymInt)."""
    if fake_mode is None:
        return _CARRIER_BASE.expand(n)
    with fake_mode:
        return torch.empty(()).expand(n)


def _geometry(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), t.storage_offset()


def _base_of(t: torch.Tensor) -> torch.Tensor:
    return t._base if t._base is not None else t
