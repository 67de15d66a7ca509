"""Interception: `Tensor.backward`, `torch.autograd.backward` and `torch.autograd.grad`
through aotgrad, and the run of one backward call.

All three reach `Variable._execution_engine.run_backward`. While some thread is inside
`enable(compiler_fn)`, that engine object is an `_Engine` that sends calls from such a
thread to `CompiledAutograd.run_backward` (a cache hit the fast way through replay.py's
templates; else walk, collect, look up or capture and compile; then take the saved tensors
over, call, callbacks) and everything else to PyTorch's engine: other threads, calls
made from inside a compiled backward (a hook calling `autograd.grad`), `create_graph`,
and the argument errors PyTorch's engine reports itself.
"""
from __future__ import annotations

import logging
import threading
import weakref
from typing import Callable

import torch
from torch.autograd.graph import GradientEdge
from torch.autograd.variable import Variable
from torch.utils._python_dispatch import _get_current_dispatch_mode

from aotgrad import compat
from aotgrad.compiled_autograd import cache as graph_cache
from aotgrad.compiled_autograd import callout, calls, reducers, replay
from aotgrad.compiled_autograd import hooks as hook_lookup
from aotgrad.compiled_autograd.capture import capture
from aotgrad.compiled_autograd.collect import EagerFallback, collect, release
from aotgrad.compiled_autograd.saved import free_python_nodes
from aotgrad.compiled_autograd.walk import gradient_edge, walk
from aotgrad.observe.printing import format_graph

log = logging.getLogger("aotgrad.compiled_autograd")

_local = threading.local()     # .stack: enabled contexts; .callbacks: while a compiled backward runs
_lock = threading.Lock()
_active = 0                    # enabled contexts over all threads
_original_engine = None
# Watchers of captures (`python -m aotgrad report`): each is called as watcher(gm, reasons)
# with every graph captured, before compiler_fn sees it, and why the cache missed.
capture_watchers: list[Callable] = []


def _stack() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


class _Engine:
    """Stands in for PyTorch's `_ImperativeEngine` while compiled autograd is enabled."""

    def __init__(self, original):
        self._original = original

    @torch.compiler.disable  # a backward called inside a torch.compile'd function runs here, not traced
    def run_backward(self, tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable,
                     accumulate_grad):
        stack = _stack()
        if not stack or getattr(_local, "callbacks", None) is not None or _get_current_dispatch_mode() is not None:
            # (a dispatch mode: a tracer, e.g. aotgrad's own, differentiating on fake tensors)
            return self._original.run_backward(tensors, grad_tensors, keep_graph, create_graph, inputs,
                                               allow_unreachable, accumulate_grad)
        return stack[-1].run_backward(self._original, tuple(tensors), tuple(grad_tensors), keep_graph,
                                      create_graph, tuple(inputs), allow_unreachable, accumulate_grad)

    def queue_callback(self, callback: Callable) -> None:
        callbacks = getattr(_local, "callbacks", None)
        if callbacks is None:
            return self._original.queue_callback(callback)
        callbacks.append(callback)

    def __getattr__(self, name):
        return getattr(self._original, name)


def install() -> None:
    """Put `_Engine` in place of PyTorch's engine object (once for all enabled contexts)."""
    global _active, _original_engine
    with _lock:
        if _active == 0:
            _original_engine = Variable._execution_engine
            Variable._execution_engine = _Engine(_original_engine)
        _active += 1


def uninstall() -> None:
    """Give PyTorch's engine object back when the last enabled context exits."""
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            Variable._execution_engine = _original_engine


def _eager_reason(tensors, grad_tensors, create_graph, inputs) -> str | None:
    """Why PyTorch's engine must run this call (it also raises the argument errors)."""
    if create_graph:
        return "create_graph=True (a differentiable backward) is run by the eager engine"
    if torch.is_anomaly_enabled():
        return "anomaly detection (torch.autograd.detect_anomaly) checks every node's results in the eager engine"
    for t in (*tensors, *inputs):
        if type(t) is GradientEdge:
            continue
        if not t.requires_grad:
            return "a tensor that does not require grad (the eager engine raises its error)"
        if t.layout is not torch.strided or t.is_nested:
            return f"a {'nested' if t.is_nested else t.layout} tensor: captured graphs take dense strided tensors only"
    for g in grad_tensors:
        if g is None:
            return "a root without a gradient"
        if isinstance(g, torch.Tensor) and torch._C._functorch.is_batchedtensor(g):
            return "batched gradients (is_grads_batched)"
    return reducers.reason()


class CompiledAutograd:
    """One `enable(compiler_fn)` context: its compiler."""

    def __init__(self, compiler_fn: Callable):
        self.compiler_fn = compiler_fn

    def run_backward(self, engine, tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable,
                     accumulate_grad):
        if not accumulate_grad and not inputs:
            # PyTorch's engine's own argument check (torch.autograd.grad checks it first from 2.13 on)
            raise ValueError("grad requires non-empty inputs.")
        reason = _eager_reason(tensors, grad_tensors, create_graph, inputs)
        if reason is None:
            if accumulate_grad:
                for t in inputs:  # as PyTorch's engine does: `backward(inputs=[h])` retains h's grad
                    if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                        t.retain_grad()
            root_edges = [gradient_edge(t) for t in tensors]
            input_edges = [gradient_edge(t) for t in inputs]
            templates = replay.templates_of(self.compiler_fn)
            results = self._run_cached(templates, root_edges, input_edges, grad_tensors, keep_graph, accumulate_grad)
            if results is not None:
                return self._results(results, accumulate_grad, allow_unreachable)
            graph = walk(root_edges, input_edges or None, accumulate_grad)
            try:
                collected = collect(graph, list(grad_tensors), accumulate_grad, input_edges)
            except EagerFallback as e:
                reason = str(e)
        fresh = False  # a graph compiled for this call: its first run may still fall back (_first_run)
        if reason is None:
            entry = graph_cache.lookup(self.compiler_fn, collected.structure, collected.sizes.values)
            if entry is None:
                entry = self._capture_and_compile(graph, collected)
                fresh = True
            else:
                graph_cache.count("hits")
            if entry.compiled is None:
                reason = "this structure could not be captured (logged when it was tried)"
        if reason is not None:
            graph_cache.count("eager_fallbacks")
            log.info("compiled autograd: running this backward eagerly: %s", reason)
            return engine.run_backward(tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable,
                                       accumulate_grad)
        if not templates.knows(collected.structure):  # (once per structure: generating its code costs ms)
            template = replay.make_template(collected, graph_cache.entries_of(self.compiler_fn, collected.structure))
            if template is not None:
                templates.remember(template)
        taken = [(slot, weakref.ref(slot.value)) for slot in collected.slots
                 if slot.owned and slot.value is not None] if fresh and not keep_graph else []
        if not keep_graph:
            release(collected)
        try:
            results = self._call(entry.compiled, collected.inputs, collected.sizes.values, collected.objects,
                                 collected.keeps_state, keep_graph, first=fresh)
        except callout.NothingRan as e:
            if not _given_back(taken):
                raise e.error from None
            # nothing ran, every saved tensor is still there: PyTorch's engine runs this backward,
            # and every later one of this structure (the next try would fail the same way)
            entry.compiled = None
            graph_cache.count("eager_fallbacks")
            log.warning("compiled autograd: this backward runs on PyTorch's engine, and so will later ones like "
                        "it: the callable compiler_fn returned for it failed before running anything, with "
                        "%s: %s", type(e.error).__name__, e.error)
            return engine.run_backward(tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable,
                                       accumulate_grad)
        return self._results(results, accumulate_grad, allow_unreachable)

    def _run_cached(self, templates, root_edges, input_edges, grad_tensors, keep_graph, accumulate_grad):
        """A cache hit the fast way (replay.py): the results, or None (then the slow way runs)."""
        if hook_lookup.unresolved():  # (collect says why)
            return None
        hit = templates.find(root_edges, input_edges, list(grad_tensors), accumulate_grad)
        entry = graph_cache.serving(hit.entries, hit.sizes) if hit is not None else None
        if entry is None or entry.compiled is None:
            return None
        graph_cache.count("hits")
        return self._call(entry.compiled, hit.take(keep_graph), hit.sizes, hit.objects, hit.keeps_state, keep_graph)

    @staticmethod
    def _results(results: list, accumulate_grad: bool, allow_unreachable: bool) -> tuple:
        if not accumulate_grad:
            unused = [i for i, r in enumerate(results) if r is None]
            if unused and not allow_unreachable:
                raise RuntimeError(compat.UNUSED_INPUT_MESSAGE.format(index=unused[0]))
            return tuple(results)
        return ()

    def _capture_and_compile(self, graph, collected) -> graph_cache.Entry:
        dynamic, reasons = graph_cache.plan_capture(self.compiler_fn, collected.structure, collected.sizes,
                                                    collected.plans)
        for reason in reasons:
            log.debug("Cache miss due to %s", reason)
        try:
            gm, guards, dynamic = self._capture(graph, collected, dynamic)
        except Exception as e:  # noqa: BLE001 - any failure to trace: eager runs it, and says why
            log.warning("compiled autograd: this backward runs on PyTorch's engine: capturing it failed with "
                        "%s: %s", type(e).__name__, e)
            entry = graph_cache.Entry(None, list(collected.sizes.values), frozenset(), None)
            graph_cache.store(self.compiler_fn, collected.structure, entry)
            return entry
        graph_cache.count("captures")
        if log.isEnabledFor(logging.DEBUG):
            for plan in collected.plans:
                log.debug("%s", plan.label)
            log.debug("%s", format_graph(gm, "compiled_autograd_graph"))
        for watcher in list(capture_watchers):
            watcher(gm, reasons)
        # (the sites are what the graph's calls out run: callout.Program gives them the call's objects)
        compiled = callout.Program(self.compiler_fn(gm), gm.meta["call_out_sites"], gm.meta["accumulated_after"])
        graph_cache.count("compiles")
        entry = graph_cache.Entry(compiled, list(collected.sizes.values), dynamic, guards)
        graph_cache.store(self.compiler_fn, collected.structure, entry)
        return entry

    def _capture(self, graph, collected, dynamic: frozenset):
        """Capture with symbols at `dynamic`; sizes the trace fixes to a constant are captured
        again as constants, until none is (each round drops at least one)."""
        while True:
            gm, guards = capture(graph, collected, dynamic)
            if guards is None or not guards.specialized:
                return gm, guards, dynamic
            for i in sorted(guards.specialized):
                log.debug("size idx %d of %s stays static: the trace needs its value", i,
                          graph_cache.owner_label(collected.plans, collected.sizes.owners[i]))
            dynamic = dynamic - guards.specialized

    def _call(self, compiled, inputs: list, sizes: list, objects: list, keeps_state: list, keep_graph: bool,
              first: bool = False) -> list:
        """Run a compiled graph (its saved tensors already taken over; `inputs` then holds the
        only reference, and the graph frees each as it goes), then the queued callbacks. On a
        graph's `first` run, a failure before anything ran is callout.NothingRan."""
        _local.callbacks = callbacks = []
        grad_mode = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        if keeps_state:  # (only graphs with nodes run as is read it: calls.run_node)
            calls.backward.frees_graph = not keep_graph
        try:
            results = compiled(inputs, sizes, objects, first)
        except callout.NothingRan:
            raise
        except BaseException:
            _mark_freed(keeps_state, keep_graph)
            raise
        finally:
            torch._C._set_grad_enabled(grad_mode)
            _local.callbacks = None
        _mark_freed(keeps_state, keep_graph)
        if keeps_state and not keep_graph:
            _free_python_nodes(keeps_state)
        while callbacks:  # a callback may queue another; each runs once, in order
            callback = callbacks.pop(0)
            _local.callbacks = callbacks
            try:
                callback()
            finally:
                _local.callbacks = None
        return list(results)


def _mark_freed(keeps_state: list, keep_graph: bool) -> None:
    """Nodes run as is keep their saved state: after a backward without retain_graph, a
    second backward through them raises eager's error (a Python call of a node runs no hooks,
    so the graph itself never meets this one)."""
    if not keep_graph:
        for node in keeps_state:
            node.register_prehook(calls.freed)


def _free_python_nodes(keeps_state: list) -> None:
    """Custom Functions whose saved tensors the user's hooks hold (aotgrad could not take them
    over) are freed as eager frees them after their backward ran (saved.free_python_nodes)."""
    python_nodes = [node for node in keeps_state if isinstance(node, torch._C._FunctionBase)]
    if python_nodes:
        free_python_nodes(python_nodes)


def _given_back(taken: list) -> bool:
    """Put the saved tensors of a graph that ran nothing back into their slots (so PyTorch's
    engine can run the nodes); False if one is gone already (the graph had started)."""
    values = [(slot, ref()) for slot, ref in taken]
    if any(value is None for _, value in values):
        return False
    for slot, value in values:
        slot.value, slot.freed = value, False
    return True


def push(context: CompiledAutograd) -> None:
    """Make `context` this thread's innermost enabled compiled autograd."""
    _stack().append(context)


def pop(context: CompiledAutograd) -> None:
    """Leave `context` (the innermost one)."""
    stack = _stack()
    assert stack and stack[-1] is context, "compiled_autograd.enable contexts exited out of order"
    stack.pop()
