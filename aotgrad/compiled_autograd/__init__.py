"""Compiled autograd: the whole backward that eager code built, captured and compiled at run time.

    with aotgrad.compiled_autograd.enable(compiler_fn):
        loss.backward()          # or torch.autograd.backward / torch.autograd.grad

walk.py     the autograd graph from the roots, in the engine's order (inputs= prunes it)
hooks.py    the hooks on it: found by probing nodes and by recording registrations
saved.py    each node's saved tensors, taken over (lifted into the graph, freed after)
collect.py  per call: how each node runs, the graph's inputs, the cache key
replay.py   a cache hit the fast way: the graph checked against a template, no walk or key
replay_code.py  each template's check written out as straight-line Python
capture.py  the FX graph: built-in nodes traced into aten ops, everything else called out
cache.py    graphs by key, counters, miss reasons
engine.py   interception of backward/grad, and the run of one call
reducers.py DDP modules whose C++ all-reduce hooks a compiled backward would skip
calls.py    what the graph calls at run time: hooks, accumulation, custom backwards
callout.py  how it calls them: under torch.compile, one op each that compilers keep whole
"""
from __future__ import annotations

import contextlib
import inspect
import logging
from typing import Callable

from aotgrad import api
from aotgrad.compiled_autograd import cache, calls, engine, hooks, reducers, replay
from aotgrad.errors import CompilerSignatureError

# Importing changes nothing in PyTorch: the first `enable()` starts recording hook
# registrations and DDP modules (hooks.install, reducers.install), each also finding those
# that exist already, and makes a custom backward's ctx view a Node (calls.install).


def enable(compiler_fn: Callable):
    """Within this context, backward calls on this thread go through compiled autograd:
    each distinct autograd graph is captured once, given to `compiler_fn(gm)` once, and the
    result runs on every later backward of the same structure. Nestable (the innermost
    compiler wins); everything is restored on exit, also on exceptions.
    `aotgrad.config.compiled_autograd_verbose` is read on entering it.

        with aotgrad.compiled_autograd.enable(lambda gm: torch.compile(gm, backend="inductor")):
            loss.backward()

    A `compiler_fn` that cannot be called with one argument (`aotgrad.nop`, a torch.compile
    backend: both take `(gm, example_inputs)`) is a CompilerSignatureError (a TypeError) here."""
    check_compiler_fn(compiler_fn)
    return _enabled(compiler_fn)


@contextlib.contextmanager
def _enabled(compiler_fn: Callable):
    from aotgrad import config
    from aotgrad.observe.logs import apply_log_level

    apply_log_level()  # AOTGRAD_LOG / config.log_level
    verbose = bool(config.compiled_autograd_verbose)
    hooks.install()  # tensor hooks and retain_grad on non-leaves are recorded from now on
    calls.install()  # a custom backward's ctx is a torch.autograd.graph.Node, as in eager
    reducers.install()  # DDP modules, whose C++ reducer a compiled backward would bypass
    context = engine.CompiledAutograd(compiler_fn)
    with _verbose_logging(verbose):
        engine.install()
        engine.push(context)
        try:
            yield context
        finally:
            engine.pop(context)
            engine.uninstall()


def check_compiler_fn(compiler_fn) -> None:
    """Raise CompilerSignatureError unless `compiler_fn(gm)` is a possible call. (Compilers
    whose signature Python cannot read, some builtins, are taken as they are.)"""
    if callable(compiler_fn):
        try:
            signature = inspect.signature(compiler_fn)
        except (TypeError, ValueError):
            return
        try:
            signature.bind(None)
            return
        except TypeError:
            pass
        passed = f"{_name_of(compiler_fn)}{_plain(signature)}"
        why = (" (it has the signature of a graph compiler for aot_function or torch.compile, which "
               "are called with the graph and its example inputs)" if _takes_example_inputs(signature) else "")
    else:
        passed, why = repr(compiler_fn), " (it is not callable)"
    raise CompilerSignatureError(
        f"compiled_autograd.enable(compiler_fn) got {passed}, which cannot be called with one argument{why}. "
        "Compiled autograd calls compiler_fn(gm) with the captured backward as one torch.fx.GraphModule, "
        "and runs the callable it returns. To continue: pass `lambda gm: gm` to run the graph as captured, "
        "or `lambda gm: torch.compile(gm, backend=\"inductor\")` (any torch.compile backend) to compile it."
        + _defined_at(compiler_fn))


def _defined_at(fn) -> str:
    """`\n  compiler_fn defined at file:line` for a Python function of the user's, else ''."""
    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    if code is None or (getattr(fn, "__module__", None) or "").split(".")[0] == "aotgrad":
        return ""
    return f"\n  compiler_fn defined at {code.co_filename}:{code.co_firstlineno}"


_PUBLIC_FUNCTIONS = ("nop", "aot_function", "aot_module", "aot_module_simplified")


def _name_of(fn) -> str:
    """`aotgrad.nop` for aotgrad's entry points and compilers (api.py), else the module and
    qualified name."""
    name = getattr(fn, "__name__", None)
    if name in _PUBLIC_FUNCTIONS and getattr(api, name) is fn:
        return f"aotgrad.{name}"
    qualname = getattr(fn, "__qualname__", None) or name or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}.{qualname}" if module and module != "__main__" else qualname


def _plain(signature: inspect.Signature) -> str:
    """`(gm, example_inputs)`: the signature without annotations."""
    params = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=params, return_annotation=inspect.Signature.empty))


def _takes_example_inputs(signature: inspect.Signature) -> bool:
    positional = [p for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return len(positional) == 2


@contextlib.contextmanager
def _verbose_logging(verbose: bool):
    """`compiled_autograd_verbose`: the `aotgrad.compiled_autograd` logger at DEBUG for the
    context (printing to stderr if nothing else handles it); restored on exit."""
    if not verbose:
        yield
        return
    level = engine.log.level
    handler = None
    engine.log.setLevel(logging.DEBUG)
    if not engine.log.handlers and not logging.getLogger("aotgrad").handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        engine.log.addHandler(handler)
    try:
        yield
    finally:
        engine.log.setLevel(level)
        if handler is not None:
            engine.log.removeHandler(handler)


def reset() -> None:
    """Forget every captured graph and zero the counters."""
    cache.reset()
    replay.reset()


__all__ = ["enable", "reset"]
