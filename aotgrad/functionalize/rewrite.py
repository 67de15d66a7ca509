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
holds its new value (joint.py put the input there).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode

from aotgrad.errors import UnsupportedError
from aotgrad.functionalize import rules
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


class _Root:
    def __init__(self, value: fx.Node, val: torch.Tensor, origin: str):
        self.value = value       # current functional value (node of the new graph)
        self.val = val           # the traced fake of the root: the layout reference
        self.origin = origin     # "input", "constant" or "intermediate"
        self.version = 0


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

    def fake_run(self, op, args, kwargs):
        fake_args, fake_kwargs = pytree.tree_map_only(fx.Node, lambda n: n.meta["val"], (args, kwargs))
        with self.fake_mode, torch.no_grad():
            return op(*fake_args, **fake_kwargs)

    # -- reading ------------------------------------------------------------
    def value(self, ref: _Ref) -> fx.Node:
        """The current functional value of a traced tensor."""
        if ref.cached is not None and ref.cached_version == ref.root.version:
            return ref.cached
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
        return node

    def _as_strided_args(self, parent: fx.Node, root: _Root, args: tuple) -> tuple:
        """as_strided offsets are absolute in the storage; move them onto a new root value."""
        if parent is root.value and root.version == 0:
            return args
        size, stride = args[0], args[1]
        offset = args[2] if len(args) > 2 and args[2] is not None else root.val.storage_offset()
        self._check_same_layout(root, "read a strided view of")
        return (size, stride, offset - root.val.storage_offset() + root.value.meta["val"].storage_offset())

    def _check_same_layout(self, root: _Root, action: str) -> None:
        current = root.value.meta["val"]
        if tuple(current.stride()) != tuple(root.val.stride()):
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
        if root.origin == "constant":
            raise UnsupportedError(
                "aotgrad cannot compile a function that mutates a tensor it did not receive as an "
                "input (a global or a captured tensor): the compiled code would not update it. "
                "To continue: pass the tensor as an argument, or register it as a module buffer."
                + self._where())
        if not ref.chain:
            root.value = new
        elif all(rules.scatter_step(step.op) for step in ref.chain):
            root.value = self._scatter_through_chain(root, ref.chain, new)
        else:
            root.value = self._scatter_as_strided(root, ref, new)
        root.version += 1
        ref.cached, ref.cached_version = new, root.version
        self.plan.num_mutations += 1

    def _scatter_through_chain(self, root: _Root, chain: tuple, new: fx.Node) -> fx.Node:
        parents = [root.value]
        for step in chain[:-1]:
            parents.append(self.replay(step, parents[-1], root))
        for step, parent in zip(reversed(chain), reversed(parents)):
            view_val = new.meta["val"]
            op, args = rules.scatter_step(step.op)(parent, new, step.args, step.index,
                                                   parent.meta["val"], view_val)
            new = args if op is None else self.emit(op, args)
        return new

    def _scatter_as_strided(self, root: _Root, ref: _Ref, new: fx.Node) -> fx.Node:
        self._check_same_layout(root, "write through an expanded or strided view of")
        view = ref.val
        offset = view.storage_offset() - root.val.storage_offset()
        return self.emit(aten.as_strided_scatter.default,
                         (root.value, new, list(view.shape), list(view.stride()), offset))

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
            self.placeholder_roots.append(root)
            ref = self.refs[node] = _Ref(root, (), val)
            ref.cached, ref.cached_version = new, 0
        else:
            self.refs[node] = new

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
        if getattr(op, "is_view", False):
            return self.on_view(node)
        if rules.is_mutating(op, node.args, node.kwargs):
            return self.on_mutation(node)
        args, kwargs = pytree.tree_map(self.arg_value, (node.args, node.kwargs))
        new = self.emit(op, args, kwargs, val=node.meta["val"])
        self.refs[node] = self._fresh(new, node.meta["val"])

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
            ref = _Ref(parent_ref.root, parent_ref.chain + (parent_ref.step_for(index),), node.meta["val"])
            getitem = self.emit(operator.getitem, (parent_ref.node, index), val=node.meta["val"])
            if parent_ref.version == parent_ref.root.version:
                ref.cached, ref.cached_version = getitem, parent_ref.version
            self.refs[node] = ref
        elif isinstance(parent_ref, list):  # outputs of a rewritten mutating op
            self.refs[node] = parent_ref[index]
        else:
            new = self.emit(operator.getitem, (parent_ref, index), val=node.meta["val"])
            self.refs[node] = self._fresh(new, node.meta["val"])

    def on_view(self, node: fx.Node) -> None:
        parent = self.refs[node.args[0]]
        args = tuple(node.args[1:])
        step = ViewStep(node.target, args, tuple(sorted(node.kwargs.items())))
        parent_value = self.value(parent)
        new = self.emit(node.target, (parent_value, *args), dict(node.kwargs),
                        val=node.meta["val"] if parent_value is parent.cached else None)
        if isinstance(node.meta["val"], torch.Tensor):
            ref = _Ref(parent.root, parent.chain + (step,), node.meta["val"])
            ref.cached, ref.cached_version = new, parent.root.version
            self.refs[node] = ref
        else:
            self.refs[node] = _MultiView(parent.root, parent.chain, step, new, parent.root.version)

    def on_metadata_mutation(self, node: fx.Node) -> None:
        ref = self.refs[node.args[0]]
        view_op = rules.METADATA_MUTATIONS[node.target]
        ref.chain = ref.chain + (ViewStep(view_op, tuple(node.args[1:]), tuple(sorted(node.kwargs.items()))),)
        ref.val = node.meta["val"]
        ref.cached_version = -1
        self.refs[node] = ref

    def on_mutation(self, node: fx.Node) -> None:
        op = node.target
        rule = rules.mutation_rule(op)
        bound = _bind(op, node.args, node.kwargs)
        call_args = [self.arg_value(bound[a.name]) for a in op._schema.arguments
                     if a.name not in rule.drop_args and not a.kwarg_only]
        call_kwargs = {a.name: self.arg_value(bound[a.name]) for a in op._schema.arguments
                       if a.name not in rule.drop_args and a.kwarg_only and a.name in bound}
        result = self.emit(rule.functional, tuple(call_args), call_kwargs)
        outputs = result.meta["val"]
        for name, k in rule.mutated:
            target = self.refs[bound[name]]
            new = result if k is None else self.emit(operator.getitem, (result, k), val=outputs[k])
            self.write(target, new)
        if rule.plain_outputs:
            plain = [self._fresh(self.emit(operator.getitem, (result, k), val=outputs[k]), outputs[k])
                     for k in range(rule.plain_outputs)]
            self.refs[node] = plain
        else:
            written = [self.refs[bound[name]] for name, _ in rule.mutated]
            self.refs[node] = written[0] if len(written) == 1 else written


class _MultiView:
    """A multi-output view op (split, unbind); its getitems are views."""

    def __init__(self, root, chain, step: ViewStep, node: fx.Node, version: int):
        self.root, self.chain, self.step, self.node, self.version = root, chain, step, node, version

    def step_for(self, index: int) -> ViewStep:
        return ViewStep(self.step.op, self.step.args, self.step.kwargs, index)


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


def functionalize(gm: fx.GraphModule) -> tuple[fx.GraphModule, FunctionalizePlan]:
    """Replace views-with-mutation and in-place/out= ops by pure ops; return what was written.

    before: forward(x): t = x.t(); add_ = t.add_(1); return (x,)
    after:  forward(x): t = x.t(); add = t + 1; t_1 = add.t(); return (t_1,)
    plan:   placeholders written: [0]
    """
    return _Functionalizer(gm).run()
