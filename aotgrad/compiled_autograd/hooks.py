"""Hooks on the autograd graph, found without running it, and run as the engine runs them.

Where each kind lives and how aotgrad finds it:
  node pre/post hooks      the node's own dict: registering a no-op hook returns a handle
                           whose `hooks_dict_ref()` is that dict (the no-op is removed)
  tensor hooks, non-leaf   inside the C++ node, out of Python's reach: from the first
                           `enable()` on, `Tensor.register_hook` adds a `TensorHooksMarker`
                           marker pre-hook (a no-op in eager) carrying the tensor's hook dict
  retain_grad, non-leaf    `Tensor.retain_grad` is recorded the same way: live tensors that retain grad
  leaf hooks               on the leaf: `_backward_hooks`, `_post_accumulate_grad_hooks`
Nothing is wrapped when aotgrad is imported. `install()`, at the first `enable()`, wraps the
registration entry points and records what was registered before from what is alive
(`_record_existing`); hooks it cannot place keep backwards on PyTorch's engine (`unresolved`).
"""
from __future__ import annotations

import gc
import inspect
import logging
import sys
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
from torch.autograd.function import _is_setup_context_defined
from torch.overrides import handle_torch_function, has_torch_function_unary

from aotgrad import compat

_lock = threading.Lock()
_node_hook_dicts: list = []   # weakrefs to every node hook dict ever made (pruned as they die)
# non-leaf tensors that retain grad, by id (a WeakSet would compare tensors with `==`)
_retaining: "weakref.WeakValueDictionary[int, torch.Tensor]" = weakref.WeakValueDictionary()
# hook dicts registered before install() that only C++ holds: node hook dicts (probing finds
# those) or the hooks of a non-leaf tensor that no longer exists in Python (nothing can)
_unresolved: list = []
_installed = False
log = logging.getLogger("aotgrad.compiled_autograd")
_AUTOGRAD_GRAPH_FILE = torch.autograd.graph.__file__


class TensorHooksMarker:
    """Marker pre-hook: node output `output_nr` has the tensor hooks in `hooks` (a dict the
    tensor and the C++ node share). Returns None: in eager it changes nothing."""

    def __init__(self, output_nr: int, hooks: OrderedDict):
        self.output_nr = output_nr
        self.hooks = hooks

    def __call__(self, grad_outputs):
        return None

    def __repr__(self):
        return f"TensorHooksMarker(output {self.output_nr}, {len(self.hooks)} hooks)"


def _recording_register_hook_dict(original):
    def _register_hook(backward_hooks, hook):
        result = original(backward_hooks, hook)
        if backward_hooks is None:  # a node's first hook dict (also one a probe makes: a later hook lands in it)
            with _lock:
                _node_hook_dicts.append(weakref.ref(result[0]))
        return result
    return staticmethod(_register_hook)


def _recording_tensor_register_hook(original):
    # Dynamo traces `t.register_hook(h)` in a compiled function by name and replays it after its
    # graph, calling this wrapper; traced itself, the wrapper's call of the original would be
    # replayed again, through the wrapper, without end (RecursionError), so Dynamo skips it
    @torch.compiler.disable
    def register_hook(self, hook):
        # As torch's own method: a torch function mode or subclass gets this wrapper as `func`
        # (`original` dispatches by the name `Tensor.register_hook`, now this wrapper: recursion)
        if has_torch_function_unary(self):
            return handle_torch_function(register_hook, (self,), self, hook)
        handle = original(self, hook)
        hooks = self._backward_hooks
        _mark_tensor_hooks(self, hooks)
        return handle
    register_hook.__doc__ = original.__doc__
    return _outside_dynamo(register_hook)


def _outside_dynamo(wrapper):
    """Dynamo must not compile a recording wrapper as a frame of its own: installed after Dynamo
    has seen torch's method, the wrapper is user code to it, and tracing it re-enters it. Code
    Dynamo traces handles `x.register_hook(...)` and friends itself (by the method's name)."""
    return torch._dynamo.disable(wrapper, recursive=False)


def _mark_tensor_hooks(tensor, hooks) -> None:
    """Put a marker carrying a non-leaf tensor's hook dict on its node (once per dict)."""
    if tensor.grad_fn is not None and getattr(tensor, "_aotgrad_marked_hooks", None) is not hooks:
        tensor.grad_fn.register_prehook(TensorHooksMarker(tensor.output_nr, hooks))
        tensor._aotgrad_marked_hooks = hooks


def _recording_retain_grad(original):
    @torch.compiler.disable  # (as register_hook above)
    def retain_grad(self):
        if has_torch_function_unary(self):
            return handle_torch_function(retain_grad, (self,), self)
        original(self)
        if self.grad_fn is not None:
            _retaining[id(self)] = self
    retain_grad.__doc__ = original.__doc__
    return _outside_dynamo(retain_grad)


def _recording_set_materialize_grads(original):
    def set_materialize_grads(self, value: bool):
        original(self, value)
        self._aotgrad_materialize_grads = bool(value)  # the C attribute cannot be read back
    set_materialize_grads.__doc__ = original.__doc__
    return set_materialize_grads


def materialize_grads(ctx) -> bool:
    """Does a custom Function's backward get zeros for missing gradients? (the default)"""
    return getattr(ctx, "_aotgrad_materialize_grads", True)


def _recording_function_apply(original):
    """What the C++ node of a custom Function keeps to itself, set on the node where it
    matters: `_aotgrad_tensor_positions`, which positional arguments were tensors (when not
    all were), and `_aotgrad_outputs`, per output None (not a tensor: its backward gets None),
    "diff", or the (shape, dtype, device) of a non-differentiable tensor (zeros when missing)."""
    def apply(cls, *args, **kwargs):
        out = original(cls, *args, **kwargs)
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        node = next((t.grad_fn for t in outputs if isinstance(t, torch.Tensor) and t.grad_fn is not None
                     and getattr(t.grad_fn, "_forward_cls", None) is cls), None)
        if node is None:
            return out
        if kwargs or not all(isinstance(a, torch.Tensor) for a in args):
            if _is_setup_context_defined(cls.setup_context):
                bound = inspect.signature(cls.forward).bind(*args, **kwargs)
                bound.apply_defaults()
                args = bound.args
            node._aotgrad_tensor_positions = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        kinds = tuple(_output_kind(t, node) for t in outputs)
        if any(k != "diff" for k in kinds):
            node._aotgrad_outputs = kinds
        return out
    apply.__doc__ = torch.autograd.Function.apply.__doc__
    # Dynamo must not compile this wrapper as a frame of its own when code it skips calls
    # `apply` (DDP's _post_forward calls _DDPSink.apply with a weakref argument, which Dynamo's
    # tracing of `apply` would pass on as its referent). Code Dynamo traces calls `apply`
    # through Dynamo's own handling of autograd.Function, never through this frame.
    return classmethod(torch._dynamo.disable(apply, recursive=False))


def _output_kind(t, node):
    if not isinstance(t, torch.Tensor):
        return None
    if t.grad_fn is node:
        return "diff"
    return (tuple(t.shape), t.dtype, t.device)


def tensor_positions(ctx) -> tuple | None:
    """Positions of a custom Function's tensor arguments, where not all were tensors."""
    return getattr(ctx, "_aotgrad_tensor_positions", None)


def output_kinds(ctx) -> tuple | None:
    """Per output of a custom Function: None, "diff" or a non-differentiable tensor's metadata
    (None when every output is a differentiable tensor)."""
    return getattr(ctx, "_aotgrad_outputs", None)


def install() -> None:
    """Wrap the registration entry points (once, at the first `enable()`), then record what
    was registered before from what is alive."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        torch.autograd.Function._register_hook = _recording_register_hook_dict(torch.autograd.Function._register_hook)
        torch.Tensor.register_hook = _recording_tensor_register_hook(torch.Tensor.register_hook)
        torch.Tensor.retain_grad = _recording_retain_grad(torch.Tensor.retain_grad)
        FunctionCtx = torch.autograd.function.FunctionCtx
        FunctionCtx.set_materialize_grads = _recording_set_materialize_grads(FunctionCtx.set_materialize_grads)
        torch.autograd.Function.apply = _recording_function_apply(compat.function_apply_impl())
    _record_existing()


def _is_hook_dict(obj) -> bool:
    return (type(obj) is OrderedDict and len(obj) > 0 and all(type(k) is int for k in obj)
            and all(callable(v) for v in obj.values()))


def _record_existing() -> None:
    """What was registered before `install()`, found among live objects (one pass of the
    garbage collector's list): hooks and retain_grad of live non-leaf tensors are recorded as
    if registered now; a custom Function node made before is marked (its arguments and
    outputs were not recorded: its backwards run eagerly); hook dicts that only C++ holds go to
    `_unresolved`."""
    candidates: list = []
    tensor_dicts: set = set()
    backward_function = torch.autograd.function.BackwardCFunction
    for obj in gc.get_objects():
        kind = type(obj)  # (not isinstance: it reads `__class__`, which some module objects warn about)
        if issubclass(kind, torch.Tensor):
            _record_tensor(obj, tensor_dicts)
        elif issubclass(kind, backward_function):
            obj._aotgrad_unrecorded = True
        elif _is_hook_dict(obj):
            candidates.append(obj)
    candidates = [d for d in candidates if id(d) not in tensor_dicts]
    if not candidates:
        return
    held_by_python = _held_by_python(candidates)
    for hooks in candidates:
        if id(hooks) not in held_by_python:
            ref = weakref.ref(hooks)
            _unresolved.append(ref)
            _node_hook_dicts.append(ref)  # probing finds the node hook dicts among them
    if _unresolved:
        log.info("compiled autograd: %d hook dicts registered before the first enable() are held by autograd "
                 "nodes only; backwards run on PyTorch's engine until each is found on a node or freed",
                 len(_unresolved))


def _record_tensor(t: torch.Tensor, tensor_dicts: set) -> None:
    """A live tensor's hooks and retain_grad, recorded as if registered now; its hook dicts
    noted in `tensor_dicts` (they are not node hook dicts)."""
    for hooks in (t._backward_hooks, t._post_accumulate_grad_hooks):
        if hooks:
            tensor_dicts.add(id(hooks))
    try:
        grad_fn = t.grad_fn
    except RuntimeError:  # a view autograd has invalidated (its base written in place): no backward reaches it
        return
    if grad_fn is not None:
        if t._backward_hooks:
            _mark_tensor_hooks(t, t._backward_hooks)
        if t.retains_grad:
            _retaining[id(t)] = t


def _held_by_python(candidates: list) -> set:
    """Ids of the dicts some Python object refers to (modules' and optimizers' hook dicts, a
    live tensor's): the others are held by C++ autograd hooks only."""
    ignore = {id(candidates), id(sys._getframe()), id(sys._getframe(1))}
    wanted = {id(d) for d in candidates}
    held: set = set()
    for referrer in gc.get_referrers(*candidates):
        if id(referrer) in ignore:
            continue
        held.update(id(r) for r in gc.get_referents(referrer) if id(r) in wanted)
    return held


def unresolved() -> bool:
    """Are hooks registered before `install()` alive that no node was found to hold? (Then a
    backward may reach a tensor hook aotgrad cannot see: PyTorch's engine runs it.)"""
    if not _unresolved:
        return False
    with _lock:
        _unresolved[:] = [ref for ref in _unresolved if ref()]
    return bool(_unresolved)


def _resolve(hooks) -> None:
    """A dict probing found on a node: a node hook dict, not a lost tensor's."""
    if _unresolved:
        with _lock:
            _unresolved[:] = [ref for ref in _unresolved if ref() is not None and ref() is not hooks]


def node_hooks_may_exist() -> bool:
    """Is any node hook dict alive and non-empty? (If not, no node needs probing.)"""
    if not _node_hook_dicts:  # none was ever made (the common case, asked on every backward)
        return False
    with _lock:
        alive = [ref for ref in _node_hook_dicts if ref() is not None]
        _node_hook_dicts[:] = alive
    return any(ref() for ref in alive)


def _noop(*args):
    return None


def _node_dict(register) -> OrderedDict | None:
    handle = register(_noop)
    hooks = handle.hooks_dict_ref()
    handle.remove()
    _resolve(hooks)
    return hooks or None


@dataclass
class NodeHooks:
    """The hooks the engine calls around one node, in its order: tensor hooks per input slot,
    then retain_grad, then node pre-hooks; the node; post-hooks (AccumulateGrad: its
    post-accumulate hooks run inside the node). Hooks are held as the live dicts they are
    registered in, read when they run, as the engine reads them: a hook removed before its
    node runs does not run."""
    tensor: list = field(default_factory=list)      # (input slot, hook dict)
    retain: list = field(default_factory=list)      # (input slot, tensor)
    pre: OrderedDict | None = None
    post: OrderedDict | None = None
    post_accumulate: OrderedDict | None = None

    def shape(self) -> tuple:
        """What the cache key sees: which kinds of hooks are where (not which functions)."""
        return (tuple(slot for slot, _ in self.tensor), tuple(slot for slot, _ in self.retain),
                self.pre is not None, self.post is not None, self.post_accumulate is not None)

    def callables(self) -> list:
        """The objects the graph gets per call, in the order `shape` lists them."""
        out: list = [hooks for _, hooks in self.tensor] + [t for _, t in self.retain]
        return out + [d for d in (self.pre, self.post, self.post_accumulate) if d is not None]

    def needs_engine(self) -> str | None:
        """A hook that only works inside PyTorch's engine (it reads the engine's graph task)."""
        dicts = [hooks for _, hooks in self.tensor] + [d for d in (self.pre, self.post) if d is not None]
        for hooks in dicts:
            for hook in hooks.values():
                code = getattr(hook, "__code__", None)
                if code is not None and code.co_filename == _AUTOGRAD_GRAPH_FILE:
                    return ("a hook made by torch.autograd.graph (register_multi_grad_hook) reads the eager "
                            "engine's graph task")
        return None


NO_HOOKS = NodeHooks()
_NO_HOOKS_SHAPE = NO_HOOKS.shape()
NO_HOOKS.shape = lambda: _NO_HOOKS_SHAPE  # asked on every step of every backward: answered once
NO_HOOKS.callables = lambda: ()


def retaining_by_node() -> dict:
    """Live non-leaf tensors that retain grad, by (grad_fn, output_nr)."""
    found: dict = {}
    if not _retaining:
        return found
    for t in list(_retaining.values()):
        if t.retains_grad and t.grad_fn is not None:
            found.setdefault(t.grad_fn, []).append((t.output_nr, t))
    return found


def hooks_of(node, leaf, probe: bool, retaining: dict) -> NodeHooks:
    """The hooks of one node (`leaf` is the tensor of an AccumulateGrad node, else None)."""
    tensor: list = []
    pre = post = post_accumulate = None
    if probe:
        pre_dict = _node_dict(node.register_prehook)
        if pre_dict:
            for hook in pre_dict.values():
                if isinstance(hook, TensorHooksMarker):
                    if hook.hooks:
                        tensor.append((hook.output_nr, hook.hooks))
                else:
                    pre = pre_dict
        post = _node_dict(node.register_hook)
    if leaf is not None:
        if leaf._backward_hooks:
            tensor.append((0, leaf._backward_hooks))
        post_accumulate = leaf._post_accumulate_grad_hooks or None
    retain = retaining.get(node, [])
    if not (tensor or pre or post or post_accumulate or retain):
        return NO_HOOKS
    return NodeHooks(tensor, retain, pre, post, post_accumulate)
