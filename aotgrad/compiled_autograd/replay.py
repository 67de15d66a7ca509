"""A cache hit, the fast way: this backward's autograd graph checked against a template of one
seen before, and its graph inputs read, with no heap walk and no key built.

In: the roots, `inputs=` and root gradients of a backward call, and the `Template`s of this
compiler (each made from the walk and the collected key of a backward that was captured or
hit the cache the slow way). Out: a `Hit` (the template's structure, this call's sizes, the
objects, and the saved tensors still in their nodes), or None when no template matches.

`match` follows a template's steps through `next_functions`: the same node types, the same
edges (by identity: a node reached twice is one node, two nodes are never one), the same
order of sequence numbers (so the engine's schedule is the template's), the same roots and
inputs, and, computed by collect's own helpers, the same hooks, saved non-tensor values,
tensor metadata and autocast state. That is every part of the key, so the structure is the
template's; the sizes come out in collect's order for `cache.lookup`. Reading saved tensors through their
nodes' getters runs autograd's version check and changes nothing: a template that does not
match leaves the graph as it found it. Only `Hit.take` changes the graph: without
retain_graph each saved tensor is handed to the graph's input list by
`SavedTensor.register_hooks` (the node drops it; unpacking it again raises eager's error).
"""
from __future__ import annotations

import operator
import threading

from torch import strided
from collections import OrderedDict
from typing import Callable

from aotgrad.compiled_autograd.collect import (
    ACCUMULATE, AOTGRAD, AUTOCAST, CUSTOM, HEADER, TRACED, UNDEFINED, Collected, autocast_state,
    custom_arguments_known, holds_state, kind_of, node_class, step_hooks, traced_values, value_reader)
from aotgrad.compiled_autograd import calls
from aotgrad.compiled_autograd import hooks as hook_lookup
from aotgrad.compiled_autograd.hooks import NO_HOOKS
from aotgrad.compiled_autograd.dynamic import SizeValues, layout
from aotgrad.compiled_autograd.saved import EagerFallback, layout_of
from aotgrad.compiled_autograd.walk import Walk

_OUTSIDE = "outside"   # a child edge into an AccumulateGrad node the walk leaves out (inputs=)
_KEEP = 8              # templates kept per compiler, most recently used first


class _StepRecord:
    """One step of a template: how to find its node, what it must be, and its key entry."""
    __slots__ = ("type", "kind", "children", "runs", "node_class", "hooks", "values", "saved", "metadata",
                 "layout", "forward_cls", "read_values", "symbolic", "plain_values", "raw_lists", "holds_state")

    def __init__(self, node, kind: str, children: tuple, runs: bool, key: tuple):
        self.type = type(node)
        self.kind = kind
        self.children = children    # per next edge: None (no node), (step, input nr), or _OUTSIDE
        self.runs = runs
        self.node_class, _, _, _, self.hooks, self.values, self.saved, self.metadata = key
        self.forward_cls = hasattr(node, "_forward_cls")  # kind and class depend on more than the type
        self.holds_state = holds_state(node)
        self.layout = self.read_values = self.plain_values = None
        self.symbolic: tuple = ()
        self.raw_lists: tuple = ()  # per saved tensor attribute: does it hold a list?
        if kind is TRACED and runs:
            self.layout = layout_of(self.type)
            self.raw_lists = tuple(type(getattr(node, raw)) in (list, tuple) for raw, _ in self.layout.tensors)
            self.read_values, names = value_reader(self.type, self.layout)
            self.symbolic = tuple(i for i, name in enumerate(names) if name is not None)
            self.plain_values = _plain_values(self.read_values(node), self.symbolic)


def _plain_values(values: tuple, symbolic: tuple) -> tuple | None:
    """A node's saved values as `match` compares them: as read, the symbolic ones by their
    length; None where some value does not compare by `==` as its key entry does."""
    out = list(values)
    for i in symbolic:
        if out[i] is not None:
            out[i] = len(out[i]) if isinstance(out[i], (list, tuple)) else 1
    plain = [v for i, v in enumerate(out) if i not in symbolic]
    return tuple(out) if all(_plain(v) for v in plain) else None


def _plain(value) -> bool:
    kind = type(value)
    if value is None or kind is int or kind is bool or kind is str:
        return True
    if kind is float or kind is complex:
        return value == value  # not NaN
    if kind is list or kind is tuple:
        return all(_plain(v) for v in value)
    return False


class Template:
    """A backward graph's shape, recorded from a walk and its collected key."""

    def __init__(self, structure: tuple, accumulate_grad: bool, roots: list, inputs: list, steps: list,
                 seq_order: tuple, seq_ties: tuple, accumulate_type: type | None, entries: list):
        self.structure = structure
        self.entries = entries        # the cache's entries of this structure (cache.entries_of)
        self.accumulate_grad = accumulate_grad
        self.roots = roots            # per root: (step, input nr)
        self.inputs = inputs          # per `inputs=` tensor: (step, output nr)
        self.steps = steps
        self.seq_order = seq_order    # step indices sorted by sequence number
        self.seq_ties = seq_ties      # whether neighbours in that order have equal numbers
        self.accumulate_type = accumulate_type  # AccumulateGrad's class, where an edge goes _OUTSIDE
        self.matcher: Callable | None = None    # `match` for this template as straight-line code (replay_code.py)


def _seq_pattern(seqs: list) -> tuple[tuple, tuple]:
    """The steps sorted by sequence number, and which neighbours there have equal numbers."""
    order = tuple(sorted(range(len(seqs)), key=seqs.__getitem__))
    ordered = [seqs[i] for i in order]
    return order, tuple(map(operator.eq, ordered, ordered[1:]))


def _same_seq_pattern(nodes: list, order: tuple, ties: tuple) -> bool:
    """Do these nodes' sequence numbers compare pairwise as the template's did? (Then the
    engine's heap, which only compares them, pops the nodes in the template's order.)"""
    ordered = [nodes[i]._sequence_nr() for i in order]
    return ordered == sorted(ordered) and tuple(map(operator.eq, ordered, ordered[1:])) == ties


def make_template(walk: Walk, collected: Collected, input_edges: list, accumulate_grad: bool,
                  entries: list) -> Template | None:
    """The template of a walked and collected backward; None when its graph reaches nodes the
    walk leaves out that a check by edges could not vouch for (a pruned subgraph)."""
    index_of = {step.node: i for i, step in enumerate(walk.steps)}
    if any(root is None for root in walk.roots):
        return None
    inputs = []
    for edge in input_edges:
        if edge.node not in index_of:
            return None
        inputs.append((index_of[edge.node], edge.output_nr))
    accumulate_type = None
    steps = []
    for i, (step, plan) in enumerate(zip(walk.steps, collected.plans)):
        children = []
        for child, nr in step.node.next_functions:
            if child is None:
                children.append(None)
            elif child in index_of:
                children.append((index_of[child], nr))
            elif child.name() == "torch::autograd::AccumulateGrad":  # a leaf inputs= leaves out
                accumulate_type = type(child)
                children.append(_OUTSIDE)
            else:
                return None
        steps.append(_StepRecord(step.node, plan.kind, tuple(children), step.runs,
                                 collected.structure[HEADER + i]))
    order, ties = _seq_pattern([step.node._sequence_nr() for step in walk.steps])
    template = Template(collected.structure, accumulate_grad, list(walk.roots), inputs, steps, order, ties,
                        accumulate_type, entries)
    template.matcher = generate(template)
    return template


class Hit:
    """A matched backward: the cache entries of its structure, its sizes, the graph's objects, and the saved
    tensors (with the SavedTensor each came from) to hand to the graph."""
    __slots__ = ("entries", "sizes", "objects", "keeps_state", "root_grads", "raws", "values", "owners")

    def __init__(self, entries, sizes, objects, keeps_state, root_grads, raws, values, owners):
        self.entries = entries
        self.sizes = sizes
        self.objects = objects
        self.keeps_state = keeps_state
        self.root_grads = root_grads
        self.raws = raws        # SavedTensor per saved tensor, in the graph's input order
        self.values = values    # the tensors their getters gave
        self.owners = owners    # the node each came from

    def take(self, keep_graph: bool) -> list:
        """The graph's input list: root gradients, then the saved tensors. Without keep_graph
        they are taken out of their nodes (the list is then their only holder)."""
        inputs = list(self.root_grads)
        if keep_graph:  # the nodes keep them; a saved output is passed without its history
            inputs.extend(v.detach() if v.grad_fn is node else v for v, node in zip(self.values, self.owners))
        else:
            self.values = None
            for raw in self.raws:
                raw.register_hooks(inputs.append, calls.freed)  # a later unpack raises eager's error
            if len(inputs) != len(self.root_grads) + len(self.raws):
                raise AssertionError("compiled autograd: a saved tensor was not handed over")
        self.raws = self.owners = None
        return inputs


def _read_saved(node, record: _StepRecord, raws: list, values: list, owners: list, saved: list) -> bool:
    """A step's saved tensors through the node's getters (autograd's version check), each
    with its SavedTensor; False when one is held by a saved_tensors_hook (collect's way
    handles those)."""
    if record.kind is TRACED:
        pairs = []
        for raw_attr, name in record.layout.tensors:
            raw = getattr(node, raw_attr)
            if type(raw) is list or type(raw) is tuple:
                if any(r is not None and r.unpack_hook is not None for r in raw):
                    return False
                got = getattr(node, name) if any(r is not None for r in raw) else [None] * len(raw)
                pairs.extend(zip(raw, got))
            elif raw is None:
                pairs.append((None, None))
            else:
                if raw.unpack_hook is not None:
                    return False
                pairs.append((raw, getattr(node, name)))
    else:
        raw = node._raw_saved_tensors
        if any(r is not None and r.unpack_hook is not None for r in raw):
            return False
        pairs = zip(raw, node.saved_tensors if any(r is not None for r in raw) else [None] * len(raw))
    for raw, value in pairs:
        if raw is None or value is None:
            saved.append(None)
        else:
            raws.append(raw)
            values.append(value)
            owners.append(node)
            saved.append(value)
    return True


def match(template: Template, root_edges: list, input_edges: list, root_grads: list,
          accumulate_grad: bool) -> Hit | None:
    """This backward as `template` describes it, or None (see the module docstring)."""
    if (accumulate_grad is not template.accumulate_grad or len(root_edges) != len(template.roots)
            or len(input_edges) != len(template.inputs)):
        return None
    records = template.steps
    nodes: list = [None] * len(records)
    for edge, (i, nr) in zip(root_edges, template.roots):
        if edge.output_nr != nr or (nodes[i] is not None and nodes[i] is not edge.node):
            return None
        nodes[i] = edge.node
    sizes = SizeValues()
    roots_key = []
    for g in root_grads:
        roots_key.append(sizes.tensor(g, 0)[0])
    if tuple(roots_key) != template.structure[3] or autocast_state() != template.structure[AUTOCAST]:
        return None
    extend = sizes.values.extend
    probe = hook_lookup.node_hooks_may_exist()
    retaining = hook_lookup.retaining_by_node()
    look = probe or bool(retaining)
    objects: list = []
    keeps_state: list = []
    raws: list = []
    values: list = []
    owners: list = []
    outside: list = []
    try:
        for index, record in enumerate(records, start=1):
            node = nodes[index - 1]
            if type(node) is not record.type:
                return None
            next_functions = node.next_functions
            if len(next_functions) != len(record.children):
                return None
            for child, expected in zip(next_functions, record.children):
                target = child[0]
                if expected is None or expected is _OUTSIDE:
                    if target is None:
                        if expected is not None:
                            return None
                    elif expected is None or type(target) is not template.accumulate_type:
                        return None
                    else:
                        outside.append(target)
                    continue
                i, nr = expected
                if target is None or child[1] != nr:
                    return None
                known = nodes[i]
                if known is None:
                    nodes[i] = target
                elif known is not target:
                    return None
            kind = record.kind
            if record.forward_cls and (kind_of(node) is not kind or node_class(kind, node) != record.node_class):
                return None
            leaf = node.variable if kind is ACCUMULATE else None
            node_hooks = step_hooks(node, leaf, probe, retaining) if look or leaf is not None else NO_HOOKS
            saved: list = []
            if record.runs:
                if kind is TRACED:
                    if not _read_saved(node, record, raws, values, owners, saved):
                        return None
                    plain = record.plain_values
                    if plain is None:  # (values that need their key form)
                        if traced_values(node, record.layout, index, sizes, None) != record.values:
                            return None
                    else:
                        got = record.read_values(node)
                        if record.symbolic:
                            got = list(got)
                            for i in record.symbolic:
                                value = got[i]
                                if value is not None:
                                    items = value if isinstance(value, (list, tuple)) else (value,)
                                    extend(items)
                                    got[i] = len(items)
                            got = tuple(got)
                        if got != plain:
                            return None
                elif kind is AOTGRAD:
                    if not _read_saved(node, record, raws, values, owners, saved):
                        return None
                    if tuple(node.saved_sizes) != record.values:
                        return None
                elif kind is CUSTOM:
                    custom_arguments_known(node)
                    if not _read_saved(node, record, raws, values, owners, saved):
                        return None
                    objects.append(node)
                elif kind is ACCUMULATE:
                    if leaf.layout is not strided:
                        return None
                    objects.append(leaf)
                elif kind is not UNDEFINED:
                    objects.append(node)
                    if record.holds_state:
                        keeps_state.append(node)
            if node_hooks is not NO_HOOKS:
                objects.extend(node_hooks.callables())
            if node_hooks.shape() != record.hooks or len(saved) != len(record.saved):
                return None
            for value, meta in zip(saved, record.saved):  # as SizeValues.tensor keys them
                if value is None or meta is None:
                    if value is not meta:
                        return None
                    continue
                dtype, device, dim, memory = meta
                if value.dtype is not dtype or value.dim() != dim or value.device != device or layout(value) != memory:
                    return None
                extend(value.shape)
            metadata = node._input_metadata
            if len(metadata) != len(record.metadata):
                return None
            for m, (dim, dtype, device) in zip(metadata, record.metadata):  # as collect.input_metadata keys them
                shape = m.shape
                if len(shape) != dim or m.dtype is not dtype or m.device != device:
                    return None
                extend(shape)
    except (RuntimeError, EagerFallback):  # an error or a fallback: collect's way says it in its order
        return None
    if outside:
        ids = {id(n) for n in nodes}
        if len(ids) != len(nodes) or any(id(n) in ids for n in outside):
            return None
    elif len({id(n) for n in nodes}) != len(nodes):
        return None
    for edge, (i, nr) in zip(input_edges, template.inputs):
        if edge.node is not nodes[i] or edge.output_nr != nr:
            return None
    if not _same_seq_pattern(nodes, template.seq_order, template.seq_ties):
        return None
    return Hit(template.entries, sizes.values, objects, keeps_state, root_grads, raws, values, owners)


class Templates:
    """The templates of one compiler, most recently used first (threads share them)."""

    def __init__(self):
        self._by_structure: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def find(self, root_edges: list, input_edges: list, root_grads: list, accumulate_grad: bool) -> Hit | None:
        for template in reversed(list(self._by_structure.values())):
            if template.matcher is not None:
                hit = template.matcher(root_edges, input_edges, root_grads, accumulate_grad)
            else:
                hit = match(template, root_edges, input_edges, root_grads, accumulate_grad)
            if hit is not None:
                with self._lock:
                    if template.structure in self._by_structure:
                        self._by_structure.move_to_end(template.structure)
                return hit
        return None

    def knows(self, structure: tuple) -> bool:
        return structure in self._by_structure

    def remember(self, template: Template) -> None:
        with self._lock:
            self._by_structure[template.structure] = template
            self._by_structure.move_to_end(template.structure)
            while len(self._by_structure) > _KEEP:
                self._by_structure.popitem(last=False)


_templates: dict[int, Templates] = {}


def templates_of(compiler_fn: Callable) -> Templates:
    found = _templates.get(id(compiler_fn))
    if found is None:
        found = _templates[id(compiler_fn)] = Templates()
    return found


def reset() -> None:
    _templates.clear()


from aotgrad.compiled_autograd.replay_code import generate  # noqa: E402 (it reads Hit and _OUTSIDE from here)
