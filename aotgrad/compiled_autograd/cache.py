"""Captured graphs by key, the counters, and why a lookup missed.

In: a `compiler_fn` and a key from `collect`. Out: the compiled graph stored under them, or
None. `counters` is `aotgrad.counters["compiled_autograd"]`: captures (cache misses), compiles
(`compiler_fn` calls), eager_fallbacks (calls PyTorch's engine ran instead).
"""
from __future__ import annotations

from typing import Any, Callable

counters: dict[str, int] = {"captures": 0, "compiles": 0, "eager_fallbacks": 0}
_graphs: dict[tuple, Any] = {}

_HEADER = 4  # key entries before the first step's (see collect.collect)


def count(name: str) -> None:
    counters[name] = counters.get(name, 0) + 1


def lookup(compiler_fn: Callable, key: tuple):
    entry = _graphs.get((id(compiler_fn), key))
    return None if entry is None else entry[1]


def store(compiler_fn: Callable, key: tuple, compiled) -> None:
    _graphs[(id(compiler_fn), key)] = (compiler_fn, compiled)  # the function kept alive: its id stays its own


def miss_reason(compiler_fn: Callable, key: tuple, plans: list) -> str:
    """Which node makes this key new, against the stored key that agrees longest with it."""
    previous = [k for (fn_id, k) in _graphs if fn_id == id(compiler_fn)]
    best, best_len = None, -1
    for other in previous:
        n = 0
        for a, b in zip(key, other):
            if a != b:
                break
            n += 1
        if n > best_len:
            best, best_len = other, n
    sizes = sorted(len(k) for k in previous)
    if best is None or best_len < _HEADER:
        label = "torch::autograd::GraphRoot (NodeCall 0)"
    else:
        label = plans[min(best_len - _HEADER, len(plans) - 1)].label
    return f"new autograd node: {label} with key size {len(key)}, previous key sizes={sizes}"


def reset() -> None:
    _graphs.clear()
    for name in counters:
        counters[name] = 0
