"""Symbolic sizes in the runtime's plan, made concrete per call (dynamic shapes).

The epilogue rebuilds an output that views an input from recorded sizes and view
arguments; under dynamic shapes those are SymInts (`2*s0`). `SymbolSources` says where
each symbol is read from the real inputs (input index, size/stride/offset, dim), and
`concrete` substitutes the call's values into any SymInt (also inside tuples and lists).

    sources: {s0: (0, "size", 0)}      inputs[0].shape == (5, 6)  ->  2*s0 == 10
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import sympy
import torch

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
    """symbol -> (input index, "size" | "stride" | "offset" | "value", dim)."""

    where: dict

    def bind(self, inputs: Sequence[Any]) -> dict:
        env = {}
        for symbol, (index, kind, dim) in self.where.items():
            value = inputs[index]
            env[symbol] = sympy.Integer(value.shape[dim] if kind == "size" else value.stride(dim)
                                        if kind == "stride" else value.storage_offset() if kind == "offset"
                                        else value)
        return env


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
