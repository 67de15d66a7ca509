"""The functionalize pass: views and mutations in, a pure graph out.

Every traced tensor is a *view chain* over a *storage root* (a placeholder, a
constant or the fresh result of an op). Each root has a current functional
value. A mutation of a view computes the new view value with the op's
functional form and scatters it back through the chain into a new root value
(`slice` -> `slice_scatter`, ...); any later read of any view of that root is
regenerated from the new root value. So a write through `x[0]` is seen
through `x.t()`, as in eager.

    before: add_ = aten.add_(select, 1)            (select = x[0], x a placeholder)
    after:  add = aten.add(select, 1); x_1 = aten.select_scatter(x, add, 0, 0)

Graph outputs read the final values, so a mutated input's slot in the output
holds its new value (joint.py put the input there). A written intermediate keeps eager's
layout, as eager's in-place and out= ops keep their target's strides (`copy` into it where
the functional op laid its result out otherwise; strides of size-1 dims may still differ).
"""
from __future__ import annotations

import contextlib
import math
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import disable_fake_tensor_cache
from torch.fx.experimental.symbolic_shapes import statically_known_true

from aotgrad.analysis import known_equal, overlaps_itself
from aotgrad.errors import UnsupportedError
from aotgrad.functionalize import rules
from aotgrad.trace.symbolic import SymbolicValues
from aotgrad.trace.tracer import op_name

aten = torch.ops.aten
_COPIED_META = ("stack_trace", "seq_nr", "nn_module_stack", "source_fn_stack", "is_backward",
                "autograd_node", "forward_op", "original_aten")


@dataclass(frozen=True)
class ViewStep:
    op: Any
    args: tuple
    kwargs: tuple = ()
    index: int | None = None  # which output of a multi-output view (split, unbind)
    # a `.data` (the tracer's meta["own_version_counter"]): the alias it makes, and views of
    # it, have a version counter of their own in eager; the nodes replaying it are tagged too
    own_counter: bool = False


class _Root:
    def __init__(self, value: fx.Node, val: torch.Tensor, origin: str):
        self.value = value       # current functional value (node of the new graph)
        self.val = val           # the traced fake of the root: the layout reference
        self.origin = origin     # "input", "constant" or "intermediate"
        self.version = 0
        self.placeholder: fx.Node | None = None  # an input's graph input, as passed


class _Ref:
    """A traced tensor: a view chain over a root, plus a cached current value."""

    def __init__(self, root: _Root, chain: tuple, val):
        self.root, self.chain, self.val = root, chain, val
        self.cached: fx.Node | None = None
        self.cached_version = -1


@dataclass
class FunctionalizePlan:
    """What the pass learned: which placeholders it wrote to, and how many writes."""

    mutated_placeholders: list[int] = field(default_factory=list)
    num_mutations: int = 0

    def __str__(self) -> str:
        return (f"functionalize: {self.num_mutations} mutation(s) made functional; "
                f"placeholders written: {self.mutated_placeholders}")


class _Functionalizer:
    def __init__(self, gm: fx.GraphModule):
        self.gm = gm
        self.graph = fx.Graph()
        self.refs: dict[fx.Node, Any] = {}  # old node -> _Ref, or new node for non-tensors
        vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        self.fake_mode = detect_fake_mode(vals)
        self.source: fx.Node | None = None   # old node being rewritten (for metadata)
        self.plan = FunctionalizePlan()
        self.placeholder_roots: list[_Root] = []
        self.order = {node: i for i, node in enumerate(gm.graph.nodes)}
        self.stale = _metadata_mutated_vals(gm)
        self.symbols = SymbolicValues(self.graph)  # sizes read from fakes, as graph values

    def traced_val(self, node: fx.Node) -> Any:
        """node's recorded fake value, or None where a later `t_`/`resize_` changed that
        fake in place (the tracer records live fakes), so it must be recomputed."""
        val = node.meta.get("val")
        parts = val if isinstance(val, (list, tuple)) else (val,)  # (`split`'s views, one of them changed)
        return None if any(id(v) in self.stale for v in parts) else val

    # -- emitting -----------------------------------------------------------
    def emit(self, op, args: tuple, kwargs: dict | None = None, val=None) -> fx.Node:
        kwargs = kwargs or {}
        node = self.graph.create_node("call_function", op, args, kwargs, name=op_name(op))
        if self.source is not None:
            for key in _COPIED_META:
                if key in self.source.meta:
                    node.meta[key] = self.source.meta[key]
        node.meta["val"] = val if val is not None else self.fake_run(op, args, kwargs)
        return node

    def geometry(self, *values: Any) -> Any:
        """Sizes, strides or offsets read from fake values, as graph arguments: a symbolic one
        (dynamic shapes) becomes the nodes that compute it from the inputs' sizes."""
        return pytree.tree_map_only(torch.SymInt, lambda s: self.symbols.node_for(s, "a strided write's layout"),
                                    values)

    def fake_run(self, op, args, kwargs):
        fake_args, fake_kwargs = pytree.tree_map_only(fx.Node, lambda n: n.meta["val"], (args, kwargs))
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.fake_mode)
            stack.enter_context(torch.no_grad())
            if op is aten.as_strided_scatter.default:
                # the fake-tensor cache's key ignores the input's storage offset, which this
                # op's output keeps (and later as_strided offsets are read from it)
                stack.enter_context(disable_fake_tensor_cache(self.fake_mode))
            return op(*fake_args, **fake_kwargs)

    # -- reading ------------------------------------------------------------
    def value(self, ref: _Ref) -> fx.Node:
        """The current functional value of a traced tensor."""
        if ref.cached is not None and ref.cached_version == ref.root.version:
            return ref.cached
        self._align(ref.root, ref.chain)
        node = ref.root.value
        for step in ref.chain:
            node = self.replay(step, node, ref.root)
        ref.cached, ref.cached_version = node, ref.root.version
        return node

    def replay(self, step: ViewStep, parent: fx.Node, root: _Root) -> fx.Node:
        args = step.args
        if step.op is aten.as_strided.default:
            args = self._as_strided_args(parent, root, args)
        node = self.emit(step.op, (parent, *args), dict(step.kwargs))
        if step.index is not None:
            node = self.emit(operator.getitem, (node, step.index), val=node.meta["val"][step.index])
        if step.own_counter or parent.meta.get("own_version_counter"):
            node.meta["own_version_counter"] = True
        return node

    def _as_strided_args(self, parent: fx.Node, root: _Root, args: tuple) -> tuple:
        """as_strided offsets are absolute in the storage; move them onto a new root value (by
        the roots' offsets' difference in bytes: `a.view(torch.int16).as_strided(...)` counts
        in int16 elements). Without an offset as_strided keeps its parent's, moved already."""
        if (parent is root.value and root.version == 0) or len(args) < 3 or args[2] is None:
            return args
        self._check_same_layout(root, "read a strided view of")
        shift, itemsize = _offset_shift(root), parent.meta["val"].element_size()
        if statically_known_true(shift == 0):
            return args
        assert shift % itemsize == 0, f"root offsets {shift} bytes apart, not aligned for {itemsize}-byte elements"
        return (*args[:2], *self.geometry(_val_of(args[2]) + shift // itemsize), *args[3:])

    def _align(self, root: _Root, chain: tuple) -> None:
        """Give the root's value eager's storage offset where `chain` reads it in elements larger
        than the offsets' difference: after `a.add_(1)` on a float input at offset 1 the new
        value is at offset 0, and `a[1:3].view(torch.float64)` needs an even offset, as in eager.

            before: add = aten.add(a, 1)                                  (offset 0; eager's a: 1)
            after:  new_empty_strided = aten.new_empty_strided(add, [7], [1])
                    as_strided_scatter = aten.as_strided_scatter(new_empty_strided, add, [6], [1], 1)
                    as_strided = aten.as_strided(as_strided_scatter, [6], [1], 1)   (offset 1)
        """
        sizes = [root.val.element_size()] + [step.args[0].itemsize for step in chain if step.op is aten.view.dtype]
        if statically_known_true(_offset_shift(root) % max(sizes) == 0):
            return
        current = root.value.meta["val"]
        size, stride, offset = list(current.shape), list(current.stride()), root.val.storage_offset()
        extent = offset + 1 + sum(torch.sym_max(n - 1, 0) * s for n, s in zip(size, stride))
        extent, size, stride, offset = self.geometry(extent, size, stride, offset)
        storage = self.emit(aten.new_empty_strided.default, (root.value, [extent], [1]))
        placed = self.emit(aten.as_strided_scatter.default, (storage, root.value, size, stride, offset))
        root.value = self.emit(aten.as_strided.default, (placed, size, stride, offset))
        root.version += 1  # the same values; views cached from the old node are made again

    def _check_same_layout(self, root: _Root, action: str) -> None:
        current = root.value.meta["val"]
        # strides of size-1 dims put no element elsewhere: offsets read the same memory
        if current.dim() != root.val.dim() or any(
                n != 1 and a != b for n, a, b in zip(current.shape, current.stride(), root.val.stride())):
            raise UnsupportedError(
                f"aotgrad cannot {action} a tensor after it was mutated: the mutated tensor "
                f"(shape {tuple(root.val.shape)}) now has strides {tuple(current.stride())} in the "
                f"functional graph but {tuple(root.val.stride())} in eager, so `as_strided` offsets "
                "would point elsewhere. To continue: use ordinary views (slicing, view, expand) "
                "instead of as_strided on a tensor that is mutated.")

    def arg_value(self, a: Any) -> Any:
        if isinstance(a, fx.Node):
            ref = self.refs[a]
            return self.value(ref) if isinstance(ref, _Ref) else ref
        return a

    # -- writing ------------------------------------------------------------
    def write(self, ref: _Ref, new: fx.Node) -> None:
        """Make `new` the value of the traced tensor `ref`, updating its root."""
        root = ref.root
        new = self._cast_like(new, ref.val)
        if overlaps_itself(ref.val):
            val = ref.val
            eager = ("unsupported operation: more than one element of the written-to tensor refers to a "
                     "single memory location. " if 0 in val.stride() else "")  # eager's own check, for stride 0
            raise UnsupportedError(
                f"{eager}aotgrad cannot compile an in-place write to a tensor of shape {tuple(val.shape)} and "
                f"strides {tuple(val.stride())} whose elements overlap in memory (from `unfold`, "
                "`as_strided` or `expand`): eager writes each shared element once per alias, which a "
                "functional graph cannot express. To continue: `.clone()` the tensor before writing to it."
                + self._where())
        if root.origin == "input" and overlaps_itself(root.val):
            # e.g. `a[0] = 1` on `a = l0.expand(2, 3)`: eager's write shows in every row; the
            # functional value of `a` has its rows apart, and copying it back into `a` raises
            raise UnsupportedError(
                f"aotgrad cannot compile an in-place write into an input of shape {tuple(root.val.shape)} "
                f"and strides {tuple(root.val.stride())} whose elements overlap in memory (an `expand`ed "
                "tensor): eager's write shows in every element that shares the memory, which the compiled "
                "code cannot express. To continue: pass the tensor it was expanded from and expand inside, "
                "or pass a `.clone()`." + self._where())
        if root.origin == "constant":
            raise UnsupportedError(
                "aotgrad cannot compile a function that mutates a tensor it did not receive as an "
                "input (a global or a captured tensor): the compiled code would not update it. "
                "To continue: pass the tensor as an argument, or register it as a module buffer."
                + self._where())
        if not ref.chain:
            new_root = new
        elif all(rules.scatter_step(step.op) for step in ref.chain):
            new_root = self._scatter_through_chain(root, ref.chain, new)
        else:
            new_root = self._scatter_as_strided(root, ref, new)
        root.value = self._keep_layout(root, new_root)
        if not ref.chain:
            new = root.value
        root.version += 1
        ref.cached, ref.cached_version = new, root.version
        self.plan.num_mutations += 1

    def _cast_like(self, new: fx.Node, like: torch.Tensor) -> fx.Node:
        """An in-place or out= op keeps its target's dtype: `x.add_(y_double)` computes in
        float64 and stores into float32 x (FunctionalTensorWrapper::replace_ casts too)."""
        val = new.meta["val"]
        if val.dtype == like.dtype:
            return new
        return self.emit(aten._to_copy.default, (new,), {"dtype": like.dtype})

    def _keep_layout(self, root: _Root, new: fx.Node) -> fx.Node:
        """An intermediate's new value, laid out as the old one: eager's in-place and out= ops
        keep their target's strides, a functional op picks its own. Before: `v0 = x.t() * 1;
        torch.add(b, 1, out=v0)` gives `add = aten.add(b, 1)`, contiguous where eager's v0 is
        transposed. After: `copy = aten.copy(mul, add)`, laid out as `mul`. Views of v0 that
        the epilogue rebuilds (`v0[1]`) then get eager's strides and offsets.

        Inputs are left alone (the epilogue copies their new value into them). Strides of size-1
        dims count too where they are static: eager's `v0 = a + a; v0.sin_()` keeps the (1, 1)
        strides of a (1, 2) `v0`, the functional `sin` picks (2, 1).
        """
        current, value = root.value.meta["val"], new.meta["val"]
        if (root.origin != "intermediate" or not isinstance(value, torch.Tensor)
                or not known_equal(value.shape, current.shape) or known_equal(value.stride(), current.stride())
                or (_same_element_offsets(value, current) and _has_symbols(value, current))):
            return new
        return self.emit(aten.copy.default, (root.value, new))

    def _scatter_through_chain(self, root: _Root, chain: tuple, new: fx.Node) -> fx.Node:
        self._align(root, chain)
        parents = [root.value]
        for step in chain[:-1]:
            parents.append(self.replay(step, parents[-1], root))
        for step, parent in zip(reversed(chain), reversed(parents)):
            view_val = new.meta["val"]
            op, args = rules.scatter_step(step.op)(parent, new, step.args, step.index,
                                                   parent.meta["val"], view_val)
            new = args if op is None else self.emit(op, self.geometry(*args))  # (sizes read off fakes)
        return new

    def _scatter_as_strided(self, root: _Root, ref: _Ref, new: fx.Node) -> fx.Node:
        """Write `new`, the view's value, into the root by `as_strided_scatter` at the view's
        place in the storage (offsets absolute, as as_strided_scatter reads them).

        A chain with a dtype view reinterprets bits: `a.as_strided((2,), (1,), 0).view(torch.int32)
        .add_(1)` adds 1 to the int32 patterns of float `a`. The root and `new` are then viewed
        in one element type first (the view's, or bytes where the sizes differ) and the result
        viewed back in the root's; as_strided_scatter of an int32 `new` into a float root would
        convert the values instead.

            before: view = aten.view.dtype(as_strided, torch.int32); add_ = aten.add_(view, 1)
            after:  add = aten.add(view, 1); view_1 = aten.view.dtype(a, torch.int32)
                    as_strided_scatter = aten.as_strided_scatter(view_1, add, [2], [1], 0)
                    a_1 = aten.view.dtype(as_strided_scatter, torch.float32)
        """
        self._check_same_layout(root, "write through an expanded or strided view of")
        view, dtype = ref.val, root.val.dtype
        unit = view.dtype if view.element_size() == root.val.element_size() else torch.uint8
        base = self._reinterpret(root.value, unit)
        if base.meta["val"].requires_grad:
            # as_strided_scatter refuses a non-contiguous input that requires grad (its own
            # backward would be wrong); this graph's backward is traced already, so a detached
            # stand-in of the same memory computes the same value
            base = self.emit(aten.detach.default, (base,))
        size, stride, offset = _geometry_in(view, unit)
        # as_strided_scatter reads the offset as absolute in its input's storage
        size, stride, offset = self.geometry(size, stride, offset + _offset_shift(root) // unit.itemsize)
        scattered = self.emit(aten.as_strided_scatter.default,
                              (base, self._reinterpret(new, unit), size, stride, offset))
        return self._reinterpret(scattered, dtype)

    def _reinterpret(self, node: fx.Node, dtype: torch.dtype) -> fx.Node:
        """node's memory read as `dtype`, by `view(dtype)`; between element sizes only to and
        from bytes, through a last dim of the larger element's size (`_geometry_in`), which
        any layout allows: f32[2, 3] <-> u8[2, 3, 4]."""
        current = node.meta["val"].dtype
        if current == dtype:
            return node
        if current.itemsize == dtype.itemsize:
            return self.emit(aten.view.dtype, (node, dtype))
        assert torch.uint8 in (current, dtype), f"reinterpret {current} as {dtype}: only to or from bytes"
        if current.itemsize > dtype.itemsize:
            return self.emit(aten.view.dtype, (self.emit(aten.unsqueeze.default, (node, -1)), dtype))
        return self.emit(aten.squeeze.dim, (self.emit(aten.view.dtype, (node, dtype)), -1))

    def _where(self) -> str:
        trace = self.source.meta.get("stack_trace") if self.source is not None else None
        return f"\n{trace.rstrip()}" if trace else ""

    # -- nodes --------------------------------------------------------------
    def run(self) -> tuple[fx.GraphModule, FunctionalizePlan]:
        for node in self.gm.graph.nodes:
            self.source = node
            handler = getattr(self, f"on_{node.op}")
            handler(node)
        remove_dead_nodes(self.graph)
        out = fx.GraphModule(self.gm, self.graph)
        self.plan.mutated_placeholders = [i for i, r in enumerate(self.placeholder_roots) if r.version > 0]
        return out, self.plan

    def on_placeholder(self, node: fx.Node) -> None:
        new = self.graph.placeholder(node.target)
        new.meta = dict(node.meta)
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            root = _Root(new, val, "input")
            root.placeholder = new
            self.placeholder_roots.append(root)
            ref = self.refs[node] = _Ref(root, (), val)
            ref.cached, ref.cached_version = new, 0
        else:
            self.refs[node] = new
        self.symbols.bind_input(new, val)

    def on_get_attr(self, node: fx.Node) -> None:
        new = self.graph.get_attr(node.target)
        new.meta = dict(node.meta)
        root = _Root(new, node.meta["val"], "constant")
        ref = self.refs[node] = _Ref(root, (), node.meta["val"])
        ref.cached, ref.cached_version = new, 0

    def on_output(self, node: fx.Node) -> None:
        self.graph.output(pytree.tree_map(self.arg_value, node.args[0]))

    def on_call_function(self, node: fx.Node) -> None:
        op = node.target
        if op is operator.getitem:
            return self.on_getitem(node)
        if op in rules.METADATA_MUTATIONS:
            return self.on_metadata_mutation(node)
        if op in rules.RESIZES:
            return self.on_resize(node)
        if getattr(op, "is_view", False) and isinstance(node.args[0], fx.Node):
            return self.on_view(node)
        if op in _GEOMETRY_READS and node.args[0].op == "placeholder":
            # a symbol the tracer reads from an input (dynamic shapes): the input as passed,
            # not as a later `t_()` left it
            self.refs[node] = self.emit(op, (self.refs[node.args[0]].root.placeholder, *node.args[1:]),
                                        val=node.meta["val"])
            return
        # A view of a Python number (`_conj(2j)`: the backward of `x * 2j` conjugates the
        # scalar autograd saved, which reaches the tracer as the number) views a tensor the
        # op makes from the number on each call: nothing else shares its memory, so it is fresh.
        if rules.is_mutating(op, node.args, node.kwargs):
            return self.on_mutation(node)
        args, kwargs = pytree.tree_map(self.arg_value, (node.args, node.kwargs))
        new = self.emit(op, args, kwargs, val=self.traced_val(node))
        self.refs[node] = self._fresh(new, new.meta["val"])

    def _fresh(self, new: fx.Node, val: Any) -> Any:
        if isinstance(val, torch.Tensor):
            ref = _Ref(_Root(new, val, "intermediate"), (), val)
            ref.cached, ref.cached_version = new, 0
            return ref
        return new  # a list (multi-output op: getitem nodes follow) or a non-tensor

    def on_getitem(self, node: fx.Node) -> None:
        parent, index = node.args
        parent_ref = self.refs[parent]
        if isinstance(parent_ref, _MultiView):
            val = parent_ref.node.meta["val"][index] if self.traced_val(node) is None else node.meta["val"]
            ref = _Ref(parent_ref.root, parent_ref.chain + (parent_ref.step_for(index),), val)
            getitem = self.emit(operator.getitem, (parent_ref.node, index), val=val)
            if parent_ref.version == parent_ref.root.version:
                ref.cached, ref.cached_version = getitem, parent_ref.version
            self.refs[node] = ref
        elif isinstance(parent_ref, list):  # outputs of a rewritten mutating op
            self.refs[node] = parent_ref[index]
        else:
            new = self.emit(operator.getitem, (parent_ref, index), val=parent_ref.meta["val"][index])
            self.refs[node] = self._fresh(new, new.meta["val"])

    def on_view(self, node: fx.Node) -> None:
        parent = self.refs[node.args[0]]
        if node.target is aten.as_strided.default and parent.chain and _is_root_geometry(parent.root, node.args[1:]):
            # an input's own geometry, whatever views and metadata ops came between: the
            # input itself (the joint's write-back of an input whose metadata changed)
            self.refs[node] = _Ref(parent.root, (), parent.root.val)
            return
        args = tuple(pytree.tree_map(self.arg_value, tuple(node.args[1:])))  # symbolic sizes: new graph's nodes
        step = ViewStep(node.target, args, tuple(sorted(node.kwargs.items())),
                        own_counter=bool(node.meta.get("own_version_counter")))
        self._align(parent.root, parent.chain + (step,))
        parent_value = self.value(parent)
        traced = self.traced_val(node)
        moved = self._as_strided_args(parent_value, parent.root, args) if step.op is aten.as_strided.default else args
        new = self.emit(node.target, (parent_value, *moved), dict(node.kwargs),
                        val=traced if moved is args else None)  # as_strided on a moved root: its own offset
        if step.own_counter or any(s.own_counter for s in parent.chain):
            new.meta["own_version_counter"] = True
        if isinstance(node.meta["val"], torch.Tensor):
            eager = traced if traced is not None else self.fake_run(
                node.target, (parent.val, *pytree.tree_map(_val_of, tuple(node.args[1:]))), node.kwargs)
            ref = _Ref(parent.root, parent.chain + (step,), eager)
            ref.cached, ref.cached_version = new, parent.root.version
            self.refs[node] = ref
        else:
            self.refs[node] = _MultiView(parent.root, parent.chain, step, new, parent.root.version)

    def on_metadata_mutation(self, node: fx.Node) -> None:
        ref = self.refs[node.args[0]]
        view_op = rules.METADATA_MUTATIONS[node.target]
        ref.chain = ref.chain + (ViewStep(view_op, tuple(node.args[1:]), tuple(sorted(node.kwargs.items()))),)
        ref.val = self.fake_run(view_op, (ref.val, *node.args[1:]), node.kwargs)
        ref.cached_version = -1
        self.refs[node] = ref

    def on_resize(self, node: fx.Node) -> None:
        """`resize_`/`resize_as_`, where a functional graph can say it (as PyTorch's
        functionalization does): to the same size, a no-op; within the storage, a
        contiguous `as_strided` view of it; past it, `aten.resize` of a fresh tensor
        that nothing else views. Anything else is an UnsupportedError."""
        ref = self.refs[node.args[0]]
        bound = _bind(node.target, node.args, node.kwargs)
        if node.target is aten.resize_as_.default:
            size = list(self.refs[bound["the_template"]].val.shape)
        else:
            size = list(bound["size"])
        memory_format = bound.get("memory_format")
        self.refs[node] = ref
        if size == list(ref.val.shape) and (memory_format is None or (
                memory_format == torch.contiguous_format and ref.val.is_contiguous())):
            return
        if memory_format not in (None, torch.contiguous_format) or not all(isinstance(n, int) for n in size):
            raise self._resize_error(node, "to a non-contiguous memory format or a symbolic size")
        stride = _contiguous_strides(size)
        offset = ref.val.storage_offset()
        capacity = ref.root.val.untyped_storage().nbytes() // ref.val.element_size()
        if offset + math.prod(size) <= capacity:
            step = ViewStep(aten.as_strided.default, (size, stride, offset))
            ref.chain = ref.chain + (step,)
            ref.val = self.fake_run(aten.as_strided.default, (ref.val, size, stride, offset), {})
            ref.cached_version = -1
        elif self._may_grow(ref, node):
            root = ref.root
            root.value = self.emit(aten.resize.default, (self.value(ref), size))
            root.val = ref.val = root.value.meta["val"]
            root.version += 1
            ref.cached, ref.cached_version = root.value, root.version
        else:
            raise self._resize_error(node, "past its storage while it is a view, an input, or viewed "
                                           "by another tensor used later")

    def _may_grow(self, ref: _Ref, node: fx.Node) -> bool:
        """A fresh, contiguous intermediate, or an input (the runtime resizes the caller's tensor
        and writes its new value into it after: runtime/epilogue.ReplayMetadata), whose other
        views are all dead by now."""
        root = ref.root
        if ref.chain or root.origin not in ("intermediate", "input") or not root.val.is_contiguous() \
                or root.val.storage_offset():
            return False
        for other, other_ref in self.refs.items():
            if other_ref is ref or getattr(other_ref, "root", None) is not root:
                continue
            if any(self.order.get(user, -1) > self.order[node] for user in other.users):
                return False
        return True

    def _resize_error(self, node: fx.Node, case: str) -> UnsupportedError:
        return UnsupportedError(
            f"aotgrad cannot compile `{node.target}` {case}: it replaces the tensor's storage in "
            "place, which a functional graph cannot express. To continue: build a new tensor "
            "instead (e.g. `torch.empty(size)` or `x.new_empty(size)` rather than `x.resize_(size)`)."
            + self._where())

    def on_mutation(self, node: fx.Node) -> None:
        op = node.target
        rule = rules.mutation_rule(op)
        bound = _bind(op, node.args, node.kwargs)
        result = self.emit(rule.functional, *self._functional_call(rule, bound))
        single = len(rule.functional._schema.returns) == 1
        outputs: dict[int, fx.Node] = {}

        def output(k: int) -> fx.Node:
            if single:
                return result
            if k not in outputs:
                outputs[k] = self.emit(operator.getitem, (result, k), val=result.meta["val"][k])
            return outputs[k]

        for name, k in rule.mutated:
            self._write_argument(bound[name], output(k))
        returned = [self._returned(bound[r]) if isinstance(r, str) else self._fresh(output(r), output(r).meta["val"])
                    for r in rule.returns]
        self.refs[node] = returned[0] if len(returned) == 1 else (returned or None)

    def _functional_call(self, rule: rules.MutationRule, bound: dict[str, Any]) -> tuple[tuple, dict]:
        """The functional op's arguments, by its own schema's names and order."""
        values = {name: pytree.tree_map(self.arg_value, v) for name, v in bound.items()
                  if name not in rule.drop_args}
        if rule.options_from is not None:  # factory out= op: make what `out` holds
            out = self.refs[bound[rule.options_from]].val
            values.update(dtype=out.dtype, layout=out.layout, device=out.device)
        args, kwargs = [], {}
        for a in rule.functional._schema.arguments:
            if a.name not in values:
                continue
            if a.kwarg_only:
                kwargs[a.name] = values[a.name]
            else:
                args.append(values[a.name])
        return tuple(args), kwargs

    def _write_argument(self, argument: Any, new: fx.Node) -> None:
        """Write `new` into a mutated argument: one tensor, or a list (`_foreach_add_`)."""
        if isinstance(argument, fx.Node):
            self.write(self.refs[argument], new)
        elif isinstance(argument, (list, tuple)):
            values = new.meta["val"]
            for i, item in enumerate(argument):
                if item is not None:
                    self.write(self.refs[item], self.emit(operator.getitem, (new, i), val=values[i]))

    def _returned(self, argument: Any) -> Any:
        if isinstance(argument, (list, tuple)):
            return [self.refs[a] for a in argument]
        return self.refs[argument]


class _MultiView:
    """A multi-output view op (split, unbind); its getitems are views."""

    def __init__(self, root, chain, step: ViewStep, node: fx.Node, version: int):
        self.root, self.chain, self.step, self.node, self.version = root, chain, step, node, version

    def step_for(self, index: int) -> ViewStep:
        return ViewStep(self.step.op, self.step.args, self.step.kwargs, index, self.step.own_counter)



def _has_symbols(*tensors: torch.Tensor) -> bool:
    return any(isinstance(x, torch.SymInt) for t in tensors for x in (*t.shape, *t.stride()))


def _same_element_offsets(t: torch.Tensor, other: torch.Tensor) -> bool:
    """Do two tensors of one shape place every element at the same offset from their start,
    i.e. are their strides equal on every dim of size > 1? (Symbolic: only if known, no guards.)

        (3, 1) strides (1, 3) and (1, 1): yes      (3, 4) strides (1, 3) and (4, 1): no
    """
    return all(statically_known_true(n <= 1) or statically_known_true(a == b)
               for n, a, b in zip(t.shape, t.stride(), other.stride()))


def _geometry_in(t: torch.Tensor, unit: torch.dtype) -> tuple[list, list, Any]:
    """Size, stride and storage offset of t's memory read as `unit` (t's dtype, one of the same
    element size, or bytes): in bytes, a last dim of t's element size is added.

        f32[2, 3] strides (3, 1) offset 1 in torch.uint8: [2, 3, 4], [12, 4, 1], 4
    """
    size, stride, offset = list(t.shape), list(t.stride()), t.storage_offset()
    ratio = t.element_size() // unit.itemsize
    if ratio == 1:
        return size, stride, offset
    assert unit == torch.uint8, f"{t.dtype} read as {unit}: only as bytes"
    return size + [ratio], [s * ratio for s in stride] + [1], offset * ratio


def _offset_shift(root: _Root) -> Any:
    """How many bytes later in its storage the root's value starts than eager's root."""
    return (root.value.meta["val"].storage_offset() - root.val.storage_offset()) * root.val.element_size()


def _val_of(a: Any) -> Any:
    return a.meta["val"] if isinstance(a, fx.Node) else a


def _bind(op, args: tuple, kwargs: dict) -> dict[str, Any]:
    bound = {}
    for i, a in enumerate(op._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            bound[a.name] = args[i]
        elif a.name in kwargs:
            bound[a.name] = kwargs[a.name]
        elif a.has_default_value():
            bound[a.name] = a.default_value
        else:
            bound[a.name] = None
    return bound


def _metadata_mutated_vals(gm: fx.GraphModule) -> set[int]:
    """ids of traced fakes that an in-place metadata op (`t_`, `resize_`) changed later."""
    changes = set(rules.METADATA_MUTATIONS) | rules.RESIZES
    return {id(node.args[0].meta.get("val")) for node in gm.graph.nodes
            if node.op == "call_function" and node.target in changes and isinstance(node.args[0], fx.Node)}


def _contiguous_strides(size: list[int]) -> list[int]:
    strides, running = [], 1
    for n in reversed(size):
        strides.append(running)
        running *= max(n, 1)
    return strides[::-1]


def _is_impure(node: fx.Node) -> bool:
    target = node.target
    tags = getattr(target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags or bool(rules.written_arguments(target))


def remove_dead_nodes(graph: fx.Graph) -> int:
    """Drop nodes nobody uses, except random ops (eager draws from the RNG even if unused)."""
    removed = 0
    for node in reversed(list(graph.nodes)):
        if node.op in ("call_function", "get_attr") and not node.users and not _is_impure(node):
            graph.erase_node(node)
            removed += 1
    return removed


_GEOMETRY_READS = {aten.sym_size.int, aten.sym_stride.int, aten.sym_storage_offset.default, aten.sym_numel.default}


def _is_root_geometry(root: _Root, args: tuple) -> bool:
    """Are as_strided's (size, stride, storage_offset) those of the input `root` itself?"""
    if root.origin != "input" or len(args) < 3:
        return False
    size, stride, offset = pytree.tree_map(_val_of, tuple(args[:3]))  # (sizes of dynamic shapes: their nodes)
    val = root.val
    return (len(size) == val.dim() and all(statically_known_true(a == b) for a, b in zip(size, val.shape))
            and all(statically_known_true(a == b) for a, b in zip(stride, val.stride()))
            and statically_known_true(offset == val.storage_offset()))


def functionalize(gm: fx.GraphModule) -> tuple[fx.GraphModule, FunctionalizePlan]:
    """Replace views-with-mutation and in-place/out= ops by pure ops; return what was written.

    before: forward(x): t = x.t(); add_ = t.add_(1); return (x,)
    after:  forward(x): t = x.t(); add = t + 1; t_1 = add.t(); return (t_1,)
    plan:   placeholders written: [0]
    """
    return _Functionalizer(gm).run()
