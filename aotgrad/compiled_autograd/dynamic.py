"""Sizes that change between backward calls: which may become symbols, and what a graph
with symbols assumes.

A key is a structure (hashable) plus a list of sizes (`SizeList`): every dim of the root
gradients, of the saved tensors and of each node's input metadata, and the saved size
values of the built-in nodes in `FORMULAS` / `LAYOUT_ONLY`. A size that changed between two
calls of one structure is marked dynamic and the graph is captured again with a symbol
there (`Symbols`); the guards the trace leaves on the symbols (`Guards`) decide whether a
later call may reuse it. A built-in node reads its saved sizes itself, as concrete ints, so
those can be symbols only where aotgrad runs the node's formula itself (`FORMULAS`) or
where the node uses them only to pick a memory layout (`LAYOUT_ONLY`; the layout is in the
structure).
"""
from __future__ import annotations

from typing import Any, Callable

import sympy
import torch
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

from aotgrad.analysis import is_dense_layout


_CONTIGUOUS: dict[int, tuple] = {}
_OTHER: dict[tuple, tuple] = {}  # (shape, strides, offset) -> layout, for the rest


def layout(t: torch.Tensor) -> tuple:
    """What a graph assumes about a tensor's memory besides its sizes: dense tensors by the
    order of their dims (strides follow from the sizes), others by their exact strides."""
    if t.layout is not torch.strided or t.is_nested:  # (no strides: collect refuses these, a match fails)
        return ("not strided", t.layout, t.is_nested)
    if t.dim() == 0:
        return ("scalar",)
    if t.is_contiguous() and t.storage_offset() == 0 and 1 not in t.shape:  # the common case, fast
        return contiguous_layout(t.dim())
    geometry = (t.shape, t.stride(), t.storage_offset())
    known = _OTHER.get(geometry)
    if known is None:
        if len(_OTHER) > 4096:
            _OTHER.clear()
        known = _OTHER[geometry] = _layout_of(*geometry)
    return known


def contiguous_layout(n: int) -> tuple:
    """The layout of a contiguous tensor of rank `n` without size-1 dims (as `_layout_of` says)."""
    known = _CONTIGUOUS.get(n)
    if known is None:
        known = _CONTIGUOUS[n] = ("dense", tuple(reversed(range(n))), ())
    return known


def _layout_of(shape, strides, offset) -> tuple:
    if offset == 0 and is_dense_layout(shape, strides):
        return ("dense", tuple(sorted(range(len(shape)), key=lambda d: (strides[d], -d))),
                tuple(d for d, s in enumerate(shape) if s == 1))
    return ("strided", strides, offset)


class SizeValues:
    """The sizes of one key, in collection order (all a cache hit needs)."""

    def __init__(self):
        self.values: list[int] = []

    def add(self, values, owner: int, capable: bool = True) -> int:
        start = len(self.values)
        self.values.extend(values)
        return start

    def tensor(self, t, owner: int) -> tuple[Any, int]:
        """The structure part of a tensor, and where its dims start in the list."""
        if t is None:
            return None, -1
        memory = layout(t)  # strided (not dense) tensors keep static sizes: their strides are exact
        return (t.dtype, t.device, t.dim(), memory), self.add(t.shape, owner, capable=memory[0] != "strided")


class SizeList(SizeValues):
    """The sizes of one key, with the step each belongs to (0: the roots) and whether it may
    become a symbol (both worked out only on a miss)."""

    def __init__(self):
        super().__init__()
        self._segments: list[tuple[int, int, bool]] = []  # (start, owner, capable)

    def add(self, values, owner: int, capable: bool = True) -> int:
        start = len(self.values)
        self.values.extend(values)
        self._segments.append((start, owner, capable))
        return start

    def _expanded(self, field: int) -> list:
        out = []
        segments = self._segments + [(len(self.values), None, None)]
        for (start, *info), (end, *_) in zip(segments, segments[1:]):
            out.extend([info[field]] * (end - start))
        return out

    @property
    def owners(self) -> list[int]:
        return self._expanded(0)

    @property
    def capable(self) -> list[bool]:
        return self._expanded(1)


# --- built-in nodes whose saved sizes may be symbols ---------------------------------------

def _sum_backward(grad, sizes, dims, keepdim):
    """FunctionsManual's sum_backward: unsqueeze the reduced dims back, then expand."""
    if not keepdim and len(sizes) > 0 and dims:
        n = len(sizes)
        for d in sorted(d % n for d in dims):
            grad = grad.unsqueeze(d)
    return grad.expand(sizes)


def _formula_sum0(node, grads, values):
    return [_sum_backward(grads[0], values["_saved_self_sym_sizes"], None, False)]


def _formula_sum1(node, grads, values):
    return [_sum_backward(grads[0], values["_saved_self_sym_sizes"], node._saved_dim, node._saved_keepdim)]


def _formula_mean0(node, grads, values):
    return [grads[0].expand(values["_saved_self_sym_sizes"]) / values["_saved_self_sym_numel"]]


def _formula_mean1(node, grads, values):
    sizes = values["_saved_self_sym_sizes"]
    dims = node._saved_dim
    if not dims:
        count = values["_saved_self_sym_numel"]
    else:
        count = 1
        for d in dims:
            count = count * sizes[d % len(sizes)]
    return [_sum_backward(grads[0], sizes, dims, node._saved_keepdim) / count]


def _formula_reshape(node, grads, values):
    return [grads[0].reshape(values["_saved_self_sym_sizes"])]


def _formula_expand(node, grads, values):
    return [grads[0].sum_to_size(values["_saved_self_sym_sizes"])]


# node name -> (saved size attributes, formula(node, grads, {attribute: symbolic value}))
FORMULAS: dict[str, tuple[tuple[str, ...], Callable]] = {
    "SumBackward0": (("_saved_self_sym_sizes",), _formula_sum0),
    "SumBackward1": (("_saved_self_sym_sizes",), _formula_sum1),
    "MeanBackward0": (("_saved_self_sym_sizes", "_saved_self_sym_numel"), _formula_mean0),
    "MeanBackward1": (("_saved_self_sym_sizes", "_saved_self_sym_numel"), _formula_mean1),
    "ViewBackward0": (("_saved_self_sym_sizes",), _formula_reshape),
    "UnsafeViewBackward0": (("_saved_self_sym_sizes",), _formula_reshape),
    "ReshapeAliasBackward0": (("_saved_self_sym_sizes",), _formula_reshape),
    "ExpandBackward0": (("_saved_self_sym_sizes",), _formula_expand),
}

# node name -> saved size attributes its formula only compares to pick a layout
LAYOUT_ONLY: dict[str, tuple[str, ...]] = {
    "MmBackward0": ("_saved_self_sym_sizes", "_saved_self_sym_strides", "_saved_mat2_sym_sizes",
                    "_saved_mat2_sym_strides"),
    "AddmmBackward0": ("_saved_mat1_sym_sizes", "_saved_mat1_sym_strides", "_saved_mat2_sym_sizes",
                       "_saved_mat2_sym_strides"),
}


_symbolic_by_type: dict[type, tuple[str, ...]] = {}


def symbolic_attributes(node_type: type) -> tuple[str, ...]:
    """The saved size values of a built-in node class that may be symbols."""
    known = _symbolic_by_type.get(node_type)
    if known is None:
        name = node_type.__name__
        known = _symbolic_by_type[node_type] = FORMULAS[name][0] if name in FORMULAS else LAYOUT_ONLY.get(name, ())
    return known


# --- capture with symbols ----------------------------------------------------------------

class Symbols:
    """The fake mode of a capture and each size position's value in it: an int, or (dynamic
    positions) a symbol; positions with equal values share one (duck sizing)."""

    def __init__(self, sizes: list[int], dynamic: frozenset):
        self.sizes = sizes
        self.dynamic = dynamic
        self.shape_env = ShapeEnv() if dynamic else None
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False, shape_env=self.shape_env)
        self._symbols: dict[int, Any] = {}

    def size(self, i: int):
        if i not in self.dynamic:
            return self.sizes[i]
        symbol = self._symbols.get(i)
        if symbol is None:
            env = self.shape_env
            value = self.sizes[i]
            expr = env.create_symbol(value, ConstantSource(f"size_{i}"), dynamic_dim=DimDynamic.DUCK)
            symbol = self._symbols[i] = env.create_symintnode(expr, hint=value)
        return symbol

    def shape(self, start: int, n: int) -> tuple:
        return tuple(self.size(i) for i in range(start, start + n))

    def fake(self, value: torch.Tensor, start: int, name: str) -> torch.Tensor:
        dims = range(start, start + value.dim())
        if self.shape_env is None or not any(i in self.dynamic for i in dims):
            return self.fake_mode.from_tensor(value, static_shapes=True)
        context = StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DUCK if i in self.dynamic else DimDynamic.STATIC for i in dims])
        fake = self.fake_mode.from_tensor(value, source=ConstantSource(name), symbolic_context=context)
        for i, d in zip(dims, range(value.dim())):
            if i in self.dynamic:
                self._symbols.setdefault(i, fake.shape[d])
        return fake

    def guards(self) -> "Guards":
        return Guards(self)


class Guards:
    """What a symbolic graph assumes about its sizes: positions that shared a symbol stay
    equal, positions the trace found to be expressions of others (a view's `b*t`) equal
    them, and the trace's guards hold. `specialized`: dynamic positions the trace fixed to
    a constant (they cannot vary; the caller captures them static)."""

    def __init__(self, symbols: Symbols):
        env = symbols.shape_env
        self.positions: dict[sympy.Symbol, list[int]] = {}
        self.derived: list[tuple[int, sympy.Expr]] = []
        self.specialized: set[int] = set()
        for i, value in sorted(symbols._symbols.items()):
            expr = value.node.expr if isinstance(value, torch.SymInt) else sympy.Integer(value)
            if expr.is_number:
                self.specialized.add(i)
            elif isinstance(expr, sympy.Symbol):
                self.positions.setdefault(expr, []).append(i)
            else:
                self.derived.append((i, expr))
        self.exprs = []
        for guard in (env.guards if env is not None else ()):
            expr = env.simplify(guard.expr)  # in terms of the symbols that remain
            if expr is not sympy.true:
                self.exprs.append(expr)
        self._passed: set[tuple] = set()

    def hold(self, sizes: list[int]) -> bool:
        values = {}
        for symbol, positions in self.positions.items():
            value = sizes[positions[0]]
            if value < 2 or any(sizes[i] != value for i in positions[1:]):
                return False
            values[symbol] = value
        key = tuple(sizes[i] for i, _ in self.derived) + tuple(values[s] for s in self.positions)
        if key in self._passed:
            return True
        replacements = {s: sympy.Integer(v) for s, v in values.items()}
        for i, expr in self.derived:
            if expr.xreplace(replacements) != sympy.Integer(sizes[i]):
                return False
        for expr in self.exprs:
            if expr.xreplace(replacements) is not sympy.true:
                return False
        self._passed.add(key)
        return True
