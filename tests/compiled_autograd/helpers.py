"""Eager as the oracle for compiled autograd, under several compilers.

`check(fn)` runs a step function eagerly, then inside `aotgrad.compiled_autograd.enable` with
the test's compiler, and compares everything it returns: bitwise with the compilers that run
the captured aten ops as they are (identity, Dynamo's "eager"), allclose with those that
compile them (aotgrad, aotgrad_inductor, inductor).

The compilers (COMPILERS), each `compiler_fn(gm)`:
  identity          lambda gm: gm
  eager             torch.compile(gm, backend="eager", fullgraph=True, dynamic=True)
  aotgrad           torch.compile(gm, backend="aotgrad", fullgraph=True, dynamic=True)
  aotgrad_inductor  torch.compile(gm, backend="aotgrad_inductor", fullgraph=True, dynamic=True)
  inductor          torch.compile(gm, backend="inductor", fullgraph=True, dynamic=True)

Which test runs under which (tests/compiled_autograd/conftest.py parametrizes every test of
this folder with the `compiler` fixture; `current_compiler()` is its compiler_fn):
  - every test: identity and eager (Dynamo must trace every captured graph whole, fullgraph
    and dynamic: hooks, custom Functions, callbacks, accumulation, nodes run as is, symbols);
  - tests marked `all_compilers` (chosen to cover each feature once: see REPRESENTATIVE in
    test_autograd_behaviours.py and the marks in the other files): all five;
  - `python -m pytest -m compilers tests/compiled_autograd`: every other test under aotgrad,
    aotgrad_inductor and inductor (the full matrix; long: Inductor compiles on CPU).
Tests that need one compiler (a graph-capturing compiler, internals) take `compiler_fn=` or
enable their own and are marked `one_compiler`: they run once.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

import torch

import aotgrad
from aotgrad import compiled_autograd


def nop_compiler(gm):
    return gm


def _dynamo(backend: str) -> Callable:
    def compiler_fn(gm):
        return torch.compile(gm, backend=backend, fullgraph=True, dynamic=True)
    compiler_fn.__name__ = f"torch_compile_{backend}"
    return compiler_fn


COMPILERS: dict[str, Callable] = {
    "identity": nop_compiler,
    "eager": _dynamo("eager"),
    "aotgrad": _dynamo("aotgrad"),
    "aotgrad_inductor": _dynamo("aotgrad_inductor"),
    "inductor": _dynamo("inductor"),
}
BITWISE = {"identity", "eager"}   # the captured aten ops run as they are: equal to eager bit for bit
DEFAULT = ("identity", "eager")   # every test; `all_compilers` tests: all of COMPILERS
_current = "identity"


def set_compiler(name: str) -> None:
    """The compiler `check` and `current_compiler()` use (the `compiler` fixture sets it)."""
    global _current
    assert name in COMPILERS, name
    _current = name


def current_compiler() -> Callable:
    return COMPILERS[_current]


def compiler_name() -> str:
    return _current


def is_bitwise() -> bool:
    return _current in BITWISE


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


def same(a, b, exact: bool = True) -> bool:
    """Values equal as `check` compares them: bitwise only if `exact` and the compiler is bitwise."""
    return _same(a, b, exact and is_bitwise())


def check(fn: Callable[[], list], *, compiler: Callable | None = None, captures: int | None = None,
          compiles: int | None = None, exact: bool = True) -> list:
    """`fn()` returns a list of values (tensors, None, bools, ...): eager and compiled must agree
    (tensors bitwise where `exact` and the compiler is bitwise, else allclose). `compiler`
    defaults to the test's (`current_compiler()`). Checks the capture/compile counts when given
    (aotgrad's counts: they do not depend on the compiler) and that nothing fell back to eager.
    The compiled run is repeated with the caches kept (its backwards then hit the cache, most
    through replay.py's fast path): it must agree with eager too."""
    compiler = current_compiler() if compiler is None else compiler
    exact = exact and is_bitwise()  # (a compiler a test passes wraps the test's, or the test says exact=False)
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
