"""Symbolic sizes in the runtime's plan, made concrete per call (dynamic shapes).

The epilogue rebuilds an output that views an input from recorded sizes and view
arguments; under dynamic shapes those are SymInts (`2*s0`). `SymbolSources` says where
each symbol is read from the real inputs (input index, size/stride/offset, dim) or,
for data-dependent sizes, from the compiled forward's outputs, and
`concrete` substitutes the call's values into any SymInt (also inside tuples and lists).

    sources: {s0: (0, "size", 0)}      inputs[0].shape == (5, 6)  ->  2*s0 == 10
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import sympy
import torch

from aotgrad.trace.symbolic import sympy_number

SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def has_symbols(value: Any) -> bool:
    if isinstance(value, SYMBOLIC):
        return not value.node.expr.is_number
    if isinstance(value, (tuple, list)):
        return any(has_symbols(v) for v in value)
    if isinstance(value, dict):
        return any(has_symbols(v) for v in value.values())
    return False


@dataclass(frozen=True)
class SymbolSources:
    """symbol -> (input index, "size" | "stride" | "offset" | "value", dim); and for the
    symbols no input carries (data-dependent sizes, `nonzero`), where the compiled
    forward's outputs carry them: symbol -> (output index, "size" | "stride", dim)."""

    where: dict
    in_outputs: dict = field(default_factory=dict)

    def bind(self, inputs: Sequence[Any], outs: Sequence[Any] = ()) -> dict:
        env = {}
        for symbol, (index, kind, dim) in self.where.items():
            env[symbol] = sympy_number(_read(inputs[index], kind, dim))
        for symbol, (index, kind, dim) in self.in_outputs.items():
            env[symbol] = sympy_number(_read(outs[index], kind, dim))
        return env

    @staticmethod
    def of(where: dict, forward_outputs: Sequence[Any], symbol_outputs: dict | None = None) -> "SymbolSources":
        """`where` plus, for symbols it lacks, a forward output that is one (a 0-d tensor,
        `symbol_outputs`) or whose size or stride is one."""
        in_outputs = {symbol: (index, "value", 0) for symbol, index in (symbol_outputs or {}).items()}
        for index, out in enumerate(forward_outputs):
            if not isinstance(out, torch.Tensor):
                continue
            for kind, values in (("size", out.shape), ("stride", out.stride())):
                for dim, v in enumerate(values):
                    if isinstance(v, torch.SymInt) and isinstance(v.node.expr, sympy.Symbol):
                        if v.node.expr not in where and v.node.expr not in in_outputs:
                            in_outputs[v.node.expr] = (index, kind, dim)
        return SymbolSources(where, in_outputs)


def _read(value: Any, kind: str, dim: int) -> Any:
    if kind == "size":
        return value.shape[dim]
    if kind == "stride":
        return value.stride(dim)
    if kind == "offset":
        return value.storage_offset()
    return value.item() if isinstance(value, torch.Tensor) else value


def concrete(value: Any, env: dict) -> Any:
    """`value` with every SymInt/SymFloat/SymBool replaced by its value under `env`."""
    if isinstance(value, SYMBOLIC):
        expr = value.node.expr.xreplace(env)
        if not expr.is_number and expr not in (sympy.true, sympy.false):
            missing = sorted(str(s) for s in expr.free_symbols)
            raise RuntimeError(f"aotgrad: the size {value.node.expr} depends on {missing}, which no input "
                               "carries; compile with static shapes for this function.")
        kind = type(value)
        return bool(expr) if kind is torch.SymBool else int(expr) if kind is torch.SymInt else float(expr)
    if isinstance(value, tuple):
        return tuple(concrete(v, env) for v in value)
    if isinstance(value, list):
        return [concrete(v, env) for v in value]
    return value
