"""The dispatch-level tracer: every aten op that runs becomes an FX node.

In: a function run on fake tensors inside `GraphRecorder` (a TorchDispatchMode
stacked above a FakeTensorMode). Out: an `fx.Graph` of aten ops, exactly as they
ran, views and in-place ops included (functionalize/ removes those later).

Node metadata written here (FX's keys where they exist):
  val            the fake value the op produced (FakeTensor, or a list of them)
  stack_trace    the user's source line(s) that issued the op
  seq_nr         autograd sequence number: a forward op and the backward ops
                 that differentiate it share it. A forward op that made no
                 autograd node (detach, ops under no_grad, BatchNorm's counter
                 add) carries the number of the last node made before it, as in
                 PyTorch's traces; only an op that made the node stands for it
                 (`forward_op` of the backward ops)
  nn_module_stack, source_fn_stack   copied from the torch.compile graph node
  is_backward    True for ops issued by the autograd engine (new key)
  autograd_node  name of the backward node that issued the op, e.g. MulBackward0 (new key)
  forward_op     the forward op a backward op differentiates, e.g. aten.mul.Tensor (new key)
  grad_enabled   the grad mode the op ran in (new key; views replayed at run time use it)
  captured_constant  True on get_attr nodes for real tensors captured from outside (new key)
"""
from __future__ import annotations

import contextlib
import functools
import linecache
import operator
import sys
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, disable_fake_tensor_cache
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.utils._python_dispatch import TorchDispatchMode
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.weak import WeakIdKeyDictionary

from aotgrad import compat
from aotgrad.errors import UnsupportedError, is_library_file
from aotgrad.trace.fake import shares_version_counter
from aotgrad.trace.grad_mode_ops import recorded_op
from aotgrad.trace.symbolic import SYMBOLIC_TYPES, SymbolicValues, has_symbols

aten = torch.ops.aten


# Ops that only answer questions about tensors (device, layout); they make no value.
_NOT_RECORDED = {torch.ops.prim.device.default, torch.ops.prim.layout.default}


def user_stack_trace(frame=None, depth: int = 2) -> str | None:
    """The innermost `depth` frames of user code, formatted like a traceback."""
    frame = frame or sys._getframe(1)
    lines = []
    while frame is not None and len(lines) < depth:
        code = frame.f_code
        if not is_library_file(code.co_filename):
            src = linecache.getline(code.co_filename, frame.f_lineno).strip()
            lines.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}\n    {src}\n')
        frame = frame.f_back
    return "".join(reversed(lines)) or None


def _hidden_writes(func, args, kwargs) -> list:
    """Tensors an op writes although its schema does not say so (native_batch_norm
    updates running stats in training; their version counters do not move, as in eager)."""
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
        self.symbolic = SymbolicValues(self.graph)  # symbolic sizes as graph values (dynamic shapes)
        self.decompositions = decompositions or {}
        self.nodes: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.constants: dict[str, torch.Tensor] = {}
        self._constant_nodes: dict[int, fx.Node] = {}
        self.in_backward = False
        self.user_node: fx.Node | None = None  # node of the torch.compile graph being run
        self.forward_nodes_by_seq_nr: dict[int, fx.Node] = {}
        self._last_placeholder: fx.Node | None = None
        # storages the forward wrote: version counters miss writes inside decompositions
        # (below the autograd key), by list-writing fake kernels (`_foreach_add_`), through
        # `.data` (its own counter) and BatchNorm's running stats (not in its schema)
        self.written_storages: set[StorageWeakRef] = set()
        # the subset whose version counters eager bumps but fake kernels do not (list writes)
        self.unbumped_storages: set[StorageWeakRef] = set()
        # in-place metadata ops (`t_`, `unsqueeze_`, `resize_`, `detach_`) on each tensor, in
        # order: (op, args, kwargs, grad mode); the runtime replays those on inputs
        self.metadata_ops: WeakIdKeyDictionary = WeakIdKeyDictionary()
        # views made in the forward; those whose base (requiring grad) then had its metadata
        # changed in place are stale: see _check_stale_views
        self._views: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._stale_views: WeakIdKeyDictionary = WeakIdKeyDictionary()
        # forward nodes whose autograd nodes are not known yet: (node, tensors to look at)
        self._unresolved: list[tuple[fx.Node, list[torch.Tensor]]] = []
        self._first_seq_nr: int | None = None  # autograd nodes older than the trace are not ours
        self._decomposing = 0  # inside a decomposition, the decomposed op's autograd work is not done
        # forward `detach` nodes with their output and input: `.data` reaches dispatch as a
        # detach too, and gets a version counter of its own only after it (see _tag_own_counters)
        self._detaches: list[tuple[fx.Node, torch.Tensor, torch.Tensor]] = []
        self._isolation: list[contextlib.ExitStack] = []

    # -- entering and leaving -------------------------------------------------
    def __enter__(self):
        """Record with the caller's state kept out of the trace, as PyTorch's tracers do:
        the saved-tensor hooks active at the call do not run on fake tensors (they run at
        run time, on what the compiled Function saves), and reading a fake tensor's data
        pointer raises (`Cannot access data pointer`) instead of warning."""
        if self._first_seq_nr is None:
            self._first_seq_nr = torch.autograd._get_sequence_nr()
        stack = contextlib.ExitStack()
        stack.enter_context(_users_saved_tensor_hooks_set_aside())
        stack.enter_context(_data_ptr_access_raises(self.fake_mode))
        self._isolation.append(stack)
        try:
            return super().__enter__()
        except BaseException:
            self._isolation.pop().close()
            raise

    def __exit__(self, exc_type, exc_value, traceback):
        try:
            if len(self._isolation) == 1:
                self._resolve_autograd_nodes()
                self._tag_own_counters()
        finally:  # leave the dispatch stack even if that fails: a mode left pushed breaks every later call
            try:
                super().__exit__(exc_type, exc_value, traceback)
            finally:
                self._isolation.pop().close()

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
        self.symbolic.bind_input(node, value)
        if isinstance(value, torch.Tensor):
            self.nodes[value] = node
            if isinstance(value, FakeTensor):
                torch._C._set_throw_on_mutable_data_ptr(value)
        return node

    def bind(self, value: torch.Tensor, node: fx.Node) -> None:
        """Make `value` stand for `node` (a tensor made outside recording, e.g. a hidden clone)."""
        self.nodes[value] = node

    def node_of(self, value: Any) -> Any:
        if isinstance(value, SYMBOLIC_TYPES):
            return self.symbolic.node_for(value)
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
                node.meta["val"] = compat.fake_from_real(self.fake_mode, real, static_shapes=True)
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
        if not self.in_backward and not getattr(func, "is_view", False):
            # not on view ops: autograd replays views while it holds a view's lock
            # (regenerating its grad_fn after an in-place write), and reading that
            # view's grad_fn here would wait for the lock forever. Before any op that
            # may write (even `a.copy_(a)`, which bumps `a`'s version): see there
            self._resolve_autograd_nodes()
        if func is aten.copy_.default and args[0] is args[1]:
            return args[0]  # eager returns at once: copying a tensor to itself is a no-op
        result = self._decomposed(func, args, kwargs)
        if result is not NotImplemented:
            return result
        if func is aten.lift_fresh.default:
            # A tensor literal (`torch.tensor(...)`) is fresh on every eager call: copy it.
            func = aten.lift_fresh_copy.default
        node_args, node_kwargs = pytree.tree_map(self.node_of, (args, kwargs))
        fake_args, fake_kwargs = pytree.tree_map(self.fake_of, (args, kwargs))
        out = self._fake_result(func, fake_args, fake_kwargs)
        if not self.in_backward:
            self._note_views_and_writes(func, args, kwargs, fake_args, fake_kwargs, out)
        target = recorded_op(func, args, kwargs)
        node = self.graph.create_node("call_function", target, tuple(node_args), node_kwargs,
                                      name=op_name(func))
        node.meta["val"] = out
        self._annotate(node, func)
        self._bind_outputs(node, out)
        if func is aten.detach.default and not self.in_backward and isinstance(args[0], torch.Tensor):
            self._detaches.append((node, out, args[0]))
        if not self.in_backward:
            tensors = _tensors_to_inspect(func, args, kwargs, out)
            if not torch.is_grad_enabled():  # see _resolve_autograd_nodes: views written under no_grad
                tensors = [t for t in tensors if not t._is_view()]
            self._unresolved.append((node, tensors))
        return out

    def _decomposed(self, func, args, kwargs) -> Any:
        """The op's result through its decomposition (the ops it is made of recorded), or
        NotImplemented when it is recorded as itself."""
        decomposition = self.decompositions.get(func)
        if decomposition is not None:
            self._decomposing += 1
            try:
                with self:
                    result = decomposition(*args, **kwargs)
            finally:
                self._decomposing -= 1
            if result is not NotImplemented:
                return result
        if self._decomposing:
            # A composite op called inside a decomposition reaches this mode below autograd, where
            # it was not broken up (`.to(device, dtype)` in nll_loss's): record what it is made
            # of, as eager runs it (`_to_copy`, or the input itself), so the compilers see their
            # own ops (Inductor lowers `aten.to` as a call of its own, a kernel boundary)
            with self:
                return func.decompose(*args, **kwargs)
        return NotImplemented

    def _fake_result(self, func, fake_args, fake_kwargs) -> Any:
        """The op run on the fakes, with eager's strides for views."""
        if getattr(func, "is_view", False) and _has_empty_tensor(fake_args):
            # the fake view of an empty tensor goes through prims.as_strided, which the fake
            # cache keeps as a fresh output: a hit would give the view a storage of its own
            with disable_fake_tensor_cache(self.fake_mode):
                return func(*fake_args, **fake_kwargs)
        out = func(*fake_args, **fake_kwargs)
        if getattr(func, "is_view", False) and not has_symbols((fake_args, fake_kwargs, out)) \
                and _has_size_one_dim(out):
            # eager's C++ kernel, not the Python one the python dispatcher picks: they
            # differ on strides of size-1 dims (`a.sum().expand(1)`: (0,) in C++, (1,) in
            # Python). Not from the fake cache either: it does not tell the two apart
            # (Dynamo's trace leaves the Python kernel's strides in it).
            with torch._C._DisablePythonDispatcher(), disable_fake_tensor_cache(self.fake_mode):
                out = func(*fake_args, **fake_kwargs)
        return out

    def _note_views_and_writes(self, func, args, kwargs, fake_args, fake_kwargs, out) -> None:
        """A forward op's effects the analysis reads: views taken, views made stale, in-place
        metadata ops on inputs, storages written."""
        if self._stale_views:
            self._check_stale_views(func, (args, kwargs))
        if getattr(func, "is_view", False):
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self._views[t] = True
        if torch.Tag.inplace_view in func.tags:
            self._mark_stale_views(args[0])
            # metadata only: no data written (their version bumps are counted from these)
            op, op_args = func, args[1:]
            if func is aten.resize_as_.default:  # replayed as a resize_ to the template's size
                op, op_args = aten.resize_.default, (list(fake_args[1].shape),)
            self.metadata_ops.setdefault(args[0], []).append((op, op_args, kwargs, torch.is_grad_enabled()))
        elif written_argument_specs(func) or func is aten.native_batch_norm.default:
            targets = _schema_writes(func, fake_args, fake_kwargs) + _hidden_writes(func, fake_args, fake_kwargs)
            written = [StorageWeakRef(t.untyped_storage()) for t in targets]
            self.written_storages.update(written)
            if any(is_list for *_, is_list in written_argument_specs(func)):
                self.unbumped_storages.update(written)

    def _tag_own_counters(self) -> None:
        """Tag the detach nodes that were `.data` (`meta["own_version_counter"]`): eager's alias
        has a version counter of its own, so writes through it, or into its base, are not
        checked by the backward of the other (the runtime gives the compiled values the same)."""
        detaches, self._detaches = self._detaches, []
        for node, out, source in detaches:
            if not shares_version_counter(out, source):
                node.meta["own_version_counter"] = True

    def _mark_stale_views(self, base: torch.Tensor) -> None:
        """An in-place metadata op on `base`: autograd rebuilds the history of a view of it taken
        before by replaying the view's op on `base` as it is now. Eager rebuilds with as_strided
        from the view's own geometry; on fake tensors autograd replays the view op itself, which
        now reads other elements (`row = b[1]; b.t_(); row.mul_(2)`: wrong gradients)."""
        if base._base is not None or not base.requires_grad:
            return  # views of a view rebuild from its root, whose metadata did not change
        for view in list(self._views.keys()):
            if view is not base and view._base is base:
                self._stale_views[view] = True

    def _check_stale_views(self, func, arguments) -> None:
        for t in pytree.tree_leaves(arguments):
            if isinstance(t, torch.Tensor) and t in self._stale_views and t.requires_grad:
                raise stale_view_error(func)

    def check_stale_outputs(self, outs: list) -> None:
        """A returned view whose history autograd would rebuild (see _mark_stale_views)."""
        for t in outs:
            if isinstance(t, torch.Tensor) and t in self._stale_views and t.requires_grad:
                raise stale_view_error(None)

    def record_call(self, target, args: tuple, out: Any, name: str | None = None) -> fx.Node:
        """A call the trace keeps whole instead of recording its aten ops (`trace_wrapped`, a
        hook called out of a compiled-autograd graph): one node taking `args` (tensors as their
        nodes); `out`, what it returns, is bound to it (list and tuple items through getitem)."""
        node = self.graph.call_function(target, pytree.tree_map(self.node_of, tuple(args)), name=name)
        node.meta["val"] = out
        self._annotate(node, target)
        self._bind_outputs(node, out)
        return node

    def _bind_outputs(self, node: fx.Node, out: Any) -> None:
        if isinstance(out, torch.Tensor):
            if out not in self.nodes:  # in-place and out= ops return their argument
                self.nodes[out] = node
                self.symbolic.bind_input(node, out)  # data-dependent sizes (nonzero) are read from it
        elif isinstance(out, SYMBOLIC_TYPES):
            self.symbolic.bind_input(node, out)  # `.item()` under dynamic shapes
        elif isinstance(out, (tuple, list)):
            for i, item in enumerate(out):
                if isinstance(item, torch.Tensor) and item not in self.nodes:
                    getitem = self.graph.call_function(operator.getitem, (node, i))
                    getitem.meta = {**node.meta, "val": item}
                    self.nodes[item] = getitem
                    self.symbolic.bind_input(getitem, item)

    def _annotate(self, node: fx.Node, func) -> None:
        meta = node.meta
        meta["original_aten"] = func
        meta["grad_enabled"] = torch.is_grad_enabled()
        if torch.is_inference_mode_enabled():
            meta["inference_mode"] = True  # (the epilogue replays views made under it under it too)
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
        meta["seq_nr"] = torch.autograd._get_sequence_nr() - 1  # (the op's own node, if it made one, is made by now)
        user = self.user_node
        if user is not None:
            for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
                if key in user.meta:
                    meta[key] = user.meta[key]
        else:
            meta["stack_trace"] = user_stack_trace(sys._getframe(2))

    def _resolve_autograd_nodes(self) -> None:
        """Give each forward node recorded since the last call the seq_nr of the autograd
        node(s) running it made, read off its outputs' `grad_fn` once autograd has set it.

        Ops that made no autograd node (detach, BatchNorm's `num_batches_tracked.add_(1)`,
        ops under no_grad or on tensors that do not require grad) keep the number _annotate
        gave them and never stand for a backward node. An in-place op on a view also claims its base's
        `CopySlices`, the node the engine runs to differentiate it; the last op of a custom
        autograd.Function's forward claims the Function's node (its output's grad_fn).
        Called before each forward op (the previous op's autograd work is then done) and
        when recording stops.

        Reading `grad_fn` must not make autograd regenerate a view's grad_fn: that happens
        when the view's version moved since autograd last set it, and here, below the
        autograd key, the regenerated node would come out empty (PyTorch's "new_fn INTERNAL
        ASSERT"), or, for a view made under no_grad, the read raises eager's "A view was
        created in no_grad mode" (eager never reads it). Tensors are read before the next op
        that could bump a version (every op but a view: version counters move after the
        kernel, where, under grad mode, the autograd layer also refreshes the written view's
        grad_fn). Under no_grad nothing refreshes it, so views that ops run under no_grad
        made or wrote are not read. No_grad makes no autograd node, with one exception: a
        custom Function's forward runs under no_grad and its output gets the Function's
        node afterwards; non-view outputs are still read to claim it (a view output leaves
        the Function's backward ops without `forward_op`).
        """
        if self._decomposing:
            return
        unresolved, self._unresolved = self._unresolved, []
        for node, tensors in unresolved:
            claimed = []
            for t in tensors:
                grad_fn = t.grad_fn
                if grad_fn is None:
                    continue
                seq_nr = grad_fn._sequence_nr()
                if seq_nr >= self._first_seq_nr and seq_nr not in self.forward_nodes_by_seq_nr:
                    self.forward_nodes_by_seq_nr[seq_nr] = node
                    claimed.append(seq_nr)
            if claimed:
                node.meta["seq_nr"] = claimed[0]
                for user in node.users:
                    if user.target is operator.getitem:
                        user.meta["seq_nr"] = claimed[0]


def stale_view_error(func) -> Exception:
    use = f"then used by `{func}`" if func is not None else "then returned"
    line = user_stack_trace(sys._getframe(2)) if func is not None else None
    return UnsupportedError((
        f"aotgrad cannot trace a view {use} after an in-place metadata op (`t_()`, `transpose_()`, "
        "`unsqueeze_()`, `as_strided_()`...) changed the tensor it views, a tensor that requires grad: "
        "autograd on the trace's fake tensors would rebuild the view's history by replaying its view op "
        "on the changed tensor, giving wrong gradients (eager rebuilds it with as_strided). To continue: "
        "take the view after the metadata change, or use the out-of-place op (`x = x.t()`)."
        + (f"\n{line.rstrip()}" if line else "")))


def _has_size_one_dim(out) -> bool:
    return any(isinstance(t, torch.Tensor) and 1 in t.shape for t in pytree.tree_leaves(out))


def _has_empty_tensor(args) -> bool:
    """Is some argument known to have no elements? (A symbolic size: only if known for every
    value it may take; no guard.)"""
    return any(isinstance(a, torch.Tensor) and statically_known_true(a.numel() == 0) for a in args)


@functools.lru_cache(maxsize=None)
def written_argument_specs(func) -> tuple:
    """(position, name, kwarg_only, is_list) of each argument the op's schema marks as written."""
    if not isinstance(func, torch._ops.OpOverload):
        return ()
    return tuple((i, spec.name, spec.kwarg_only, isinstance(spec.type, torch.ListType))
                 for i, spec in enumerate(func._schema.arguments)
                 if spec.alias_info is not None and spec.alias_info.is_write)


def _schema_writes(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors an op's schema marks as written (`Tensor(a!)`, `Tensor(a!)[]`)."""
    written = []
    for i, name, kwarg_only, _ in written_argument_specs(func):
        value = args[i] if i < len(args) and not kwarg_only else kwargs.get(name)
        values = value if isinstance(value, (list, tuple)) else [value]
        written.extend(v for v in values if isinstance(v, torch.Tensor))
    return written


def _tensors_to_inspect(func, args, kwargs, out) -> list[torch.Tensor]:
    """Where the autograd node(s) of an op show: the base of a view it wrote in place
    (CopySlices), then its outputs (in-place and out= ops return the written tensor)."""
    outputs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    bases = [a._base for a in _schema_writes(func, args, kwargs) if a._is_view()]
    return bases + outputs


@contextlib.contextmanager
def _users_saved_tensor_hooks_set_aside():
    """Take the saved-tensor hooks that are active when recording starts off autograd's
    stack, and put them back after: they would run on fake tensors. As in PyTorch's
    AOTAutograd they run at run time instead, on what the compiled Function saves.
    Hooks that the traced code pushes itself are part of its program and are traced."""
    hooks_api = torch._C._autograd
    if not hooks_api._saved_tensors_hooks_is_enabled():  # disabled hooks do not run at all
        yield
        return
    set_aside = []
    while (top := hooks_api._top_saved_tensors_default_hooks(True)) is not None:
        set_aside.append(top)
        hooks_api._pop_saved_tensors_default_hooks()
    try:
        yield
    finally:
        for pack, unpack in reversed(set_aside):
            hooks_api._push_saved_tensors_default_hooks(pack, unpack)


@contextlib.contextmanager
def _data_ptr_access_raises(fake_mode: FakeTensorMode):
    """Fake tensors made while recording raise on `data_ptr()` instead of warning."""
    previous = fake_mode._allow_unsafe_data_ptr_access
    fake_mode._allow_unsafe_data_ptr_access = False
    try:
        yield
    finally:
        fake_mode._allow_unsafe_data_ptr_access = previous


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
