"""Eager as the oracle for compiled autograd: run a step function eagerly, then inside
`aotgrad.compiled_autograd.enable`, and compare everything it returns exactly."""
from __future__ import annotations

from collections import Counter
from typing import Callable

import torch

import aotgrad
from aotgrad import compiled_autograd


def nop_compiler(gm):
    return gm


def _same(a, b, exact: bool) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return torch.equal(a, b) if exact else torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y, exact) for x, y in zip(a, b))
    return a == b


def check(fn: Callable[[], list], *, compiler: Callable = nop_compiler, captures: int | None = None,
          compiles: int | None = None, exact: bool = True) -> list:
    """`fn()` returns a list of values (tensors, None, bools, ...): eager and compiled must agree
    (tensors bitwise with the nop compiler). Checks the capture/compile counts when given.
    The compiled run is repeated with the caches kept (its backwards then hit the cache, most
    through replay.py's fast path): it must agree with eager too."""
    compiled_autograd.reset()
    torch.manual_seed(123)
    expected = fn()
    torch.manual_seed(123)
    with compiled_autograd.enable(compiler):
        actual = fn()
        assert _same(expected, actual, exact), f"eager {expected}\ncompiled {actual}"
        counts = Counter(aotgrad.counters["compiled_autograd"])
        if captures is not None:
            assert counts["captures"] == captures, counts
        if compiles is not None:
            assert counts["compiles"] == compiles, counts
        assert counts["eager_fallbacks"] == 0, counts
        torch.manual_seed(123)
        again = fn()
    assert _same(expected, again, exact), f"eager {expected}\ncompiled again, from the cache {again}"
    assert aotgrad.counters["compiled_autograd"]["eager_fallbacks"] == 0
    return actual
