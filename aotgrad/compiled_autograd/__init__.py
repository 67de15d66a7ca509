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
"""
from __future__ import annotations

import contextlib
import logging
from typing import Callable

from aotgrad.compiled_autograd import cache, engine, hooks, reducers, replay

# Importing changes nothing in PyTorch: the first `enable()` starts recording hook
# registrations and DDP modules (hooks.install, reducers.install), each also finding those
# that exist already.


@contextlib.contextmanager
def enable(compiler_fn: Callable):
    """Within this context, backward calls on this thread go through compiled autograd:
    each distinct autograd graph is captured once, given to `compiler_fn(gm)` once, and the
    result runs on every later backward of the same structure. Nestable (the innermost
    compiler wins); everything is restored on exit, also on exceptions.
    `aotgrad.config.compiled_autograd_verbose` is read here."""
    from aotgrad import config
    from aotgrad.logs import apply_log_level

    apply_log_level()  # AOTGRAD_LOG / config.log_level
    verbose = bool(config.compiled_autograd_verbose)
    hooks.install()  # tensor hooks and retain_grad on non-leaves are recorded from now on
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
