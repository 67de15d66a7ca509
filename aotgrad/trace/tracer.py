"""The dispatch-level tracer: every aten op that runs becomes an FX node.

In: a function run on fake tensors inside `GraphRecorder` (a TorchDispatchMode
stacked above a FakeTensorMode). Out: an `fx.Graph` of aten ops, exactly as they
ran, views and in-place ops included (functionalize/ removes those later).

Node metadata written here (FX's keys where they exist):
  val            the fake value the op produced (FakeTensor, or a list of them)
  stack_trace    the user's source line(s) that issued the op
  seq_nr         autograd sequence number: a forward op and the backward ops
                 that differentiate it share it
  nn_module_stack, source_fn_stack   copied from the torch.compile graph node
  is_backward    True for ops issued by the autograd engine (new key)
  autograd_node  name of the backward node that issued the op, e.g. MulBackward0 (new key)
  forward_op     the forward op a backward op differentiates, e.g. aten.mul.Tensor (new key)
  captured_constant  True on get_attr nodes for real tensors captured from outside (new key)
"""
from __future__ import annotations

import linecache
import operator
import os
import sys
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten

_TORCH_DIR = os.path.dirname(torch.__file__)
_AOTGRAD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB_DIR = os.path.dirname(os.__file__)

# Ops that only answer questions about tensors (device, layout); they make no value.
_NOT_RECORDED = {torch.ops.prim.device.default, torch.ops.prim.layout.default}


def _is_library_file(filename: str) -> bool:
    return (
        filename.startswith(_TORCH_DIR)
        or filename.startswith(_AOTGRAD_DIR)
        or filename.startswith(_STDLIB_DIR)
        or filename.startswith("<")
    )


def user_stack_trace(frame=None, depth: int = 2) -> str | None:
    """The innermost `depth` frames of user code, formatted like a traceback."""
    frame = frame or sys._getframe(1)
    lines = []
    while frame is not None and len(lines) < depth:
        code = frame.f_code
        if not _is_library_file(code.co_filename):
            src = linecache.getline(code.co_filename, frame.f_lineno).strip()
            lines.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}\n    {src}\n')
        frame = frame.f_back
    return "".join(reversed(lines)) or None


def _hidden_writes(func, args, kwargs) -> list:
    """Tensors an op writes although its schema does not say so (native_batch_norm
    updates running stats in training). Their version counters do not move, as in
    eager, so the recorder lists them for the analysis."""
    if func is aten.native_batch_norm.default:
        training = args[5] if len(args) > 5 else kwargs.get("training")
        if training:
            return [t for t in args[3:5] if isinstance(t, torch.Tensor)]
    return []


def op_name(func) -> str:
    """Short, deterministic node names: aten.mul.Tensor -> mul (FX adds _1, _2 ...)."""
    return getattr(func, "_opname", None) or getattr(func, "__name__", "op")


class GraphRecorder(TorchDispatchMode):
    """Records each aten op as a node of `self.graph` while it runs on fake tensors.

    Tensors are matched to nodes by identity. A real tensor that reaches an op
    (a captured global, a `torch.tensor(...)` literal) becomes a `get_attr`
    constant; `self.constants` holds their real values.
    """

    def __init__(self, fake_mode: FakeTensorMode, decompositions: dict | None = None):
        super().__init__()
        self.graph = fx.Graph()
        self.fake_mode = fake_mode
        self.decompositions = decompositions or {}
        self.nodes: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.constants: dict[str, torch.Tensor] = {}
        self._constant_nodes: dict[int, fx.Node] = {}
        self.in_backward = False
        self.user_node: fx.Node | None = None  # node of the torch.compile graph being run
        self.forward_nodes_by_seq_nr: dict[int, fx.Node] = {}
        self._last_placeholder: fx.Node | None = None
        self.hidden_writes: set[int] = set()  # ids of tensors written without a version bump

    # -- graph inputs -------------------------------------------------------
    def placeholder(self, name: str, value: Any) -> fx.Node:
        if self._last_placeholder is None:
            anchor = next(iter(self.graph.nodes), None)
            with self.graph.inserting_before(anchor):
                node = self.graph.placeholder(name)
        else:
            with self.graph.inserting_after(self._last_placeholder):
                node = self.graph.placeholder(name)
        self._last_placeholder = node
        node.meta["val"] = value
        if isinstance(value, torch.Tensor):
            self.nodes[value] = node
        return node

    def bind(self, value: torch.Tensor, node: fx.Node) -> None:
        """Make `value` stand for `node` (a tensor made outside recording, e.g. a hidden clone)."""
        self.nodes[value] = node

    def node_of(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        node = self.nodes.get(value)
        if node is not None:
            return node
        if isinstance(value, FakeTensor):
            raise RuntimeError(
                "aotgrad's tracer met a fake tensor it did not create "
                f"(shape {tuple(value.shape)}, {value.dtype}); it may come from another "
                "fake mode or from a tensor cached across compilations. "
                "Pass the tensor as an input of the function instead."
            )
        return self._constant(value)

    def _constant(self, real: torch.Tensor) -> fx.Node:
        key = id(real)
        node = self._constant_nodes.get(key)
        if node is None:
            name = f"_tensor_constant{len(self.constants)}"
            self.constants[name] = real
            node = self.graph.get_attr(name)
            with self.fake_mode:
                node.meta["val"] = self.fake_mode.from_tensor(real, static_shapes=True)
            node.meta["captured_constant"] = True
            self._constant_nodes[key] = node
        return node

    def fake_of(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
            return self.node_of(value).meta["val"]
        return value

    # -- recording ----------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _NOT_RECORDED:
            return func(*args, **kwargs)
        decomposition = self.decompositions.get(func)
        if decomposition is not None:
            with self:
                result = decomposition(*args, **kwargs)
            if result is not NotImplemented:
                return result
        if func is aten.lift_fresh.default:
            # A tensor literal (`torch.tensor(...)`) is fresh on every eager call: copy it.
            func = aten.lift_fresh_copy.default
        node_args, node_kwargs = pytree.tree_map(self.node_of, (args, kwargs))
        fake_args, fake_kwargs = pytree.tree_map(self.fake_of, (args, kwargs))
        out = func(*fake_args, **fake_kwargs)
        self.hidden_writes.update(id(t) for t in _hidden_writes(func, fake_args, fake_kwargs))
        node = self.graph.create_node("call_function", func, tuple(node_args), node_kwargs,
                                      name=op_name(func))
        node.meta["val"] = out
        self._annotate(node, func)
        self._bind_outputs(node, out)
        return out

    def _bind_outputs(self, node: fx.Node, out: Any) -> None:
        if isinstance(out, torch.Tensor):
            if out not in self.nodes:  # in-place and out= ops return their argument
                self.nodes[out] = node
        elif isinstance(out, (tuple, list)):
            for i, item in enumerate(out):
                if isinstance(item, torch.Tensor) and item not in self.nodes:
                    getitem = self.graph.call_function(operator.getitem, (node, i))
                    getitem.meta = {**node.meta, "val": item}
                    self.nodes[item] = getitem

    def _annotate(self, node: fx.Node, func) -> None:
        meta = node.meta
        meta["original_aten"] = func
        if self.in_backward:
            autograd_node = torch._C._current_autograd_node()
            meta["is_backward"] = True
            if autograd_node is not None:
                seq_nr = autograd_node._sequence_nr()
                meta["seq_nr"] = seq_nr
                meta["autograd_node"] = autograd_node.name()
                forward = self.forward_nodes_by_seq_nr.get(seq_nr)
                if forward is not None:
                    meta["forward_op"] = str(forward.target)
                    for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
                        if key in forward.meta:
                            meta[key] = forward.meta[key]
            return
        seq_nr = torch.autograd._get_sequence_nr() - 1
        meta["seq_nr"] = seq_nr
        self.forward_nodes_by_seq_nr[seq_nr] = node
        user = self.user_node
        if user is not None:
            for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
                if key in user.meta:
                    meta[key] = user.meta[key]
        else:
            meta["stack_trace"] = user_stack_trace(sys._getframe(2))


class UserGraphRunner(fx.Interpreter):
    """Runs a torch.compile graph under the recorder, one user node at a time,
    so every recorded aten op inherits the user's source line and module path.
    `get_attr` nodes read from `attrs` (lifted parameters and buffers) first."""

    def __init__(self, gm: fx.GraphModule, recorder: GraphRecorder, attrs: dict[str, Any]):
        super().__init__(gm, garbage_collect_values=True)
        self.recorder = recorder
        self.attrs = attrs

    def run_node(self, n: fx.Node) -> Any:
        previous = self.recorder.user_node
        self.recorder.user_node = n
        try:
            return super().run_node(n)
        finally:
            self.recorder.user_node = previous

    def get_attr(self, target, args, kwargs):
        if target in self.attrs:
            return self.attrs[target]
        return super().get_attr(target, args, kwargs)


def call_recorded(recorder: GraphRecorder, fn: Callable, *args) -> Any:
    """Run fn(*args) with the recorder and its fake mode active."""
    with recorder.fake_mode, recorder:
        return fn(*args)
