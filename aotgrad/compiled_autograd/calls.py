"""What a captured backward graph calls out to: the engine's steps that are not aten ops.

Each function here is called out of the captured graph (through callout.py, which keeps the
call whole under torch.compile), run with real tensors at run time and doing exactly what the
eager engine does at that point: tensor hooks, retain_grad, node pre/post hooks, accumulation
into `.grad` (and post-accumulate hooks), a Python custom Function's backward or a node aotgrad
does not trace (run as is), each followed by the engine's check of its gradients against the
inputs they flow to (`validate_outputs`, before the node's post hooks, as in eager).
"""
from __future__ import annotations

import threading
import warnings
import weakref

import torch
from torch.autograd.graph import GradientEdge

from aotgrad import compat
from aotgrad.analysis import is_dense_layout
from aotgrad.compiled_autograd.hooks import TensorHooksMarker, materialize_grads, output_kinds
from aotgrad.compiled_autograd.saved import FREED_MESSAGE, TORCH_ENGINE
from aotgrad.errors import UnsupportedError


def _hook_name(hook) -> str:
    return getattr(hook, "__name__", None) or repr(hook)


def _check_single_result(hook, old, new) -> None:
    """Eager's check of one value a hook returned (python_hook.cpp's check_single_result)."""
    if new is None:
        return
    if old is None:
        raise RuntimeError("can't replace a None gradient with a non-None value")
    if not isinstance(new, torch.Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(new).__name__}'")
    if new.dtype != old.dtype or new.device != old.device:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the type of value (was "
                           f"{old.type()} got {new.type()})")
    if new.shape != old.shape:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value")


def _kept_defined(hook, old, new):
    """A gradient the captured graph goes on with as a tensor: a hook that made it None has
    changed what the graph is for."""
    if new is None and old is not None:
        raise UnsupportedError(
            f"hook '{_hook_name(hook)}' returned None for a gradient, which eager would pass on as "
            "undefined; compiled autograd captured this backward with a gradient there. Return the "
            "gradient (or zeros) instead, or run this backward outside aotgrad.compiled_autograd.enable.")
    return new


def tensor_hooks(hooks: dict, grad):
    """A tensor's hooks on its incoming gradient, in registration order (those in the dict
    when its node runs; also with no gradient, as in eager); a hook returning None keeps it."""
    for hook in list(hooks.values()):
        result = hook(grad)
        if result is not None:
            _check_single_result(hook, grad, result)
            grad = result
    return grad


def retain_grad(tensor: torch.Tensor, grad) -> None:
    """A non-leaf's `retain_grad`: the first gradient is copied, later ones added out of place."""
    if grad is None:
        return
    if tensor.grad is None:
        tensor.grad = grad.clone(memory_format=torch.contiguous_format)
    else:
        tensor.grad = tensor.grad + grad


def _hook_values(hook, before: tuple, result) -> list:
    """Eager's check of a node hook's result (a tuple replacing all the values) and the new values."""
    if not isinstance(result, tuple):
        raise TypeError(f"expected tuple, but hook returned '{type(result).__name__}'")
    if len(result) != len(before):
        raise RuntimeError(f"hook '{_hook_name(hook)}' has returned an incorrect number of values (got "
                           f"{len(result)}, but expected {len(before)})")
    for old, new in zip(before, result):
        _check_single_result(hook, old, new)
    return [_kept_defined(hook, old, new) for old, new in zip(before, result)]


def pre_hooks(hooks: dict, grads: list) -> list:
    """Node pre-hooks: each sees the gradients the previous one left; None keeps them.
    (aotgrad's tensor-hook markers in the same dict do nothing.)"""
    for hook in list(hooks.values()):
        if isinstance(hook, TensorHooksMarker):
            continue
        result = hook(tuple(grads))
        if result is not None:
            grads = _hook_values(hook, tuple(grads), result)
    return list(grads)


def post_hooks(hooks: dict, grad_inputs: list, grad_outputs: list) -> list:
    """Node post-hooks: hook(grad_inputs, grad_outputs); a returned tuple replaces grad_inputs."""
    outputs = tuple(grad_outputs)
    for hook in list(hooks.values()):
        result = hook(tuple(grad_inputs), outputs)
        if result is not None:
            grad_inputs = _hook_values(hook, tuple(grad_inputs), result)
    return list(grad_inputs)


def freed(*args):
    """Marker pre-hook on a node whose saved state aotgrad cannot release (a node run as is, a
    tensor the user's saved_tensors_hooks hold): after a backward without retain_graph, a
    second backward through it raises eager's error."""
    raise RuntimeError(FREED_MESSAGE)


def raise_error(message: str) -> None:
    """A backward the capture knows must fail when run (eager's error, raised at that point)."""
    raise RuntimeError(message)


def _is_dense(t: torch.Tensor) -> bool:
    return is_dense_layout(t.shape, t.stride())


def _obeys_layout(grad: torch.Tensor, variable: torch.Tensor) -> bool:
    if variable.is_contiguous() and grad.stride() == variable.stride():  # (the usual case, told without _is_dense)
        return True
    if _is_dense(variable):
        return grad.stride() == variable.stride()
    return grad.is_contiguous()


def _clone_obeying_layout(grad: torch.Tensor, variable: torch.Tensor) -> torch.Tensor:
    """AccumulateGrad's layout contract: a dense parameter's gradient gets its strides."""
    if _is_dense(variable):
        out = torch.empty_strided(variable.shape, variable.stride(), dtype=grad.dtype, device=grad.device)
        return out.copy_(grad)
    return grad.clone(memory_format=torch.contiguous_format)


def accumulate_grad(variable: torch.Tensor, grad, may_steal: bool, hooks: dict | None) -> None:
    """AccumulateGrad: a fresh `.grad` when there is none (the graph's own temporary is taken
    if nobody else can hold it and its layout fits; otherwise copied), else in place, so
    `param.grad is g` stays true. Then the post-accumulate-grad hooks, with the leaf."""
    if grad is None or not variable.requires_grad:
        return
    old = variable.grad
    if old is None:
        if may_steal and _obeys_layout(grad, variable):
            variable.grad = grad.detach()
        elif grad.layout is not torch.strided:  # a sparse gradient becomes a sparse `.grad`, as in eager
            variable.grad = grad.detach().clone()
        else:
            variable.grad = _clone_obeying_layout(grad, variable)
    elif old.layout is not torch.strided:  # a sparse `.grad` takes a dense gradient out of place, as in eager
        variable.grad = grad + old
    else:
        old += grad
    # the post-accumulate-grad hooks: checked as tensor hooks are; only the leaf itself may come back
    if hooks and tensor_hooks(hooks, variable) is not variable:
        raise RuntimeError("Tensor post accumulate grad hooks should return None.")


def input_addresses(inputs: list) -> dict:
    """A graph's inputs by address, each as a weak reference, taken before the graph runs (and
    may free them): a gradient at a freed input's address, even with its id(), is a new tensor."""
    return {t.data_ptr(): weakref.ref(t) for t in inputs if t is not None}


def accumulate_after_graph(leaves: list, grads, may_steal: tuple, inputs_at: dict, results=()) -> None:
    """AccumulateGrad for the gradients a graph returned instead of accumulating them as it ran
    (capture._accumulate_after_graph), in the engine's order. A tensor becomes a fresh `.grad`
    only where the graph made it for that leaf alone (`may_steal`) and nothing else can see its
    memory: a compiler may return one buffer for two equal computations (another leaf's
    gradient, one of the graph's `results`), or an input or a view of one for a no-op
    (`inputs_at`: address -> weak reference to the graph's input there, taken before it ran)."""
    taken = {r.data_ptr() for r in results if isinstance(r, torch.Tensor)} if results else set()
    for leaf, grad, steal in zip(leaves, grads, may_steal):
        if steal and grad.numel():
            steal = _may_take(grad, inputs_at, taken)
            taken.add(grad.data_ptr())
        accumulate_grad(leaf, grad, steal, None)


def _may_take(grad: torch.Tensor, inputs_at: dict, taken: set) -> bool:
    """Whether no tensor but `grad` can see its memory (`taken`: the addresses handed out).
    A tensor that is no view, the only one on its storage (the count includes the storage object
    `untyped_storage()` returns) and not an input itself owns its memory, even at an address an
    input had: the graph may have freed that input, and its memory is reused (on CUDA above
    all), and `grad` may even have the freed input's id(): only a live input is compared. A view,
    and the base it keeps, must be at no input's address."""
    address = grad.data_ptr()
    if address in taken:
        return False
    base = grad._base
    holders = torch._C._storage_Use_Count(grad.untyped_storage()._cdata)
    if base is not None:
        return holders <= 3 and address not in inputs_at and base.data_ptr() not in inputs_at and \
            base.data_ptr() not in taken
    there = inputs_at.get(address)
    return holders <= 2 and (there is None or there() is not grad)


def _materialized(ctx, grads: list) -> list:
    """PyNode's missing gradients: zeros for tensor outputs (non-differentiable ones too,
    unless `_materialize_non_diff_grads` is off), None for non-tensor outputs, all None with
    `set_materialize_grads(False)`."""
    if not materialize_grads(ctx) or all(g is not None for g in grads):
        return grads
    kinds = output_kinds(ctx) or ("diff",) * len(grads)
    out = []
    for grad, meta, kind in zip(grads, ctx._input_metadata, kinds):
        if grad is None and kind == "diff":
            grad = torch.zeros(meta.shape, dtype=meta.dtype, device=meta.device)
        elif grad is None and kind is not None and ctx._materialize_non_diff_grads:
            shape, dtype, device = kind
            grad = torch.zeros(shape, dtype=dtype, device=device)
        out.append(grad)
    return out


_registered_as_node = False


def install() -> None:
    """At the first `enable()`: the ctx a custom backward gets inside a captured graph (a
    SavedTensorsView) is a `torch.autograd.graph.Node`, as the real ctx is in eager
    (`isinstance(ctx, Node)`, test_autograd_node_isinstance). Node is an ABC: the view is
    registered as a virtual subclass, which changes PyTorch's class, so not at import."""
    global _registered_as_node
    if not _registered_as_node:
        torch.autograd.graph.Node.register(SavedTensorsView)
        _registered_as_node = True


class SavedTensorsView:
    """A custom Function's ctx as its backward sees it inside a captured graph: `saved_tensors`
    are the graph's inputs (so the graph can free them as it goes); everything else is the
    real ctx (attributes are read at run time, never baked in)."""

    def __init__(self, ctx, saved: tuple):
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "saved_tensors", saved)

    @property
    def saved_variables(self):
        warnings.warn("'saved_variables' is deprecated; use 'saved_tensors'", DeprecationWarning, stacklevel=2)
        return self.saved_tensors

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def __setattr__(self, name, value):
        setattr(self._ctx, name, value)


def custom_backward(ctx, saved: list, grads: list, positions: tuple, checks: tuple) -> list:
    """A Python custom Function's backward as PyNode runs it: zeros for missing gradients
    (unless `set_materialize_grads(False)`), the user's backward with the real ctx, then the
    result checked (one gradient per forward argument, extra trailing Nones dropped, None for
    non-tensor arguments) and those of the tensor arguments (`positions`) validated (`checks`)."""
    view = SavedTensorsView(ctx, tuple(saved))
    args = _materialized(ctx, grads)
    if getattr(ctx._forward_cls, "boxed_grads_call", False):
        args = [args]
    result = compat.custom_backward_fn(ctx)(view, *args)
    if not isinstance(result, tuple):
        result = (result,)
    name = ctx.name()
    arity = len(ctx.needs_input_grad)
    if len(result) > arity and all(r is None for r in result[arity:]):
        result = result[:arity]
    if len(result) != arity:
        raise RuntimeError(f"function {name} returned an incorrect number of gradients (expected {arity}, "
                           f"got {len(result)})")
    tensors = set(positions)
    for i, r in enumerate(result):
        if i not in tensors and r is not None:
            raise RuntimeError(f"function {name} returned a gradient different than None at position {i + 1}, "
                               "but the corresponding forward input was not a Variable")
    return validated([result[p] for p in positions], checks)


def as_list(results) -> list:
    """A node called from Python returns a tensor (or None) for one result, a tuple for several."""
    return list(results) if isinstance(results, tuple) else [results]


class _Backward(threading.local):
    """The compiled backward running on this thread, as its calls out need to know it (set by
    engine.py before a graph with nodes run as is runs: only `run_node` reads it)."""
    frees_graph = False  # no retain_graph: the nodes that run free what they saved


backward = _Backward()


def run_node(node, grads: list, checks: tuple, frees_through_engine: bool = False) -> list:
    """A node aotgrad does not trace (e.g. CopySlices, a C++ custom Function, a built-in node
    whose saved tensors the user's hooks hold), run as is; its results validated (`checks`).
    With `frees_through_engine` and no retain_graph it runs inside PyTorch's engine, which
    frees what it saved as eager does (`_run_in_engine`)."""
    if frees_through_engine and backward.frees_graph and any(g is not None for g in grads):
        return validated(_run_in_engine(node, grads, checks), checks)
    return validated(as_list(node(*grads)), checks)


def _run_in_engine(node, grads: list, checks: tuple) -> list:
    """Run one node in PyTorch's engine without retain_graph, so that it frees its saved
    tensors afterwards as in eager: `grad_fn._saved_self` then raises "after they have already
    been freed" (test_grad_fn_attr_bindings) and the user's packed tensor is let go. A node
    called from Python frees nothing, and PyTorch has no Python call that frees a C++ node.
    The node's gradients are the roots; its results are captured where they flow (so the
    engine runs no node after it; captures of one edge twice sum there) and read by a
    temporary post hook, one per result. The capture runs the tensor hooks of the nodes
    there: the capture only asks for this where they have none, nor has the node any hooks."""
    next_functions = node.next_functions
    flows = tuple(GradientEdge(*next_functions[i]) for i, check in enumerate(checks) if check is not None)
    if not flows:  # (without a capture the engine would run every node after this one)
        return as_list(node(*grads))
    results: list = []
    handle = node.register_hook(lambda grad_inputs, grad_outputs: results.extend(grad_inputs))
    try:
        roots = [i for i, g in enumerate(grads) if g is not None]
        TORCH_ENGINE.run_backward(tuple(GradientEdge(node, i) for i in roots), tuple(grads[i] for i in roots),
                             False, False, flows, True, False)
    finally:
        handle.remove()
    return results


def validated(results: list, checks: tuple) -> list:
    """The engine's `validate_outputs` for a node run out of the graph: each result that flows
    somewhere checked by `expect_grad(*check)`; None where it flows nowhere (the graph was
    captured without a value there; eager's post hooks would see the value itself)."""
    return [None if check is None else expect_grad(check[0], check[1], grad, *check[2:])
            for grad, check in zip(results, checks)]


def _expandable(shape, desired) -> bool:
    """Can a tensor of `shape` be broadcast to `desired`?"""
    if len(shape) > len(desired):
        return False
    return all(s == d or s == 1 for s, d in zip(reversed(shape), reversed(desired)))


def check_grad(name: str, index: int, grad, shape, dtype, device=None):
    """The engine's `validate_outputs` for one gradient: sum a broadcast gradient down to the
    input's shape, cast to its dtype; a shape that cannot be summed down, or another device,
    is an error."""
    if grad is None:
        return None
    if device is not None and grad.device != device:
        raise RuntimeError(f"Function {name} returned an invalid gradient at index {index} - expected device "
                           f"{device} but got {grad.device}")
    if tuple(grad.shape) != tuple(shape):
        if not _expandable(tuple(shape), tuple(grad.shape)):
            raise RuntimeError(f"Function {name} returned an invalid gradient at index {index} - got "
                               f"{list(grad.shape)} but expected shape compatible with {list(shape)}")
        grad = grad.sum_to_size(shape)
    if grad.dtype != dtype:
        grad = grad.to(dtype)
    return grad


def expect_grad(name: str, index: int, grad, shape, dtype, device, may_be_none: bool = False):
    """`check_grad` for a result the graph was captured to receive: a Python backward or an
    untraced node that returns None there has changed what the graph is for, unless the
    gradient goes straight into `.grad` (`may_be_none`: None then accumulates nothing). The
    graph was traced with a contiguous tensor here, so it gets one (same values)."""
    if grad is None and not may_be_none:
        raise UnsupportedError(
            f"{name} returned no gradient (None) at index {index}, where it returned one when compiled "
            "autograd captured this backward; the captured graph cannot skip that gradient. Return zeros "
            "there (e.g. `torch.zeros_like(x)`), or run this backward outside "
            "`aotgrad.compiled_autograd.enable`.")
    grad = check_grad(name, index, grad, shape, dtype, device)
    if grad is not None and grad.layout is not torch.strided:  # a sparse gradient, as eager lets through
        if may_be_none:  # straight into `.grad` or a result: as it is, as in eager
            return grad
        raise UnsupportedError(
            f"{name} returned a {grad.layout} gradient at index {index}, where compiled autograd captured this "
            "backward with a dense one flowing on into other nodes. Return a dense gradient there, or run this "
            "backward outside `aotgrad.compiled_autograd.enable`.")
    return grad.contiguous() if grad is not None else None


def clear(values: list) -> None:
    """Empty the graph's input list once read: each value then lives only as long as the graph
    needs it (FX frees a local after its last use)."""
    values.clear()
