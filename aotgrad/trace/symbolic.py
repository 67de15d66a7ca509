"""Symbolic sizes as graph values (dynamic shapes).

Under dynamic shapes a fake tensor's sizes are SymInts whose `node.expr` is a sympy
expression over the input symbols: `x.shape[0]` is `s0`, `x.view(-1)` has size
`s0*s1`. A recorded op that takes a size, `view(y, [2*s0, -1])`, must compute it
from the run-time inputs instead of baking in the example's value. `SymbolicValues`
binds each symbol to where the graph can read it (a SymInt placeholder, a
`sym_size`/`sym_stride`/`sym_storage_offset` of a tensor placeholder, or an op
output for data-dependent sizes) and turns any expression over bound symbols into FX
nodes, one node per distinct sub-expression:

    s0 = sym_size(x, 0)          # bound on first use
    mul = operator.mul(s0, 2)    # 2*s0
    view = aten.view(y, [mul, -1])

Symbolic floats and bools are values like any other (`x * math.sqrt(2.0 / a)` with a float
argument `a`, `scores / math.sqrt(q.shape[-1])`): `OpaqueUnaryFn_sqrt(FloatTrueDiv(2.0, zf0))`
becomes `torch._sym_sqrt(operator.truediv(2.0, item))`, the calls Dynamo's own graphs make.
An expression no such call builds is fixed at the example's value with a guard on its symbols.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import sympy
import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols, guard_scalar
from torch.utils._sympy import functions as symfn

from aotgrad.errors import UnsupportedError

aten = torch.ops.aten

SYMBOLIC_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)

# sympy function -> the Python operation on SymInts/SymFloats/SymBools that builds it; the
# graph calls the same operation on the call's ints, floats and bools (as Dynamo's graphs do).
# Two or more arguments: applied left to right, `max(a, b, c)` as `sym_max(sym_max(a, b), c)`.
_BINARY: dict[type, Callable] = {
    symfn.FloorDiv: operator.floordiv,
    symfn.CleanDiv: operator.floordiv,
    symfn.Mod: operator.mod,
    symfn.PythonMod: operator.mod,
    sympy.Mod: operator.mod,
    sympy.Max: torch.sym_max,
    symfn.Max: torch.sym_max,
    sympy.Min: torch.sym_min,
    symfn.Min: torch.sym_min,
    sympy.Eq: operator.eq,
    sympy.Ne: operator.ne,
    sympy.Lt: operator.lt,
    sympy.Le: operator.le,
    sympy.Gt: operator.gt,
    sympy.Ge: operator.ge,
    symfn.IntTrueDiv: operator.truediv,     # int / int: Python's exact quotient, rounded once
    symfn.FloatTrueDiv: operator.truediv,
    symfn.FloatPow: operator.pow,
    symfn.PowByNatural: operator.pow,
    symfn.RoundDecimal: round,              # round(x, ndigits)
    symfn.LShift: operator.lshift,
    symfn.RShift: operator.rshift,
    symfn.BitwiseFn_bitwise_and: operator.and_,
    symfn.BitwiseFn_bitwise_or: operator.or_,
    symfn.BitwiseFn_bitwise_xor: operator.xor,
    sympy.And: operator.and_,
    sympy.Or: operator.or_,
}

# one-argument functions: conversions, rounding, and the math functions of SymFloats
_UNARY: dict[type, Callable] = {
    symfn.ToFloat: torch.sym_float,
    symfn.TruncToInt: math.trunc,           # int(x), torch.sym_int(x)
    symfn.FloorToInt: math.floor,
    sympy.floor: math.floor,
    symfn.CeilToInt: math.ceil,
    sympy.ceiling: math.ceil,
    symfn.RoundToInt: round,
    sympy.Abs: abs,
    sympy.Not: torch.sym_not,
    # math.sqrt(x), math.cos(x), ... on a SymFloat: torch._sym_sqrt, ... (sym_node's math_op_names)
    **{getattr(symfn, f"OpaqueUnaryFn_{name}"): getattr(torch, f"_sym_{name}")
       for name in ("sqrt", "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos", "atan", "log2")},
}


_WHAT = {torch.SymInt: "a size", torch.SymFloat: "a symbolic float", torch.SymBool: "a symbolic bool"}


def is_symbolic(value: Any) -> bool:
    """A SymInt/SymFloat/SymBool that is not a known constant."""
    return isinstance(value, SYMBOLIC_TYPES) and value.node.maybe_as_int() is None \
        and not value.node.expr.is_number


def has_symbols(values: Any) -> bool:
    """Some number in `values` (a nest of containers) is a SymInt/SymFloat/SymBool, or some
    tensor's size, stride or offset is symbolic."""
    return any(isinstance(v, SYMBOLIC_TYPES) or (isinstance(v, torch.Tensor) and v._has_symbolic_sizes_strides)
               for v in pytree.tree_leaves(values))


def free_symbols(value: Any) -> set:
    """The symbols a SymInt/SymFloat/SymBool, or a nest of tuples and lists of them, uses."""
    if isinstance(value, SYMBOLIC_TYPES):
        return set(value.node.expr.free_symbols)
    if isinstance(value, (tuple, list)):
        return set().union(*(free_symbols(v) for v in value))
    return set()


def has_symbolic_shape(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return any(is_symbolic(s) for s in (*value.shape, *value.stride(), value.storage_offset()))
    return is_symbolic(value)


class SymbolicValues:
    """Graph values for symbolic sizes, for one graph being recorded."""

    def __init__(self, graph: fx.Graph):
        self.graph = graph
        # symbol -> how to read it: a node, or (tensor node, "size" | "stride" | "offset", dim, its SymInt)
        self.sources: dict[sympy.Symbol, Any] = {}
        self.nodes: dict[sympy.Expr, fx.Node] = {}  # expression -> the node computing it
        self.vals: dict[sympy.Expr, Any] = {}        # expression -> a SymInt with that expression

    # -- binding ----------------------------------------------------------------
    def bind_input(self, node: fx.Node, value: Any) -> None:
        """A placeholder (or an op output): its symbols not bound yet are read from it."""
        if isinstance(value, SYMBOLIC_TYPES):
            expr = value.node.expr
            if isinstance(expr, sympy.Symbol) and expr not in self.sources:
                self.sources[expr] = node
                self.nodes[expr], self.vals[expr] = node, value
            return
        if not isinstance(value, torch.Tensor) or not value._has_symbolic_sizes_strides:
            return
        where = [("size", d, s) for d, s in enumerate(value.shape)]
        where += [("stride", d, s) for d, s in enumerate(value.stride())]
        where.append(("offset", 0, value.storage_offset()))
        for kind, dim, size in where:
            if isinstance(size, torch.SymInt):
                expr = size.node.expr
                if isinstance(expr, sympy.Symbol) and expr not in self.sources:
                    self.sources[expr] = (node, kind, dim, size)

    def input_sources(self, placeholders: list[fx.Node]) -> dict:
        """symbol -> (input index, "size" | "stride" | "offset" | "value", dim): where each
        symbol bound to one of `placeholders` (in input order) is read from the inputs."""
        index = {node: i for i, node in enumerate(placeholders)}
        where = {}
        for symbol, source in self.sources.items():
            if isinstance(source, fx.Node):
                if source in index:
                    where[symbol] = (index[source], "value", 0)
            elif source[0] in index:
                where[symbol] = (index[source[0]], source[1], source[2])
        return where

    def value_of(self, symbol: sympy.Symbol) -> Any:
        """A SymInt (SymFloat, SymBool) that is `symbol`, if the trace has bound it."""
        source = self.sources.get(symbol)
        if isinstance(source, tuple):
            return source[3]
        return self.vals.get(symbol)

    # -- expressions ------------------------------------------------------------
    def node_for(self, value: Any, what: str | None = None) -> Any:
        """The graph value of a SymInt/SymFloat/SymBool: an int (bool, float) if it is a
        constant, else the node computing its expression. `what` names the value in errors."""
        what = what or _WHAT[type(value)]
        constant = value.node.maybe_as_int() if isinstance(value, torch.SymInt) else None
        if constant is not None:
            return constant
        expr = value.node.expr
        if expr.is_number or expr in (sympy.true, sympy.false):
            # of the value's type: sympy writes the SymFloat `a - a` as the Integer 0, and
            # `int_tensor * 0` would stay an int tensor where `int_tensor * 0.0` is a float one
            return value.node.pytype(_python_number(expr))
        return self._emit(expr, value, what)

    def _emit(self, expr: sympy.Expr, val: Any, what: str) -> Any:
        if expr.is_Integer:
            return int(expr)
        if expr in (sympy.true, sympy.false):
            return bool(expr)
        node = self.nodes.get(expr)
        if node is not None:
            return node
        if isinstance(expr, sympy.Symbol):
            node, val = self._read(expr, what)
        else:
            node, val = self._compute(expr, what)
        if isinstance(node, fx.Node):
            node.meta["val"] = val
            self.nodes[expr], self.vals[expr] = node, val
        return node

    def _read(self, symbol: sympy.Symbol, what: str) -> tuple[fx.Node, Any]:
        source = self.sources.get(symbol)
        if source is None:
            raise UnsupportedError(
                f"aotgrad: {what} depends on the symbol {symbol}, which no input of the traced "
                "function carries (a data-dependent size from `nonzero`, `.item()` or "
                "`.tolist()` made outside the graph, or a size guarded away). To continue: "
                "mark the size static (`torch._dynamo.mark_static`), or compute the size "
                "from an input's shape inside the function.")
        if isinstance(source, fx.Node):
            return source, self.vals[symbol]
        tensor_node, kind, dim, val = source
        op = {"size": aten.sym_size.int, "stride": aten.sym_stride.int,
              "offset": aten.sym_storage_offset.default}[kind]
        args = (tensor_node,) if kind == "offset" else (tensor_node, dim)
        node = self.graph.call_function(op, args)  # at the first use; later uses are after it
        node.meta.update({k: tensor_node.meta[k] for k in ("stack_trace",) if k in tensor_node.meta})
        return node, val

    def _compute(self, expr: sympy.Expr, what: str) -> tuple[Any, Any]:
        """Nodes for a compound expression, built from its parts' nodes and values; an
        expression no Python operation builds is specialised (`_specialise`)."""
        if isinstance(expr, sympy.Add):
            return self._fold(expr.args, operator.add, what)
        if isinstance(expr, sympy.Mul):
            return self._fold(expr.args, operator.mul, what)
        if isinstance(expr, sympy.Pow) and expr.exp.is_Integer:  # `s0*s0` is Pow(s0, 2)
            return self._fold((expr.base, expr.exp), operator.pow, what)
        if isinstance(expr, sympy.Piecewise):
            return self._choice(list(expr.args), what)
        if isinstance(expr, symfn.Where):
            return self._choice([(expr.args[1], expr.args[0]), (expr.args[2], sympy.true)], what)
        if isinstance(expr, symfn.Identity):
            return self._part(expr.args[0], what)
        if isinstance(expr, symfn.ModularIndexing):  # (x // div) % mod
            base, divisor, modulus = expr.args
            return self._fold((symfn.FloorDiv(base, divisor), modulus), operator.mod, what)
        unary = _UNARY.get(type(expr))
        if unary is not None and len(expr.args) == 1:
            node, val = self._part(expr.args[0], what)
            return self._call(unary, (node,), unary(val))
        binary = _BINARY.get(type(expr))
        if binary is not None and len(expr.args) >= 2:
            return self._fold(expr.args, binary, what)
        return self._specialise(expr, what)

    def _specialise(self, expr: sympy.Expr, what: str) -> tuple[Any, Any]:
        """An expression no Python operation on SymInts/SymFloats/SymBools builds (sympy's own
        functions, Inductor's indexing helpers): its value at the example's sizes, with guards
        that each symbol it uses keeps its value (Dynamo checks them per call, aot_function
        traces again). The guards name the symbols, not the expression: guard code cannot
        print every sympy function, and a float compared for equality may miss by an ulp."""
        cannot = (f"aotgrad: {what} is the symbolic expression {expr}, and aotgrad cannot express "
                  f"`{type(expr).__name__}` in a graph")
        unbacked = sorted(free_unbacked_symbols(expr), key=str)
        if unbacked:
            raise UnsupportedError(
                f"{cannot}; it cannot fix its value either, because {', '.join(map(str, unbacked))} "
                "is known only when the graph runs (it comes from a tensor's data, e.g. `.item()`). "
                "To continue: compute the value with Python operators or math functions, or "
                "compile without dynamic=True.")
        values = {}
        for symbol in sorted(expr.free_symbols, key=str):
            if self.value_of(symbol) is None:
                self._read(symbol, what)  # raises: no input carries it
            values[symbol] = sympy_number(guard_scalar(self.value_of(symbol)))
        number = expr.xreplace(values)
        if not (number.is_number or number in (sympy.true, sympy.false)):
            raise UnsupportedError(
                f"{cannot}, nor evaluate it at the example's sizes (it stays {number}). To continue: "
                "mark the sizes involved static (`torch._dynamo.mark_static`, or compile without "
                "dynamic=True).")
        value = bool(number) if isinstance(number, sympy.logic.boolalg.BooleanAtom) \
            else int(number) if expr.is_integer else float(number)
        return value, value

    def _choice(self, pieces: list, what: str) -> tuple[Any, Any]:
        """Piecewise((e1, c1), (e2, c2), ..., (en, True)) as nested sym_ite(c1, e1, ...)."""
        (value, condition), rest = pieces[0], pieces[1:]
        if condition == sympy.true or not rest:
            return self._part(value, what)
        if_true = self._part(value, what)
        if_false = self._choice(rest, what)
        cond_node, cond_val = self._part(condition, what)
        return self._call(torch.sym_ite, (cond_node, if_true[0], if_false[0]),
                          torch.sym_ite(cond_val, if_true[1], if_false[1]))

    def _fold(self, parts, op: Callable, what: str) -> tuple[Any, Any]:
        node, val = self._part(parts[0], what)
        for part in parts[1:]:
            right, right_val = self._part(part, what)
            node, val = self._call(op, (node, right), op(val, right_val))
        return node, val

    def _part(self, expr: sympy.Expr, what: str) -> tuple[Any, Any]:
        if expr.is_number or expr in (sympy.true, sympy.false):
            value = _python_number(expr)
            return value, value
        node = self._emit(expr, None, what)
        if not isinstance(node, fx.Node):  # specialised: a constant
            return node, node
        return node, self.vals[expr]

    def _call(self, op: Callable, args: tuple, val: Any) -> tuple[Any, Any]:
        """`op(*args)` as a node, or `val` itself when no argument is a node (a constant)."""
        if not any(isinstance(a, fx.Node) for a in args):
            return val, val
        node = self.graph.call_function(op, args)
        node.meta["val"] = val
        if isinstance(val, SYMBOLIC_TYPES):
            self.nodes.setdefault(val.node.expr, node)
            self.vals.setdefault(val.node.expr, val)
        return node, val


def sympy_number(value: int | float | bool) -> sympy.Basic:
    """A symbol's value for sympy: a float stays a Float (as an Integer, `floor(2*zf)` at
    zf = 1.75 would come out 2, not 3), a bool is true or false."""
    if isinstance(value, bool):
        return sympy.true if value else sympy.false
    return sympy.Float(value) if isinstance(value, float) else sympy.Integer(value)


def _python_number(expr: sympy.Expr) -> Any:
    if expr.is_Integer:
        return int(expr)
    if expr in (sympy.true, sympy.false):
        return bool(expr)
    if expr.is_Rational and not expr.is_Integer:
        raise UnsupportedError(f"aotgrad: the size expression has a fraction ({expr}), which "
                               "aotgrad cannot express with integer operations.")
    return float(expr)
