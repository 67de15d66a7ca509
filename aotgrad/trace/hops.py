"""`trace_wrapped`: a call that tracers keep as one node instead of tracing through.

In eager, `trace_wrapped(*args, fn=fn)` is `fn(*args)`. Inside aotgrad's tracer (joint
tracing, where a backward hook may run on fake tensors) it becomes one `trace_wrapped` node
in the graph that calls `fn` when the graph runs, so the hook's side effects happen on every
run, not once at trace time; `fn` runs on the fake arguments only to learn what it returns.
Under torch.compile, Dynamo traces through it like any Python function (the graph shows
`fn`'s body), and under compiled autograd the hook that calls it runs from the graph.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import _disable_current_modes, _get_current_dispatch_mode

from aotgrad.errors import TraceError
from aotgrad.trace.tracer import GraphRecorder


class TraceWrapped:
    """The node's target: calls `fn` with the node's arguments."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.__name__ = "trace_wrapped"
        self.__qualname__ = "trace_wrapped"

    def __call__(self, *args):
        return self.fn(*args)

    def __repr__(self):
        return f"trace_wrapped(fn={_name(self.fn)})"


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def trace_wrapped(*args: Any, fn: Callable) -> Any:
    """`fn(*args)`; one graph node when aotgrad is tracing (see the module docstring)."""
    if torch.compiler.is_compiling():  # Dynamo traces through: the graph shows fn's body
        return fn(*args)
    recorder = _get_current_dispatch_mode()
    if not isinstance(recorder, GraphRecorder):
        return fn(*args)
    with _disable_current_modes(), recorder.fake_mode:
        try:
            out = fn(*args)
        except Exception as e:
            raise TraceError(
                f"trace_wrapped: fn={_name(fn)} cannot be captured into the graph: running it on fake tensors "
                f"(to learn what it returns) raised {type(e).__name__}: {e}. Keep the function to tensor ops "
                "whose output shapes do not depend on tensor values, or register the hook outside the "
                "compiled region.") from e
    recorder.record_call(TraceWrapped(fn), args, out, name="trace_wrapped")
    return out
